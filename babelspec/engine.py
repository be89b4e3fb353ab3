"""The speculative loop: propose -> verify in one target forward -> accept/reject -> roll back.

Leviathan et al. (2023), Chen et al. (2023). Plain decoding is the same loop with a drafter
that proposes nothing, so wall-clock speedups compare like with like.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from babelspec.drafters.base import Draft, Drafter, Verdict, check_vocabulary
from babelspec.errors import UserError
from babelspec.forward import HeadRequest
from babelspec.forward.certified import CERTIFIED_TOP_K
from babelspec.machine import execution_plan
from babelspec.sampling import Probs, SamplingConfig, draw_index, top_rows, warp
from babelspec.speedup import acceptance_rate, theoretical_speedup
from babelspec.target import Target


@dataclass
class GenerationResult:
    token_ids: list[int]  # generated tokens only (an EOS that ended generation included)
    text: str  # decoded generated text, cut before a stop string
    stop_reason: str  # "length", "eos", "stop_string" or "stopped" (on_block asked)
    gamma: int
    steps: int = 0  # target verification forwards
    proposed: int = 0  # drafted tokens handed to the verifier
    accepted: int = 0  # drafted tokens the verifier kept
    rejections: int = 0  # steps that ended in a rejection
    proposed_per_step: list[int] = field(default_factory=list)  # drafted tokens (a tree's nodes)
    accepted_per_step: list[int] = field(default_factory=list)
    depth_per_step: list[int] = field(default_factory=list)  # tokens on the draft's longest path
    rejected_per_step: list[int] = field(default_factory=list)  # 1 where the step ended in a rejection
    draft_seconds: float = 0.0  # the drafter's start on the prompt, propose and commit (rollback, replay, index)
    target_seconds: float = 0.0  # verification forwards, prefill excluded
    rollback_seconds: float = 0.0  # the target's crops and replays after rejections
    # The target's prefill of the prompt: the same for plain and speculative decoding. The
    # drafter's own start (a neural drafter's prefill) is not in it: it is the drafter's cost,
    # counted in draft_seconds and in the decode time a speedup divides.
    prefill_seconds: float = 0.0
    draft_start_seconds: float = 0.0  # the drafter's start on the prompt (also in draft_seconds)
    wall_seconds: float = 0.0
    draft_forwards: int = 0
    draft_forward_seconds: list[float] = field(default_factory=list)
    target_forward_seconds: list[float] = field(default_factory=list)  # verification forwards
    target_replay_seconds: list[float] = field(default_factory=list)  # rollback replays

    @property
    def n_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def n_chars(self) -> int:
        return len(self.text)

    @property
    def alpha(self) -> float:
        """Acceptance rate as the paper's code defines it: matched / (matched + rejections).

        Tokens after the first rejection in a step are never judged, so they do not count."""
        return acceptance_rate(self.accepted, self.rejections)

    @property
    def alpha_token(self) -> float:
        """Token-weighted acceptance: accepted / proposed."""
        return self.accepted / self.proposed if self.proposed else float("nan")

    @property
    def mean_accepted_length(self) -> float:
        """Drafted tokens kept per verification step."""
        return self.accepted / self.steps if self.steps else float("nan")

    @property
    def c(self) -> float:
        """Measured cost ratio: mean draft forward time / mean target forward time."""
        if self.draft_forward_seconds:
            draft = sum(self.draft_forward_seconds) / len(self.draft_forward_seconds)
        elif self.draft_forwards:
            draft = self.draft_seconds / self.draft_forwards
        else:
            return float("nan")
        if not self.target_forward_seconds:
            return float("nan")
        return draft / (sum(self.target_forward_seconds) / len(self.target_forward_seconds))

    @property
    def drafted_per_step(self) -> float:
        """Tokens actually drafted per verification step (below γ where the drafter stops early
        or the budget ends a draft; a tree's nodes); NaN before a step."""
        return self.proposed / self.steps if self.steps else float("nan")

    @property
    def depth_per_step_mean(self) -> float:
        """Tokens on the longest path of a step's draft, per step (``drafted_per_step`` for
        chains): a step keeps at most this + 1 tokens; NaN before a step."""
        return sum(self.depth_per_step) / self.steps if self.steps else float("nan")

    def theoretical_speedup(self, gamma: float | None = None, c: float | None = None) -> float:
        """f at the draft's depth and node count per step (``speedup.theoretical_speedup``), or
        at a chain of ``gamma`` tokens when given."""
        c = self.c if c is None else c
        if gamma is not None:
            return theoretical_speedup(self.alpha, gamma, c)
        return theoretical_speedup(self.alpha, self.depth_per_step_mean, c, nodes=self.drafted_per_step)

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(n_tokens=self.n_tokens, n_chars=self.n_chars, alpha=self.alpha,
                 alpha_token=self.alpha_token, mean_accepted_length=self.mean_accepted_length,
                 c=self.c, drafted_per_step=self.drafted_per_step, depth_per_step_mean=self.depth_per_step_mean,
                 theoretical_speedup=self.theoretical_speedup())
        return d


def validate_request(
    target: Target, drafter: Drafter, prompt_ids: list[int], gamma: int, max_new_tokens: int
) -> None:
    check_vocabulary(drafter, target)
    if not isinstance(gamma, int) or gamma < 1:
        raise UserError(f"gamma must be an integer >= 1 (got {gamma!r}); use the drafter 'none' "
                         "for plain decoding")
    if not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise UserError(f"max_new_tokens must be an integer >= 0 (got {max_new_tokens!r})")
    if len(prompt_ids) == 0:
        raise UserError("the prompt is empty: give at least one token (e.g. the BOS token)")
    if target.max_context is not None and len(prompt_ids) + max_new_tokens > target.max_context:
        raise UserError(
            f"prompt ({len(prompt_ids)} tokens) + max_new_tokens ({max_new_tokens}) exceeds the "
            f"model's context window of {target.max_context} tokens; shorten the prompt or lower "
            "max_new_tokens"
        )
    bad = [t for t in prompt_ids if not 0 <= t < target.vocab_size]
    if bad:
        raise UserError(f"prompt token ids {bad[:5]} are outside the vocabulary [0, {target.vocab_size})")


def accept_or_reject(q: Probs, draft: Draft, rng: np.random.Generator) -> tuple[int, int]:
    """Judge the drafted tokens against the target's distributions ``q`` (k + 1 rows).

    Returns (number accepted, next token): the correction after a rejection, else a bonus
    token from the last row. Lossless for any draft distribution the tokens were drawn from.
    """
    k = len(draft)
    u = rng.random(k + 1)  # k judgements, then one draw
    for i, token in enumerate(draft.tokens.tolist()):
        # q: target prob, p: draft prob (1 for a point mass); accept with prob min(1, q/p),
        # so q >= p is always accepted (u < 1)
        if u[i] * draft.probs.prob(i, token) >= q.prob(i, token):
            return i, q.draw_residual(i, draft.probs, float(u[k]))
    return k, q.draw(k, float(u[k]))


def accept_tree(q: Probs, draft: Draft, rng: np.random.Generator) -> tuple[list[int], int]:
    """Judge a token tree against the target's rows ``q`` (row 0 after the pending token, row
    i + 1 after node i). Returns (the accepted nodes, root to leaf; the next token).

    From the root, a node's children are tried in order: child x with draft row p is accepted
    with probability min(1, r(x) / p(x)) where r starts as the node's target row and, after each
    rejection, becomes norm(max(0, r - p)) (SpecInfer's multi-step rule; for a point mass p it
    removes x and renormalises, so candidates x_1, x_2, ... come out with probability q(x_i)).
    An accepted child is judged in turn; when all are rejected the next token is drawn from the
    last residual, and after a leaf from the leaf's row (the bonus token). Lossless for point-mass
    children and for children drawn i.i.d. from their rows; greedy: descend while the arg-max is
    a child."""
    children: dict[int, list[int]] = {}
    for i, parent in enumerate(draft.parents.tolist()):
        children.setdefault(parent, []).append(i)
    tokens = draft.tokens.tolist()
    path: list[int] = []
    node = -1
    while True:
        ids, row = q.support(node + 1)
        residual = row.astype(np.float64)
        chosen = None
        for child in children.get(node, ()):
            x = tokens[child]
            mass = residual.sum()
            r_x = residual[ids == x].sum() / mass
            if rng.random() * draft.probs.prob(child, x) < r_x:  # accept with min(1, r / p)
                chosen = child
                break
            rest = np.maximum(residual / mass - draft.probs.prob_at(child, ids), 0.0)
            if rest.sum() > 0:  # else r == p up to rounding: a rejection is a measure-zero event
                residual = rest
        if chosen is None:
            return path, int(ids[draw_index(residual, rng.random())])
        path.append(chosen)
        node = chosen


def _tree_windows(seq: np.ndarray, length: int, tokens: list[int], parents: np.ndarray, window: int) -> np.ndarray:
    """[k + 1, window]: the ids each row of a tree's verification penalises, the last ``window``
    of the sequence followed by the row's own path (row 0: the sequence itself)."""
    before = seq[max(0, length - window) : length].tolist()
    paths: list[list[int]] = [[]]
    for i, parent in enumerate(parents.tolist()):
        paths.append(paths[parent + 1] + [tokens[i]])
    out = np.empty((len(paths), window), dtype=np.int64)
    for r, path in enumerate(paths):
        ids = (before + path)[-window:]
        out[r] = [ids[0]] * (window - len(ids)) + ids  # a short history repeats its first id: no effect
    return out


@dataclass
class Verification:
    """One draft verified in one target forward and judged: the accepted path (node indices,
    root to leaf), the verifier's next token, whether a drafted token was rejected, the
    target's logits of every row, and the seconds spent rolling the target's cache back."""

    path: list[int]
    next_token: int
    rejected: bool
    logits: torch.Tensor
    rollback_seconds: float


def head_request(target: Target, sampling: SamplingConfig, seq: np.ndarray, length: int, drafted: list[int],
                 observes_top: int = 0) -> HeadRequest | None:  # fmt: skip
    """What the verification of ``drafted`` after ``seq[:length]`` needs of the target's logits,
    for a target with the certified head: the k largest (1 under greedy decoding, else top-k,
    and at least the ``observes_top`` a drafter reads), and exactly every token the repetition
    penalty may touch (the window before and the drafted tokens). None where all are needed
    (top-k off: top-p and temperature alone need the full normaliser) or more than the head
    certifies."""
    if not target.certifies_head:
        return None
    k = 1 if sampling.greedy else sampling.top_k
    if k == 0:
        return None
    k = max(k, observes_top)
    if k > CERTIFIED_TOP_K:
        return None
    exact: tuple[int, ...] = ()
    if sampling.repetition_penalty != 1.0 and sampling.repetition_window > 0:
        exact = tuple(sorted(set(seq[max(0, length - sampling.repetition_window) : length].tolist()) | set(drafted)))
    return HeadRequest(k, exact)


def verify(target: Target, draft: Draft, seq: np.ndarray, length: int, sampling: SamplingConfig,
           rng: np.random.Generator, observes_top: int = 0) -> Verification:  # fmt: skip
    """Verify ``draft`` after ``seq[:length]`` (the target caches all but its last, pending
    token) and judge it: Leviathan/Chen for a chain, SpecInfer's multi-candidate rule for a tree.
    The target's cache then holds the pending token and the accepted path."""
    drafted, pending = draft.tokens.tolist(), int(seq[length - 1])
    head = head_request(target, sampling, seq, length, drafted, observes_top)
    if draft.is_tree:
        block = torch.from_numpy(np.concatenate([[-1], draft.parents + 1]))
        logits = target.verify_tree([pending] + drafted, block, head=head)
        windows = None
        if sampling.repetition_penalty != 1.0 and sampling.repetition_window > 0:
            windows = _tree_windows(seq, length, drafted, draft.parents, sampling.repetition_window)
        path, next_token = accept_tree(warp(logits, sampling, windows=windows), draft, rng)
        rejected = any(p == (path[-1] if path else -1) for p in draft.parents.tolist())
        t0 = time.perf_counter()
        target.keep_path(length - 1, [0] + [i + 1 for i in path])
    else:
        seq[length : length + len(drafted)] = drafted
        if draft.hidden is not None:  # the drafter ran the target's layers on them: its head judges
            if draft.hidden.shape[1] != len(drafted) + 1 or target.cached_len != length + len(drafted):
                raise RuntimeError(f"a draft of {len(drafted)} tokens came with {draft.hidden.shape[1]} hidden rows "
                                   f"and a target cache of {target.cached_len} tokens (expected {length + len(drafted)})")
            logits = target.head_logits(draft.hidden, head=head)
        else:
            logits = target.checkpoint_and_verify([pending] + drafted, head=head)
        n, next_token = accept_or_reject(warp(logits, sampling, seq, first_position=length), draft, rng)
        path, rejected = list(range(n)), n < len(drafted)
        t0 = time.perf_counter()
        target.crop_or_replay(length + n)
    return Verification(path, int(next_token), rejected, logits, time.perf_counter() - t0)


def generate(
    target: Target,
    drafter: Drafter,
    prompt_ids: list[int],
    *,
    gamma: int = 4,
    max_new_tokens: int = 128,
    sampling: SamplingConfig = SamplingConfig(),
    stop_strings: tuple[str, ...] | list[str] = (),
    eos_token_ids: tuple[int, ...] | list[int] | None = None,
    on_block: Callable[[list[int]], bool | None] | None = None,
) -> GenerationResult:
    """Generate up to ``max_new_tokens`` after ``prompt_ids`` with speculative decoding.

    ``on_block``, if given, is called after every step with the tokens that step added (the
    accepted drafted tokens and the verifier's token, cut at an EOS or a stop string); a true
    return value stops generation there (stop reason ``"stopped"``), e.g. for a server whose
    client went away."""
    prompt_ids = [int(t) for t in prompt_ids]
    eos = _check_request(target, drafter, prompt_ids, gamma, max_new_tokens, stop_strings, eos_token_ids)
    generator = torch.Generator().manual_seed(sampling.seed)  # the drafters'
    rng = np.random.default_rng(sampling.seed)  # the judge's
    started = time.perf_counter()
    # seq holds prompt + generated ids; the target caches all but the last (pending) one.
    seq = np.zeros(len(prompt_ids) + max_new_tokens + gamma + 1, dtype=np.int64)
    seq[: len(prompt_ids)] = prompt_ids
    length = len(prompt_ids)
    target.prefill(prompt_ids[:-1])
    t0 = time.perf_counter()
    drafter.start(list(prompt_ids), sampling, generator)
    result = GenerationResult(token_ids=[], text="", stop_reason="length", gamma=gamma,
                              prefill_seconds=target.prefill_seconds, draft_start_seconds=time.perf_counter() - t0)
    result.draft_seconds = result.draft_start_seconds
    generated: list[int] = []
    while len(generated) < max_new_tokens:
        # Propose (never past the budget: a step yields at most k + 1 tokens), verify, judge.
        k_max = min(gamma, max_new_tokens - len(generated) - 1)
        t0 = time.perf_counter()
        draft = drafter.propose(k_max) if k_max > 0 else Draft.empty()
        result.draft_seconds += time.perf_counter() - t0
        if draft.is_tree and not target.verifies_tree(len(draft) + 1):
            draft = draft.first_chain()  # a verifier without trees (now) checks the first guesses
        depth = draft.depth()
        if depth > k_max:
            raise RuntimeError(f"drafter {drafter.name!r} proposed {depth} tokens in a row, more than {k_max}")
        v = verify(target, draft, seq, length, sampling, rng, drafter.observes_top)
        # The drafter hears the verdict, and rolls back to the tokens kept.
        drafted = draft.tokens.tolist()
        kept = [drafted[i] for i in v.path]
        t0 = time.perf_counter()
        top = top_rows(v.logits, drafter.observes_top) if drafter.observes_top else None
        drafter.commit(Verdict(kept, v.next_token, inputs=[int(seq[length - 1])] + drafted, top=top,
                               drafted=len(draft), depth=depth, rejected=v.rejected))
        result.draft_seconds += time.perf_counter() - t0  # rollback, replay, lookup index
        new_tokens = kept + [v.next_token]
        seq[length : length + len(new_tokens)] = new_tokens
        length += len(new_tokens)
        _record_step(result, draft, depth, v)
        start = len(generated)
        generated.extend(new_tokens)
        stop = _first_stop(generated, start, eos, target.tokenizer, stop_strings)
        if stop is not None:
            end, result.stop_reason = stop
            del generated[end:]
        if on_block is not None and on_block(generated[start:]) and result.stop_reason == "length":
            result.stop_reason = "stopped"
        if result.stop_reason != "length":
            break
    return _finish(result, target, drafter, generated, stop_strings, started)


def _check_request(target: Target, drafter: Drafter, prompt_ids: list[int], gamma: int, max_new_tokens: int,
                   stop_strings, eos_token_ids) -> set[int]:  # fmt: skip
    """Refuse a bad request with a message; the EOS ids that end the generation."""
    validate_request(target, drafter, prompt_ids, gamma, max_new_tokens)
    if gamma > 0 and getattr(drafter, "name", "none") != "none":
        _warn_if_not_exact(target)
    tokenizer = target.tokenizer
    if any(not isinstance(s, str) or not s for s in stop_strings):
        raise UserError(f"stop strings must be non-empty strings (got {list(stop_strings)!r}): an empty one "
                         "would stop before the first token")
    if stop_strings and tokenizer is None:
        raise UserError("stop strings need a target with a tokenizer to decode the output")
    if eos_token_ids is None:
        eos = getattr(tokenizer, "eos_token_id", None) if tokenizer is not None else None
        eos_token_ids = () if eos is None else (eos,)
    return set(eos_token_ids)


_WARNED_NOT_EXACT: set[tuple[str, str]] = set()


def _warn_if_not_exact(target: Target) -> None:
    """Once per kind of target (forward and weights): a target whose forward is not row-invariant
    (``exact: no`` in its plan) may round a verification row otherwise than the decode step, so
    greedy output can part from plain decoding's at a near-tie; the warning says why and the fix."""
    plan = execution_plan(target)
    kind = (plan.get("forward", ""), plan.get("weights", ""))
    if plan.get("exact") != "no" or kind in _WARNED_NOT_EXACT:
        return
    _WARNED_NOT_EXACT.add(kind)
    why = plan.get("exact_why") or "its rows are not bit-invariant"
    warnings.warn(f"speculating on a {plan.get('weights')} target through the {plan.get('forward')} forward, whose "
                  "rows are not bit-invariant: a verification row may round otherwise than plain decoding's step, "
                  f"so outputs can differ at near-ties. Why: {why}", stacklevel=4)  # fmt: skip


def _record_step(result: GenerationResult, draft: Draft, depth: int, v: Verification) -> None:
    """A step's counts: drafted nodes, accepted tokens, the draft's depth, a rejection."""
    k, n = len(draft), len(v.path)
    result.rollback_seconds += v.rollback_seconds
    result.steps += 1
    result.proposed += k
    result.accepted += n
    result.rejections += v.rejected
    result.proposed_per_step.append(k)
    result.accepted_per_step.append(n)
    result.depth_per_step.append(depth)
    result.rejected_per_step.append(int(v.rejected))
    result.draft_forwards += draft.forwards


def _finish(result: GenerationResult, target: Target, drafter: Drafter, generated: list[int],
            stop_strings, started: float) -> GenerationResult:  # fmt: skip
    """The result's tokens, text (cut before a stop string) and the forwards' times."""
    result.wall_seconds = time.perf_counter() - started
    result.token_ids = generated
    result.target_forward_seconds = list(target.forward_seconds)
    result.target_replay_seconds = list(target.replay_seconds)
    result.target_seconds = sum(result.target_forward_seconds)
    result.draft_forward_seconds = list(drafter.forward_seconds())
    if target.tokenizer is not None:
        text = target.tokenizer.decode(generated, skip_special_tokens=True)
        if result.stop_reason == "stop_string":
            text = text_before_stop(text, stop_strings)
        result.text = text
    return result


def text_before_stop(text: str, stop_strings) -> str:
    """``text`` cut before the earliest of ``stop_strings`` it holds (as it is where it holds none)."""
    found = [i for s in stop_strings if (i := text.find(s)) >= 0]
    return text[: min(found)] if found else text


def _first_stop(
    generated: list[int], start: int, eos: set[int], tokenizer, stop_strings
) -> tuple[int, str] | None:
    """Where plain decoding would have stopped among the tokens from ``start`` on: (tokens to
    keep, reason) at the earliest of the first EOS and the token completing a stop string
    (an EOS first when one token is both), or None to go on."""
    end = next((i + 1 for i in range(start, len(generated)) if generated[i] in eos), None)
    if stop_strings:
        last = len(generated) if end is None else end - 1  # tokens before the EOS
        if any(s in tokenizer.decode(generated[:last], skip_special_tokens=True) for s in stop_strings):
            for cut in range(start + 1, last + 1):
                text = tokenizer.decode(generated[:cut], skip_special_tokens=True)
                if any(s in text for s in stop_strings):
                    return cut, "stop_string"
    return None if end is None else (end, "eos")
