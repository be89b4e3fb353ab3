"""Distillation losses on the teacher's cached top-k, and the expected acceptance of a draft.

The paper's code trains with the soft cross-entropy on the teacher's top-k,
``-sum_j exp(teacher_logp[j]) * student_logp[topk[j]]``, averaged over response tokens. The
top-k mass is below 1, so this is the cross-entropy against an unnormalised target; the option
``"kl"`` uses the top-k renormalised to a distribution and subtracts its entropy (same gradient
direction per row, rows weighted equally instead of by their top-k mass).
"""

from __future__ import annotations

from typing import Literal

import torch

LossKind = Literal["ce", "kl"]
LOSS_KINDS: tuple[str, ...] = ("ce", "kl")


def topk_kd_loss(
    student_logits: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_logp: torch.Tensor,
    kind: LossKind = "ce",
    valid: torch.Tensor | None = None,
) -> torch.Tensor:
    """Mean KD loss over the rows of ``student_logits`` [N, V] against the teacher's top-k.

    ``topk_ids`` [N, k] index the student's columns; ``topk_logp`` [N, k] are the teacher's
    log-probs. ``valid`` [N, k] (optional) masks entries the student cannot represent (a
    vocabulary-restricted head): they are left out of the sum, since no parameter moves them.
    """
    if kind not in LOSS_KINDS:
        raise ValueError(f"unknown loss {kind!r}; choose one of {', '.join(LOSS_KINDS)}")
    if valid is not None:  # a row none of whose top-k the student can emit teaches nothing
        keep = valid.any(dim=1)
        student_logits, topk_ids, topk_logp, valid = (
            student_logits[keep], topk_ids[keep], topk_logp[keep], valid[keep])
    if student_logits.shape[0] == 0:
        return student_logits.sum() * 0.0
    student_logp = torch.log_softmax(student_logits.float(), dim=-1)
    picked = student_logp.gather(1, topk_ids.long().clamp(min=0))  # [N, k]
    teacher_logp = topk_logp.float()
    if valid is not None:
        teacher_logp = teacher_logp.masked_fill(~valid, float("-inf"))
        picked = picked.masked_fill(~valid, 0.0)
    if kind == "ce":
        weights = teacher_logp.exp()
        return -(weights * picked).sum(dim=1).mean()
    # KL(p~ || p_student) with p~ the renormalised top-k (entries masked out get weight 0).
    renorm = torch.log_softmax(teacher_logp, dim=1)
    weights = renorm.exp()
    plogp = torch.where(weights > 0, weights * renorm, torch.zeros_like(weights))
    return (plogp - weights * picked).sum(dim=1).mean()


def expected_acceptance(draft_probs: torch.Tensor, target_indices: torch.Tensor,
                        target_probs: torch.Tensor) -> torch.Tensor:
    """Per row, sum_x min(p(x), q(x)) with p the draft's dense rows [N, V] and q sparse.

    ``target_indices``/``target_probs`` [N, m] hold every token of non-zero target probability
    (exact when the decoding settings keep at most m tokens, e.g. top-k 100), so tokens outside
    them contribute min(p, 0) = 0. This is the probability that one drafted token is accepted
    (Leviathan et al. 2023, Def. 3.1).
    """
    p = draft_probs.gather(1, target_indices.long())
    return torch.minimum(p, target_probs.float()).sum(dim=1)
