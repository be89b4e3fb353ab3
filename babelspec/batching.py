"""Sequences that share the target's forwards: continuous batching on the lean forward.

On a CPU a verification block of 2-16 rows costs about one decode step, because a forward is
bound by reading the weights; sequences decoded at the same time can therefore share each
forward. ``SharedForward`` hands out *slots*: ``Target`` objects over the same model, each with
its own KV cache, whose forwards go to one batcher. A slot's forward waits until every active
slot has a block pending (or ``max_wait`` has passed), then one thread runs them all through
``LeanGemma3.forward_many``: every product over all rows at once, attention per sequence on its
own cache. Sequences join and leave between steps (``SharedForward.active``), so a server can
start a request while others are half done.

Each sequence stays exactly what it would be alone: a block's rows round as in their own
forward where the products are row-invariant, and ``LeanGemma3.batch_rows`` measures up to how
many rows they are on this machine, for this dtype; a batch never holds more rows than that,
and blocks longer than ``MERGE_MAX_TOKENS`` (prefills) run alone. The engine, drafters and
sampling are untouched: a slot is an ordinary ``Target`` to them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from babelspec.lean import MERGE_MAX_TOKENS, Block, LeanCache, LeanGemma3
from babelspec.target import Target

MAX_BATCH_ROWS = 32  # rows per shared forward at most (2-16-row blocks of a few sequences)
MAX_WAIT_SECONDS = 0.005  # how long a pending block waits for the other active sequences


@dataclass(eq=False)  # compared by identity (its tensors have no truth value)
class _Pending:
    block: Block
    logits: torch.Tensor | None = None
    error: BaseException | None = None
    done: bool = False


@dataclass
class BatchStats:
    forwards: int = 0  # shared forwards run
    blocks: int = 0  # blocks they carried
    sizes: dict[int, int] = field(default_factory=dict)  # blocks per forward -> how many forwards


class SharedForward:
    """The one forward that ``slots`` share. ``max_rows`` caps a batch's rows (and is lowered to
    what the machine's products keep row-invariant, ``LeanGemma3.batch_rows``); ``max_wait``
    is how long a block waits for the other active sequences' blocks."""

    def __init__(self, target: Target, max_rows: int = MAX_BATCH_ROWS, max_wait: float = MAX_WAIT_SECONDS) -> None:
        if not isinstance(target.lean, LeanGemma3):
            raise ValueError("batching needs the lean forward (a Gemma-3 text model under eager attention, "
                             "without BABELSPEC_FORWARD=hf); serve this model one request at a time")  # fmt: skip
        if max_rows < 1:
            raise ValueError(f"max_rows must be at least 1, got {max_rows}")
        self.target, self.lean = target, target.lean
        self.max_rows = self.lean.batch_rows(max_rows) if max_rows > 1 else 1
        self.max_wait = max_wait
        self.stats = BatchStats()
        self._cond = threading.Condition()
        self._pending: list[_Pending] = []
        self._busy = False
        self._active = 0

    def slots(self, n: int) -> list[Target]:
        """``n`` targets over the shared model, each with its own cache, forwarding through this."""
        t = self.target
        return [Target(t.model, t.tokenizer, t.device, lean=_Slot(self)) for _ in range(n)]

    @contextmanager
    def active(self) -> Iterator[None]:
        """A sequence is being generated: the batcher waits for its blocks until it leaves."""
        with self._cond:
            self._active += 1
        try:
            yield
        finally:
            with self._cond:
                self._active -= 1
                self._cond.notify_all()

    def forward(self, block: Block) -> torch.Tensor:
        """``block``'s logits, computed in one forward with the other active sequences' blocks.
        Whichever waiting thread finds the batch complete (or its wait over) runs it, outside
        the lock, so the next batch gathers meanwhile."""
        me = _Pending(block)
        with self._cond:
            self._pending.append(me)
            self._cond.notify_all()
            deadline = time.monotonic() + self.max_wait
            while not me.done:
                if self._pending and not self._busy and (
                        len(self._pending) >= self._active or time.monotonic() >= deadline):  # fmt: skip
                    batch = self._take()
                    self._busy = True
                    self._cond.release()
                    try:
                        self._run(batch)
                    finally:
                        self._cond.acquire()
                        self._busy = False
                        self._cond.notify_all()
                    continue
                timeout = deadline - time.monotonic()
                self._cond.wait(timeout if timeout > 0 and not self._busy else 0.05)
        if me.error is not None:
            raise me.error
        return me.logits

    def _take(self) -> list[_Pending]:
        """The pending blocks of the next forward, in arrival order: a long block (a prefill)
        alone, else short blocks while their rows fit ``max_rows``."""
        first = self._pending[0]
        batch, rows = [first], first.block.ids.shape[1]
        if rows <= MERGE_MAX_TOKENS:
            for p in self._pending[1:]:
                n = p.block.ids.shape[1]
                if n <= MERGE_MAX_TOKENS and rows + n <= self.max_rows:
                    batch.append(p)
                    rows += n
        for p in batch:
            self._pending.remove(p)
        return batch

    def _run(self, batch: list[_Pending]) -> None:
        try:
            outs = self.lean.forward_many([p.block for p in batch])
        except BaseException as err:  # noqa: BLE001 - each waiting sequence raises it
            for p in batch:
                p.error = err
        else:
            for p, logits in zip(batch, outs):
                p.logits = logits
        with self._cond:
            for p in batch:
                p.done = True
            self.stats.forwards += 1
            self.stats.blocks += len(batch)
            self.stats.sizes[len(batch)] = self.stats.sizes.get(len(batch), 0) + 1
            self._cond.notify_all()


class _Slot:
    """What a slot's ``CausalLM`` calls as its lean forward: the shared one, through the batcher."""

    def __init__(self, shared: SharedForward) -> None:
        self.shared = shared

    def new_cache(self) -> LeanCache:
        return self.shared.lean.new_cache()

    def __call__(self, ids: torch.Tensor, cache: LeanCache, logits_to_keep: int = 0,
                 parents: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
        return self.shared.forward(Block(ids, cache, logits_to_keep, parents))
