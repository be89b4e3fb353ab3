"""babelspec's per-language n-gram drafters as a vLLM proposer (speculative method ``custom_class``).

```python
from vllm import LLM
llm = LLM(model=PATH, speculative_config={"method": "custom_class", "num_speculative_tokens": 4,
                                          "model": "babelspec.integrations.vllm.NgramProposer"},
          additional_config={"babelspec": {"tables": "exported/vllm"}})
```

``tables`` is a folder that ``babelspec ngram export --format vllm`` writes: ``manifest.json`` and
one babelspec n-gram file per language, counted with the served model's tokenizer (checked at
load). Further keys of ``additional_config["babelspec"]``: ``lang`` drafts every request in one
language (a server per language); ``lookup``, ``lookup_min``, ``threshold``, ``min_backoff`` are
babelspec's n-gram drafting options (``NgramDraftConfig``; ``DRAFT_DEFAULTS`` below, else
babelspec's engine's).

vLLM hands a proposer token ids only, never the request, so a language named in the request
cannot reach it. Without ``lang`` the proposer runs babelspec's language identifier (the
server's: line by line, the language beside English with most characters) on the text of each
request's first ``DETECT_TOKENS`` tokens, and drafts nothing where that language has no table.

Each draft is a chain, as vLLM takes them: babelspec's n-gram drafter with prompt lookup first,
the most likely token at each step. vLLM verifies a draft without probabilities as a point mass,
so its output is its own, greedy or sampled.

This module imports vLLM's types nowhere: vLLM builds the class with its ``VllmConfig`` and calls
``propose``. It is tested against vLLM itself (``make test-vllm``).
"""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import torch

from babelspec.data.langid import OutputChecker, detect_language
from babelspec.drafters.ngram_drafter import NgramDraftConfig, NgramDrafter
from babelspec.errors import UserError
from babelspec.fileio import write_text_atomic
from babelspec.ngram import NgramModel
from babelspec.sampling import SamplingConfig

MANIFEST = "manifest.json"
FORMAT = "babelspec-vllm-tables"
DETECT_TOKENS = 512  # of a request's text, read by the language identifier
DETECT_CACHE = 1024  # detections kept, keyed by those tokens
# babelspec's n-gram drafting options the proposer takes (NgramDraftConfig): the longest and
# shortest prompt-lookup match, the confidence below which a chain stops, the shortest context
# backed off to (1: never draft from the unigram)
DRAFT_OPTIONS = ("lookup", "lookup_min", "threshold", "min_backoff")
# The proposer's defaults: draft only while the context's most likely continuation has half the
# row's mass, and never from the unigram. vLLM's verification of a block is not flat on a CPU, so
# a draft must be likely to pay. `bench vllm` on 9 languages (docs/engines.md): with them 1.37-2.31x
# vLLM plain greedy and 0.72-0.84x sampled; drafting at every step, 1.10-2.13x and 0.45-0.62x.
DRAFT_DEFAULTS = {"threshold": "0.5", "min_backoff": "1"}


def write_tables(models: dict[str, NgramModel], folder: str | os.PathLike) -> Path:
    """Write the proposer's tables: one n-gram file per language (each carries its tokenizer's
    fingerprint) and the manifest naming them; the manifest's path."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    files = {}
    for lang, model in models.items():
        model.save(folder / f"{lang}.ngram")
        files[lang] = f"{lang}.ngram"
    manifest = {"format": FORMAT, "version": 1, "languages": files}
    write_text_atomic(folder / MANIFEST, json.dumps(manifest, indent=2) + "\n")
    return folder / MANIFEST


def read_tables(folder: str | os.PathLike) -> dict[str, NgramModel]:
    """The n-gram model of each language of a tables folder (or its manifest), or a clear error."""
    folder = Path(folder).parent if Path(folder).name == MANIFEST else Path(folder)
    path = folder / MANIFEST
    if not path.is_file():
        raise FileNotFoundError(f"{folder} has no {MANIFEST}; write the tables with "
                                "`babelspec ngram export --format vllm TABLE... -o FOLDER`")  # fmt: skip
    manifest = json.loads(path.read_text())
    if manifest.get("format") != FORMAT:
        raise UserError(f"{path} is not a babelspec vLLM tables manifest (format {manifest.get('format')!r})")
    from babelspec.data.languages import canonical_tables

    # keyed by canonical codes whatever a manifest says (``amh_Ethi`` is amh, as the detector names
    # it); two codes of one language are refused, as at export, never merged silently
    tables = canonical_tables({lang: folder / name for lang, name in manifest["languages"].items()})
    return {code: NgramModel.load(path) for code, path in tables.items()}


class NgramProposer:
    """vLLM's ``custom_class`` proposer: babelspec's n-gram chains, per request's language."""

    def __init__(self, vllm_config: Any) -> None:
        from transformers import AutoTokenizer

        from babelspec.data.languages import get_language
        from babelspec.models.tokenizers import tokenizer_fingerprint

        options = dict((getattr(vllm_config, "additional_config", None) or {}).get("babelspec") or {})
        if "tables" not in options:
            raise UserError('babelspec\'s vLLM proposer needs its tables: additional_config={"babelspec": '
                             '{"tables": FOLDER}} (written by `babelspec ngram export --format vllm`)')  # fmt: skip
        unknown = set(options) - {"tables", "lang", *DRAFT_OPTIONS}
        if unknown:
            raise UserError(f"unknown babelspec proposer options {sorted(unknown)}; known: tables, lang, "
                             + ", ".join(DRAFT_OPTIONS))  # fmt: skip
        self.k = int(vllm_config.speculative_config.num_speculative_tokens)
        self.max_model_len = int(vllm_config.model_config.max_model_len)
        self.tokenizer = AutoTokenizer.from_pretrained(vllm_config.model_config.tokenizer)
        fingerprint = tokenizer_fingerprint(self.tokenizer)
        tables = read_tables(options["tables"])
        drafting = {k: str(v) for k, v in options.items() if k in DRAFT_OPTIONS}
        config = NgramDraftConfig.from_options({**DRAFT_DEFAULTS, **drafting, "mode": "top1", "tree": "0"})
        vocab = len(self.tokenizer)
        self.drafters: dict[str, NgramDrafter] = {}
        for lang, table in tables.items():
            table.check_tokenizer(fingerprint)
            self.drafters[lang] = NgramDrafter(table, config, vocab_size=vocab)
        self.lang = get_language(options["lang"]).code if options.get("lang") else None
        if self.lang is not None and self.lang not in self.drafters:
            raise UserError(f"lang {self.lang!r} has no table in {options['tables']}; it has {sorted(self.drafters)}")
        self.detector = None if self.lang else OutputChecker.from_corpora(list(self.drafters), use_langid=False).classifier
        self._detect = lru_cache(maxsize=DETECT_CACHE)(self._detect_head)  # keyed by the head's bytes
        self._sampling = SamplingConfig(greedy=True)
        self._generator = torch.Generator().manual_seed(0)

    def language(self, ids: np.ndarray) -> str | None:
        """The language of a request from its first ``DETECT_TOKENS`` token ids."""
        if self.lang is not None:
            return self.lang
        return self._detect(np.ascontiguousarray(ids[:DETECT_TOKENS], dtype=np.int64).tobytes())

    def _detect_head(self, head: bytes) -> str | None:
        text = self.tokenizer.decode(np.frombuffer(head, dtype=np.int64).tolist(), skip_special_tokens=True)
        return detect_language(self.detector, text)

    def draft(self, ids: np.ndarray, k: int) -> list[int]:
        """The chain of up to ``k`` tokens after ``ids`` (one request's tokens so far)."""
        lang = self.language(ids)
        drafter = self.drafters.get(lang) if lang else None
        if drafter is None:
            return []
        drafter.start(ids.tolist(), self._sampling, self._generator)
        return drafter.propose(k).tokens.tolist()

    def propose(self, sampled_token_ids: list[list[int]], num_tokens_no_spec: np.ndarray, token_ids_cpu: np.ndarray,
                slot_mappings: Any = None) -> list[list[int]]:  # fmt: skip
        """vLLM's call each step: per request of the batch, its draft (empty where a request
        sampled nothing this step, e.g. mid-prefill, or its context is full)."""
        drafts: list[list[int]] = []
        for i, sampled in enumerate(sampled_token_ids):
            n = int(num_tokens_no_spec[i])
            k = min(self.k, self.max_model_len - n - 1)
            drafts.append(self.draft(token_ids_cpu[i, :n], k) if sampled and k > 0 else [])
        return drafts

    def load_model(self, *args: Any, **kwargs: Any) -> None:
        """Nothing to load beside the tables (vLLM calls this for every proposer)."""
