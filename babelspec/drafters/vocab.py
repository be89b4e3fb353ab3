"""The tokens a language's corpus uses under a tokenizer: the rows a restricted draft head keeps.

A language's rows are every token of its monolingual train split and the ``SOURCE_TOKENS`` most
frequent tokens of the English source side of the bundled parallel train splits: under the
paper's sampling a small target drifts into English words that are not in the prompt (41 % of
the tokens Gemma-3-270M sampled in 4 held-out amh translations lay outside the amh corpus's
1,885 tokens), and a draft with no row for them can only be rejected there.

A head can also keep the tokens the target itself finds likely on the language's text
(``predicted_token_ids``): the corpus's own tokens missed 19 % of the tokens Gemma-3-270M sampled in
held-out Occitan and Asturian FLORES-200 translations (the target strays into neighbouring
languages' words), and since a restricted head's draft is the target's distribution renormalised on
its rows, those misses are what its acceptance loses.

Computed once per (language, tokenizer, corpus) and cached as a sorted ``.npy`` of token ids
in the user's cache, keyed by a fingerprint of the tokenizer and the corpus text.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from babelspec.errors import UserError
from babelspec.fileio import atomic_open
from babelspec.models import cache_dir
from babelspec.models.tokenizers import tokenizer_fingerprint

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

VOCAB_FORMAT = 2
# English source tokens each restricted head also keeps. Tokens the target sampled outside the
# head's rows, 4 held-out FLORES-200 translations per language (166-192 tokens): amh 68 with
# none, 55 / 51 / 38 / 31 with the 1k / 2k / 4k / 8k most frequent; yor 20 -> 13 / 10 / 9 / 9;
# npi 15 -> 14 from 2k on. 4k rows add 5 MB to a 2-7k-row head; `babelspec bench quant`
# measures the drafters' α and speedup per language.
SOURCE_TOKENS = 4000
# The target's likely tokens on the language's text (``predicted_token_ids``): every id it gives
# probability >= PREDICT_THRESHOLD at some position of the first PREDICT_TOKENS tokens, teacher-
# forced. Tokens the target sampled in the held-out translations of the wide profile's run that lay
# outside the head's rows: oci 18.8 % -> 2.3 %, ast_Latn 18.7 -> 6.0, hin_Deva 8.2 -> 6.6, som_Latn
# 5.6 -> 4.4, amh 33 -> 29, for 1.6-6k more rows (0.05 -> 0.08 ms a draft); a threshold of 0.0005
# gained at most 2 points more for 3-4k rows more, the target's top-p nucleus under the paper's
# sampling half as much (benchmarks/vocab_coverage.py, benchmarks/results/vocab_coverage.json).
PREDICT_TOKENS = 1024
PREDICT_THRESHOLD = 1e-3
PREDICT_WINDOW = 256  # positions scored in one forward (their logits: 256 MB of float32)


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


def frequent_token_ids(texts: Iterable[str], tokenizer: PreTrainedTokenizerBase, top: int) -> np.ndarray:
    """Sorted ids of the ``top`` most frequent tokens of ``texts`` (ties: the smaller id first)."""
    counts = np.zeros(len(tokenizer), dtype=np.int64)
    encoded = tokenizer(list(texts), add_special_tokens=False)["input_ids"]
    np.add.at(counts, np.fromiter((t for ids in encoded for t in ids), dtype=np.int64), 1)
    ranked = np.argsort(-counts, kind="stable")[:top]
    return np.sort(ranked[counts[ranked] > 0])


def predicted_token_ids(model: Any, tokenizer: PreTrainedTokenizerBase, texts: Iterable[str], *,
                        tokens: int = PREDICT_TOKENS, threshold: float = PREDICT_THRESHOLD) -> np.ndarray:
    """Sorted ids ``model`` (a causal LM module: ``model(input_ids=...).logits``) gives probability
    >= ``threshold`` at some position of the first ``tokens`` tokens of ``texts`` (joined by new
    lines), teacher-forced in windows of ``PREDICT_WINDOW`` positions, each from the text's start
    of the window (a BOS token first). Empty where ``tokens`` is 0."""
    import torch

    if tokens < 0 or not 0.0 < threshold < 1.0:
        raise UserError(f"predicted tokens need tokens >= 0 and 0 < threshold < 1 (got {tokens}, {threshold})")
    ids: list[int] = []
    for text in texts:
        if len(ids) >= tokens:
            break
        ids.extend(tokenizer(text + "\n", add_special_tokens=False)["input_ids"])
    ids = ids[:tokens]
    bos = tokenizer.bos_token_id
    seen = np.zeros(0, dtype=np.int64)
    device = next(model.parameters()).device
    with torch.inference_mode():
        for begin in range(0, len(ids), PREDICT_WINDOW):
            window = ([bos] if bos is not None else []) + ids[begin : begin + PREDICT_WINDOW]
            logits = model(input_ids=torch.tensor([window], device=device)).logits[0].float()
            likely = torch.nonzero(logits.softmax(-1) > threshold)[:, 1].unique().cpu().numpy()
            seen = np.union1d(seen, likely)
    return seen.astype(np.int64)


def _text_digest(texts: Iterable[str]) -> str:
    digest = hashlib.sha256()
    for text in texts:
        digest.update(text.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:12]


def english_source_texts() -> list[str]:
    """The English source side of every bundled language's parallel train split."""
    from babelspec.data.corpus import parallel
    from babelspec.data.languages import PAPER_LANGUAGES

    return [en for other in PAPER_LANGUAGES for en, _ in parallel(other, "train")]


def vocabulary_ids(texts: Iterable[str], tokenizer: PreTrainedTokenizerBase,
                   source_tokens: int = SOURCE_TOKENS, *, model: Any = None, predict_tokens: int = PREDICT_TOKENS,
                   predict_threshold: float = PREDICT_THRESHOLD) -> np.ndarray:  # fmt: skip
    """Sorted ids a restricted head keeps for a language whose text is ``texts``: every token
    of them, the specials, the ``source_tokens`` most frequent English source tokens, and with a
    ``model`` those it finds likely on the text (``predicted_token_ids``; none where
    ``predict_tokens`` is 0)."""
    if source_tokens < 0:
        raise UserError(f"source_tokens must be >= 0 (got {source_tokens})")
    texts = list(texts)
    ids = corpus_token_ids(texts, tokenizer)
    if source_tokens:
        ids = np.union1d(ids, frequent_token_ids(english_source_texts(), tokenizer, source_tokens))
    if model is not None and predict_tokens:
        ids = np.union1d(ids, predicted_token_ids(model, tokenizer, texts, tokens=predict_tokens,
                                                  threshold=predict_threshold))  # fmt: skip
    return ids


def language_token_ids(lang: str, tokenizer: PreTrainedTokenizerBase, source_tokens: int = SOURCE_TOKENS, *,
                       model: Any = None, predict_tokens: int = PREDICT_TOKENS,
                       predict_threshold: float = PREDICT_THRESHOLD) -> np.ndarray:  # fmt: skip
    """Token ids that occur in the language's monolingual train split, and the ``source_tokens``
    most frequent ones of the English sources of every bundled language's parallel train split,
    and with a ``model`` those it finds likely on that text (``predicted_token_ids``; cached). A
    language the bundled dataset does not hold takes a vocabulary file instead (``save_vocabulary``;
    the experiment runner's ``kind = "head"`` writes one from its real text)."""
    from babelspec.data.corpus import monolingual
    from babelspec.data.languages import get_language

    code = get_language(lang).code  # UnknownLanguageError (a ValueError) names the choices
    if source_tokens < 0:
        raise UserError(f"source_tokens must be >= 0 (got {source_tokens})")
    texts = monolingual(code, "train")
    if not texts:
        raise UserError(
            f"the bundled dataset has no {code} monolingual text to restrict a head to; give a vocabulary "
            f"file instead (int8:FILE.npy, head:FILE.npy; babelspec.drafters.vocab.save_vocabulary writes "
            f"one from the language's text)"
        )
    sources = english_source_texts() if source_tokens else []
    key = (f"{code}-{_tokenizer_key(tokenizer)}-{_text_digest(texts)}-en{source_tokens}-{_text_digest(sources)}"
           f"-v{VOCAB_FORMAT}")  # fmt: skip
    if model is not None and predict_tokens:
        key += f"-p{predict_tokens}-{predict_threshold:g}-{_model_key(model)}"
    path = cache_dir() / "vocab" / f"{key}.npy"
    if path.is_file():
        return np.load(path)
    ids = vocabulary_ids(texts, tokenizer, source_tokens, model=model, predict_tokens=predict_tokens,
                         predict_threshold=predict_threshold)  # fmt: skip
    _save_atomic(path, ids)
    return ids


def _model_key(model: Any) -> str:
    """A short hash of a model's output head (its first rows, in bf16: the same model loaded in
    float32 or bf16 shares its likely tokens, which differ at most in a near-threshold one)."""
    import torch

    head = model.get_output_embeddings().weight[:16].detach().to(torch.bfloat16).float()
    return hashlib.sha256(head.cpu().numpy().tobytes()).hexdigest()[:12]


def save_vocabulary(path: str | Path, ids: np.ndarray) -> None:
    """Write a restricted head's token ids as a ``.npy`` file (``load_vocabulary`` reads it)."""
    _save_atomic(Path(path), np.asarray(ids, dtype=np.int64))


def load_vocabulary(path: str | Path, vocab_size: int) -> np.ndarray:
    """The token ids of a vocabulary file, checked against a vocabulary of ``vocab_size``."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"no vocabulary file {path} (a .npy of token ids, e.g. from babelspec.drafters.vocab.save_vocabulary)")
    try:
        ids = np.load(path, allow_pickle=False)
    except (ValueError, OSError) as exc:
        raise UserError(f"{path} is not a .npy array of token ids: {exc}") from exc
    if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer) or len(ids) == 0:
        raise UserError(f"{path} must hold a non-empty 1-D array of integer token ids (got {ids.dtype} {ids.shape})")
    if ids.min() < 0 or ids.max() >= vocab_size:
        raise UserError(f"{path} holds token ids outside [0, {vocab_size}): is it for another tokenizer?")
    return np.unique(ids.astype(np.int64))


def _save_atomic(path: Path, array: np.ndarray) -> None:
    with atomic_open(path, "wb") as handle:
        np.save(handle, array)
