"""The router: per language and task, the drafter setting and gamma that predict the most
speedup, and plain decoding where nothing beats 1.0x, so no language is served slower.

Prediction uses the measured wall-clock speedup (paired against plain decoding) where the run
has a baseline, and the theoretical f otherwise. A route needs ``min_speedup`` (1.0 by
default) to be taken; the ``auto`` drafter (``babelspec.drafters.auto``) reads the JSON file
and also falls back online when its own acceptance in a generation says drafting no longer
pays.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from babelspec.experiments.aggregate import BASELINE, SettingStats
from babelspec.fileio import write_text_atomic

ROUTER_VERSION = 1
ANY_TASK = "*"  # the per-language route, used when the task is not known


@dataclass
class Route:
    language: str
    task: str
    drafter: str  # setting name; "none" = plain decoding
    spec: str  # drafter spec to build ("none" for plain decoding)
    gamma: int
    predicted_speedup: float
    source: str  # "measured" | "theoretical" | "fallback"
    alpha: float = math.nan
    c: float = math.nan
    theoretical_f: float = math.nan


@dataclass
class Router:
    routes: list[Route] = field(default_factory=list)
    target: str = ""
    min_speedup: float = 1.0
    version: int = ROUTER_VERSION

    def route(self, language: str, task: str | None = None) -> Route:
        """The route for ``language`` and ``task``; without a task, the per-language route
        (task ``"*"``): the setting whose worst task is best."""
        mine = [r for r in self.routes if r.language == language]
        if not mine:
            known = ", ".join(sorted({r.language for r in self.routes})) or "none"
            raise ValueError(
                f"the router has no route for language {language!r}; it knows: {known}. "
                f"Run `babelspec run` on a config that includes {language!r}."
            )
        wanted = ANY_TASK if task is None else task
        for r in mine:
            if r.task == wanted:
                return r
        known = ", ".join(sorted({r.task for r in mine}))
        raise ValueError(f"the router has no route for {language!r} / task {task!r}; tasks: {known}")

    def to_dict(self) -> dict:
        return asdict(self)

    def save(self, path: str | Path) -> Path:
        """Write atomically; drafter files inside the run directory are stored relative."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        data = self.to_dict()
        for r in data["routes"]:
            r["spec"] = _relative_spec(r["spec"], path.parent)
            for k, v in r.items():
                if isinstance(v, float) and not math.isfinite(v):
                    r[k] = None
        write_text_atomic(path, json.dumps(data, indent=2, ensure_ascii=False))
        return path

    @classmethod
    def load(cls, path: str | Path) -> "Router":
        path = Path(path)
        if not path.is_file():
            raise ValueError(f"router file {str(path)!r} not found; `babelspec run` writes runs/NAME/router.json")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if data.get("version") != ROUTER_VERSION:
                raise ValueError(f"router file version {data.get('version')!r}, expected {ROUTER_VERSION}")
            routes = []
            for r in data["routes"]:
                r = {k: (math.nan if v is None else v) for k, v in r.items()}
                r["spec"] = _absolute_spec(r["spec"], path.parent)
                routes.append(Route(**r))
        except (KeyError, TypeError, json.JSONDecodeError) as exc:
            raise ValueError(f"{path}: not a babelspec router file ({exc})") from exc
        return cls(routes=routes, target=data.get("target", ""), min_speedup=data.get("min_speedup", 1.0))


_PATH_PREFIXES = ("ngram", "distilled")


def _relative_spec(spec: str, base: Path) -> str:
    prefix, _, arg = spec.partition(":")
    if prefix in _PATH_PREFIXES and arg and Path(arg).is_absolute():
        try:
            return f"{prefix}:{os.path.relpath(arg, base)}"
        except ValueError:  # another drive
            return spec
    return spec


def _absolute_spec(spec: str, base: Path) -> str:
    prefix, _, arg = spec.partition(":")
    if prefix in _PATH_PREFIXES and arg and not Path(arg).is_absolute():
        return f"{prefix}:{(base / arg).resolve()}"
    return spec


def _prediction(s: SettingStats) -> tuple[float, str]:
    if math.isfinite(s.speedup):
        return s.speedup, "measured"
    if math.isfinite(s.theoretical_f):
        return s.theoretical_f, "theoretical"
    return -math.inf, "none"


def build_router(
    stats: list[SettingStats],
    specs: dict[tuple[str, str], str],
    target: str = "",
    min_speedup: float = 1.0,
) -> Router:
    """Choose per (language, task) the best setting; ``specs[(drafter, language)]`` is the
    drafter spec each setting resolved to for that language.

    A setting with a measured speedup is judged only by it (never by f), so a setting
    measured at or below ``min_speedup`` is never picked.
    """
    best: dict[tuple[str, str], tuple[float, str, SettingStats]] = {}
    cells = {(s.language, s.task) for s in stats}
    for s in stats:
        if s.drafter == BASELINE or (s.drafter, s.language) not in specs:
            continue
        value, source = _prediction(s)
        if not value > min_speedup:
            continue
        key = (s.language, s.task)
        if key not in best or value > best[key][0]:
            best[key] = (value, source, s)
    routes = []
    for lang, task in sorted(cells):
        if (lang, task) in best:
            value, source, s = best[(lang, task)]
            routes.append(_route(lang, task, s, specs, value, source))
        else:
            routes.append(_fallback(lang, task))
    # Per language, whatever the task: the setting whose worst task is best.
    for lang in sorted({lang for lang, _ in cells}):
        tasks = {t for la, t in cells if la == lang}
        per_setting: dict[tuple[str, int], dict[str, tuple[float, str, SettingStats]]] = {}
        for s in stats:
            if s.language != lang or s.drafter == BASELINE or (s.drafter, lang) not in specs:
                continue
            per_setting.setdefault((s.drafter, s.gamma), {})[s.task] = (*_prediction(s), s)
        choice = None
        for by_task in per_setting.values():
            if set(by_task) != tasks:
                continue
            worst = min(by_task.values(), key=lambda v: v[0])
            if worst[0] > min_speedup and (choice is None or worst[0] > choice[0]):
                choice = worst
        routes.append(
            _route(lang, ANY_TASK, choice[2], specs, choice[0], choice[1]) if choice
            else _fallback(lang, ANY_TASK)
        )
    return Router(routes=routes, target=target, min_speedup=min_speedup)


def _route(lang: str, task: str, s: SettingStats, specs: dict, value: float, source: str) -> Route:
    return Route(
        language=lang, task=task, drafter=s.drafter, spec=specs[(s.drafter, lang)],
        gamma=s.gamma, predicted_speedup=value, source=source, alpha=s.alpha_mean,
        c=s.c, theoretical_f=s.theoretical_f,
    )  # fmt: skip


def _fallback(lang: str, task: str) -> Route:
    return Route(language=lang, task=task, drafter=BASELINE, spec="none", gamma=0,
                 predicted_speedup=1.0, source="fallback")  # fmt: skip


def predicted_vs_measured(router: Router, held_out: list[SettingStats]) -> list[dict]:
    """Each route's predicted speedup next to what the same setting measured on held-out prompts."""
    index = {(s.language, s.task, s.drafter, s.gamma): s for s in held_out}
    rows = []
    for r in router.routes:
        s = index.get((r.language, r.task, r.drafter, r.gamma))
        measured = 1.0 if r.drafter == BASELINE else (s.speedup if s else math.nan)
        rows.append({
            "language": r.language, "task": r.task, "drafter": r.drafter, "gamma": r.gamma,
            "predicted": r.predicted_speedup, "measured": measured, "source": r.source,
            "n_pairs": s.n_pairs if s and r.drafter != BASELINE else 0,
        })  # fmt: skip
    return rows


def default_router_path() -> Path:
    """Where ``auto`` (no file) looks: $BABELSPEC_ROUTER, else the user cache's router.json."""
    env = os.environ.get("BABELSPEC_ROUTER")
    if env:
        return Path(env)
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("babelspec")) / "router.json"
