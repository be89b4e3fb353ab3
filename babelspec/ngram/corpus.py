"""From texts to token arrays, and the tokenizer fingerprint an n-gram file carries."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np


def _encode_batch(tokenizer: Any, batch: list[str]) -> list[list[int]]:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:  # the Rust tokenizer directly: parallel, no Python post-processing
        return [e.ids for e in backend.encode_batch(batch, add_special_tokens=False)]
    if hasattr(tokenizer, "encode_batch"):  # a bare `tokenizers.Tokenizer`
        return [e.ids for e in tokenizer.encode_batch(batch, add_special_tokens=False)]
    return tokenizer(batch, add_special_tokens=False)["input_ids"]


def tokenize_texts(
    texts: Iterable[str],
    tokenizer: Any,
    *,
    batch_size: int = 2048,
    separator: str = "\n",
    progress: bool = False,
    total: int | None = None,
) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
    """Tokenise ``texts`` in batches with the (fast) tokenizer.

    Each text is one document (n-grams never cross documents); ``separator`` is appended to
    each so the model also learns how a line ends. Returns (tokens, document lengths, sizes).
    """
    chunks: list[np.ndarray] = []
    lengths: list[np.ndarray] = []
    n_chars = n_texts = 0
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=total, unit=" texts", desc="tokenising", dynamic_ncols=True)
    it = iter(texts)
    while True:
        raw = list(itertools.islice(it, batch_size))
        if not raw:
            break
        batch = [t + separator for t in raw if t and not t.isspace()]
        if not batch:
            continue
        ids = _encode_batch(tokenizer, batch)
        lens = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        flat = np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int32, count=int(lens.sum()))
        chunks.append(flat)
        lengths.append(lens)
        n_chars += sum(map(len, batch))
        n_texts += len(batch)
        if bar is not None:
            bar.update(len(batch))
    if bar is not None:
        bar.close()
    tokens = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int32)
    doc_lengths = np.concatenate(lengths) if lengths else np.zeros(0, dtype=np.int64)
    return tokens, doc_lengths, {"texts": n_texts, "characters": n_chars, "tokens": int(tokens.size)}


def _language(source: str):
    from babelspec.data.languages import get_language

    try:
        return get_language(source)
    except ValueError:
        return None


def corpus_texts(source: str, split: str = "train", data_root: str | None = None) -> tuple[Iterable[str], str]:
    """Texts of a corpus SOURCE and a name for the training metadata.

    SOURCE is a language code of the bundled data (its ``split``), ``FORMAT:PATH`` or a path in
    one of the data layer's formats (plain text, TSV, JSONL, Leipzig, FLORES+, HF datasets). A
    FLORES-200 language beyond the bundled 11 reads its real sets' training text from the corpora
    folder (``data_root``, else the one ``data.real.corpora_root`` finds).
    """
    from babelspec.data.loaders import load_corpus

    language = None if Path(source).exists() else _language(source)
    if language is not None and not language.bundled and split == "train":  # its real sets, where found
        from babelspec.data.real import corpora_root
        from babelspec.data.sources import real_training_texts

        root = corpora_root(data_root)
        if root is not None:
            return real_training_texts(language.code, root), f"{language.code}:real:{root.name}"
    texts = load_corpus(source, split=split)
    path = Path(source)
    name = path.name if path.exists() else f"{source}:{split}"
    return texts, name
