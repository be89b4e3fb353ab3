"""The distillation training loop: AdamW, cosine schedule with warmup, gradient accumulation,
atomic checkpoints and exact resume.

The data order is a pure function of (seed, step): micro-batch j of step s takes the next
``batch_size`` examples of a stream of per-epoch permutations. A run resumed from a checkpoint
therefore sees exactly the batches an uninterrupted run would have seen, and ends at the same
step count with the same weights.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save, save_file

from babelspec.distill.losses import LOSS_KINDS, topk_kd_loss
from babelspec.distill.soft_targets import Example
from babelspec.drafters.students import Student
from babelspec.errors import UserError
from babelspec.fileio import write_bytes_atomic, write_json_atomic


@dataclass
class TrainConfig:
    """Defaults: the CPU recipe (babelspec/profiles/distill/cpu.toml); babelspec/profiles/distill/paper.toml: the paper's."""

    steps: int = 2000  # optimizer steps at most (early stopping or the budget usually ends sooner)
    batch_size: int = 4  # examples per micro-batch
    grad_accum: int = 1  # micro-batches per optimizer step
    lr: float = 3e-4  # peak learning rate (AdamW)
    warmup_ratio: float = 0.01  # fraction of steps of linear warmup before the cosine decay
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0  # gradient clipping; 0 turns it off
    loss: str = "ce"  # "ce" (the paper's soft cross-entropy on top-k) or "kl" (renormalised)
    max_seq_len: int = 192  # examples are truncated to this many tokens
    checkpoint_every: int = 20  # steps between checkpoints (the last step always gets one)
    eval_every: int = 20  # steps between evaluations (dev loss, held-out eval); 0 = only before and after
    keep_checkpoints: int = 1
    seed: int = 0
    # Early stopping: training examples held out as the dev split, and how many evaluations in a
    # row may pass without a better dev loss before training stops (0 = off: train every step).
    # The best checkpoint by dev loss is what the run keeps.
    dev_examples: int = 16
    patience: int = 4
    min_delta: float = 0.0  # a dev loss must beat the best by more than this to count
    budget_seconds: float = 100.0  # stop once training (evaluations included) took this long; 0 = none

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "grad_accum", "max_seq_len", "checkpoint_every",
                     "keep_checkpoints"):
            if getattr(self, name) < 1:
                raise UserError(f"train.{name} must be >= 1 (got {getattr(self, name)})")
        for name in ("eval_every", "dev_examples", "patience", "min_delta", "budget_seconds"):
            if getattr(self, name) < 0:
                raise UserError(f"train.{name} must be >= 0 (got {getattr(self, name)})")
        if self.patience and not (self.eval_every and self.dev_examples):
            raise UserError("train.patience needs train.eval_every and train.dev_examples (the dev split "
                             "early stopping watches)")
        if self.lr <= 0:
            raise UserError(f"train.lr must be > 0 (got {self.lr})")
        if not 0.0 <= self.warmup_ratio < 1.0:
            raise UserError(f"train.warmup_ratio must be in [0, 1) (got {self.warmup_ratio})")
        if self.loss not in LOSS_KINDS:
            raise UserError(f"train.loss must be one of {', '.join(LOSS_KINDS)} (got {self.loss!r})")

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TrainConfig:
        known = {f.name for f in fields(cls)}
        unknown = set(values) - known
        if unknown:
            raise UserError(f"unknown [train] keys {sorted(unknown)}; known: {sorted(known)}")
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class TrainState:
    step: int = 0
    losses: list[float] = field(default_factory=list)  # mean micro-batch loss of each step
    evals: list[dict[str, Any]] = field(default_factory=list)
    train_seconds: float = 0.0  # wall time spent in optimizer steps, summed over resumes
    resumed_from: list[int] = field(default_factory=list)
    # The learning curve: at step 0 and every eval_every steps, the mean training loss since
    # the previous point, the dev loss and the held-out evaluation (KD loss, expected α).
    curve: list[dict[str, Any]] = field(default_factory=list)
    best_step: int = -1  # the step whose weights are kept (-1: none judged yet)
    best_dev_loss: float | None = None
    evals_without_gain: int = 0
    eval_seconds: float = 0.0  # wall time of the evaluations, summed over resumes
    stopped: str = ""  # "steps" | "patience" | "budget" once training is over


@dataclass
class Batch:
    input_ids: torch.Tensor  # [B, T]
    attention_mask: torch.Tensor  # [B, T]
    rows: torch.Tensor  # [N] flat index b * T + t of the positions that predict response tokens
    topk_ids: torch.Tensor  # [N, k]
    topk_logp: torch.Tensor  # [N, k]


def fit_length(e: Example, max_seq_len: int) -> Example:
    """Cut an example to ``max_seq_len`` tokens from the left, keeping its first token (BOS)
    and its response: long few-shot prompts lose their oldest context, never the targets."""
    n = e.ids.size
    if n <= max_seq_len:
        return e
    cut = n - max_seq_len + 1  # tokens 1 .. cut-1 are dropped
    keep = np.concatenate([[0], np.arange(cut, n)])
    rows_dropped = int(e.mask[1:cut].sum())  # response rows of dropped tokens (before the tail)
    mask = e.mask[keep].copy()
    mask[0] = False
    return Example(ids=e.ids[keep], mask=mask, topk_ids=e.topk_ids[rows_dropped:],
                   topk_values=e.topk_values[rows_dropped:])


def collate(examples: Sequence[Example], max_seq_len: int, pad_id: int = 0) -> Batch:
    """Right-pad a micro-batch; position t - 1 of a response token t carries its top-k row."""
    examples = [fit_length(e, max_seq_len) for e in examples]
    width = max(e.ids.size for e in examples)
    ids = np.full((len(examples), width), pad_id, dtype=np.int64)
    attn = np.zeros((len(examples), width), dtype=np.int64)
    rows, topk_ids, topk_logp = [], [], []
    for b, e in enumerate(examples):
        n = e.ids.size
        ids[b, :n] = e.ids
        attn[b, :n] = 1
        resp = np.flatnonzero(e.mask)  # response token positions, in order
        rows.append(b * width + resp - 1)
        topk_ids.append(e.topk_ids)
        topk_logp.append(e.topk_values)
    return Batch(
        input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(attn),
        rows=torch.from_numpy(np.concatenate(rows)).long(),
        topk_ids=torch.from_numpy(np.concatenate(topk_ids).astype(np.int64)),
        topk_logp=torch.from_numpy(np.concatenate(topk_logp).astype(np.float32)),
    )


def batch_loss(student: Student, batch: Batch, kind: str) -> torch.Tensor:
    device = next(student.parameters()).device
    logits = student.logits(batch.input_ids.to(device), batch.attention_mask.to(device))
    picked = logits.reshape(-1, logits.shape[-1])[batch.rows.to(device)]
    cols, valid = student.columns(batch.topk_ids.to(device))
    return topk_kd_loss(picked, cols, batch.topk_logp.to(device), kind=kind, valid=valid)


def example_order(n_examples: int, seed: int, start: int, count: int) -> np.ndarray:
    """Positions ``start .. start+count`` of the endless stream of per-epoch permutations."""
    idx = np.arange(start, start + count)
    epochs = idx // n_examples
    out = np.empty(count, dtype=np.int64)
    for epoch in np.unique(epochs):
        perm = np.random.default_rng([seed, int(epoch)]).permutation(n_examples)
        sel = epochs == epoch
        out[sel] = perm[idx[sel] % n_examples]
    return out


# --- checkpoints -------------------------------------------------------------------------

def _trainable(student: Student) -> dict[str, torch.nn.Parameter]:
    return {n: p for n, p in student.named_parameters() if p.requires_grad}


def latest_checkpoint(out_dir: Path) -> Path | None:
    pointer = out_dir / "checkpoints" / "latest.json"
    if not pointer.exists():
        return None
    path = out_dir / "checkpoints" / json.loads(pointer.read_text())["name"]
    return path if path.exists() else None


def save_checkpoint(out_dir: Path, student: Student, optimizer, scheduler, state: TrainState,
                    config: TrainConfig) -> Path:
    """Write a checkpoint into a temporary directory, fsync it, rename it into place, then move
    the ``latest`` pointer: a kill at any point leaves the previous checkpoint usable."""
    root = out_dir / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    name = f"step-{state.step:07d}"
    tmp = root / f".{name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    save_file({n: p.detach().contiguous() for n, p in _trainable(student).items()},
              str(tmp / "student.safetensors"))
    torch.save({"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                "torch_rng": torch.get_rng_state()}, tmp / "optimizer.pt")
    (tmp / "state.json").write_text(json.dumps({"state": asdict(state), "config": config.to_dict()}))
    for f in tmp.iterdir():
        with open(f, "rb") as fh:
            os.fsync(fh.fileno())
    final = root / name
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    write_json_atomic(root / "latest.json", {"name": name, "step": state.step})
    existing = sorted(p for p in root.glob("step-*") if p.is_dir())
    for old in existing[: -config.keep_checkpoints]:
        if old != final:
            shutil.rmtree(old, ignore_errors=True)
    return final


def load_checkpoint(path: Path, student: Student, optimizer, scheduler) -> TrainState:
    params = _trainable(student)
    saved = load_file(str(path / "student.safetensors"))
    if set(saved) != set(params):
        raise UserError(f"checkpoint {path} does not match this student (different tensors); "
                         "use a new output directory or the same student spec")
    with torch.no_grad():
        for name, tensor in saved.items():
            params[name].copy_(tensor)
    extra = torch.load(path / "optimizer.pt", weights_only=False)
    optimizer.load_state_dict(extra["optimizer"])
    scheduler.load_state_dict(extra["scheduler"])
    torch.set_rng_state(extra["torch_rng"])
    return TrainState(**json.loads((path / "state.json").read_text())["state"])


# --- the loop ----------------------------------------------------------------------------

EvalFn = Callable[[Student], dict[str, Any]]
BEST = "best.safetensors"


def dev_loss(student: Student, dev: Sequence[Example], config: TrainConfig, pad_id: int = 0) -> float:
    """Mean KD loss of ``student`` over the dev examples (micro-batches of ``batch_size``)."""
    total, n = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(dev), config.batch_size):
            chunk = dev[i : i + config.batch_size]
            total += float(batch_loss(student, collate(chunk, config.max_seq_len, pad_id), config.loss)) * len(chunk)
            n += len(chunk)
    return total / max(n, 1)


def _save_best(out_dir: Path, student: Student) -> None:
    tensors = {n: p.detach().contiguous() for n, p in _trainable(student).items()}
    write_bytes_atomic(out_dir / "checkpoints" / BEST, save(tensors))


def _load_best(out_dir: Path, student: Student) -> bool:
    path = out_dir / "checkpoints" / BEST
    if not path.exists():
        return False
    params = _trainable(student)
    with torch.no_grad():
        for name, tensor in load_file(str(path)).items():
            params[name].copy_(tensor)
    return True


def _evaluate(student: Student, state: TrainState, config: TrainConfig, out_dir: Path,
              dev: Sequence[Example], eval_fn: EvalFn | None, pad_id: int) -> None:
    """One point of the learning curve; with a dev split, keep the best weights and count the
    evaluations without a gain."""
    started = time.perf_counter()
    student.eval()
    since = state.curve[-1]["step"] if state.curve else 0
    recent = state.losses[since:]
    point: dict[str, Any] = {"step": state.step, "train_loss": float(np.mean(recent)) if recent else None}
    if dev:
        point["dev_loss"] = dev_loss(student, dev, config, pad_id)
        if state.best_dev_loss is None or point["dev_loss"] < state.best_dev_loss - config.min_delta:
            state.best_dev_loss, state.best_step, state.evals_without_gain = point["dev_loss"], state.step, 0
            _save_best(out_dir, student)
        else:
            state.evals_without_gain += 1
    if eval_fn is not None:
        point["held_out"] = eval_fn(student)
        state.evals.append({"step": state.step, **point["held_out"]})
    state.curve.append(point)
    student.train()
    state.eval_seconds += time.perf_counter() - started


def _accumulate_gradients(student: Student, examples: Sequence[Example], order, config: TrainConfig,
                          pad_id: int) -> float:  # fmt: skip
    """One step's micro-batches (``order``: its examples), gradients summed; the step's loss."""
    total = 0.0
    for j in range(config.grad_accum):
        chosen = order[j * config.batch_size : (j + 1) * config.batch_size]
        batch = collate([examples[i] for i in chosen], config.max_seq_len, pad_id)
        loss = batch_loss(student, batch, config.loss) / config.grad_accum
        loss.backward()
        total += float(loss.detach())
    return total


def _why_stop(state: TrainState, config: TrainConfig) -> str:
    """Why training ends after this step ("" to go on): patience, budget or the last step."""
    if config.patience and state.evals_without_gain >= config.patience:
        return "patience"
    if config.budget_seconds and state.train_seconds + state.eval_seconds >= config.budget_seconds:
        return "budget"
    if state.step == config.steps:
        return "steps"
    return ""


def train(
    student: Student,
    examples: Sequence[Example],
    config: TrainConfig,
    out_dir: str | os.PathLike,
    *,
    eval_fn: EvalFn | None = None,
    dev: Sequence[Example] = (),
    pad_id: int = 0,
    stop_after: int | None = None,
    progress: bool = True,
) -> TrainState:
    """Train ``student`` on ``examples`` until ``config.steps``, resuming from the latest
    checkpoint in ``out_dir`` if there is one. ``stop_after`` ends the call after that many
    steps in total (a planned interruption, as a kill would be; the checkpoint is written).

    With ``dev`` examples, every ``eval_every`` steps add a point to the learning curve and
    training stops early after ``patience`` points without a better dev loss, or once
    ``budget_seconds`` are spent; the student then holds the best weights by dev loss.
    ``state.stopped`` says why training ended ("" while it may go on)."""
    from tqdm.auto import tqdm
    from transformers import get_cosine_schedule_with_warmup

    if not examples:
        raise UserError("no training examples (the cache is empty); check the data and mode")
    out_dir = Path(out_dir)
    params = list(_trainable(student).values())
    if not params:
        raise UserError("the student has no trainable parameters")
    optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
    warmup = round(config.warmup_ratio * config.steps)
    scheduler = get_cosine_schedule_with_warmup(optimizer, warmup, config.steps)
    torch.manual_seed(config.seed)
    state = TrainState()
    ckpt = latest_checkpoint(out_dir)
    if ckpt is not None:
        state = load_checkpoint(ckpt, student, optimizer, scheduler)
        state.resumed_from.append(state.step)
    evaluating = bool(config.eval_every) and (bool(dev) or eval_fn is not None)
    if evaluating and not state.curve and not state.stopped:
        _evaluate(student, state, config, out_dir, dev, eval_fn, pad_id)  # the curve's step 0
    student.train()
    last = min(config.steps, stop_after) if stop_after is not None else config.steps
    bar = tqdm(total=config.steps, initial=state.step, desc="distill", unit="step",
               disable=not progress, dynamic_ncols=True)
    micro_examples = config.batch_size * config.grad_accum
    while state.step < last and not state.stopped:
        started = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        order = example_order(len(examples), config.seed, state.step * micro_examples,
                              micro_examples)
        total = _accumulate_gradients(student, examples, order, config, pad_id)
        if config.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm)
        optimizer.step()
        scheduler.step()
        state.step += 1
        state.losses.append(total)
        state.train_seconds += time.perf_counter() - started
        bar.update(1)
        bar.set_postfix(loss=f"{total:.3f}", lr=f"{scheduler.get_last_lr()[0]:.2e}")
        if evaluating and (state.step % config.eval_every == 0 or state.step == config.steps):
            _evaluate(student, state, config, out_dir, dev, eval_fn, pad_id)
        state.stopped = _why_stop(state, config)
        if state.step % config.checkpoint_every == 0 or state.step == last or state.stopped:
            save_checkpoint(out_dir, student, optimizer, scheduler, state, config)
    bar.close()
    if state.stopped and dev:
        _load_best(out_dir, student)  # the weights of the best dev loss, not the last step's
    student.eval()
    return state
