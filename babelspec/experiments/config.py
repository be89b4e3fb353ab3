"""Experiment configuration: a TOML file a researcher can edit, read into dataclasses.

A file names the target model, the grid (languages x tasks x drafter settings x gamma), the
decoding settings, the output checks and the divergence analysis. The package carries profiles
(``babelspec/profiles``: ``quick``, ``full``, ``paper``, ``real``, ``flores200``); ``load_config`` reads one or a user's file and
rejects unknown keys, unknown languages or drafters and bad numbers with a message that says
how to fix them.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from importlib import resources
from pathlib import Path
from typing import Any

from babelspec.data.languages import PAPER_LANGUAGES
from babelspec.errors import UserError
from babelspec.router import RULES

KNOWN_TASKS: tuple[str, ...] = ("translation", "story")
# Drafter spec prefixes the project knows of (registered by their modules as they land).
KNOWN_DRAFTER_PREFIXES: tuple[str, ...] = (
    "none", "model", "self", "head", "int8", "gguf", "ngram", "distilled", "auto", "adaptive",
)  # fmt: skip
# Drafter settings the runner must prepare (train) per language before it can use them.
PREPARED_KINDS: tuple[str, ...] = ("ngram", "distilled", "head")


class ConfigError(UserError):
    """A configuration file is malformed; the message names the key and the fix."""


@dataclass
class DrafterSetting:
    """One drafter setting of the grid.

    Either a fixed ``spec`` (``self:6``, ``model:PATH``; ``{lang}`` and ``{task}`` are
    substituted) or a ``kind`` the runner prepares per language (``ngram`` trains an n-gram
    file on the language's monolingual train split; ``distilled`` runs knowledge
    distillation; ``head`` writes the rows of a restricted-head self-drafter, ``quantize =
    "int8"`` or ``"gguf"`` and ``layers = K`` choosing which) and turns into a spec.
    """

    name: str  # label in the store and the report, e.g. "bigram"
    spec: str = ""  # fixed drafter spec; empty when ``kind`` is set
    kind: str = ""  # "ngram" | "distilled" | "head" (prepared) | "" (fixed spec)
    trained_on: str = ""  # task the drafter was fitted to ("translation"), "general" or ""
    languages: list[str] = field(default_factory=list)  # restrict to these; empty = all
    options: dict[str, Any] = field(default_factory=dict)  # passed to the preparer

    @property
    def prepared(self) -> bool:
        return bool(self.kind)

    @property
    def mix(self) -> list[str]:
        """The languages of a multilingual distilled setting (its ``data.mix`` option): one
        drafter trained once for every language of the run; [] otherwise."""
        data = self.options.get("data")
        return list(data.get("mix", [])) if self.kind == "distilled" and isinstance(data, dict) else []


@dataclass
class SamplingSection:
    preset: str = "paper"  # "paper" (top-k 100, top-p 0.9, penalty 1.1/16) | "greedy" | "plain"
    temperature: float | None = None  # overrides of the preset (None keeps the preset's)
    top_k: int | None = None
    top_p: float | None = None
    repetition_penalty: float | None = None
    repetition_window: int | None = None


@dataclass
class ChecksSection:
    loop_ngram: int = 4  # n of the repeated n-gram ratio (in characters-free word/tokens units)
    loop_threshold: float = 0.5  # ratio above which an output counts as stuck in a loop
    min_language_score: float = 0.5  # share of the text's letters in the language's script(s)
    langid_package: bool = True  # also ask a shipped language-ID package where it covers L


@dataclass
class DivergenceSection:
    enabled: bool = True
    drafters: list[str] = field(default_factory=list)  # setting names; empty = every setting
    texts_per_language: int = 4  # held-out (monolingual test) texts per language
    max_tokens_per_text: int = 48  # truncation of each held-out text, in target tokens


@dataclass
class SequentialSection:
    """``[sequential]``: more prompts for a language and task whose numbers cannot yet decide.

    After the grid's ``prompts_per_cell`` prompts, a cell gets ``step`` more prompts (half of
    them choose, half measure held out: ``aggregate.held_out_split``), every setting of it with
    plain decoding, while either no setting's choosing interval lies above 1.0 but one reaches
    above it (it may pay, and more prompts can tell), or the choosing interval of the setting
    the cell chose is wider than ``half_width`` on either side (the held-out prompts, as many,
    never stop a round: ``sequential``); up to ``max_prompts_per_cell``.
    Each round is decided from the prompts of the rounds before it, so a resumed run takes the
    same rounds as one that never stopped (``experiments.sequential``)."""

    max_prompts_per_cell: int = 0  # the cap; 0: no rounds beyond prompts_per_cell
    step: int = 2  # prompts added per round: an even number, as many choose as measure
    half_width: float = 0.15  # the choosing speedup interval's half-width to reach (x plain)
    min_speedup: float = 1.0  # the router's bar a choosing interval must clear


@dataclass
class RouterSection:
    """``[router]``: how the router judges a setting on its choosing prompts
    (``experiments.route_choice``): ``"interval"``, where a language's own bootstrap interval
    must lie above 1.0, or ``"pooled"``, where every language of a setting informs each one's
    estimate (for runs of many languages)."""

    rule: str = "interval"


@dataclass
class HeldOutSection:
    """``[held_out]``: ``prompts = N`` runs the choosing prompts (the even-numbered ones below
    ``prompts_per_cell``) with every setting, then N held-out prompts (1, 3, ..., 2N - 1) with
    plain decoding and only the settings those chose (``experiments.held_out``); 0 (the default):
    every prompt runs every setting, half of them held out."""

    prompts: int = 0


@dataclass
class LanguageData:
    """Where one language's text comes from (source strings, see ``babelspec.data.sources``)."""

    test: str = "bundled@test"  # translation test sentences (English-aligned)
    shots: str = "bundled@train"  # few-shot examples of the translation prompts (English-aligned)
    monolingual: list[str] = field(default_factory=lambda: ["bundled@train"])  # n-grams, distillation
    train: str = ""  # English-aligned sentences task distillation translates ("" = bundled train split)


@dataclass
class DataSection:
    """``[data]``: ``root`` (or ``--data-root``), ``default`` and one ``[data.LANG]`` table per
    language whose sets differ from the default. ``default = "bundled"`` gives a language without
    a table the bundled dataset; ``default = "real"`` gives it its real sets under the corpora
    root (``babelspec.data.real``: SIB-200, NTREX-128, OLDI Seed by the language table's codes).
    Sentences of the test source never reach the few-shot examples or the monolingual text (the
    runner drops exact repeats)."""

    root: str = ""  # folder relative source paths resolve against
    default: str = "bundled"  # "bundled" | "real": the sets of a language without a [data.LANG] table
    languages: dict[str, LanguageData] = field(default_factory=dict)

    def for_language(self, lang: str) -> LanguageData:
        if lang in self.languages:
            return self.languages[lang]
        from babelspec.data.languages import get_language

        if self.default == "real" or not get_language(lang).bundled:  # beyond the 11: its real sets
            from babelspec.data.real import real_sets

            real = real_sets(lang)
            if real is not None:
                return LanguageData(test=real.test, shots=real.shots, monolingual=list(real.monolingual),
                                    train=real.train)
        return LanguageData()

    def bundled(self, lang: str) -> bool:
        """Whether ``lang`` reads the bundled dataset (no table, and no real sets by default)."""
        return self.for_language(lang) == LanguageData()

    def sources(self, lang: str):
        """(test, shots, monolingual) of ``lang`` as resolved ``Source`` objects."""
        from babelspec.data.sources import parse_source

        d = self.for_language(lang)
        test, shots = parse_source(d.test).resolve(self.root), parse_source(d.shots).resolve(self.root)
        mono = tuple(parse_source(m).resolve(self.root) for m in d.monolingual)
        return test, shots, mono


@dataclass
class ExperimentConfig:
    name: str = "experiment"
    description: str = ""
    target: str = "gemma-3-270m"  # preset name or local model directory
    languages: list[str] = field(default_factory=lambda: list(PAPER_LANGUAGES))
    tasks: list[str] = field(default_factory=lambda: list(KNOWN_TASKS))
    gammas: list[int] = field(default_factory=lambda: [2, 3, 4])
    prompts_per_cell: int = 10
    seeds: list[int] = field(default_factory=lambda: [0])
    baseline: bool = True  # plain decoding (drafter "none") for the wall-clock speedup
    llama_cpp: bool = False  # llama.cpp's plain decoding of the target's GGUF too: a second baseline (vs_llama_cpp)
    max_new_tokens: int = 128
    threads: int = 0  # torch threads; 0 = leave torch's default
    dtype: str = "auto"  # auto (bf16 where the hardware has it natively, else fp32) | bfloat16 | float32
    precision: str = ""  # a target mode: "" (the default: gguf for GGUF models on a CPU) | none | gguf | w8a8 (target.load_target)
    head: str = "full"  # the target's output head: full | certified (exact top-k from an int8 pass; bf16)
    forward: str = "lean"  # the target's forward: lean (babelspec's own, where the family has one) | hf
    native: bool = True  # the lean forward's C glue (False: the same arithmetic in torch operations)
    shared_cache: bool = False  # prepared drafters in the user cache instead of runs/NAME
    ray: str = ""  # "" runs here; "auto" or HOST:PORT runs the units on that Ray cluster
    ray_workers: int = 0  # Ray workers (each `threads` threads); 0 = as many as the cluster holds
    drafters: list[DrafterSetting] = field(default_factory=list)
    sampling: SamplingSection = field(default_factory=SamplingSection)
    checks: ChecksSection = field(default_factory=ChecksSection)
    divergence: DivergenceSection = field(default_factory=DivergenceSection)
    sequential: SequentialSection = field(default_factory=SequentialSection)
    router: RouterSection = field(default_factory=RouterSection)
    held_out: HeldOutSection = field(default_factory=HeldOutSection)
    data: DataSection = field(default_factory=DataSection)
    source: str = ""  # where the config was read from (informational)

    def sampling_config(self, seed: int):
        """The ``SamplingConfig`` of one generation."""
        from babelspec.sampling import SamplingConfig

        s = self.sampling
        if s.preset == "paper":
            base = SamplingConfig.paper(seed=seed)
        elif s.preset == "greedy":
            base = SamplingConfig(greedy=True, seed=seed)
        else:
            base = SamplingConfig(seed=seed)
        overrides = {
            k: getattr(s, k)
            for k in ("temperature", "top_k", "top_p", "repetition_penalty", "repetition_window")
            if getattr(s, k) is not None
        }
        return SamplingConfig(**{**base.to_dict(), **overrides})

    @property
    def max_prompts(self) -> int:
        """The most prompts a cell can run: ``prompts_per_cell``, the ``[sequential]`` cap, or as
        far as the ``[held_out]`` prompts reach."""
        return max(self.prompts_per_cell, self.sequential.max_prompts_per_cell, 2 * self.held_out.prompts)

    def settings_for(self, lang: str) -> list[DrafterSetting]:
        return [d for d in self.drafters if not d.languages or lang in d.languages]

    def to_dict(self) -> dict:
        return asdict(self)


_SECTIONS = {"sampling": SamplingSection, "checks": ChecksSection, "divergence": DivergenceSection,
             "sequential": SequentialSection, "router": RouterSection, "held_out": HeldOutSection}


def _field_names(cls: type) -> set[str]:
    return {f.name for f in fields(cls)}


def _check_keys(table: dict, cls: type, where: str, extra: set[str] = frozenset()) -> None:
    allowed = _field_names(cls) | set(extra)
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise ConfigError(
            f"{where}: unknown key(s) {', '.join(map(repr, unknown))}; "
            f"allowed: {', '.join(sorted(allowed - {'source', 'options'}))}"
        )


def resolve_language(name: str) -> str:
    """ISO 639-3 code of a language code or alias (``ne`` -> ``npi``); ConfigError if unknown."""
    from babelspec.data.languages import get_language

    try:
        return get_language(name).code
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


# What a distilled n-gram (kind = "ngram" with distil) learns from: the target's distributions
# over train text, and over its answers to a task's train prompts (babelspec.distill.ngram_distill).
DISTIL_MODES = ("general", "task")


def _parse_drafter(raw: Any, index: int) -> DrafterSetting:
    where = f"[[drafters]] #{index + 1}"
    if isinstance(raw, str):  # shorthand: drafters = ["self:6", ...]
        raw = {"spec": raw}
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a table or a spec string, got {raw!r}")
    own = {"name", "spec", "kind", "trained_on", "languages"}
    options = {k: v for k, v in raw.items() if k not in own}
    spec = str(raw.get("spec", ""))
    kind = str(raw.get("kind", ""))
    if bool(spec) == bool(kind):
        raise ConfigError(
            f"{where}: give exactly one of spec = \"self:6\" (a fixed drafter) or "
            f"kind = \"ngram\"|\"distilled\"|\"head\" (a drafter the runner trains per language)"
        )
    if kind and kind not in PREPARED_KINDS:
        raise ConfigError(
            f"{where}: unknown kind {kind!r}; the runner can prepare: {', '.join(PREPARED_KINDS)}"
        )
    if spec:
        prefix = spec.partition(":")[0]
        if prefix not in KNOWN_DRAFTER_PREFIXES:
            raise ConfigError(
                f"{where}: unknown drafter spec {spec!r}; known forms: "
                + ", ".join(p if p == "none" else f"{p}:..." for p in KNOWN_DRAFTER_PREFIXES)
            )
        if prefix in ("none", "auto"):
            raise ConfigError(
                f"{where}: {spec!r} is not a grid setting (plain decoding is the baseline, "
                f"set baseline = true; 'auto' is the router's output)"
            )
        if options:
            raise ConfigError(
                f"{where}: unknown key(s) {', '.join(map(repr, sorted(options)))} for a fixed "
                f"spec; allowed: name, spec, trained_on, languages"
            )
    name = str(raw.get("name") or spec or kind)
    if name in ("none", "llama.cpp"):
        raise ConfigError(f"{where}: the name {name!r} is reserved for a baseline (plain decoding; llama.cpp's)")
    if kind == "ngram" and "distil" in options:
        modes = options["distil"]
        modes = [modes] if isinstance(modes, str) else modes
        if not isinstance(modes, list) or not modes or any(m not in DISTIL_MODES for m in modes):
            raise ConfigError(
                f"{where}: distil must be \"general\", \"task\" or [\"general\", \"task\"] "
                f"(the target's distributions over train text, or over its answers to train prompts); "
                f"got {options['distil']!r}"
            )
    if "adaptive" in options and not isinstance(options["adaptive"], bool):
        raise ConfigError(f"{where}: adaptive must be true or false (each step's gamma from what the "
                          f"generation measured, drafters.adaptive), got {options['adaptive']!r}")
    if kind == "head":
        _check_head_options(options, where)
    default_trained = options.get("mode", "task") if kind == "distilled" else ""
    trained_on = str(raw.get("trained_on", default_trained))
    if trained_on == "task":
        trained_on = "translation"
    if kind == "distilled" and options.get("mode", "task") not in ("task", "general"):
        raise ConfigError(f"{where}: mode must be 'task' or 'general', got {options['mode']!r}")
    langs = raw.get("languages", [])
    if not isinstance(langs, list):
        raise ConfigError(f"{where}: languages must be a list of codes, got {langs!r}")
    return DrafterSetting(
        name=name, spec=spec, kind=kind, trained_on=trained_on, languages=list(langs),
        options=options,
    )  # fmt: skip


def _check_head_options(options: dict, where: str) -> None:
    """A kind = "head" setting's options, each checked with a message naming it."""
    unknown = sorted(set(options) - {"quantize", "layers", "corpus", "adaptive", "predict_tokens",
                                     "predict_threshold"})  # fmt: skip
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(map(repr, unknown))} for kind = \"head\"; "
                          "allowed: quantize = \"int8\", layers = K, corpus, adaptive, predict_tokens, "
                          "predict_threshold")
    tokens, threshold = options.get("predict_tokens", 0), options.get("predict_threshold", 0.5)
    if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 0:
        raise ConfigError(f"{where}: predict_tokens must be a whole number of tokens >= 0 (0: the corpus's "
                          f"tokens alone), got {tokens!r}")
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0 < threshold < 1:
        raise ConfigError(f"{where}: predict_threshold must be a probability between 0 and 1, got {threshold!r}")
    if options.get("quantize", "int8") not in ("int8", "gguf", "none"):
        raise ConfigError(f"{where}: quantize must be \"int8\", \"gguf\" (a gguf target's own blocks) or "
                          f"\"none\", got {options['quantize']!r}")
    layers = options.get("layers")
    if layers is not None and (not isinstance(layers, int) or isinstance(layers, bool) or layers < 1):
        raise ConfigError(f"{where}: layers must be a whole number of layers >= 1, got {layers!r}")


def config_from_dict(data: dict, source: str = "") -> ExperimentConfig:
    """Build and validate an ``ExperimentConfig`` from a parsed TOML table."""
    where = source or "config"
    _check_keys(data, ExperimentConfig, where)
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        if key in _SECTIONS:
            if not isinstance(value, dict):
                raise ConfigError(f"{where}: [{key}] must be a table")
            _check_keys(value, _SECTIONS[key], f"{where} [{key}]")
            kwargs[key] = _SECTIONS[key](**value)
        elif key == "data":
            kwargs[key] = _parse_data(value, where)
        elif key == "drafters":
            if not isinstance(value, list):
                raise ConfigError(f"{where}: drafters must be an array of tables [[drafters]]")
            kwargs[key] = [_parse_drafter(d, i) for i, d in enumerate(value)]
        else:
            kwargs[key] = value
    cfg = ExperimentConfig(**kwargs, source=source)
    validate(cfg)
    return cfg


def _parse_data(raw: Any, where: str) -> DataSection:
    from babelspec.data.sources import PARALLEL_FORMATS, parse_source

    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: [data] must be a table")
    root = raw.get("root", "")
    if not isinstance(root, str):
        raise ConfigError(f"{where}: [data] root must be a folder path string")
    default = raw.get("default", "bundled")
    if default not in ("bundled", "real"):
        raise ConfigError(f"{where}: [data] default must be \"bundled\" (the bundled dataset) or \"real\" "
                          f"(each language's real sets under root), got {default!r}")
    langs: dict[str, LanguageData] = {}
    for name, table in raw.items():
        if name in ("root", "default"):
            continue
        at = f"{where} [data.{name}]"
        if not isinstance(table, dict):
            raise ConfigError(f"{at}: expected a table of test, shots, monolingual (or the key root)")
        code = _language(name, at)
        _check_keys(table, LanguageData, at)
        mono = table.get("monolingual", ["bundled@train"])
        if isinstance(mono, str):
            mono = [mono]
        if not isinstance(mono, list) or not mono:
            raise ConfigError(f"{at}: monolingual must be a non-empty list of sources")
        d = LanguageData(test=str(table.get("test", "bundled@test")),
                         shots=str(table.get("shots", "bundled@train")), monolingual=[str(m) for m in mono],
                         train=str(table.get("train", "")))  # fmt: skip
        try:
            test, shots = parse_source(d.test), parse_source(d.shots)
            monos = [parse_source(m) for m in d.monolingual]
            train = parse_source(d.train) if d.train else None
        except ValueError as exc:
            raise ConfigError(f"{at}: {exc}") from None
        for key, src in (("test", test), ("shots", shots), ("train", train)):
            if src is not None and src.format not in PARALLEL_FORMATS:
                raise ConfigError(f"{at}: {key} = {str(src)!r} has no English "
                                  f"side; use one of {', '.join(PARALLEL_FORMATS)}")
        if train is not None and train.same_text(test):
            raise ConfigError(f"{at}: train and test are the same sentences ({test}); distil on the "
                              f"train split (e.g. @train)")
        # Never overlapping: few-shot examples and training text come from other sentences.
        if shots.same_text(test):
            raise ConfigError(f"{at}: shots and test are the same sentences ({test}); take the "
                              f"few-shot examples from another split (e.g. @dev)")
        for m in monos:
            if m.same_text(test):
                raise ConfigError(f"{at}: monolingual source {m} is the test split; count n-grams "
                                  f"and distil on train splits or other sets, never on the test")
        langs[code] = d
    return DataSection(root=root, default=default, languages=langs)


def validate(cfg: ExperimentConfig) -> None:
    """Raise ``ConfigError`` naming the first problem found."""
    where = cfg.source or "config"

    def need(cond: bool, message: str) -> None:
        if not cond:
            raise ConfigError(f"{where}: {message}")

    _validate_languages(cfg, need, where)
    need(isinstance(cfg.tasks, list) and cfg.tasks, "tasks must be a non-empty list")
    for task in cfg.tasks:
        need(
            task in _known_tasks(),
            f"unknown task {task!r}; known: {', '.join(_known_tasks())}",
        )
    need(isinstance(cfg.gammas, list) and cfg.gammas, "gammas must be a non-empty list, e.g. [2, 3, 4]")
    for g in cfg.gammas:
        need(
            isinstance(g, int) and not isinstance(g, bool) and g >= 1,
            f"every gamma must be an integer >= 1 (got {g!r}); the paper sweeps [2, 3, 4]",
        )
    cfg.gammas = sorted(set(cfg.gammas))
    need(
        isinstance(cfg.prompts_per_cell, int) and cfg.prompts_per_cell >= 1,
        f"prompts_per_cell must be an integer >= 1 (got {cfg.prompts_per_cell!r})",
    )
    _validate_sequential(cfg, need)
    need(cfg.router.rule in RULES,
         f"[router] rule must be one of {', '.join(map(repr, RULES))} (got {cfg.router.rule!r})")
    need(
        cfg.dtype in ("auto", "bfloat16", "float32"),
        f"dtype must be auto, bfloat16 or float32 (got {cfg.dtype!r}); float32 is the exact mode",
    )
    need(
        cfg.precision in ("", "none", "gguf", "w8a8"),
        f"precision must be gguf, w8a8, none (the dtype's own) or empty for the default (got {cfg.precision!r})",
    )
    need(
        cfg.head in ("full", "certified"),
        f"head must be full or certified (got {cfg.head!r})",
    )
    need(cfg.forward in ("lean", "hf"), f"forward must be lean or hf (got {cfg.forward!r})")
    need(isinstance(cfg.native, bool), f"native must be true or false (got {cfg.native!r})")
    need(
        isinstance(cfg.max_new_tokens, int) and cfg.max_new_tokens >= 1,
        f"max_new_tokens must be an integer >= 1 (got {cfg.max_new_tokens!r})",
    )
    need(
        isinstance(cfg.seeds, list) and cfg.seeds and all(isinstance(s, int) for s in cfg.seeds),
        f"seeds must be a non-empty list of integers (got {cfg.seeds!r})",
    )
    need(isinstance(cfg.target, str) and cfg.target, "target must name a preset or a model directory")
    need(
        cfg.sampling.preset in ("paper", "greedy", "plain"),
        f"[sampling] preset must be 'paper', 'greedy' or 'plain' (got {cfg.sampling.preset!r})",
    )
    try:
        cfg.sampling_config(0)
    except ValueError as exc:
        raise ConfigError(f"{where} [sampling]: {exc}") from exc
    need(cfg.baseline or cfg.drafters, "nothing to run: no drafters and baseline = false")
    seen: set[str] = set()
    for d in cfg.drafters:
        need(d.name not in seen, f"two drafter settings are named {d.name!r}; give each a name")
        seen.add(d.name)
        d.languages = [_language(lang, f"{where} drafter {d.name!r}") for lang in d.languages]
    for n in cfg.divergence.drafters:
        need(n in seen, f"[divergence] drafters: no drafter setting named {n!r}")
    need(isinstance(cfg.ray, str), f"ray must be \"auto\" or \"HOST:PORT\" of a Ray cluster (got {cfg.ray!r})")
    need(
        isinstance(cfg.ray_workers, int) and not isinstance(cfg.ray_workers, bool) and cfg.ray_workers >= 0,
        f"ray_workers must be an integer >= 0, 0 = as many as the cluster holds (got {cfg.ray_workers!r})",
    )
    need(cfg.checks.loop_ngram >= 1, "[checks] loop_ngram must be >= 1")
    need(0.0 < cfg.checks.loop_threshold <= 1.0, "[checks] loop_threshold must be in (0, 1]")


def _validate_languages(cfg: ExperimentConfig, need: Callable[[bool, str], None], where: str) -> None:
    """``languages``: a named set ("paper", "flores200") or a list, each name resolved to its code
    once (``validate``'s)."""
    if isinstance(cfg.languages, str):  # a named set: "paper" or "flores200"
        from babelspec.data.languages import LANGUAGE_SETS

        need(cfg.languages in LANGUAGE_SETS, f"languages = {cfg.languages!r} names no set; give a list of "
             f"codes or one of: {', '.join(map(repr, LANGUAGE_SETS))}")
        cfg.languages = list(LANGUAGE_SETS[cfg.languages])
    need(isinstance(cfg.languages, list) and cfg.languages, "languages must be a non-empty list")
    cfg.languages = list(dict.fromkeys(_language(lang, where) for lang in cfg.languages))


def _validate_sequential(cfg: ExperimentConfig, need: Callable[[bool, str], None]) -> None:
    """The ``[sequential]`` and ``[held_out]`` sections' checks (``validate``'s): both say which
    prompts a cell runs beyond the grid's."""
    seq = cfg.sequential
    need(
        isinstance(seq.max_prompts_per_cell, int) and not isinstance(seq.max_prompts_per_cell, bool)
        and (seq.max_prompts_per_cell == 0 or seq.max_prompts_per_cell >= cfg.prompts_per_cell),
        f"[sequential] max_prompts_per_cell must be 0 (no rounds) or at least prompts_per_cell = "
        f"{cfg.prompts_per_cell} (got {seq.max_prompts_per_cell!r})",
    )
    need(
        isinstance(seq.step, int) and not isinstance(seq.step, bool) and seq.step >= 2 and seq.step % 2 == 0,
        f"[sequential] step must be an even integer >= 2, as many choosing as held-out prompts (got {seq.step!r})",
    )
    need(
        isinstance(seq.half_width, (int, float)) and seq.half_width > 0,
        f"[sequential] half_width must be a positive speedup, e.g. 0.15 (got {seq.half_width!r})",
    )
    need(
        isinstance(seq.min_speedup, (int, float)) and seq.min_speedup > 0,
        f"[sequential] min_speedup must be positive, e.g. 1.0 (got {seq.min_speedup!r})",
    )
    need(
        seq.max_prompts_per_cell == 0 or cfg.baseline,
        "[sequential] rounds judge speedups against plain decoding: set baseline = true",
    )
    n = cfg.held_out.prompts
    need(isinstance(n, int) and not isinstance(n, bool) and n >= 0,
         f"[held_out] prompts must be an integer >= 0, 0 = every prompt runs every setting (got {n!r})")
    need(n == 0 or cfg.baseline, "[held_out] prompts measure speedups against plain decoding: set baseline = true")
    need(isinstance(cfg.llama_cpp, bool), f"llama_cpp must be true or false (got {cfg.llama_cpp!r})")
    need(not cfg.llama_cpp or cfg.baseline,
         "llama_cpp = true compares the chosen settings with llama.cpp beside plain decoding: set baseline = true")
    need(n == 0 or seq.max_prompts_per_cell == 0,
         "[held_out] prompts and [sequential] rounds cannot be combined: the rounds add held-out prompts "
         "with every setting; set [sequential] max_prompts_per_cell = 0 or [held_out] prompts = 0")
    need(n == 0 or cfg.prompts_per_cell >= 2,
         f"[held_out] prompts need choosing prompts: prompts_per_cell must be >= 2 (got {cfg.prompts_per_cell})")


def _language(name: object, where: str) -> str:
    if not isinstance(name, str):
        raise ConfigError(f"{where}: a language must be a code string like \"amh\", got {name!r}")
    try:
        return resolve_language(name)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _known_tasks() -> tuple[str, ...]:
    try:
        from babelspec.data import tasks as task_registry  # type: ignore

        names = getattr(task_registry, "task_names", None)
        if callable(names):
            return tuple(names())
        registry = getattr(task_registry, "TASKS", None)
        if isinstance(registry, dict):
            return tuple(registry)
    except Exception:  # noqa: BLE001 - fall back to the paper's two tasks
        pass
    return KNOWN_TASKS


def profiles() -> dict[str, Path]:
    """The profiles the package carries (``babelspec/profiles/NAME.toml``, read through
    ``importlib.resources``: the checkout's folder, or the installed wheel's), by name."""
    folder = Path(str(resources.files("babelspec") / "profiles"))
    return {path.stem: path for path in sorted(folder.glob("*.toml"))}


def profile_path(profile: str) -> Path:
    """The file of a shipped profile; a wrong name lists the ones there are."""
    known = profiles()
    if profile not in known:
        raise ConfigError(f"unknown profile {profile!r}; choose one of: {', '.join(known) or '(none installed)'}, "
                          "or pass your own --config FILE")  # fmt: skip
    return known[profile]


def load_config(path: str | Path | None = None, profile: str | None = None,
                data_root: str | Path | None = None) -> ExperimentConfig:
    """Read a config file, or a named profile (``quick`` when neither is given).

    ``data_root`` (``--data-root``) overrides ``[data] root``; a relative ``[data] root`` is
    relative to the config file. A language the bundled dataset does not hold reads its real sets
    (``DataSection.for_language``) from that root, else from the corpora folder found
    (``data.real.corpora_root``: ``$BABELSPEC_CORPORA``, then the user's corpora folder).
    """
    if path is not None and profile is not None:
        raise ConfigError("give either a config file or a profile, not both")
    file = Path(path) if path is not None else profile_path(profile or "quick")
    if not file.is_file():
        raise ConfigError(f"config file {str(file)!r} not found")
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{file}: not valid TOML: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{file}: not UTF-8 text: {exc}") from exc
    cfg = config_from_dict(data, source=str(file))
    if data_root is not None:
        cfg.data.root = str(Path(data_root).resolve())
    elif cfg.data.root and not Path(cfg.data.root).is_absolute():
        cfg.data.root = str((file.parent / cfg.data.root).resolve())
    if cfg.data.root and not Path(cfg.data.root).is_dir():
        raise ConfigError(f"data root {cfg.data.root!r} is not a folder; pass --data-root DIR")
    from babelspec.data.languages import get_language
    from babelspec.data.real import corpora_root, corpora_searched

    beyond = [lang for lang in cfg.languages if lang not in cfg.data.languages and not get_language(lang).bundled]
    if (beyond or cfg.data.default == "real" or cfg.data.languages) and not cfg.data.root:
        found = corpora_root()
        if found is None and beyond:
            named = ", ".join(beyond[:4]) + (f" and {len(beyond) - 4} more" if len(beyond) > 4 else "")
            raise ConfigError(f"{file}: {named} {'is' if len(beyond) == 1 else 'are'} not in the bundled "
                              f"dataset and no corpora folder holding real sets was found (looked at "
                              f"{', '.join(corpora_searched())}); pass --data-root DIR (the folder holding sib200/)")  # fmt: skip
        cfg.data.root = str(found) if found is not None else ""
    if cfg.data.default == "real" and not cfg.data.root:
        raise ConfigError(f"{file}: [data] default = \"real\" reads the corpora folder; set [data] root "
                          f"or pass --data-root DIR (the corpora folder)")
    try:
        for lang in cfg.languages:
            cfg.data.sources(lang)  # relative sources need a root
    except ValueError as exc:
        raise ConfigError(f"{file}: [data.{lang}]: {exc}") from None
    # Relative paths (a local model directory, a distillation config) are relative to the file.
    target = Path(cfg.target)
    if not target.is_absolute() and (file.parent / target).is_dir():
        cfg.target = str((file.parent / target).resolve())
    for d in cfg.drafters:
        sub = d.options.get("config")
        if isinstance(sub, str) and not Path(sub).is_absolute():
            if not (file.parent / sub).is_file():
                raise ConfigError(f"{file}: drafter {d.name!r}: config file {sub!r} not found next to it")
            d.options["config"] = str((file.parent / sub).resolve())
    return cfg


def dump_toml(cfg: ExperimentConfig) -> str:
    """The config as TOML (what the run directory keeps next to its store); ``load_config``
    reads it back to the same config."""
    import tomli_w

    data = cfg.to_dict()
    data.pop("source", None)
    for section in ("sampling", "checks", "divergence"):
        data[section] = {k: v for k, v in data[section].items() if v is not None}  # TOML has no null
    section = data["data"]  # [data] root = ..., then a [data.LANG] table per language
    data["data"] = {**({"root": section["root"]} if section["root"] else {}),
                    **({"default": section["default"]} if section["default"] != "bundled" else {}),
                    **section["languages"]}
    drafters = []
    for d in data["drafters"]:
        options = d.pop("options")
        drafters.append({k: v for k, v in {**d, **options}.items() if v not in ("", [], None)})
    data["drafters"] = drafters
    return tomli_w.dumps(data)
