"""Preparation of the drafter settings that must be trained per language before a run.

A preparer turns a ``DrafterSetting`` of a prepared kind (``ngram``, ``distilled``) and a
language into a drafter spec (``ngram:FILE``, ``distilled:DIR``), training into the run's
artifact folder (or the shared cache) through the owning module's API. When that module is
not available, or has nothing to train on for the language, it raises ``DrafterUnavailable``
and the runner skips the setting for that language with the reason, which the report shows.
New kinds register with ``@register_preparer("kind")``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from babelspec.experiments.config import DrafterSetting


class DrafterUnavailable(RuntimeError):
    """A drafter setting cannot be built for a language; ``str(exc)`` is the reason."""


@dataclass
class PrepareRequest:
    setting: DrafterSetting
    language: str
    target_spec: str
    target: Any  # babelspec.target.Target (its tokenizer and model)
    artifacts: Path  # folder for this kind's files
    log: Callable[[str], None] = print
    data: Any = None  # the run's DataSection (config.py); None = the bundled dataset

    def corpus_sources(self) -> tuple:
        """The monolingual sources this setting trains on: the ``[data]`` section's, or the
        bundled train split when the setting says ``corpus = "bundled"`` (or there is no section)."""
        from babelspec.data.sources import parse_source

        which = self.setting.options.get("corpus", "data")
        if which not in ("data", "bundled"):
            raise DrafterUnavailable(f"corpus must be 'data' (the [data] section's) or 'bundled', got {which!r}")
        if which == "bundled" or self.data is None:
            return (parse_source("bundled@train"),)
        return self.data.sources(self.language)[2]

    def artifact_path(self, suffix: str) -> Path:
        """A file or folder name keyed by everything that determines the artifact."""
        fields = {"target": self.target_spec, "lang": self.language, "kind": self.setting.kind,
                  "options": self.setting.options}
        sources = [str(s) for s in self.corpus_sources()]
        if sources != ["bundled@train"]:
            fields["corpus"] = sources
        key = json.dumps(fields, sort_keys=True)
        digest = hashlib.sha256(key.encode()).hexdigest()[:10]
        return self.artifacts / f"{self.setting.name}-{self.language}-{digest}{suffix}"


Preparer = Callable[[PrepareRequest], str]
_PREPARERS: dict[str, Preparer] = {}


def register_preparer(kind: str) -> Callable[[Preparer], Preparer]:
    def wrap(fn: Preparer) -> Preparer:
        _PREPARERS[kind] = fn
        return fn

    return wrap


def prepare(request: PrepareRequest) -> str:
    """The drafter spec for ``request``; raises ``DrafterUnavailable`` with the reason."""
    kind = request.setting.kind
    if kind not in _PREPARERS:
        raise DrafterUnavailable(f"no preparer for kind {kind!r}")
    request.artifacts.mkdir(parents=True, exist_ok=True)
    return _PREPARERS[kind](request)


def _require(module: str, what: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise DrafterUnavailable(f"{what} needs `{module}`, which is not available ({exc})") from exc


def _monolingual_train(req: PrepareRequest) -> list[str]:
    """The setting's monolingual text for the language, without any sentence of its test source."""
    sources = _require("babelspec.data.sources", "training on a corpus")
    lang, texts = req.language, []
    try:
        for src in req.corpus_sources():
            texts += sources.monolingual_texts(src, lang)
        if req.data is not None:
            test = req.data.sources(lang)[0]
            texts, dropped = sources.without(texts, [r["text"] for r in sources.parallel_records(test, lang)])
            if dropped:
                req.log(f"{req.setting.name} {lang}: dropped {dropped} training texts that are test sentences")
    except (ValueError, OSError) as exc:
        raise DrafterUnavailable(f"no monolingual train text for {lang}: {exc}") from exc
    if not texts:
        raise DrafterUnavailable(f"the monolingual train text of {lang} is empty")
    return list(dict.fromkeys(texts))


# Options of a kind = "ngram" setting: counting (``CountConfig``) or drafting (the spec's
# ``,name=value`` options, ``NgramDraftConfig``); ``corpus`` picks the text (see corpus_sources).
_NGRAM_COUNT_OPTIONS = ("order", "min_count", "max_continuations")


@register_preparer("ngram")
def _prepare_ngram(req: PrepareRequest) -> str:
    """Count an n-gram file on the language's monolingual train split with the target's tokenizer."""
    ngram = _require("babelspec.ngram", "the n-gram drafter")
    options = dict(req.setting.options)
    options.pop("corpus", None)
    count = {k: options.pop(k) for k in list(options) if k in _NGRAM_COUNT_OPTIONS}
    suffix = "".join(f",{k}={v}" for k, v in sorted(options.items()))
    path = req.artifact_path(".ngram")
    if not path.is_file():
        texts = _monolingual_train(req)
        try:
            config = ngram.CountConfig(**count)
        except (TypeError, ValueError) as exc:
            raise DrafterUnavailable(f"bad n-gram options {count}: {exc}") from exc
        req.log(f"counting {req.setting.name} for {req.language} on {len(texts)} texts")
        model = ngram.train(texts, req.target.tokenizer, config,
                            corpus_name=f"{req.language}:" + "+".join(str(s) for s in req.corpus_sources()))  # fmt: skip
        model.save(path)
    return f"ngram:{path}{suffix}"


@register_preparer("distilled")
def _prepare_distilled(req: PrepareRequest) -> str:
    """Knowledge distillation (task or general mode) into a directory ``distilled:DIR`` loads.

    Options: ``mode``, ``student`` and the tables ``data``, ``train``, ``eval`` of
    ``babelspec.distill``'s config; the target already loaded is the teacher.
    """
    pipeline = _require("babelspec.distill.pipeline", "the distilled drafters")
    out = req.artifact_path("")
    if (out / "distilled.json").is_file():
        return f"distilled:{out}"
    options = dict(req.setting.options)
    config_file = options.pop("config", None)  # a babelspec.distill TOML (configs/distill/)
    overrides: dict[str, Any] = {}
    for key, value in options.items():
        if isinstance(value, dict):
            overrides.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            overrides[key] = value
    try:
        config = pipeline.load_config(config_file, lang=req.language, teacher=req.target_spec, **overrides)
        req.log(f"distilling {req.setting.name} ({config.mode}) for {req.language}")
        teacher = pipeline.Teacher(req.target_spec, req.target.model, req.target.tokenizer)
        meta = pipeline.run_distill(config, out, teacher=teacher)
    except (ValueError, OSError) as exc:
        raise DrafterUnavailable(f"distillation failed: {exc}") from exc
    if "interrupted_at_step" in meta or not (out / "distilled.json").is_file():
        raise DrafterUnavailable(f"distillation wrote no drafter in {out}")
    return f"distilled:{out}"
