"""The statistics behind the lossless tests: exact pair distributions and a chi-square check."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch
from scipy.stats import chisquare

from babelspec.sampling import SamplingConfig, logits_to_probs


def exact_pair_distribution(model, prompt: list[int], config: SamplingConfig) -> torch.Tensor:
    """P(t1, t2 | prompt) under the warped target distributions, by enumeration (flattened)."""
    with torch.no_grad():
        first = model(torch.tensor([prompt])).logits[0, -1:]
        vocab = first.shape[-1]
        q1 = logits_to_probs(first, config, torch.tensor(prompt), len(prompt))[0]
        joint = torch.zeros(vocab, vocab)
        for t1 in range(vocab):
            seq = prompt + [t1]
            logits = model(torch.tensor([seq])).logits[0, -1:]
            joint[t1] = q1[t1] * logits_to_probs(logits, config, torch.tensor(seq), len(seq))[0]
    return joint.flatten()


def exact_joint_distribution(model, prompt: list[int], config: SamplingConfig, n: int) -> torch.Tensor:
    """P(t1, ..., tn | prompt) under the warped target distributions, by enumeration over the
    sequences the warping leaves possible (flattened, t1 most significant)."""

    def row(seq: list[int]) -> torch.Tensor:
        with torch.no_grad():
            logits = model(torch.tensor([seq])).logits[0, -1:]
        return logits_to_probs(logits, config, torch.tensor(seq), len(seq))[0]

    vocab = model.config.vocab_size
    joint = torch.zeros(vocab**n, dtype=torch.float64)

    def walk(seq: list[int], prob: float, index: int, depth: int) -> None:
        if depth == n:
            joint[index] = prob
            return
        q = row(seq)
        for t in range(vocab):
            if q[t] > 0:
                walk(seq + [t], prob * float(q[t]), index * vocab + t, depth + 1)

    walk(list(prompt), 1.0, 0, 0)
    return joint


def chi_square_pvalue(counts, probs) -> float:
    """Chi-square goodness of fit of ``counts`` to ``probs``; cells expecting < 5 are pooled."""
    counts = np.asarray(counts, dtype=np.float64)
    probs = np.asarray(probs, dtype=np.float64)
    expected = probs * counts.sum()
    big = expected >= 5
    obs = np.append(counts[big], counts[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    return float(chisquare(obs, exp * obs.sum() / exp.sum()).pvalue)


class LeanModel:
    """A lean forward called as ``exact_pair_distribution`` calls a model: ``(ids) -> .logits``."""

    def __init__(self, lean) -> None:
        self.lean = lean

    def __call__(self, ids: torch.Tensor) -> SimpleNamespace:
        return SimpleNamespace(logits=self.lean.forward(ids, self.lean.new_cache()).float()[None])


def sampled_pairs(target, drafter, prompt: list[int], config: SamplingConfig, seeds: range,
                  vocab: int) -> tuple[torch.Tensor, int, int]:  # fmt: skip
    """(counts of each (t1, t2) pair, flattened; drafted tokens; accepted ones): two tokens
    generated speculatively at gamma 2 once per seed."""
    from babelspec.engine import generate

    counts = torch.zeros(vocab * vocab)
    proposed = accepted = 0
    for seed in seeds:
        result = generate(target, drafter, prompt, gamma=2, max_new_tokens=2,
                          sampling=SamplingConfig(**{**config.to_dict(), "seed": seed}))  # fmt: skip
        counts[result.token_ids[0] * vocab + result.token_ids[1]] += 1
        proposed, accepted = proposed + result.proposed, accepted + result.accepted
    return counts, proposed, accepted
