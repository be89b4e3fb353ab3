"""One distillation run, end to end: soft targets -> student -> train -> evaluate -> save.

Every expensive stage is resumable: the teacher's soft-target shards and the held-out evaluation sets
live in shard caches (skipped when complete), training resumes from its latest checkpoint, and
the evaluation before training is stored in the output directory.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import tomllib
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch

from babelspec.distill.soft_targets import Example, SoftTargetShards, build_soft_targets
from babelspec.distill.trainer import TrainConfig, TrainState, latest_checkpoint, train
from babelspec.errors import UserError
from babelspec.fileio import write_json_atomic
from babelspec.machine import dtype_name

MODES = ("task", "general")
EVAL_TASKS = ("translation", "story")


# The defaults are the CPU recipe (babelspec/profiles/distill/cpu.toml, which documents them): a 2-core CPU
# distils a language and mode in minutes and training stops when the dev loss stops improving.
# babelspec/profiles/distill/paper.toml is the paper's recipe, for a GPU.
@dataclass
class DataConfig:
    k: int = 20  # teacher top-k kept per response position
    logp_dtype: str = "float16"  # "float16" halves the cache; "float32" for exact logits
    max_examples: int = 48  # training examples (prompts in task mode, windows in general)
    max_new_tokens: int = 32  # teacher greedy response length in task mode
    max_tokens: int = 96  # general mode: window length of monolingual text
    shard_size: int = 16
    # Real text instead of the bundled splits, as source strings of babelspec.data.sources
    # relative to DistillConfig.data_root: task mode translates train_source's sentences with
    # shots_source's pairs as few-shot examples; general mode reads text_sources' texts.
    train_source: str = ""  # e.g. "sib200:sib200@train"
    shots_source: str = ""  # e.g. "sib200:sib200@dev" ("" = train_source)
    text_sources: list[str] = field(default_factory=list)  # e.g. ["oldi-seed:nllb_oldi_seed"]
    # The translation prompts the held-out evaluation uses (with shots_source's pairs as
    # examples): "" = the bundled test split.
    test_source: str = ""  # e.g. "sib200:sib200@test"
    # General mode: other languages whose text joins the language's, in equal shares of the
    # windows (a multilingual student, the way a family's small model is trained); each reads
    # its real sets (babelspec.data.real) under data_root where they exist, else the bundled split.
    mix: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.k < 1:
            raise UserError(f"data.k must be >= 1 (got {self.k})")
        if self.logp_dtype not in ("float16", "float32"):
            raise UserError(f"data.logp_dtype must be float16 or float32 (got {self.logp_dtype!r})")
        from babelspec.data.languages import get_language

        self.mix = [get_language(m).code for m in self.mix]
        for name in ("max_examples", "max_new_tokens", "max_tokens", "shard_size"):
            if getattr(self, name) < 1:
                raise UserError(f"data.{name} must be >= 1 (got {getattr(self, name)})")


@dataclass
class EvalConfig:
    tasks: tuple[str, ...] = EVAL_TASKS  # held-out tasks the expected acceptance is measured on
    prompts: int = 4  # held-out prompts per task (test split)
    max_new_tokens: int = 32  # length of the teacher's sampled held-out responses
    seed: int = 0

    def __post_init__(self) -> None:
        self.tasks = tuple(self.tasks)
        bad = [t for t in self.tasks if t not in EVAL_TASKS]
        if bad:
            raise UserError(f"eval.tasks {bad} unknown; choose from {', '.join(EVAL_TASKS)}")
        if self.prompts < 0 or self.max_new_tokens < 1:
            raise UserError("eval.prompts must be >= 0 and eval.max_new_tokens >= 1")


@dataclass
class DistillConfig:
    mode: str = "task"
    lang: str = ""
    teacher: str = "gemma-3-270m"
    student: str = "self:6,head=corpus"
    cache_dir: str = ""  # where soft-target shards go; "" = the user cache directory
    dtype: str = "float32"  # teacher (and student) dtype: float32 | bfloat16 | auto
    data_root: str = ""  # the folder the data sources' relative paths are in (the corpora folder)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)

    def validate(self) -> None:
        if self.mode not in MODES:
            raise UserError(f"mode must be one of {', '.join(MODES)} (got {self.mode!r})")
        if not self.lang:
            raise UserError("a language is needed (--lang, e.g. --lang yor)")
        if self.dtype not in ("auto", "bfloat16", "float32"):
            raise UserError(f"dtype must be float32, bfloat16 or auto (got {self.dtype!r})")
        from babelspec.data.languages import get_language

        self.lang = get_language(self.lang).code
        from babelspec.drafters.students import StudentSpec

        StudentSpec.parse(self.student)
        from babelspec.data.sources import PARALLEL_FORMATS, parse_source

        d = self.data
        for name, text in (("data.train_source", d.train_source), ("data.shots_source", d.shots_source),
                           ("data.test_source", d.test_source),
                           *(("data.text_sources", t) for t in d.text_sources)):  # fmt: skip
            if not text:
                continue
            try:
                source = parse_source(text).resolve(self.data_root or None)
            except ValueError as err:
                raise UserError(f"{name}: {err}") from None
            if name != "data.text_sources" and source.format not in PARALLEL_FORMATS:
                raise UserError(f"{name} {text!r}: translation prompts need English-aligned text, one of "
                                 f"{', '.join(PARALLEL_FORMATS)}")
            if source.format != "bundled" and not Path(source.path).exists():
                raise UserError(f"{name} {text!r}: {source.path} does not exist; check --data-root")
        if d.shots_source and not (d.train_source or d.test_source):
            raise UserError("data.shots_source needs data.train_source or data.test_source (the sentences "
                             "the shots go with)")
        if d.mix and self.mode != "general":
            raise UserError("data.mix (a multilingual student) is for general mode")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def fill_sources(config: DistillConfig, root: str | os.PathLike, *, test: str, shots: str, train: str,
                 monolingual: Sequence[str]) -> DistillConfig:
    """``config`` reading the given sets (source strings under ``root``) wherever it names no
    source of its own: task mode translates ``train`` (when given) with ``shots`` as examples,
    general mode reads ``monolingual``, and the held-out translation prompts are ``test``'s."""
    d = config.data
    config.data_root = config.data_root or str(root)
    if config.mode == "task" and not d.train_source and train:
        d.train_source, d.shots_source = train, d.shots_source or shots
    if config.mode == "general" and not d.text_sources:
        d.text_sources = list(monolingual)
    if not d.test_source:
        d.test_source, d.shots_source = test, d.shots_source or shots
    return config


def with_real_data(config: DistillConfig, root: str | os.PathLike | None) -> DistillConfig:
    """``config`` reading the language's real sets (``babelspec.data.real``) under ``root``
    wherever it names no source of its own (``fill_sources``): the parallel train split with the
    dev split's shots, the monolingual sets, the test split held out. Unchanged where ``root``
    holds no real set."""
    from babelspec.data.real import real_data

    real = real_data(config.lang, root)
    if real is None:
        return config
    return fill_sources(config, root, test=real.test, shots=real.shots, train=real.train,
                        monolingual=real.monolingual)


def load_config(path: str | os.PathLike | None = None, **overrides: Any) -> DistillConfig:
    """A ``DistillConfig`` from a TOML file (sections [data], [train], [eval]) plus overrides
    (top-level keys, or ``section.key``); unknown keys are errors, not silently ignored."""
    raw: dict[str, Any] = {}
    if path is not None:
        path = Path(path)
        if not path.exists():
            raise UserError(f"config file {path} does not exist")
        try:
            raw = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as err:
            raise UserError(f"{path} is not valid TOML: {err}") from err
    for key, value in overrides.items():
        if value is None:
            continue
        section, _, name = key.rpartition(".")
        (raw.setdefault(section, {}) if section else raw)[name] = value
    sections = {"data": DataConfig, "train": TrainConfig, "eval": EvalConfig}
    top_known = {f.name for f in fields(DistillConfig)}
    unknown = set(raw) - top_known
    if unknown:
        raise UserError(f"unknown config keys {sorted(unknown)}; known: {sorted(top_known)}")
    kwargs: dict[str, Any] = {}
    for key, value in raw.items():
        if key in sections:
            cls = sections[key]
            known = {f.name for f in fields(cls)}
            bad = set(value) - known
            if bad:
                raise UserError(f"unknown [{key}] keys {sorted(bad)}; known: {sorted(known)}")
            kwargs[key] = cls(**value)
        else:
            kwargs[key] = value
    return DistillConfig(**kwargs)


def _cache_root(config: DistillConfig) -> Path:
    if config.cache_dir:
        return Path(config.cache_dir)
    from babelspec.models import cache_dir

    return cache_dir() / "distill"


def _teacher_dtype(teacher: Teacher) -> dict[str, str]:
    """The teacher's dtype in a cache key, when not fp32 (so fp32 caches keep their keys)."""
    dtype = next(teacher.model.parameters()).dtype
    return {} if dtype == torch.float32 else {"teacher_dtype": dtype_name(dtype)}


def _key(meta: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(meta, sort_keys=True).encode()).hexdigest()[:12]


@dataclass
class Teacher:
    spec: str
    model: torch.nn.Module
    tokenizer: Any

    @property
    def eos_ids(self) -> list[int]:
        eos = getattr(self.model.generation_config, "eos_token_id", None)
        ids = [eos] if isinstance(eos, int) else list(eos or [])
        if self.tokenizer.eos_token_id is not None and self.tokenizer.eos_token_id not in ids:
            ids.append(self.tokenizer.eos_token_id)
        return ids


def training_cache(config: DistillConfig, teacher: Teacher, progress: bool = True) -> SoftTargetShards:
    """Build (or reuse, or finish) the teacher's soft-target shards of the training examples."""
    from tqdm.auto import tqdm

    from babelspec.distill import data
    from babelspec.distill import teacher as tmod

    d = config.data
    dtype = np.dtype(d.logp_dtype)
    meta = {"kind": "train", "mode": config.mode, "lang": config.lang, "teacher": teacher.spec,
            "k": d.k, "logp_dtype": d.logp_dtype, "max_examples": d.max_examples,
            **_teacher_dtype(teacher)}
    if config.mode == "task":
        meta["max_new_tokens"] = d.max_new_tokens
        sources = (d.train_source, d.shots_source or d.train_source) if d.train_source else None
        if sources:
            meta["sources"] = list(sources)
        items = data.task_prompts("translation", config.lang, teacher.tokenizer, "train",
                                  d.max_examples, sources=sources, root=config.data_root)

        def make(start: int, stop: int) -> list[Example]:
            return tmod.task_examples(teacher.model, teacher.tokenizer, items[start:stop], d.k,
                                      d.max_new_tokens, dtype, teacher.eos_ids)
    else:
        meta["max_tokens"] = d.max_tokens
        bos = teacher.tokenizer.bos_token_id
        if d.text_sources:
            meta["sources"] = list(d.text_sources)
        texts = data.monolingual_token_ids(config.lang, teacher.tokenizer, sources=d.text_sources,
                                           root=config.data_root)
        windows = tmod.chunk_token_ids(texts, d.max_tokens, bos)
        if d.mix:
            meta["mix"] = list(d.mix)
            windows = _mixed_windows(config, teacher, windows)
        windows = windows[: d.max_examples]
        items = windows

        def make(start: int, stop: int) -> list[Example]:
            return tmod.text_examples(teacher.model, windows[start:stop], d.k, dtype)
    directory = _cache_root(config) / f"train-{config.mode}-{config.lang}-{_key(meta)}"
    bar = tqdm(total=len(items), desc=f"teacher top-{d.k} ({config.mode})", unit="ex",
               disable=not progress, dynamic_ncols=True)
    cache = build_soft_targets(directory, meta, len(items), make, d.shard_size, progress=bar.update)
    bar.close()
    return cache


def _mixed_windows(config: DistillConfig, teacher: Teacher, own: list[list[int]]) -> list[list[int]]:
    """The language's windows interleaved with each ``data.mix`` language's (its real sets
    under ``data_root`` where they exist, else its bundled train split), in equal shares."""
    from babelspec.data.real import real_data
    from babelspec.distill import data
    from babelspec.distill import teacher as tmod

    d, bos = config.data, teacher.tokenizer.bos_token_id
    per_language = [own]
    for lang in d.mix:
        real = real_data(lang, config.data_root or None)
        texts = data.monolingual_token_ids(lang, teacher.tokenizer, sources=real.monolingual if real else (),
                                           root=config.data_root)
        per_language.append(tmod.chunk_token_ids(texts, d.max_tokens, bos))
    share = -(-d.max_examples // len(per_language))
    rounds = [w[:share] for w in per_language]
    return [w for i in range(share) for w in (r[i] for r in rounds if i < len(r))]


def eval_sets(config: DistillConfig, teacher: Teacher, progress: bool = True
              ) -> dict[str, tuple[list[Example], list[Example]]]:
    """Per held-out task: (teacher top-k examples for the KD loss, the teacher's warped
    distributions for the expected acceptance), on responses the teacher *sampled* under the
    paper's decoding settings from test-split prompts -- the text a drafter faces."""
    from tqdm.auto import tqdm

    from babelspec.distill import data
    from babelspec.distill import teacher as tmod
    from babelspec.sampling import SamplingConfig

    e = config.eval
    sampling = SamplingConfig.paper(seed=e.seed)
    out = {}
    for task in e.tasks:
        if e.prompts == 0:
            continue
        meta = {"kind": "eval", "task": task, "lang": config.lang, "teacher": teacher.spec,
                "prompts": e.prompts, "max_new_tokens": e.max_new_tokens, "seed": e.seed,
                "k": config.data.k, "sampling": sampling.to_dict(), **_teacher_dtype(teacher)}
        sources = None
        if task == "translation" and config.data.test_source:
            sources = (config.data.test_source, config.data.shots_source or config.data.test_source)
            meta["sources"] = list(sources)
        items = data.task_prompts(task, config.lang, teacher.tokenizer, "test", e.prompts,
                                  seed=e.seed, sources=sources, root=config.data_root)
        root = _cache_root(config) / f"eval-{task}-{config.lang}-{_key(meta)}"
        caches = {"topk": root / "topk", "warped": root / "warped"}
        if all((d / "manifest.json").exists() and SoftTargetShards(d).complete for d in caches.values()):
            out[task] = (SoftTargetShards(caches["topk"]).load_all(), SoftTargetShards(caches["warped"]).load_all())
            continue
        topk, warped = [], []
        for i in tqdm(range(len(items)), desc=f"held-out {task}", unit="ex", disable=not progress):
            prompt = list(items[i].prompt_ids)
            dec = tmod.teacher_decode(teacher.model, prompt, sampling, e.max_new_tokens,
                                      teacher.eos_ids, seed=e.seed + i,
                                      stop_strings=items[i].stop_strings,
                                      tokenizer=teacher.tokenizer, k=config.data.k, warp=sampling)
            if not dec.tokens:
                continue
            ids = np.asarray(prompt + dec.tokens, dtype=np.int32)
            mask = np.zeros(ids.size, dtype=bool)
            mask[len(prompt):] = True
            topk.append(Example(ids, mask, dec.topk_ids, dec.topk_logp.astype(np.float32)))
            warped.append(Example(ids, mask, dec.warped_ids, dec.warped_probs))
        # Both caches come from the one pass over the sampled responses.
        for name, examples, values in (("topk", topk, "logp"), ("warped", warped, "prob")):
            cache = SoftTargetShards(caches[name], {**meta, "values": values})
            if examples:
                cache.write_shard(0, examples)
            cache.mark_complete(len(examples))
        out[task] = (topk, warped)
    return out


def evaluate(student, sets: dict[str, tuple[list[Example], list[Example]]],
             config: DistillConfig, pad_id: int = 0) -> dict[str, Any]:
    from babelspec.distill.evaluate import acceptance_on, kd_loss_on
    from babelspec.sampling import SamplingConfig

    started = time.perf_counter()
    result: dict[str, Any] = {}
    for task, (topk, warped) in sets.items():
        acc = acceptance_on(student, warped, SamplingConfig.paper(seed=config.eval.seed))
        result[task] = {"kd_loss": kd_loss_on(student, topk, config.train.loss,
                                              max_seq_len=4096, pad_id=pad_id), **acc}
    result["eval_seconds"] = time.perf_counter() - started
    return result


def split_dev(examples: list[Example], n_dev: int, seed: int) -> tuple[list[Example], list[Example]]:
    """(train, dev): ``n_dev`` examples drawn at random (fixed by ``seed``) held out from training
    for early stopping; at least one example stays for training."""
    n_dev = min(n_dev, len(examples) - 1)
    if n_dev <= 0:
        return list(examples), []
    held = set(np.random.default_rng([seed, 7]).choice(len(examples), size=n_dev, replace=False).tolist())
    return ([e for i, e in enumerate(examples) if i not in held],
            [e for i, e in enumerate(examples) if i in held])  # fmt: skip


def _claim_output(config: DistillConfig, out_dir: Path) -> None:
    """Write the run's configuration into ``out_dir``; refuse a folder holding a run with
    another one (only the training budget may change on resume)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    saved_config = out_dir / "distill_config.json"
    if latest_checkpoint(out_dir) is not None and saved_config.exists():
        before = json.loads(saved_config.read_text())
        now = json.loads(json.dumps(config.to_dict()))
        if {k: v for k, v in before.items() if k != "train"} != \
                {k: v for k, v in now.items() if k != "train"}:
            raise UserError(f"{out_dir} holds a run with another configuration; resume it with "
                             "the same settings or use a new output directory")
    write_json_atomic(saved_config, config.to_dict())


def _evaluation_before(out_dir: Path, student, sets, config: DistillConfig, pad_id: int) -> dict:
    """The student's evaluation before training, computed once per output folder."""
    before_path = out_dir / "eval_before.json"
    if before_path.exists():
        return json.loads(before_path.read_text())
    student.eval()
    before = evaluate(student, sets, config, pad_id)
    write_json_atomic(before_path, before)
    return before


def run_distill(config: DistillConfig, out_dir: str | os.PathLike, *, progress: bool = True,
                stop_after: int | None = None, teacher: Teacher | None = None) -> dict[str, Any]:
    """Distil ``config.student`` from ``config.teacher`` into ``out_dir`` (a loadable drafter).

    Returns the metadata written to ``out_dir/distilled.json``. Rerunning with the same
    ``out_dir`` resumes: caches are reused and training continues from its last checkpoint.
    """
    from babelspec.distill import data
    from babelspec.drafters.artifact import save_distilled
    from babelspec.drafters.students import StudentSpec, build_student

    config.validate()
    out_dir = Path(out_dir)
    _claim_output(config, out_dir)
    walls: dict[str, float] = {}
    started = time.perf_counter()
    if teacher is None:
        from babelspec.distill.teacher import load_causal_lm

        model, tokenizer = load_causal_lm(config.teacher, dtype=config.dtype)
        teacher = Teacher(config.teacher, model, tokenizer)
    walls["load_seconds"] = time.perf_counter() - started

    t0 = time.perf_counter()
    cache = training_cache(config, teacher, progress)
    examples = cache.load_all()
    walls["teacher_cache_seconds"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    sets = eval_sets(config, teacher, progress)
    walls["eval_set_seconds"] = time.perf_counter() - t0

    spec = StudentSpec.parse(config.student)
    kept = None
    if spec.kind == "self" and spec.head == "corpus":
        kept = torch.tensor(data.corpus_vocabulary(
            config.lang, teacher.tokenizer, [e.ids[e.mask] for e in examples]), dtype=torch.long)
    student = build_student(spec, teacher.model, kept_ids=kept)
    pad_id = teacher.tokenizer.pad_token_id or 0

    before = _evaluation_before(out_dir, student, sets, config, pad_id)

    def eval_fn(s):
        return evaluate(s, sets, config, pad_id)

    examples, dev = split_dev(examples, config.train.dev_examples, config.train.seed)
    state: TrainState = train(student, examples, config.train, out_dir, eval_fn=eval_fn, dev=dev,
                              pad_id=pad_id, stop_after=stop_after, progress=progress)
    walls["train_seconds"] = state.train_seconds
    walls["train_eval_seconds"] = state.eval_seconds
    if not state.stopped:  # planned interruption: no drafter written yet
        return {"interrupted_at_step": state.step, **walls}
    after = evaluate(student, sets, config, pad_id)
    meta = {
        "mode": config.mode, "lang": config.lang, "teacher": teacher.spec,
        "student_spec": config.student, "steps": state.step,
        "train_examples": len(examples), "train_response_tokens": int(sum(e.n_response
                                                                          for e in examples)),
        "losses": state.losses, "final_loss": state.losses[-1] if state.losses else None,
        # early stopping: why training ended, the step whose weights were kept, the learning curve
        "stopped": state.stopped, "best_step": state.best_step, "best_dev_loss": state.best_dev_loss,
        "dev_examples": len(dev), "curve": state.curve,
        "eval_before": before, "eval_after": after, "evals": state.evals,
        "resumed_from": state.resumed_from, "config": config.to_dict(),
        "wall_seconds": {**walls, "total_seconds_this_process": time.perf_counter() - started},
        "torch_threads": torch.get_num_threads(),
    }
    save_distilled(out_dir, student, teacher.model, meta,
                   tokenizer=teacher.tokenizer if spec.kind == "model" else None)
    return meta
