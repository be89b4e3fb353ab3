"""Held-out evaluation of a student: KD loss on the teacher's top-k, and expected acceptance.

Expected acceptance is the mean over held-out positions of sum_x min(p(x), q(x)) with p the
student's and q the teacher's distribution, both warped by the decoding settings (repetition
penalty over the actual sequence, top-k, top-p). It is the per-token acceptance probability of
speculative sampling (Leviathan et al. 2023), measured without running the loop.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from babelspec.distill.losses import expected_acceptance
from babelspec.distill.soft_targets import Example
from babelspec.distill.trainer import batch_loss, collate, fit_length
from babelspec.drafters.students import Student
from babelspec.sampling import SamplingConfig, logits_to_probs


@torch.inference_mode()
def kd_loss_on(student: Student, examples: Sequence[Example], kind: str = "ce",
               max_seq_len: int = 256, batch_size: int = 4, pad_id: int = 0) -> float:
    """Response-token-weighted mean KD loss of ``student`` on held-out examples."""
    total, weight = 0.0, 0
    for start in range(0, len(examples), batch_size):
        batch = collate(examples[start : start + batch_size], max_seq_len, pad_id)
        n = int(batch.rows.numel())
        if n:
            total += float(batch_loss(student, batch, kind)) * n
            weight += n
    return total / max(weight, 1)


@torch.inference_mode()
def full_vocab_logits(student: Student, ids: torch.Tensor) -> torch.Tensor:
    """Student logits [T, V_full] on one sequence (-inf outside a restricted head's tokens)."""
    device = next(student.parameters()).device
    ids = ids.to(device).view(1, -1)
    logits = student.logits(ids, torch.ones_like(ids))[0].float()
    if student.column_of is None:
        return logits
    full = logits.new_full((logits.shape[0], student.full_vocab_size), float("-inf"))
    full[:, student.model.kept_ids] = logits
    return full


@torch.inference_mode()
def acceptance_on(student: Student, targets: Sequence[Example], sampling: SamplingConfig,
                  max_seq_len: int = 4096) -> dict[str, float]:
    """Expected acceptance of ``student`` against the teacher's warped distributions
    (``targets``: examples whose top-k values are the teacher's probabilities)."""
    per_position: list[np.ndarray] = []
    per_example: list[float] = []
    for e in targets:
        e = fit_length(e, max_seq_len)
        ids = torch.from_numpy(e.ids.astype(np.int64))
        resp = np.flatnonzero(e.mask)
        if resp.size == 0:
            continue
        logits = full_vocab_logits(student, ids)[torch.from_numpy(resp - 1)]
        # Row i predicts token resp[i]; resp is contiguous from the response start.
        probs = logits_to_probs(logits.cpu(), sampling, sequence=ids,
                                first_position=int(resp[0]))
        acc = expected_acceptance(probs, torch.from_numpy(e.topk_ids[: resp.size]),
                                  torch.from_numpy(e.topk_values[: resp.size]))
        per_position.append(acc.numpy())
        per_example.append(float(acc.mean()))
    if not per_position:
        return {"expected_acceptance": float("nan"), "positions": 0}
    flat = np.concatenate(per_position)
    return {
        "expected_acceptance": float(flat.mean()),  # token-weighted
        "expected_acceptance_example_mean": float(np.mean(per_example)),
        "positions": int(flat.size),
    }
