"""Students: the models a drafter is distilled into, and how they are saved and loaded.

Student specs:

* ``self:K`` -- the target's first K layers and final norm, **copied** (trainable), on top of the
  target's input embedding, **shared and frozen**. Training the shared layers in place would
  change the target itself (and so the outputs the lossless guarantee is about); copying the
  K layers costs K/L of the body, while the 262k-row embedding (170M of Gemma-3-270M's 270M
  parameters) stays shared, so a distilled drafter directory holds only a few tens of MB.
  With the full head the output projection is the shared, tied embedding (frozen too).
* ``self:K,head=corpus`` -- the same body with a vocabulary-restricted output head: a trainable
  copy of the output rows of the tokens seen in the language's data (plus the specials), with
  probability zero elsewhere. It is what makes a Gemma-3 draft forward cheap, and its softmax
  over tens of thousands instead of 262k columns makes training several times faster.
* ``model:PATH_OR_PRESET`` -- a real small model sharing the target's tokenizer (Qwen3.5-0.8B for
  Qwen3.5-9B), all parameters trained, as in the paper.
"""

from __future__ import annotations

import copy
import hashlib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from transformers.modeling_outputs import CausalLMOutputWithPast

from babelspec.errors import UserError


class StudentSpecError(UserError):
    """A student spec that cannot be parsed or built; the message lists the forms."""


SPEC_HELP = "student specs: self:K, self:K,head=corpus (or self:K@LANG), model:PATH_OR_PRESET"


@dataclass(frozen=True)
class StudentSpec:
    kind: str  # "self" | "model"
    layers: int = 0  # K for "self"
    head: str = "full"  # "full" | "corpus" (vocabulary-restricted)
    path: str = ""  # for "model"

    @classmethod
    def parse(cls, spec: str) -> StudentSpec:
        prefix, _, arg = spec.partition(":")
        if prefix == "self":
            if "@" in arg:  # the drafter spelling self:K@LANG: the language comes from --lang
                arg = arg.split("@")[0] + ",head=corpus"
            layer_text, *options = arg.split(",")
            try:
                layers = int(layer_text)
            except ValueError:
                raise StudentSpecError(f"{spec!r}: K in self:K must be an integer; {SPEC_HELP}") from None
            head = "full"
            for option in options:
                key, _, value = option.partition("=")
                if key != "head" or value not in ("full", "corpus"):
                    raise StudentSpecError(f"{spec!r}: unknown option {option!r}; {SPEC_HELP}")
                head = value
            if layers < 1:
                raise StudentSpecError(f"{spec!r}: K must be >= 1; {SPEC_HELP}")
            return cls(kind="self", layers=layers, head=head)
        if prefix == "model" and arg:
            return cls(kind="model", path=arg)
        raise StudentSpecError(f"unknown student spec {spec!r}; {SPEC_HELP}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _layers_of(lm: nn.Module) -> nn.ModuleList:
    return lm.model.layers


def truncated_copy(target_model: nn.Module, layers: int) -> nn.Module:
    """A new causal LM with copies of the target's first ``layers`` layers and final norm,
    sharing (not copying) its input embedding and tied output head, which are frozen."""
    total = len(_layers_of(target_model))
    if not 1 <= layers <= total:
        raise StudentSpecError(f"self:{layers}: the target has {total} layers; choose 1..{total}")
    embedding = target_model.get_input_embeddings().weight
    head = target_model.get_output_embeddings()
    shared = {id(embedding): embedding}
    if head is not None:
        shared[id(head.weight)] = head.weight
    # Layers past K are dropped before copying so that only K layers are ever duplicated.
    all_layers = target_model.model.layers
    target_model.model.layers = nn.ModuleList(list(all_layers)[:layers])
    try:
        student = copy.deepcopy(target_model, memo=shared)
    finally:
        target_model.model.layers = all_layers
    config = student.config
    config.num_hidden_layers = layers
    if getattr(config, "layer_types", None) is not None:
        config.layer_types = list(config.layer_types)[:layers]
    for p in student.parameters():
        p.requires_grad_(True)
    embedding.requires_grad_(False)
    if head is not None:
        head.weight.requires_grad_(False)
    return student


class RestrictedHeadLM(nn.Module):
    """A causal LM body with an output head over ``kept_ids`` only.

    ``forward`` has the Hugging Face signature used by the model runner and returns logits over
    the full vocabulary, ``-inf`` outside the kept tokens, so any drafter code sees a normal LM
    whose distribution is zero there (verification stays lossless: the target corrects it).
    """

    def __init__(self, body_lm: nn.Module, kept_ids: torch.Tensor, head_weight: torch.Tensor,
                 full_vocab_size: int) -> None:
        super().__init__()
        self.lm = body_lm
        self.config = body_lm.config
        self.full_vocab_size = int(full_vocab_size)
        self.register_buffer("kept_ids", kept_ids.long(), persistent=False)
        self.head = nn.Parameter(head_weight.detach().clone())
        self.softcap = getattr(self.config, "final_logit_softcapping", None)

    def get_output_embeddings(self) -> None:
        return None  # the runner falls back to config.vocab_size (the full vocabulary)

    def get_input_embeddings(self) -> nn.Module:
        return self.lm.get_input_embeddings()

    def restricted_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = hidden @ self.head.t()
        if self.softcap:
            logits = torch.tanh(logits / self.softcap) * self.softcap
        return logits

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                cache: Any = None, use_cache: bool = False, logits_to_keep: int = 0,
                past_key_values: Any = None, **kwargs: Any) -> CausalLMOutputWithPast:
        out = self.lm.model(input_ids=input_ids, attention_mask=attention_mask,
                            cache=cache if cache is not None else past_key_values,
                            use_cache=use_cache)
        hidden = out.last_hidden_state
        if logits_to_keep:
            hidden = hidden[:, -logits_to_keep:]
        small = self.restricted_logits(hidden)
        full = small.new_full((*small.shape[:-1], self.full_vocab_size), float("-inf"))
        full.scatter_(-1, self.kept_ids.expand(*small.shape[:-1], -1), small)
        return CausalLMOutputWithPast(logits=full, past_key_values=out.past_key_values)


class Student(nn.Module):
    """What the trainer optimises: logits over the student's own columns, and the map from
    full-vocabulary token ids to those columns (identity for a full head)."""

    def __init__(self, model: nn.Module, spec: StudentSpec, full_vocab_size: int) -> None:
        super().__init__()
        self.model = model
        self.spec = spec
        self.full_vocab_size = int(full_vocab_size)
        if isinstance(model, RestrictedHeadLM):
            column = torch.full((full_vocab_size,), -1, dtype=torch.long)
            column[model.kept_ids] = torch.arange(model.kept_ids.numel())
            self.register_buffer("column_of", column, persistent=False)
        else:
            self.column_of = None

    def logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        if isinstance(self.model, RestrictedHeadLM):
            hidden = self.model.lm.model(input_ids=input_ids, attention_mask=attention_mask,
                                         use_cache=False).last_hidden_state
            return self.model.restricted_logits(hidden)
        return self.model(input_ids=input_ids, attention_mask=attention_mask,
                          use_cache=False).logits

    def columns(self, full_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Student columns of ``full_ids`` and a validity mask (None when all are valid)."""
        if self.column_of is None:
            return full_ids.long(), None
        cols = self.column_of[full_ids.long()]
        return cols.clamp(min=0), cols >= 0

    def trainable_state(self) -> dict[str, torch.Tensor]:
        """The tensors a distilled drafter directory stores (the frozen, shared ones are not)."""
        names = {n for n, p in self.model.named_parameters() if p.requires_grad}
        state = {n: t.detach().contiguous() for n, t in self.model.state_dict().items()
                 if n in names or (self.spec.kind == "model")}
        if isinstance(self.model, RestrictedHeadLM):
            state["kept_ids"] = self.model.kept_ids.detach().clone()
        return state


def embedding_fingerprint(model: nn.Module, legacy: bool = False) -> str:
    """A short hash of the target's input embedding, to refuse a drafter built on another one.

    The rows are hashed as bf16 values, so the float32 and bf16 loads of one model agree (a
    drafter distilled with a float32 teacher runs on the bf16 target). ``legacy``: the hash of
    earlier versions, of the rows in the model's own dtype (what older drafters recorded)."""
    weight = model.get_input_embeddings().weight.detach()
    rows = weight[:: max(1, weight.shape[0] // 64)][:64]
    rows = (rows if legacy else rows.to(torch.bfloat16)).float().cpu().numpy()
    digest = hashlib.sha256(np.ascontiguousarray(rows.round(4)).tobytes())
    digest.update(str(tuple(weight.shape)).encode())
    return digest.hexdigest()[:16]


def build_student(spec: StudentSpec, target_model: nn.Module,
                  kept_ids: torch.Tensor | None = None) -> Student:
    """A fresh student (before training) for ``spec`` on top of ``target_model``."""
    full_vocab = int(target_model.config.get_text_config().vocab_size)
    head = target_model.get_output_embeddings()
    if head is not None:
        full_vocab = int(head.weight.shape[0])
    if spec.kind == "self":
        body = truncated_copy(target_model, spec.layers)
        if spec.head == "corpus":
            if kept_ids is None:
                raise StudentSpecError("self:K,head=corpus needs the kept token ids (the corpus)")
            weight = (head.weight if head is not None
                      else target_model.get_input_embeddings().weight)[kept_ids]
            return Student(RestrictedHeadLM(body, kept_ids, weight, full_vocab), spec, full_vocab)
        return Student(body, spec, full_vocab)
    from babelspec.models import load_model

    model = load_model(spec.path, dtype=next(target_model.parameters()).dtype)[0]  # the teacher's
    vocab = int(model.get_output_embeddings().weight.shape[0])
    if vocab != full_vocab:
        raise StudentSpecError(
            f"student {spec.path!r} has a vocabulary of {vocab} tokens but the target has "
            f"{full_vocab}; a drafter must share the target's tokenizer")
    for p in model.parameters():
        p.requires_grad_(True)
    return Student(model, spec, full_vocab)


def load_trained(state: dict[str, torch.Tensor], spec: StudentSpec, target_model: nn.Module,
                 model_dir: Path | None = None) -> Student:
    """Rebuild a distilled student from its saved tensors on top of ``target_model``."""
    if spec.kind == "model":
        from babelspec.models import load_model

        model = load_model(str(model_dir), dtype=next(target_model.parameters()).dtype)[0]
        return Student(model, spec, int(model.get_output_embeddings().weight.shape[0]))
    kept = state.pop("kept_ids", None)
    student = build_student(spec, target_model, kept_ids=kept)
    missing = set(state) - set(student.model.state_dict())
    if missing:
        raise UserError(f"saved drafter has tensors the student lacks: {sorted(missing)[:5]}")
    student.model.load_state_dict(state, strict=False)
    return student
