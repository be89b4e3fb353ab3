"""Sequences that share the target's forwards: continuous batching on one engine thread.

On a CPU a verification block of 2-16 rows costs little more than a decode step, because a
forward is bound by reading the weights; sequences decoded at the same time can therefore
share each forward. An ``EngineLoop`` runs generations (any callable given a ``Target``: a
call of ``engine.generate``, unchanged) as greenlets on the one thread that calls ``run``.
Each gets a *slot*: a ``Target`` over the shared model with its own KV cache, whose forward
suspends the generation and hands its block to the loop. When every running generation is
suspended at a forward (or finished), the loop runs their blocks in one
``LeanGemma3.forward_many`` (every product over all rows, attention per sequence on its own
cache) and resumes each with its logits. Generations join and leave between steps, so a server
starts a request while others are half done, and no step waits on a timer.

One thread, not one per sequence: GNU OpenMP, which torch's CPU kernels use, throttles its
threads' spin-wait once more threads run parallel regions than there are cores, and every
small op then pays a futex wake-up. Measured on this project's 2-core Xeon: a decode step of
the default model takes 32 ms on the thread that loaded it and 47 ms on a second thread
(``python -m babelspec bench serve`` shows it end to end). So the loop is best run on the thread
that loaded the model (``babelspec serve`` runs it on the main thread and HTTP on another).

Each sequence stays exactly what it would be alone: a block's rows round as in their own
forward where the products are row-invariant, and ``LeanGemma3.batch_rows`` measures up to how
many rows they are on this machine, for this dtype; a batch never holds more rows than that,
and blocks longer than the forward's ``merge_max_tokens`` (prefills) run alone. The engine, drafters and
sampling are untouched: a slot is an ordinary ``Target`` to them.
"""

from __future__ import annotations

import logging
import threading
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from greenlet import greenlet

from babelspec.errors import UserError
from babelspec.forward.base import Forward
from babelspec.forward.cache import LeanCache
from babelspec.forward.gemma3 import Block
from babelspec.target import Target

log = logging.getLogger("babelspec.batching")
MAX_BATCH_ROWS = 32  # rows per shared forward at most (2-16-row blocks of a few sequences)
IDLE_POLL_SECONDS = 0.2  # how often an idle loop checks its stop condition

Task = Callable[[int, Target], None]  # run on a slot: (slot index, slot target)


@dataclass
class BatchStats:
    forwards: int = 0  # shared forwards run
    blocks: int = 0  # blocks they carried
    sizes: dict[int, int] = field(default_factory=dict)  # blocks per forward -> how many forwards


class EngineLoop:
    """Up to ``batch`` generations at once, on the thread that calls ``run``, sharing each
    target forward. ``batch=1`` (or a target whose forward cannot batch: ``ValueError``) runs
    them one after another on the plain target. ``max_rows`` caps a shared forward's rows (and
    is lowered to what the machine's products keep row-invariant, ``LeanGemma3.batch_rows``)."""

    def __init__(self, target: Target, batch: int = 1, max_rows: int = MAX_BATCH_ROWS) -> None:
        if batch < 1:
            raise UserError(f"batch must be at least 1, got {batch}")
        if max_rows < 1:
            raise UserError(f"max_rows must be at least 1, got {max_rows}")
        self.target, self.shared = target, None
        self.max_rows = 1
        if batch > 1:
            if not target.impl.batches:
                raise UserError("batching needs the lean forward (a Gemma-3 text model under eager attention, "
                                 "not forward='hf'); serve this model one request at a time")  # fmt: skip
            self.shared = target.impl
            self.max_rows = self.shared.batch_rows(max_rows) if max_rows > 1 else 1
            self.slots = [Target(target.model, target.tokenizer, target.device, impl=_Slot(self)) for _ in range(batch)]
        else:
            self.slots = [target]
        self.batch = batch
        self.stats = BatchStats()
        self._cond = threading.Condition()
        self._tasks: deque[Task] = deque()
        self._closing = False
        self._hub: greenlet | None = None  # the loop's own greenlet, while it runs
        self._free = list(range(batch))[::-1]
        self._running: dict[greenlet, int] = {}  # generation -> its slot
        self._pending: dict[greenlet, Block] = {}  # suspended at a forward, oldest first

    # --- from any thread ---
    def submit(self, task: Task) -> None:
        """Run ``task(slot_index, slot_target)`` when a slot is free (in submission order)."""
        with self._cond:
            if self._closing:
                raise RuntimeError("the engine loop is closed")
            self._tasks.append(task)
            self._cond.notify_all()

    def close(self) -> None:
        """Stop ``run``: tasks not yet started are dropped; running ones are resumed until they
        end (a generation whose ``on_block`` sees the server closing ends at its next step)."""
        with self._cond:
            self._closing = True
            self._tasks.clear()
            self._cond.notify_all()

    @property
    def closing(self) -> bool:
        return self._closing

    @property
    def running(self) -> int:
        return len(self._running)

    # --- on the loop's thread ---
    def run(self, until_idle: bool = False, stop: Callable[[], bool] | None = None) -> None:
        """Run generations on this thread: until ``close`` (and the running ones have ended),
        until nothing is left to run (``until_idle``), or until ``stop()`` is true while idle."""
        self._hub = greenlet.getcurrent()
        # Inference mode around everything: generations switch in and out of each other's
        # ``with torch.inference_mode()`` blocks, which restore the state they found on exit;
        # the state each finds is then the same, and interleaving them changes nothing.
        try:
            with torch.inference_mode():
                self._loop(until_idle, stop)
        finally:
            self._hub = None

    def _loop(self, until_idle: bool, stop: Callable[[], bool] | None) -> None:
        while True:
            self._admit()
            if self._pending:
                self._step()
                continue
            with self._cond:
                if self._tasks and self._free:
                    continue
                if self._closing or until_idle or (stop is not None and stop()):
                    return
                self._cond.wait(IDLE_POLL_SECONDS)

    def _admit(self) -> None:
        while True:
            with self._cond:
                if not self._tasks or not self._free or self._closing:
                    return
                task, index = self._tasks.popleft(), self._free.pop()
            g = greenlet(_guarded(task), parent=self._hub)
            self._running[g] = index
            self._resume(g, index, self.slots[index])

    def _resume(self, g: greenlet, *args, error: BaseException | None = None) -> None:
        """Run ``g`` until its next forward (kept pending) or its end (its slot freed)."""
        block = g.throw(error) if error is not None else g.switch(*args)
        if g.dead:
            with self._cond:
                self._free.append(self._running.pop(g))
        else:
            self._pending[g] = block

    def _take(self) -> list[tuple[greenlet, Block]]:
        """The pending blocks of the next forward, oldest first: a long block (a prefill) alone,
        else short blocks while their rows fit ``max_rows``."""
        items = iter(self._pending.items())
        first = next(items)
        batch, rows = [first], first[1].ids.shape[1]
        limit = self.shared.options.merge_max_tokens
        if rows <= limit:
            for g, block in items:
                n = block.ids.shape[1]
                if n <= limit and rows + n <= self.max_rows:
                    batch.append((g, block))
                    rows += n
        for g, _ in batch:
            del self._pending[g]
        return batch

    def _step(self) -> None:
        batch = self._take()
        try:
            outs = self.shared.forward_many([block for _, block in batch])
        except Exception as err:  # noqa: BLE001 - raised at the forward of the generations it is theirs
            if len(batch) == 1:
                self._resume(batch[0][0], error=err)
                return
            for g, block in batch:  # each block alone: one sequence's fault fails no other
                try:
                    logits = self.shared.forward(block.ids, block.cache, block.logits_to_keep, block.parents, head=block.head)
                except Exception as own:  # noqa: BLE001
                    self._resume(g, error=own)
                else:
                    self._resume(g, logits)
            return
        self.stats.forwards += 1
        self.stats.blocks += len(batch)
        self.stats.sizes[len(batch)] = self.stats.sizes.get(len(batch), 0) + 1
        for (g, _), logits in zip(batch, outs):
            self._resume(g, logits)


def _guarded(task: Task) -> Task:
    """``task``, logging what escapes it (a generation's errors are its own to report: one
    escaping must not stop the loop or the other generations)."""

    def body(index: int, target: Target) -> None:
        try:
            task(index, target)
        except Exception:  # noqa: BLE001
            log.error("a generation failed:\n%s", traceback.format_exc())

    return body


class _Slot(Forward):
    """What a slot's ``CausalLM`` calls as its forward: the shared one, through the loop
    (directly where called outside the loop's generations: building a drafter, say)."""

    kind = "lean"
    batches = False  # a slot is one sequence of the loop's batch
    takes_target_rows = True
    prefills_without_logits = True

    def __init__(self, loop: EngineLoop) -> None:
        self.loop = loop

    def __getattr__(self, name: str) -> Any:  # the shared forward's settings (glue, dtypes) and helpers
        if name == "loop":
            raise AttributeError(name)
        return getattr(self.loop.shared, name)

    # ``Forward``'s own defaults, which ``__getattr__`` never reaches: the shared forward's, so a
    # slot's plan says what its rows are (a slot's block rounds as the sequence alone: the module
    # docstring), and a slot keeps a certified head's contract
    @property
    def exact(self) -> bool:  # type: ignore[override]
        return self.loop.shared.exact

    @property
    def not_exact_reason(self) -> str:
        return self.loop.shared.not_exact_reason

    @property
    def certifies_head(self) -> bool:  # type: ignore[override]
        return self.loop.shared.certifies_head

    def new_cache(self) -> LeanCache:
        return self.loop.shared.new_cache()

    def forward(self, ids: torch.Tensor, cache: LeanCache, logits_to_keep: int = 0,
                parents: torch.Tensor | None = None, past: int | None = None, head: Any = None) -> torch.Tensor:  # fmt: skip
        hub = self.loop._hub
        if hub is None or greenlet.getcurrent().parent is not hub:
            return self.loop.shared.forward(ids, cache, logits_to_keep, parents, head=head)
        return hub.switch(Block(ids, cache, logits_to_keep, parents, head))

    def tree_capacity(self, cache: LeanCache) -> float:
        return self.loop.shared.tree_capacity(cache)

    def keep_path(self, cache: LeanCache, past: int, indices: torch.Tensor) -> None:
        self.loop.shared.keep_path(cache, past, indices)

    def cache_like(self, layer: Any) -> Any:
        return self.loop.shared.cache_like(layer)
