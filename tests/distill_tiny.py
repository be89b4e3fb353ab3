"""Tiny teacher/student set-ups for the distillation tests, and a training run that can be
started as a subprocess (``python distill_tiny.py OUT_DIR [--slow]``) so a test can kill it."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))

from tiny import tiny_gemma3  # noqa: E402

from babelspec.distill.soft_targets import Example  # noqa: E402
from babelspec.distill.teacher import text_examples  # noqa: E402

VOCAB = 64


def teacher_and_examples(n: int = 24, length: int = 16, seed: int = 0):
    """A tiny Gemma-3 teacher and examples of its top-k on sequences it sampled itself."""
    teacher = tiny_gemma3(vocab=VOCAB, seed=seed, layers=3)
    g = torch.Generator().manual_seed(seed)
    seqs = []
    with torch.no_grad():
        for _ in range(n):
            ids = [int(torch.randint(0, VOCAB, (1,), generator=g))]
            for _ in range(length - 1):
                p = torch.softmax(teacher(torch.tensor([ids])).logits[0, -1], -1)
                ids.append(int(torch.multinomial(p, 1, generator=g)))
            seqs.append(ids)
    return teacher, text_examples(teacher, seqs, k=8, logp_dtype=np.float32), seqs


class SlowExamples(Sequence):
    """Examples that take a while to fetch, so that a kill lands in the middle of a run."""

    def __init__(self, examples: list[Example], seconds: float) -> None:
        self.examples, self.seconds = examples, seconds

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, i):
        time.sleep(self.seconds)
        return self.examples[i]


def run(out_dir: str, slow: bool) -> None:
    from babelspec.distill.trainer import TrainConfig, train
    from babelspec.drafters.students import StudentSpec, build_student

    torch.set_num_threads(1)
    teacher, examples, _ = teacher_and_examples()
    student = build_student(StudentSpec.parse("self:1"), teacher)
    # A dev split and an evaluation every 2 steps: the learning curve and the best weights are
    # part of what a resumed run must reproduce (patience high enough to train every step).
    config = TrainConfig(steps=10, batch_size=2, grad_accum=2, lr=5e-3, warmup_ratio=0.2,
                         checkpoint_every=2, eval_every=2, dev_examples=4, patience=100)
    train_set, dev = examples[:-4], examples[-4:]
    data = SlowExamples(train_set, 0.05) if slow else train_set
    state = train(student, data, config, out_dir, dev=dev, progress=False)
    print(f"done step={state.step} resumed_from={state.resumed_from}", flush=True)


if __name__ == "__main__":
    run(sys.argv[1], "--slow" in sys.argv)
