"""The tokens a language's corpus uses under a tokenizer: the rows a restricted draft head keeps.

Computed once per (language, tokenizer, corpus) and cached as a sorted ``.npy`` of token ids
in the user's cache, keyed by a fingerprint of the tokenizer and the corpus text.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from babelspec.fileio import atomic_open
from babelspec.models import cache_dir
from babelspec.models.tokenizers import tokenizer_fingerprint

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

VOCAB_FORMAT = 1


def _tokenizer_key(tokenizer: PreTrainedTokenizerBase) -> str:
    """A short hash that changes whenever the tokenizer's vocabulary or rules change."""
    fingerprint = tokenizer_fingerprint(tokenizer)
    return (fingerprint["rules_sha256"] or fingerprint["vocab_sha256"])[:16]


def special_token_ids(tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """EOS/BOS/PAD and friends: always drafted-for, so a draft can end a text."""
    ids = {tid for tid in (tokenizer.eos_token_id, tokenizer.bos_token_id) if tid is not None}
    return sorted(ids)


def corpus_token_ids(
    texts: Iterable[str], tokenizer: PreTrainedTokenizerBase, *, batch_size: int = 1024
) -> np.ndarray:
    """Sorted unique token ids of ``texts`` (tokenised without special tokens), plus specials."""
    seen = np.zeros(len(tokenizer), dtype=bool)
    batch: list[str] = []

    def flush() -> None:
        if batch:
            encoded = tokenizer(batch, add_special_tokens=False)["input_ids"]
            flat = np.fromiter((t for ids in encoded for t in ids), dtype=np.int64)
            seen[flat] = True
            batch.clear()

    for text in texts:
        batch.append(text)
        if len(batch) >= batch_size:
            flush()
    flush()
    seen[special_token_ids(tokenizer)] = True
    return np.flatnonzero(seen).astype(np.int64)


def language_token_ids(lang: str, tokenizer: PreTrainedTokenizerBase) -> np.ndarray:
    """Token ids that occur in the language's monolingual train split (cached)."""
    from babelspec.data.corpus import monolingual
    from babelspec.data.languages import get_language

    code = get_language(lang).code  # UnknownLanguageError (a ValueError) names the choices
    texts = monolingual(code, "train")
    if not texts:
        raise ValueError(f"the {code} monolingual train split is empty; no vocabulary to restrict to")
    digest = hashlib.sha256()
    for text in texts:
        digest.update(text.encode())
        digest.update(b"\0")
    key = f"{code}-{_tokenizer_key(tokenizer)}-{digest.hexdigest()[:12]}-v{VOCAB_FORMAT}"
    path = cache_dir() / "vocab" / f"{key}.npy"
    if path.is_file():
        return np.load(path)
    ids = corpus_token_ids(texts, tokenizer)
    _save_atomic(path, ids)
    return ids


def _save_atomic(path: Path, array: np.ndarray) -> None:
    with atomic_open(path, "wb") as handle:
        np.save(handle, array)
