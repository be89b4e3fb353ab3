"""The verifier: a ``CausalLM`` that prefills the prompt and verifies drafted blocks."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import torch

from babelspec.errors import UserError
from babelspec.forward import CACHE_ONLY, ForwardOptions, HeadRequest, LeanGemma3
from babelspec.forward.gguf import use_gguf
from babelspec.forward.options import HEADS
from babelspec.forward.w8a8 import quantize_w8a8
from babelspec.lm import CausalLM
from babelspec.models import DEFAULT_TARGET, gguf_source, load_model
from babelspec.models.loader import resolve_dtype


class Target(CausalLM):
    """The verifier: prefill the prompt, verify drafted blocks in one forward, roll back."""

    def __init__(self, model: torch.nn.Module, tokenizer=None, device: torch.device | None = None,
                 forward: str | None = None, impl: Any = None, options: ForwardOptions | None = None):  # fmt: skip
        super().__init__(model, device, forward, impl=impl, options=options)
        self.tokenizer = tokenizer
        self.name = getattr(model.config, "name_or_path", "") or type(model).__name__
        self.precision: str | None = None  # a target mode (load_target's ``precision``), else the dtype's own

    def prefill(self, ids: list[int]) -> None:
        """Start a new sequence: cache ``ids`` (the caller keeps the last token pending)."""
        self.reset()
        started = time.perf_counter()
        if ids:  # its logits are not used: the lean forward skips the output head
            self.forward(ids, logits_to_keep=CACHE_ONLY if self.impl.prefills_without_logits else 1)
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        self.prefill_seconds = time.perf_counter() - started
        self.timer.reset()  # prefill is timed apart from the decode forwards
        self.forward_tokens = []

    @property
    def certifies_head(self) -> bool:
        """Whether this target's forward has the certified head (``load_target(head=...)``)."""
        return self.impl.certifies_head

    def checkpoint_and_verify(self, tokens: list[int] | torch.Tensor, head: HeadRequest | None = None) -> torch.Tensor:
        """Logits [len(tokens), vocab] after each of ``tokens``: the pending token followed by
        the drafted ones, so row i judges draft i and the last row gives the bonus token.

        Takes the rollback point first when a drafted token may be rejected (a block of more
        than one token on a cache that cannot be cropped); plain decoding never needs one."""
        if len(tokens) > 1:
            self.checkpoint()
        return self.forward(tokens, head=head)

    def verify_tree(self, tokens: list[int], parents: torch.Tensor, head: HeadRequest | None = None) -> torch.Tensor:
        """Logits [len(tokens), vocab] of a token tree in one forward: the pending token (parent
        -1) and the drafted nodes, each seeing only its ancestors (where ``verifies_tree``)."""
        return self.forward(tokens, parents=parents, head=head)


PRECISIONS = ("w8a8", "gguf")  # target modes beside the loaded dtype's own ("none")


def default_precision(spec: str, device: str | torch.device | None = None, dtype: str | torch.dtype | None = None,
                      head: str = "full", forward: str | None = None) -> str | None:  # fmt: skip
    """The target mode ``load_target`` takes where none is named: ``gguf`` for a model distributed
    as a GGUF (a packaged preset, a ``.gguf`` path) under the dtype ``auto`` on a CPU whose lean
    forward is exact (oneDNN packs bf16) and where the C product builds: its plain decoding reads
    the file's 256 MB a step instead of bf16's 535, and its agreement with float32 is no worse than
    llama.cpp's on the same file (``benchmarks/results/gguf_forward.json``,
    ``benchmarks/results/gguf_target.json``). None (the dtype's own) elsewhere, or where a dtype,
    a head or a forward is named."""
    from babelspec.forward.kernels import onednn_packs_bf16
    from babelspec.forward.qmm import library
    from babelspec.models import PRESETS

    if dtype not in (None, "auto") or head != "full" or forward not in (None, "lean"):
        return None
    if torch.device(device).type != "cpu" if device is not None else torch.cuda.is_available():
        return None
    name = spec.strip() if isinstance(spec, str) else ""
    gguf = (name in PRESETS and PRESETS[name].source == "gguf-package") or name.endswith(".gguf")
    return "gguf" if gguf and onednn_packs_bf16() and library() is not None else None


def _check_bf16_choices(dtype: str | torch.dtype | None, device: str | torch.device | None,
                        precision: str | None, head: str) -> None:
    """A target mode or the certified head with a dtype other than bf16, refused before a model
    loads (seconds to minutes) with the message the forward would give after."""
    if dtype in (None, "auto") or (precision is None and head == "full"):
        return
    resolved = resolve_dtype(dtype, torch.device(device) if device is not None else None)
    if resolved == torch.bfloat16:
        return
    if precision == "w8a8":
        raise UserError(f"W8A8 quantizes a bfloat16 target; this one is {resolved} (load it with dtype='bfloat16')")
    if precision == "gguf":
        raise UserError(f"the gguf mode runs on the bf16 lean forward; this one is {resolved} (load the model "
                        "with dtype='bfloat16')")  # fmt: skip
    if head == "certified":
        raise UserError(f"the certified head needs a bf16 head (this one: {resolved}); load the target with "
                        "dtype='bfloat16' or use head='full'")  # fmt: skip


def load_target(
    spec: str = DEFAULT_TARGET,
    *,
    device: str | torch.device | None = None,
    dtype: str | torch.dtype | None = None,
    attention: str = "eager",
    precision: str | None = None,
    head: str = "full",
    forward: str | None = None,
    options: ForwardOptions | None = None,
    kernel: str = "auto",
) -> Target:
    """The verifier for a model spec (a preset, local path or hub name; see ``models.load_model``).

    ``precision="w8a8"``: a lower-precision target mode, another model than the bf16 one (its
    agreement with it is measured by ``babelspec bench peers --precision w8a8``): the layers'
    products (MLP down-projections kept bf16) and the output head on int8 weights and int8
    activations (``forward.w8a8.quantize_w8a8``), calibrated on the bundled corpora's training pairs.
    Speculative decoding stays lossless with respect to this model: a block's rows get the bits
    they get alone.

    ``precision``: None takes ``default_precision`` (``gguf`` for a GGUF-distributed model under
    the dtype auto on a CPU), ``"none"`` the loaded dtype's own model.

    ``precision="gguf"``: the file's own model, for a GGUF preset or a ``.gguf`` path: every
    product and the output head on the file's quantized blocks (``forward.gguf``), each read once
    for all rows of a block, with activations quantized per row as llama.cpp quantizes them;
    ``kernel`` picks the product's path (``forward.qmm.KERNELS``: ``auto``, each instruction set,
    ``torch``), every one with the same bits.

    ``head="certified"``: the bf16 target's greedy and top-k rows take the certified head
    (``forward.certified``): the same logits where they matter, from an int8 pass.

    ``forward`` (``"lean"`` or ``"hf"``) and ``options`` (``ForwardOptions``, whose head ``head``
    replaces): how the target computes (``forward.lean_forward``); its drafters compute so too."""
    if precision is not None and precision not in (*PRECISIONS, "none"):
        raise UserError(f"unknown target precision {precision!r}; use one of {', '.join(PRECISIONS)} "
                         "or none for the loaded dtype's own")  # fmt: skip
    if precision is None:
        precision = default_precision(spec, device, dtype, head, forward)
    elif precision == "none":
        precision = None
    if head not in HEADS:
        raise UserError(f"unknown output head {head!r}; use one of {', '.join(HEADS)}")
    if head == "certified" and dtype in (None, "auto"):
        dtype = "bfloat16"
    if precision is not None and head == "certified":
        raise UserError(f"the certified head belongs to the bf16 target; use it without precision={precision!r}")
    if precision in PRECISIONS and dtype in (None, "auto"):
        dtype = "bfloat16"  # the modes are made from the bf16 model
    _check_bf16_choices(dtype, device, precision, head)  # before the model loads, not after
    model, tokenizer = load_model(spec, device=device, dtype=dtype, attention=attention)
    if options is not None or head != "full":
        options = replace(options if options is not None else ForwardOptions(), head=head)
    target = Target(model, tokenizer, forward=forward, options=options)
    if precision is not None:  # a target mode, made from the bf16 lean forward in place
        if not isinstance(target.impl, LeanGemma3) or target.device.type != "cpu":
            raise UserError(f"a {precision} target needs the lean forward on the CPU (a Gemma-3 text model under "
                             "eager attention, not forward='hf')")  # fmt: skip
        if precision == "w8a8":
            quantize_w8a8(target.impl, lambda: calibrate(target))
        else:
            with gguf_source(spec) as path:
                use_gguf(target.impl, path, kernel)
        target.name += f" ({precision})"
        target.precision = precision
        target.reset()
    return target


def calibration_texts(pairs_per_lang: int = 4) -> list[str]:
    """W8A8 calibration text: for each bundled language, a few training pairs written as the
    translation task writes them (the English line, then the language's), no test split."""
    from babelspec.data import LANGUAGES, parallel
    from babelspec.data.corpus import languages_with_data

    texts = []
    for code in languages_with_data():
        pairs = parallel(code)
        spread = [pairs[i * len(pairs) // pairs_per_lang] for i in range(min(pairs_per_lang, len(pairs)))]
        texts.append("\n".join(f"English: {en}\n{LANGUAGES[code].name}: {text}" for en, text in spread))
    return texts


def calibrate(target: Target, max_tokens: int = 256, head_rows: int = 0) -> None:
    """Run the target over ``calibration_texts()`` (what W8A8 records its input magnitudes on),
    the output head on the last ``head_rows`` rows of each text (0: all of them)."""
    for text in calibration_texts():
        ids = target.tokenizer(text, add_special_tokens=True)["input_ids"][:max_tokens]
        target.impl.forward(torch.tensor([ids], device=target.device), target.impl.new_cache(),
                            logits_to_keep=head_rows)  # fmt: skip
