"""Preparation of the drafter settings that must be trained per language before a run.

A preparer turns a ``DrafterSetting`` of a prepared kind (``ngram``, ``distilled``, ``head``)
and a language into a drafter spec (``ngram:FILE``, ``distilled:DIR``, ``int8:FILE.npy``), training into the run's
artifact folder (or the shared cache) through the owning module's API. When that module is
not available, or has nothing to train on for the language, it raises ``DrafterUnavailable``
and the runner skips the setting for that language with the reason, which the report shows.
New kinds register with ``@register_preparer("kind")``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from babelspec.experiments.config import DISTIL_MODES, DrafterSetting


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
    sampling: Any = None  # the run's SamplingConfig (distilled n-grams learn its warped q)

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

    def predicted_rows(self) -> tuple[int, float]:
        """A ``kind = "head"`` setting's ``(predict_tokens, predict_threshold)``, its options' or
        the defaults (``drafters.vocab``): what its rows hold and its artifact's key both read."""
        from babelspec.drafters.vocab import PREDICT_THRESHOLD, PREDICT_TOKENS

        options = self.setting.options
        return options.get("predict_tokens", PREDICT_TOKENS), options.get("predict_threshold", PREDICT_THRESHOLD)

    def artifact_path(self, suffix: str) -> Path:
        """A file or folder name keyed by everything that determines the artifact."""
        fields = {"target": self.target_spec, "lang": self.language, "kind": self.setting.kind,
                  "options": self.setting.options}
        if self.setting.kind == "head":  # the rows: the corpus's tokens and the target's likely ones
            fields["predicted"] = list(self.predicted_rows())
        sources = [str(s) for s in self.corpus_sources()]
        if sources != ["bundled@train"]:
            fields["corpus"] = sources
        if "distil" in self.setting.options:  # the target's own distributions: its dtype and warping
            fields["sampling"] = self.sampling.to_dict() if self.sampling is not None else None
            fields["dtype"] = str(next(self.target.model.parameters()).dtype)
        if self.setting.kind == "distilled":
            if self.data is not None and self.data.root:
                fields["data"] = asdict(self.data.for_language(self.language))
            if self.setting.mix:  # one multilingual drafter for every language of the run
                fields["lang"] = self.setting.mix
                fields.pop("data", None)
                fields.pop("corpus", None)
        key = json.dumps(fields, sort_keys=True)
        digest = hashlib.sha256(key.encode()).hexdigest()[:10]
        lang = "mix" if self.setting.mix else self.language
        return self.artifacts / f"{self.setting.name}-{lang}-{digest}{suffix}"



Preparer = Callable[[PrepareRequest], str]
_PREPARERS: dict[str, Preparer] = {}


def register_preparer(kind: str) -> Callable[[Preparer], Preparer]:
    def wrap(fn: Preparer) -> Preparer:
        _PREPARERS[kind] = fn
        return fn

    return wrap


def prepare(request: PrepareRequest) -> str:
    """The drafter spec for ``request``; raises ``DrafterUnavailable`` with the reason. A
    setting with ``adaptive = true`` gets its kind's spec as ``adaptive:SPEC``."""
    kind = request.setting.kind
    if kind not in _PREPARERS:
        raise DrafterUnavailable(f"no preparer for kind {kind!r}")
    request.artifacts.mkdir(parents=True, exist_ok=True)
    options = dict(request.setting.options)
    adaptive = bool(options.pop("adaptive", False))
    if adaptive:  # the kind's own preparer never sees the option (nor keys its files by it)
        request = replace(request, setting=replace(request.setting, options=options))
    spec = _PREPARERS[kind](request)
    return f"adaptive:{spec}" if adaptive else spec


def _require(module: str, what: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise DrafterUnavailable(f"{what} needs `{module}`, which is not available ({exc})") from exc


def _monolingual_train(req: PrepareRequest) -> list[str]:
    """The setting's monolingual text for the language, without any sentence of its test source."""
    sources = _require("babelspec.data.sources", "training on a corpus")
    lang = req.language
    try:
        test = req.data.sources(lang)[0] if req.data is not None else None
        texts, dropped = sources.training_texts(list(req.corpus_sources()), lang, test)
    except (ValueError, OSError) as exc:
        raise DrafterUnavailable(f"no monolingual train text for {lang}: {exc}") from exc
    if dropped:
        req.log(f"{req.setting.name} {lang}: dropped {dropped} training texts that are test sentences")
    if not texts:
        raise DrafterUnavailable(f"the monolingual train text of {lang} is empty")
    return texts


# Options of a kind = "ngram" setting: counting (``CountConfig``), distillation (``distil`` and
# the ``DISTIL_OPTIONS``), or drafting (the spec's ``,name=value`` options, ``NgramDraftConfig``);
# ``corpus`` picks the text (see corpus_sources).
_NGRAM_COUNT_OPTIONS = ("order", "min_count", "max_continuations")
# distil_tokens: general-mode positions; distil_prompts / distil_max_new_tokens: task mode;
# distil_top_k, distil_corpus_weight: see babelspec.distill.ngram_distill.DistillConfig.
DISTIL_OPTIONS = ("distil_tokens", "distil_prompts", "distil_max_new_tokens", "distil_top_k",
                  "distil_corpus_weight")


@register_preparer("ngram")
def _prepare_ngram(req: PrepareRequest) -> str:
    """Count an n-gram file on the language's monolingual train split with the target's
    tokenizer, or, with ``distil``, on the target's own next-token distributions."""
    ngram = _require("babelspec.ngram", "the n-gram drafter")
    options = dict(req.setting.options)
    options.pop("corpus", None)
    count = {k: options.pop(k) for k in list(options) if k in _NGRAM_COUNT_OPTIONS}
    distil = {k: options.pop(k) for k in list(options) if k == "distil" or k in DISTIL_OPTIONS}
    suffix = "".join(f",{k}={v}" for k, v in sorted(options.items()))
    path = req.artifact_path(".ngram")
    if not path.is_file():
        texts = _monolingual_train(req)
        if distil:
            model = _distil_ngram(req, texts, count, distil)
        else:
            try:
                config = ngram.CountConfig(**count)
            except (TypeError, ValueError) as exc:
                raise DrafterUnavailable(f"bad n-gram options {count}: {exc}") from exc
            req.log(f"counting {req.setting.name} for {req.language} on {len(texts)} texts")
            model = ngram.train(texts, req.target.tokenizer, config,
                                corpus_name=f"{req.language}:" + "+".join(str(s) for s in req.corpus_sources()))  # fmt: skip
        model.save(path)
    return f"ngram:{path}{suffix}"


def _distil_ngram(req: PrepareRequest, texts: list[str], count: dict[str, Any], options: dict[str, Any]) -> Any:
    """A distilled n-gram (``babelspec.distill.ngram_distill``): ``distil = "general"``, ``"task"`` or
    ``["general", "task"]``; task mode answers the train prompts of the setting's
    ``trained_on`` task (translation when it names none)."""
    distill = _require("babelspec.distill.ngram_distill", "the distilled n-gram drafter")
    from babelspec.sampling import SamplingConfig

    modes = options.pop("distil")
    modes = [modes] if isinstance(modes, str) else list(modes)
    bad = [m for m in modes if m not in DISTIL_MODES]
    if bad or not modes:
        raise DrafterUnavailable(f"distil must be {' or '.join(map(repr, DISTIL_MODES))} or a list of them, got {modes!r}")
    if set(count) - {"order"}:
        raise DrafterUnavailable(f"a distilled n-gram takes order but not {', '.join(sorted(set(count) - {'order'}))}")
    prompts = int(options.pop("distil_prompts", 16))
    max_new = int(options.pop("distil_max_new_tokens", 48))
    tokens = int(options.pop("distil_tokens", 8192))
    try:
        config = distill.DistillConfig(
            order=int(count.get("order", 2)), max_tokens=tokens if "general" in modes else 0,
            top_k=int(options.pop("distil_top_k", 20)),
            corpus_weight=float(options.pop("distil_corpus_weight", 0.0)))  # fmt: skip
    except (TypeError, ValueError) as exc:
        raise DrafterUnavailable(f"bad distilled n-gram options: {exc}") from exc
    sampling = req.sampling if req.sampling is not None else SamplingConfig.paper()
    task = ""
    if "task" in modes:
        task = req.setting.trained_on if req.setting.trained_on in ("translation", "story") else "translation"
    req.log(f"distilling {req.setting.name} for {req.language}: " + " + ".join(modes))
    try:
        return distill.distil_texts(req.target, texts, sampling=sampling, config=config, task=task,
                                    lang=req.language, prompts=prompts, max_new_tokens=max_new, log=req.log,
                                    training={"corpus": f"{req.language}:distilled:{'+'.join(modes)}"})  # fmt: skip
    except ValueError as exc:  # nothing to score (no text, no prompts, empty responses)
        raise DrafterUnavailable(f"distilling the n-gram failed: {exc}") from exc


@register_preparer("head")
def _prepare_head(req: PrepareRequest) -> str:
    """The target drafting for itself under a head restricted to the language's tokens
    (``drafters.vocabhead``): the rows are counted on the setting's monolingual text, so a
    language the bundled dataset does not hold gets its head from its real sets, with the tokens
    the target itself finds likely on that text (``drafters.vocab.predicted_token_ids``). Options:
    ``quantize`` (``"int8"``, the default; ``"gguf"``, the layers on a gguf target's own blocks;
    or ``"none"``), ``layers`` (all when absent), ``predict_tokens`` (the positions the target
    reads; 0: the corpus's tokens alone) and ``predict_threshold``."""
    vocab = _require("babelspec.drafters.vocab", "the restricted-head drafter")
    options = req.setting.options
    quantize, layers = options.get("quantize", "int8"), options.get("layers")
    tokens, threshold = req.predicted_rows()
    path = req.artifact_path(".npy")
    if not path.is_file():
        texts = _monolingual_train(req)
        req.log(f"counting {req.setting.name}'s rows for {req.language} on {len(texts)} texts")
        model = req.target.model if tokens else None
        vocab.save_vocabulary(path, vocab.vocabulary_ids(texts, req.target.tokenizer, model=model,
                                                         predict_tokens=tokens, predict_threshold=threshold))  # fmt: skip
    at = f"{layers}@" if layers else ""
    if quantize in ("int8", "gguf"):
        return f"{quantize}:{at}{path}"
    return f"self:{layers}@{path}" if layers else f"head:{path}"


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
    config_file = options.pop("config", None)  # a babelspec.distill TOML (babelspec/profiles/distill/)
    overrides: dict[str, Any] = {}
    for key, value in options.items():
        if isinstance(value, dict):
            overrides.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            overrides[key] = value
    mix = req.setting.mix
    if mix:  # trained once, on the first language's text and the others', for every language
        overrides["lang"], overrides["data.mix"] = mix[0], mix[1:]
    try:
        config = pipeline.load_config(config_file, **{"lang": req.language, "teacher": req.target_spec, **overrides})
        if req.data is not None and req.data.root:
            _real_sources(config, req.data, req.language)
        req.log(f"distilling {req.setting.name} ({config.mode}) for {config.lang}"
                + (f" + {', '.join(config.data.mix)}" if config.data.mix else ""))
        # The loaded target teaches when it has the distillation's dtype; a bf16 target does not:
        # the student trains in the teacher's dtype, and bf16 weights round most AdamW updates
        # away, so the recipe's float32 teacher is loaded beside it.
        from babelspec.models.loader import resolve_dtype

        model = req.target.model
        same = resolve_dtype(config.dtype, None) == next(model.parameters()).dtype
        teacher = pipeline.Teacher(req.target_spec, model, req.target.tokenizer) if same else None
        meta = pipeline.run_distill(config, out, teacher=teacher, progress=False)
    except (ValueError, OSError) as exc:
        raise DrafterUnavailable(f"distillation failed: {exc}") from exc
    if "interrupted_at_step" in meta or not (out / "distilled.json").is_file():
        raise DrafterUnavailable(f"distillation wrote no drafter in {out}")
    return f"distilled:{out}"


def _real_sources(config: Any, data: Any, lang: str) -> None:
    """Point a distillation at the run's ``[data]`` sets where its own config names none
    (``pipeline.fill_sources``); a multilingual setting takes its first language's."""
    from babelspec.distill.pipeline import fill_sources

    ours = data.for_language(config.lang if config.data.mix else lang)
    fill_sources(config, data.root, test=ours.test, shots=ours.shots, train=ours.train,
                 monolingual=ours.monolingual)
