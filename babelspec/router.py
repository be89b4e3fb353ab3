"""What the router chose, per language and task: the data types the study writes
(``babelspec.experiments.route_choice``) and the ``auto`` drafter reads, with their JSON file.

It sits below both, so the mechanism (drafters) never imports the study (experiments).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from babelspec.errors import UserError
from babelspec.fileio import write_text_atomic

BASELINE = "none"  # the setting name (and drafter spec) of plain decoding
LLAMA_CPP = "llama.cpp"  # the setting name of llama.cpp's plain decoding of the same GGUF (a study's second baseline)

ROUTER_VERSION = 1
ANY_TASK = "*"  # the per-language route, used when the task is not known
# How a router judges a setting on its choosing prompts (babelspec.experiments.route_choice).
RULES = ("interval", "pooled")


@dataclass
class Route:
    language: str
    task: str
    drafter: str  # setting name; BASELINE = plain decoding
    spec: str  # drafter spec to build (BASELINE for plain decoding)
    gamma: int
    predicted_speedup: float  # measured on prompts the choice did not see (held out)
    source: str  # "measured" | "theoretical" | "fallback"
    alpha: float = math.nan
    c: float = math.nan  # draft forward / verification forward
    theoretical_f: float = math.nan
    predicted_low: float = math.nan  # bootstrap 95% interval of predicted_speedup
    predicted_high: float = math.nan
    n_pairs: int = 0  # held-out (plain, speculative) pairs behind predicted_speedup
    selection_speedup: float = math.nan  # the same setting on the prompts it was chosen on
    selection_low: float = math.nan
    selection_high: float = math.nan
    # Verification forward (gamma + 1 tokens) and draft forward, each over a plain decode
    # step: what the auto drafter's online f needs (NaN in older files: taken as 1 and c).
    verify_cost: float = math.nan
    draft_cost: float = math.nan
    # The pooled rule's estimate on the choosing prompts (route_choice.pooled_posteriors): the
    # language's speedup shrunk towards its setting's mean over languages, with its 95 % bounds.
    pooled_speedup: float = math.nan
    pooled_low: float = math.nan
    pooled_high: float = math.nan


@dataclass
class Router:
    routes: list[Route] = field(default_factory=list)
    target: str = ""
    min_speedup: float = 1.0
    version: int = ROUTER_VERSION
    rule: str = "interval"  # how a choice was judged on its prompts (experiments.route_choice.RULES)

    def route(self, language: str, task: str | None = None) -> Route:
        """The route for ``language`` and ``task``; without a task, or for a task with no route
        of its own, the per-language route (task ``"*"``): the setting whose worst task is best."""
        mine = [r for r in self.routes if r.language == language]
        if not mine:
            known = ", ".join(sorted({r.language for r in self.routes})) or "none"
            raise UserError(
                f"the router has no route for language {language!r}; it knows: {known}. "
                f"Run `babelspec run` on a config that includes {language!r}."
            )
        for wanted in (ANY_TASK,) if task is None else (task, ANY_TASK):  # a task's own route, else every task's
            for r in mine:
                if r.task == wanted:
                    return r
        known = ", ".join(sorted({r.task for r in mine}))
        raise UserError(f"the router has no route for {language!r} / task {task!r}; tasks: {known}")

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
    def load(cls, path: str | Path) -> Router:
        path = Path(path)
        if not path.is_file():
            raise UserError(f"router file {str(path)!r} not found; `babelspec run` writes runs/NAME/router.json")
        from pydantic import TypeAdapter, ValidationError

        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(data, dict):
                raise TypeError(f"the file holds a JSON {type(data).__name__}, not an object")
            if data.get("version") != ROUTER_VERSION:
                raise UserError(f"router file version {data.get('version')!r}, expected {ROUTER_VERSION}")
            names = {f.name for f in fields(Route)}
            raw = data["routes"]
            if not isinstance(raw, list) or not all(isinstance(r, dict) for r in raw):
                raise TypeError("'routes' must be a list of objects")
            routes = TypeAdapter(list[Route]).validate_python(
                [{k: (math.nan if v is None else v) for k, v in r.items() if k in names} for r in raw])
            for route in routes:
                route.spec = _absolute_spec(route.spec, path.parent)
            if not isinstance(data.get("min_speedup", 1.0), (int, float)):
                raise TypeError("'min_speedup' must be a number")
            if not isinstance(data.get("rule", "interval"), str):
                raise TypeError("'rule' must be a string")
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise UserError(f"{path}: not a babelspec router file (routes.{where}: {first['msg']})") from None
        except KeyError as exc:
            raise UserError(f"{path}: not a babelspec router file (no {exc.args[0]!r} field)") from None
        except (TypeError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise UserError(f"{path}: not a babelspec router file ({exc})") from None
        return cls(routes=routes, target=data.get("target", ""), min_speedup=data.get("min_speedup", 1.0),
                   rule=data.get("rule", "interval"))


_PATH_PREFIXES = ("ngram", "distilled")


def _relative_spec(spec: str, base: Path) -> str:
    """A route's file as a path relative to the router's folder. A spec's relative path is one
    the drafter opens from the working directory (``babelspec run -o runs/X`` writes such), so it
    is made absolute from there first."""
    prefix, _, arg = spec.partition(":")
    if prefix in _PATH_PREFIXES and arg:
        path, _, options = arg.partition(",")
        try:
            relative = os.path.relpath(Path(path).resolve(), base.resolve())
        except ValueError:  # another drive
            return spec
        return f"{prefix}:{relative}" + (f",{options}" if options else "")
    return spec


def _absolute_spec(spec: str, base: Path) -> str:
    """A route's file as an absolute path: relative to the router's folder, or, in router files
    written before that rule, relative to the working directory where only that path exists."""
    prefix, _, arg = spec.partition(":")
    if prefix in _PATH_PREFIXES and arg and not Path(arg).is_absolute():
        path, _, options = arg.partition(",")
        found = (base / path).resolve()
        if not found.exists() and Path(path).exists():
            found = Path(path).resolve()
        return f"{prefix}:{found}" + (f",{options}" if options else "")
    return spec



def default_router_path() -> Path:
    """Where ``auto`` (no file) looks: $BABELSPEC_ROUTER, else router.json in babelspec's cache
    directory (``models.cache_dir``: $BABELSPEC_CACHE, else the user cache)."""
    env = os.environ.get("BABELSPEC_ROUTER")
    if env:
        return Path(env)
    from babelspec.models.userdir import cache_dir

    return cache_dir() / "router.json"
