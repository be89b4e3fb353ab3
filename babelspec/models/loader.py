"""Load a causal LM and its tokenizer from a preset name, a local path, or a hub name.

Packaged GGUF presets are dequantised once into the user's cache (``cache.cache_dir()``) as
safetensors plus a fast tokenizer, so every later load is a plain ``from_pretrained`` of a
local directory (seconds, memory-mapped).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from babelspec.errors import UserError
from babelspec.fileio import sha256_file
from babelspec.machine import cpu_flags, dtype_name
from babelspec.models.presets import DEFAULT_TARGET, GGUF_LOCATORS, PRESETS, Preset, PresetError
from babelspec.models.userdir import COMPLETE_MARKER, cache_dir, cached_build

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

# Bump when the converted layout changes, so stale caches are rebuilt rather than misread.
CONVERSION_FORMAT = 1

# How many GGUF conversions this process has run (the cache is meant to keep this at 0 or 1).
conversion_count = 0


def default_device() -> torch.device:
    import torch

    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


DTYPES = ("auto", "bfloat16", "float32")
_DTYPE_ALIASES = {"bf16": "bfloat16", "fp32": "float32", "float": "float32"}


def cpu_has_native_bf16(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether this CPU multiplies bf16 natively (AVX-512 BF16 or AMX-BF16), from its flags.

    Without these instructions bf16 has no native matmul here and ``auto`` keeps fp32 (a
    choice not measured on such a CPU; ``babelspec bench forward`` measures it where needed)."""
    return bool(cpu_flags(cpuinfo) & {"avx512_bf16", "amx_bf16"})


def default_dtype(device: torch.device, cpuinfo: str = "/proc/cpuinfo") -> torch.dtype:
    """bf16 where the hardware computes in it natively (CUDA with bf16 support, a CPU with
    AVX-512 BF16 or AMX), fp32 elsewhere. ``babelspec bench forward`` measures it. On this
    project's idle 2-core Xeon (2 threads, lean forward) a one-token decode is a little faster
    in fp32 (58.7 ms against 64.3), but a verification of 4-9 tokens costs 95.7-153 ms in fp32
    and 66-74 ms in bf16 (1.4-2.3x faster): auto takes bf16 because speculation verifies blocks,
    and its verification then costs 0.98-1.16 decode steps for any block up to 9 tokens."""
    import torch

    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float32
    if device.type == "cpu" and cpu_has_native_bf16(cpuinfo):
        return torch.bfloat16
    return torch.float32


def resolve_dtype(dtype: str | torch.dtype | None, device: torch.device | None = None,
                  cpuinfo: str = "/proc/cpuinfo") -> torch.dtype:
    """A torch dtype from ``auto`` (or None), ``bfloat16``/``bf16``, ``float32``/``fp32``;
    ``auto`` reads the CPU's flags from ``cpuinfo``."""
    import torch

    if isinstance(dtype, torch.dtype):
        return dtype
    name = "auto" if dtype is None else _DTYPE_ALIASES.get(str(dtype).strip().lower(), str(dtype).strip().lower())
    if name == "auto":
        return default_dtype(device if device is not None else default_device(), cpuinfo)
    if name not in DTYPES:
        raise UserError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}")
    return getattr(torch, name)


def convert_gguf(gguf_path: Path, out_dir: Path, *, source: str) -> None:
    """Dequantise a GGUF into ``out_dir`` as fp32 safetensors plus a fast tokenizer."""
    global conversion_count
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    started = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    model = AutoModelForCausalLM.from_pretrained(
        gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32
    )
    # The weights are now plain fp32 tensors; drop the GGUF quantizer so save_pretrained writes
    # an ordinary checkpoint and later loads do not look for the GGUF.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    conversion_count += 1
    marker = {
        "format": CONVERSION_FORMAT,
        "source": source,
        "gguf_sha256": sha256_file(gguf_path),
        "gguf_bytes": gguf_path.stat().st_size,
        "dtype": "float32",
        "conversion_seconds": round(time.perf_counter() - started, 3),
    }
    (out_dir / COMPLETE_MARKER).write_text(json.dumps(marker, indent=2) + "\n")


def recast_checkpoint(source: Path, out_dir: Path, dtype: torch.dtype) -> None:
    """Save the fp32 conversion in ``source`` again in ``dtype`` (half the bytes for bf16, so
    later loads read less and cast nothing)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    started = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype)
    model.save_pretrained(out_dir, safe_serialization=True)
    AutoTokenizer.from_pretrained(source).save_pretrained(out_dir)
    marker = json.loads((source / COMPLETE_MARKER).read_text())
    marker.update(dtype=dtype_name(dtype), recast_from=source.name,
                  conversion_seconds=round(time.perf_counter() - started, 3))
    (out_dir / COMPLETE_MARKER).write_text(json.dumps(marker, indent=2) + "\n")


def _per_dtype(name: str, fp32_dir: Path, dtype: torch.dtype | None) -> Path:
    """The fp32 conversion itself, or its cached copy in another dtype (``NAME-bfloat16``)."""
    import torch

    if dtype is None or dtype == torch.float32:
        return fp32_dir
    return cached_build(f"{name}-{dtype_name(dtype)}", lambda tmp: recast_checkpoint(fp32_dir, tmp, dtype))


def converted_dir(preset_name: str, dtype: torch.dtype | None = None) -> Path:
    """The cached, dequantised checkpoint of a packaged preset, converting it on first use
    (fp32 when ``dtype`` is None; one cached copy per other dtype)."""
    preset = _get_preset(preset_name)
    if preset.source != "gguf-package":
        raise PresetError(f"preset {preset_name!r} is not a packaged GGUF preset")
    name = f"models/{preset.name}-v{CONVERSION_FORMAT}"

    def build(tmp: Path) -> None:
        with tempfile.TemporaryDirectory(dir=cache_dir(), prefix=".gguf-") as gguf_tmp:
            gguf = GGUF_LOCATORS[preset.name](Path(gguf_tmp))
            convert_gguf(gguf, tmp, source=preset.name)

    return _per_dtype(name, cached_build(name, build), dtype)


def gguf_file_dir(path: Path, dtype: torch.dtype | None = None) -> Path:
    """A cached conversion of any GGUF file given by path (keyed by its content hash)."""
    digest = sha256_file(path)[:16]

    def build(tmp: Path) -> None:
        convert_gguf(path, tmp, source=str(path.name))

    name = f"models/gguf-{path.stem}-{digest}-v{CONVERSION_FORMAT}"
    return _per_dtype(name, cached_build(name, build), dtype)


def _get_preset(name: str) -> Preset:
    try:
        return PRESETS[name]
    except KeyError:
        raise PresetError(_unknown_message(name)) from None


def _unknown_message(spec: str) -> str:
    known = ", ".join(sorted(PRESETS))
    return (
        f"unknown model {spec!r}: not a preset, not an existing local path, not a hub name "
        f"(org/name). Presets: {known}. Or pass a directory holding a Hugging Face checkpoint, "
        "or a .gguf file."
    )


def _looks_like_hub_name(spec: str) -> bool:
    parts = spec.split("/")
    return len(parts) == 2 and all(parts) and not spec.startswith((".", "~"))


def resolve(spec: str, dtype: torch.dtype | None = None) -> tuple[str, str]:
    """Map a model spec to ``(kind, location)`` without loading weights.

    kind is ``"dir"`` (a local checkpoint directory, possibly the cache's conversion in
    ``dtype`` for packaged and .gguf models), ``"hub"`` (a hub name), or raises PresetError.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise PresetError("empty model spec; give a preset name, e.g. " + repr(DEFAULT_TARGET))
    spec = spec.strip()
    if spec in PRESETS:
        preset = PRESETS[spec]
        if preset.source == "gguf-package":
            return "dir", str(converted_dir(spec, dtype))
        return "hub", preset.hub_id or spec
    path = Path(spec).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise PresetError(
                f"{spec!r} is a directory but holds no config.json; point to a Hugging Face "
                "checkpoint directory (config.json + *.safetensors + tokenizer files)"
            )
        return "dir", str(path)
    if path.is_file() and path.suffix == ".gguf":
        return "dir", str(gguf_file_dir(path.resolve(), dtype))
    if path.exists():
        raise PresetError(f"{spec!r} is a file but not a .gguf; give a checkpoint directory")
    if _looks_like_hub_name(spec):
        return "hub", spec
    raise PresetError(_unknown_message(spec))


@contextlib.contextmanager
def gguf_source(spec: str) -> Iterator[Path]:
    """The GGUF file a model spec was made from, for as long as the context lasts: a packaged
    preset's, assembled from its parts into a temporary folder, or a ``.gguf`` path itself.
    Any other spec has none: a PresetError says what to give instead."""
    spec = spec.strip() if isinstance(spec, str) else spec
    if spec in PRESETS and PRESETS[spec].source == "gguf-package":
        with tempfile.TemporaryDirectory(dir=cache_dir(), prefix=".gguf-") as tmp:
            yield GGUF_LOCATORS[spec](Path(tmp))
        return
    path = Path(str(spec)).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        yield path.resolve()
        return
    raise PresetError(f"{spec!r} is not a GGUF model: the gguf mode computes on a GGUF file's own blocks; give a "
                      "packaged preset (gemma-3-270m) or a .gguf file, or leave the mode out for bfloat16")


def _hub_failure(spec: str, hub_id: str, err: Exception) -> PresetError:
    preset = PRESETS.get(spec)
    hint = preset.install_hint if preset else (
        f"put a copy of {hub_id!r} in your Hugging Face cache (HF_HOME), or pass a local "
        "checkpoint directory"
    )
    return PresetError(f"cannot load {spec!r} ({hub_id}) here: {hint}. Cause: {err}")


def _from_pretrained(cls: Any, spec: str, kind: str, location: str, **kwargs: Any) -> Any:
    if kind == "dir":
        return cls.from_pretrained(location, **kwargs)
    # A hub name: the local HF cache first (no network), then the hub unless told offline.
    try:
        return cls.from_pretrained(location, local_files_only=True, **kwargs)
    except (OSError, ValueError) as err:
        offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in {"1", "true", "yes", "on"}
        if offline:
            raise _hub_failure(spec, location, err) from err
    try:
        return cls.from_pretrained(location, **kwargs)
    except Exception as err:  # network errors come in many types; all mean "not available"
        raise _hub_failure(spec, location, err) from err


def load_tokenizer(spec: str = DEFAULT_TARGET) -> PreTrainedTokenizerBase:
    """The tokenizer of a model spec, or a tokenizer preset (e.g. ``qwen3.5``)."""
    from babelspec.models.tokenizers import TOKENIZER_PRESETS, load_tokenizer_preset

    if isinstance(spec, str) and spec.strip() in TOKENIZER_PRESETS:
        return load_tokenizer_preset(spec.strip())
    from transformers import AutoTokenizer

    kind, location = resolve(spec)
    return _from_pretrained(AutoTokenizer, spec, kind, location)


def load_model(
    spec: str = DEFAULT_TARGET,
    *,
    device: str | torch.device | None = None,
    dtype: str | torch.dtype | None = None,
    attention: str = "eager",
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load ``(model, tokenizer)`` for a preset name, a local path, a .gguf file or a hub name.

    The model is in eval mode on ``device`` (CUDA when present, else CPU) in ``dtype``
    (``auto``/None: ``default_dtype``; or ``bfloat16``, ``float32``, a torch dtype), with the
    ``attention`` implementation of transformers. Eager by default: the CPU SDPA kernel rounds
    by the number of query rows, so in bf16 a verification forward of k tokens differed from k
    one-token forwards in every block probed (logits up to 2.0 apart from the second layer on);
    with eager attention most blocks are bit-identical (2 of 3 probed), at the same speed within
    the noise of a loaded machine. bf16 stays the fast mode, not the exact one;
    ``babelspec bench equivalence --dtype bfloat16 [--attention sdpa]`` measures its agreement.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    device = torch.device(device) if device is not None else default_device()
    dtype = resolve_dtype(dtype, device)
    kind, location = resolve(spec, dtype)
    tokenizer = _from_pretrained(AutoTokenizer, spec, kind, location)
    model = _from_pretrained(AutoModelForCausalLM, spec, kind, location, dtype=dtype,
                             attn_implementation=attention)
    model.to(device)
    model.eval()
    model.requires_grad_(False)
    return model, tokenizer
