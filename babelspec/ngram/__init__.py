"""N-gram drafting models: vectorised counting (``counting``), the file format (``model``),
counting the target's own distributions (``distill``),
corpus tokenisation and the tokenizer fingerprint (``corpus``), the CLI (``cli``) and the
benchmark (``bench``). The drafter that walks a model is ``babelspec.drafters.ngram_drafter``."""

from babelspec.ngram.counting import CountConfig, count_ngrams, count_weighted
from babelspec.ngram.model import NgramFileError, NgramModel, NgramTable, TokenizerMismatchError

__all__ = [
    "CountConfig",
    "NgramFileError",
    "NgramModel",
    "NgramTable",
    "TokenizerMismatchError",
    "count_ngrams",
    "count_weighted",
    "train",
]


def train(texts, tokenizer, config: CountConfig = CountConfig(), *, corpus_name: str = "", progress: bool = False):
    """Tokenise ``texts`` with ``tokenizer`` (always the target's) and count an n-gram model."""
    import time

    from babelspec.models.tokenizers import tokenizer_fingerprint
    from babelspec.ngram.corpus import tokenize_texts

    tokens, lengths, sizes = tokenize_texts(texts, tokenizer, progress=progress)
    fingerprint = tokenizer_fingerprint(tokenizer)
    t0 = time.perf_counter()
    model = count_ngrams(
        tokens,
        lengths,
        config,
        tokenizer=fingerprint,
        training={"corpus": corpus_name, "texts": sizes["texts"], "characters": sizes["characters"]},
    )
    model.training["count_seconds"] = round(time.perf_counter() - t0, 4)
    return model
