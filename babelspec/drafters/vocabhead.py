"""A draft head restricted to the tokens a language uses: ``head:LANG`` and ``self:K@LANG``.

In Gemma-3-270M the 262,144 x 640 output matrix is ~170M of the 270M parameters, so on a CPU
(memory-bound) it is most of a forward's cost. The draft keeps only the rows of tokens that
occur in the language's monolingual train corpus (tokenised with the target's tokenizer), the
most frequent English source tokens (``drafters.vocab``) and those of the prompt, and scores
nothing else: its distribution is exactly zero outside that set, renormalised on it, and handed
to the verifier as sparse rows in full-vocabulary ids. Verification stays lossless because the
engine judges tokens by the draft probabilities they were actually drawn from.

* ``head:LANG`` -- the target's full stack of layers under the restricted head;
* ``self:K@LANG`` -- its first K layers (``self:K``) under the restricted head;
* ``int8:LANG``, ``int8:K@LANG`` -- the same on weight-only int8 copies of the layers, the
  restricted head kept in bf16: the target itself at lower precision. An int8 head cost the
  non-Latin scripts most of their acceptance (greedy α on 3 held-out FLORES-200 sentences, npi
  0.58 -> 0.88 and amh 0.74 -> 0.85 with the head back in bf16; yor, ibo, grn unchanged), for a
  head of 2-7k rows that is a small part of the drafter's forward.

``LANG`` may be left out (``head``, ``self:6@``) when the caller passes ``lang=...``, and may be a
vocabulary file, ``FILE.npy`` of token ids (``drafters.vocab.save_vocabulary``): a language the
bundled dataset does not hold, whose rows the experiment runner counts on its real text.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from babelspec.drafters.base import Drafter, Verdict
from babelspec.drafters.columns import HeadColumns
from babelspec.drafters.selfdraft import SelfDrafter, num_layers, truncated_model
from babelspec.errors import UserError
from babelspec.lm import CausalLM
from babelspec.sampling import Probs, SamplingConfig
from babelspec.target import Target

# The most extra rows a generation adds to a restricted head (the prompt's tokens and those the
# target writes outside the language's rows): 4,096 rows are 5 MB of bf16 per draft step.
MAX_EXTRA = 4096


class RestrictedHeadLM(torch.nn.Module):
    """A causal LM's decoder stack under an output head that scores only ``token_ids``.

    Columns of the logits are: the base token ids (the language's), then any extra ids set
    per generation (``set_extra``, e.g. the prompt's). The base rows are gathered once into
    a contiguous matrix (|S| x hidden; the decoder stack itself stays shared).
    """

    def __init__(self, model: torch.nn.Module, token_ids: torch.Tensor, quantize: str | None = None,
                 gguf_head: Any = None) -> None:  # fmt: skip
        super().__init__()
        self.quantize = quantize
        # a gguf target's output head (``forward.qmm.QWeight``): the rows scored on the file's own
        # blocks, as the target scores them (so a token's logit is the target's bit for bit where
        # the hidden state is), reading a byte a weight instead of bf16's two
        self.gguf_head = gguf_head
        self.body = model.model  # shared, not copied
        self.config = model.config
        head = model.get_output_embeddings()
        if head is None or getattr(head, "bias", None) is not None:
            raise UserError("a restricted head needs a bias-free linear output head")
        self.full_weight = head.weight  # shared; extra rows are gathered from it per generation
        self.vocab_size = int(head.weight.shape[0])
        ids = torch.unique(torch.as_tensor(token_ids, dtype=torch.long))
        if len(ids) == 0 or ids[0] < 0 or ids[-1] >= self.vocab_size:
            raise UserError(f"restricted head ids must be non-empty and in [0, {self.vocab_size})")
        self.base_ids = ids.to(head.weight.device)
        self.base_product = self._product(self.base_ids)
        self.softcap = getattr(self.config.get_text_config(), "final_logit_softcapping", None)
        self.set_extra([])

    def get_output_embeddings(self) -> None:  # the full vocabulary is reported via config
        return None

    def set_extra(self, token_ids: list[int]) -> None:
        """Also score these ids (those not already in the base set) until the next call."""
        device = self.base_ids.device
        extra = torch.as_tensor(sorted(set(token_ids)), dtype=torch.long, device=device)
        if len(extra):
            extra = extra[~torch.isin(extra, self.base_ids)]
        self.extra_product = self._product(extra) if len(extra) else None
        self.index = torch.cat([self.base_ids, extra])  # column -> token id
        n = len(self.index)
        # token id -> column; ids outside the set map to a dummy column n (logit -inf).
        self.column = torch.full((self.vocab_size,), n, dtype=torch.long, device=device)
        self.column[self.index] = torch.arange(n, device=device)

    def _product(self, ids: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
        """The logits of rows ``ids`` of the output head: ``hidden @ weight[ids].T`` in the head's
        own dtype whatever ``quantize`` (the layers'), or on the GGUF's blocks of those rows
        (float32 logits, as the gguf target's)."""
        if self.gguf_head is not None:
            from babelspec.forward.qmm import QProduct

            product, n = QProduct([self.gguf_head.rows(ids.cpu())], out_dtype=torch.float32), len(ids)
            return lambda hidden: product.stacked(hidden)[..., :n]
        weight = self.full_weight.detach().index_select(0, ids).contiguous()
        return lambda hidden: torch.nn.functional.linear(hidden, weight)

    def add_extra(self, token_ids: list[int]) -> bool:
        """Also score these ids from now on, besides the extra ids already set; False (and no
        change) where every one is scored already or ``MAX_EXTRA`` extra rows are reached."""
        new = [t for t in set(token_ids) if int(self.column[t]) == self.n_columns]
        extra = self.index[len(self.base_ids):].tolist()
        if not new or len(extra) + len(new) > MAX_EXTRA:
            return False
        self.set_extra(extra + new)
        return True

    @property
    def n_columns(self) -> int:
        return int(self.index.numel())

    def forward(self, input_ids: torch.Tensor, cache: Any = None, use_cache: bool = True,
                logits_to_keep: int = 0, **kwargs: Any) -> SimpleNamespace:
        hidden = self.body(input_ids=input_ids, cache=cache, use_cache=use_cache).last_hidden_state
        if logits_to_keep:
            hidden = hidden[:, -logits_to_keep:]
        return SimpleNamespace(logits=self.logits_of(hidden), cache=cache)

    def logits_of(self, hidden: torch.Tensor) -> torch.Tensor:
        """The restricted columns' logits of the body's last hidden states (also the lean
        forward's output head: ``babelspec.forward.kernels.OutputHead``)."""
        logits = self.base_product(hidden)
        if self.extra_product is not None:
            logits = torch.cat([logits, self.extra_product(hidden)], -1)
        if self.softcap is not None:
            logits = torch.tanh(logits / self.softcap) * self.softcap
        return logits


class VocabHeadDrafter(SelfDrafter):
    """Drafts over the restricted columns; reports compact distributions in full-vocab ids.

    With a ``target`` whose first layers the head's body shares, the prompt's cache is copied
    from the target (see ``SelfDrafter``); without one the draft prefills itself.
    """

    def __init__(self, lm: RestrictedHeadLM, name: str, target: Target | None = None) -> None:
        own = target.sibling(lm, lm.quantize) if target is not None else CausalLM(lm, quantize=lm.quantize)
        super().__init__(own, target, len(lm.body.layers), name=name)
        self.head = lm
        self.vocab_size = lm.vocab_size
        self.columns = HeadColumns(lm)

    def start(self, context_ids: list[int], sampling: SamplingConfig, generator: torch.Generator) -> None:
        self.columns.start(context_ids)
        super().start(context_ids, sampling, generator)

    def commit(self, verdict: Verdict) -> None:
        """As every drafter commits; and where the target wrote a token outside the head's rows
        (a draft cannot propose it), the head scores that token from the next draft on
        (``drafters.columns``)."""
        super().commit(verdict)
        self.columns.keep_stray(int(verdict.next_token))

    def next_probs(self, pending: list[int], sequence: np.ndarray, position: int) -> Probs:
        """One row over the kept columns, in full-vocabulary ids (zero outside them)."""
        logits = self.lm.forward(pending, logits_to_keep=1)  # [1, n columns]
        return self.columns.probs(logits, self.sampling, sequence, position)


def restricted_drafter(target: Target, *, k: int | None, lang: str | None, name: str,
                       quantize: str | None = None, own_steps: bool = True) -> Drafter:  # fmt: skip
    """``self:K@LANG`` (k layers) or ``head:LANG`` (k = None: all layers); ``int8:[K@]LANG``
    with ``quantize="int8"``, ``gguf:[K@]LANG`` with ``"gguf"``. ``LANG`` may be a vocabulary
    file, ``FILE.npy`` of token ids. ``gguf:LANG`` (all layers) drafts from the target's own steps
    (``drafters.stackhead``) unless ``own_steps`` is false: then from a cache of its own, computing
    the layers again (the same drafts at about twice the layers' cost; for comparison)."""
    from babelspec.drafters.vocab import language_token_ids, load_vocabulary

    if not lang:
        raise UserError(
            f"drafter {name!r} needs a language for its restricted head: write head:LANG or "
            "self:K@LANG (e.g. head:amh, self:6@npi), or pass lang=..."
        )
    if lang.endswith(".npy"):  # a vocabulary file (the runner's kind = "head" writes one)
        ids = torch.from_numpy(load_vocabulary(lang, target.vocab_size))
    elif target.tokenizer is None:
        raise UserError(f"drafter {name!r} needs a target with a tokenizer to build its vocabulary")
    else:
        ids = torch.from_numpy(language_token_ids(lang, target.tokenizer, model=target.model))
    ids = ids[ids < target.vocab_size]
    body = target.model
    if k is not None and k < num_layers(target.model):
        body = truncated_model(target.model, k)
    gguf_head = None
    if quantize == "gguf":  # the head's rows on the file's blocks too, where the target has them
        project = getattr(getattr(target.lean, "logits_of", None), "project", None)
        gguf_head = project.parts[0] if getattr(project, "parts", None) else None
    head = RestrictedHeadLM(body, ids, quantize=quantize, gguf_head=gguf_head)
    if own_steps and quantize == "gguf" and k is None and target.steps_layers and target.lean.quantize == "gguf":
        from babelspec.drafters.stackhead import StackHeadDrafter

        return StackHeadDrafter(head, target, name=name)
    return VocabHeadDrafter(head, name=name, target=target)
