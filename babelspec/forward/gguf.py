"""The ``gguf`` target mode as a step applied to a built forward: every linear product and the
tied output head of a Gemma-3 lean forward computed on the GGUF file's own quantized blocks
(``forward.qmm``), the rest (embedding lookup, norms, attention) as in the bf16 forward.

The file's model, not a rounding of it: bf16 weights are the file's values rounded to 8 bits of
mantissa, these products read the file's codes and scales themselves, with activations quantized
per row per group of 32 (16 for Q6_K) to int8, as llama.cpp's CPU products quantize them.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import torch

from babelspec.errors import UserError
from babelspec.forward.gemma3 import LeanGemma3
from babelspec.forward.kernels import OutputHead
from babelspec.forward.qmm import KERNELS, QProduct, QuantError, QWeight, repack

# the lean forward's products -> the GGUF tensors stacked into each (per layer ``blk.N.``)
PRODUCTS = {"qkv": ("attn_q", "attn_k", "attn_v"), "o": ("attn_output",), "gate_up": ("ffn_gate", "ffn_up"),
            "down": ("ffn_down",)}  # fmt: skip


_SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}  # GGUF value types


def tensor_table(path: Path) -> dict[str, tuple[str, tuple[int, ...], np.ndarray]]:
    """A GGUF file's tensors: name -> (type name, shape as the file gives it, raw bytes as uint8
    [rows, bytes per row], memory-mapped). Reads the header's key-value section only to step over
    it (gguf's GGUFReader decodes every vocabulary string, 10 s for a 262k vocabulary)."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    data = np.memmap(path, dtype=np.uint8, mode="r")
    view = memoryview(data)
    at = 0

    def take(fmt: str):
        nonlocal at
        value = struct.unpack_from("<" + fmt, view, at)
        at += struct.calcsize("<" + fmt)
        return value[0] if len(value) == 1 else value

    def string() -> str:
        nonlocal at
        n = take("Q")
        at += n
        return bytes(view[at - n : at]).decode("utf-8", "replace")

    def skip(kind: int) -> None:
        nonlocal at
        if kind == 8:
            n = take("Q")
            at += n
        elif kind == 9:
            inner, count = take("I"), take("Q")
            if inner in _SCALAR:
                at += count * struct.calcsize(_SCALAR[inner])
            else:
                for _ in range(count):
                    skip(inner)
        else:
            at += struct.calcsize(_SCALAR[kind])

    if bytes(view[:4]) != b"GGUF":
        raise QuantError(f"{path} is not a GGUF file (no GGUF magic); give the .gguf the model was loaded from")
    at = 4
    version, tensors, fields = take("I"), take("Q"), take("Q")
    if version < 2:
        raise QuantError(f"{path} is GGUF version {version}; this reader takes version 2 and later")
    alignment = 32
    for _ in range(fields):
        key, kind = string(), take("I")
        if key == "general.alignment" and kind == 4:
            alignment = take("I")
        else:
            skip(kind)
    infos = []
    for _ in range(tensors):
        name, dims = string(), take("I")
        shape = tuple(take("Q") for _ in range(dims))
        infos.append((name, shape, take("I"), take("Q")))
    start = -(-at // alignment) * alignment
    table = {}
    for name, shape, kind, offset in infos:
        kind_name = GGMLQuantizationType(kind).name
        block, size = GGML_QUANT_SIZES[GGMLQuantizationType(kind)]
        rows = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        row_bytes = shape[0] // block * size
        table[name] = (kind_name, shape, data[start + offset : start + offset + rows * row_bytes].reshape(rows, row_bytes))
    return table


def read_gguf(path: Path, layers: int) -> dict[str, QWeight]:
    """The product weights of a Gemma-3 GGUF, repacked: ``blk.N.attn_q`` .. and ``output`` (the
    output head: the file's ``output.weight``, or its tied ``token_embd.weight``)."""
    try:
        table = {name.removesuffix(".weight"): t for name, t in tensor_table(path).items()}
    except (OSError, ValueError, struct.error) as err:
        raise QuantError(f"cannot read {path} as a GGUF file ({err}); give the .gguf the model was loaded from") from None
    names = [f"blk.{i}.{part}" for i in range(layers) for parts in PRODUCTS.values() for part in parts]
    head = "output" if "output" in table else "token_embd"
    missing = [name for name in [*names, head] if name not in table]
    if missing:
        raise QuantError(f"{path} lacks {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}: not the "
                         "GGUF of this Gemma-3 model")  # fmt: skip
    out = {}
    for name in [*names, head]:
        kind, shape, raw = table[name]
        k, n = int(shape[0]), int(shape[1])
        out["output" if name == head else name] = repack(kind, raw, n, k, name)
    return out


def use_gguf(forward: LeanGemma3, path: Path, kernel: str = "auto") -> None:
    """Turn a bf16 target's lean forward into the GGUF file's model, in place: each layer's
    products and the output head on ``QProduct`` over the file's blocks. ``kernel``: one of
    ``qmm.KERNELS`` (``auto``: the best this CPU runs)."""
    if kernel not in KERNELS:
        raise UserError(f"unknown quantized kernel {kernel!r}; use one of {', '.join(KERNELS)}")
    if not isinstance(forward.logits_of, OutputHead) or forward.quantize is not None:
        raise UserError("the gguf mode applies to a target's own forward (a drafter's head or int8 layers are not)")
    if forward.dtype != torch.bfloat16 or not forward.exact:
        raise UserError(f"the gguf mode runs on the bf16 lean forward; this one is {forward.dtype} (load the model "
                         "with dtype='bfloat16')")  # fmt: skip
    if forward.logits_of.certified is not None:
        raise UserError("the certified head belongs to the bf16 target; use head='full' with the gguf mode")
    weights = read_gguf(path, len(forward.layers))
    config = forward.body.config
    expect = {"qkv": (forward.heads + 2 * forward.kv_heads) * forward.head_dim, "o": config.hidden_size,
              "gate_up": 2 * config.intermediate_size, "down": config.hidden_size}  # fmt: skip
    for i, layer in enumerate(forward.layers):
        for kind, parts in PRODUCTS.items():
            product = QProduct([weights[f"blk.{i}.{part}"] for part in parts], kernel)
            if product.n != expect[kind]:
                raise QuantError(f"{path}: layer {i}'s {kind} gives {product.n} outputs, the model {expect[kind]}: "
                                 "not the GGUF of this model")  # fmt: skip
            setattr(layer, kind, product)
    head = QProduct([weights["output"]], kernel, out_dtype=torch.float32)  # logits unrounded, as llama.cpp's
    if head.n != forward.logits_of.weight.shape[0]:
        raise QuantError(f"{path}: the output head has {head.n} rows, the model's vocabulary {forward.logits_of.weight.shape[0]}")
    forward.logits_of.project = head
    forward.quantize = "gguf"
    forward._batch_rows.clear()
    forward._exact_rows.clear()
