"""Token trees: one forward verifies several guesses per position, still lossless.

The tree forward's logits equal those of separate forwards over each path (exact mode), with
the lean forward and with Hugging Face's (a 4-D mask and positions by depth), the cache keeps
only the accepted path, tree acceptance follows the target's joint distribution
exactly (point-mass and sampled children, under the paper's warping with its repetition
penalty), and greedy tree decoding equals plain greedy decoding.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from edge import OPTIONS
from stats import chi_square_pvalue
from tiny import tiny_gemma3, tiny_qwen3, tiny_qwen35

from babelspec.drafters.base import Draft, Drafter, Verdict
from babelspec.engine import accept_tree, generate
from babelspec.lm import CausalLM
from babelspec.sampling import Probs, SamplingConfig
from babelspec.target import Target

VOCAB = 8
PROMPT = [1, 5, 2, 7, 3]


def _eager(model):
    model.set_attn_implementation("eager")
    return model


@pytest.fixture(scope="module")
def gemma():
    return _eager(tiny_gemma3(vocab=VOCAB, seed=3, sliding_window=4))


# (model, forward): Gemma-3 under the lean forward (its sliding window of 4 full from the
# prompt on) and under Hugging Face's (a window of 64, so every layer sees the whole context),
# and another family, Qwen3, which has only Hugging Face's forward
KINDS = ["gemma-lean", "gemma-hf", "qwen3-hf"]


def _model(kind: str):
    if kind == "qwen3-hf":
        return _eager(tiny_qwen3(vocab=VOCAB, seed=3))
    return _eager(tiny_gemma3(vocab=VOCAB, seed=3, sliding_window=4 if kind == "gemma-lean" else 64))


def _forward(kind: str) -> str:
    return kind.rsplit("-", 1)[1]


# pending token (parent -1), then: 0 -> {1, 2}, 1 -> {3}, 2 -> {4, 5}, 5 -> {6}
BLOCK = [3, 6, 2, 4, 1, 0, 5]
PARENTS = [-1, 0, 0, 1, 2, 2, 5]


def _path(i):
    out = []
    while i >= 0:
        out.append(i)
        i = PARENTS[i]
    return out[::-1]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_tree_logits_equal_separate_forwards_over_each_path(kind, dtype):
    model = _model(kind).to(dtype)
    lm = CausalLM(model, forward=_forward(kind))
    assert lm.supports_trees and (lm.lean is not None) == (_forward(kind) == "lean")
    lm.forward(PROMPT[:-1])
    tree = lm.forward(BLOCK, parents=torch.tensor(PARENTS))
    for i in range(len(BLOCK)):
        path = _path(i)
        alone = CausalLM(model, forward=_forward(kind))
        alone.forward(PROMPT[:-1])
        rows = alone.forward([BLOCK[j] for j in path])
        if dtype == torch.float32:  # exact mode: the same numbers
            torch.testing.assert_close(tree[i], rows[-1], rtol=1e-5, atol=1e-5)
        else:
            assert int(tree[i].argmax()) == int(rows[-1].argmax())


@pytest.mark.parametrize("kind", KINDS)
def test_the_cache_keeps_only_the_accepted_path(kind):
    model = _model(kind)
    lm = CausalLM(model, forward=_forward(kind))
    lm.forward(PROMPT[:-1])
    past = lm.cached_len
    lm.forward(BLOCK, parents=torch.tensor(PARENTS))
    lm.keep_path(past, [0, 2, 5])  # pending, node 2, node 5
    after = lm.forward([BLOCK[6]])
    ref = CausalLM(model, forward=_forward(kind))
    ref.forward(PROMPT[:-1] + [BLOCK[0], BLOCK[2], BLOCK[5]])
    torch.testing.assert_close(after, ref.forward([BLOCK[6]]), rtol=1e-5, atol=1e-5)
    assert lm.tokens == PROMPT[:-1] + [BLOCK[0], BLOCK[2], BLOCK[5], BLOCK[6]]


@pytest.mark.parametrize("kind", KINDS)
def test_parents_must_point_back(kind):
    lm = CausalLM(_model(kind), forward=_forward(kind))
    lm.forward(PROMPT[:-1])
    with pytest.raises(ValueError, match="topological order"):
        lm.forward([1, 2, 3], parents=torch.tensor([-1, 2, 0]))


def test_hugging_face_trees_stop_at_a_full_sliding_window_and_the_engine_verifies_the_first_chain(gemma):
    """Past a sliding window, layers see different keys and one mask no longer serves them all:
    a tree forward is refused with its reason, and generation verifies each tree's first chain,
    still equal to plain greedy decoding."""
    lm = CausalLM(gemma, forward="hf")
    assert lm.supports_trees and lm.verifies_tree(3)
    lm.forward(PROMPT[:-1])  # 4 cached tokens: a window of 4 is full
    assert not lm.verifies_tree(2)
    with pytest.raises(ValueError, match="sliding window .4 tokens.; verify its first chain"):
        lm.forward(BLOCK, parents=torch.tensor(PARENTS))
    target = Target(gemma, forward="hf")
    greedy = SamplingConfig(greedy=True)
    plain = generate(target, _none(), PROMPT, max_new_tokens=10, sampling=greedy)
    likely = torch.tensor([0.2, 0.0, 0.1, 0.4, 0.3, 0.0, 0.0, 0.0])
    tree = generate(target, TreeDrafter("point", p=likely), PROMPT, gamma=2, max_new_tokens=10, sampling=greedy)
    assert tree.token_ids == plain.token_ids
    assert max(tree.proposed_per_step) <= 2  # first chains (depth 2), not trees of 9 nodes


def test_recurrent_layers_cannot_verify_trees():
    """Qwen3.5's linear-attention layers read their tokens in order: no trees, and a clear
    error naming why when one is passed anyway."""
    lm = CausalLM(tiny_qwen35(vocab=VOCAB), forward="hf")
    assert not lm.supports_trees and not lm.verifies_tree(2)
    lm.forward(PROMPT[:-1])
    with pytest.raises(ValueError, match="cannot verify token trees: its cache has recurrent"):
        lm.forward(BLOCK, parents=torch.tensor(PARENTS))


class TreeDrafter(Drafter):
    """A fixed tree of depth 2: ``first`` candidates at the first position, each with
    ``second`` candidates, as point masses or drawn i.i.d. from a fixed distribution."""

    name = "fixed-tree"

    def __init__(self, form: str, width: int = 3, p: torch.Tensor | None = None) -> None:
        self.form, self.width, self.vocab_size = form, width, VOCAB
        self.p = p if p is not None else torch.tensor([0.30, 0.02, 0.25, 0.03, 0.15, 0.05, 0.0, 0.20])

    def start(self, context_ids, sampling, generator) -> None:
        self.generator = generator

    def _children(self) -> list[int]:
        if self.form == "point":  # the most likely tokens of p, distinct
            return self.p.argsort(descending=True)[: self.width].tolist()
        return torch.multinomial(self.p, self.width, replacement=True, generator=self.generator).tolist()

    def propose(self, gamma: int) -> Draft:
        first = self._children()
        tokens, parents = list(first), [-1] * len(first)
        if gamma >= 2:
            for i in range(len(first)):
                second = self._children()[:2]
                tokens += second
                parents += [i] * len(second)
        if self.form == "point":
            probs = Probs.point(tokens)
        else:
            probs = Probs(self.p.repeat(len(tokens), 1))
        self.last = (tokens, parents)
        return Draft.tree(tokens, parents, probs, forwards=len(tokens))

    def commit(self, verdict: Verdict) -> None:
        pass


def exact_triple_distribution(model, prompt: list[int], config: SamplingConfig) -> torch.Tensor:
    """P(t1, t2, t3 | prompt) under the warped target distributions, by enumeration (flattened)."""
    from babelspec.sampling import logits_to_probs

    def q(seq):
        with torch.no_grad():
            logits = model(torch.tensor([seq])).logits[0, -1:]
        return logits_to_probs(logits, config, torch.tensor(seq), len(seq))[0]

    joint = torch.zeros(VOCAB, VOCAB, VOCAB)
    q1 = q(prompt)
    for t1 in range(VOCAB):
        if q1[t1] == 0:
            continue
        q2 = q(prompt + [t1])
        for t2 in range(VOCAB):
            if q2[t2] > 0:
                joint[t1, t2] = q1[t1] * q2[t2] * q(prompt + [t1, t2])
    return joint.flatten()


# Hugging Face's forward (an option beside the lean default) in make test-extended: 30 s of make test
@pytest.mark.parametrize("kind", ["gemma-lean", pytest.param("gemma-hf", marks=pytest.mark.extended)])
@pytest.mark.parametrize("form", ["point", "sampled"])
def test_depth_two_trees_follow_the_target_distribution(kind, form):
    """Three tokens from one step of a depth-2 tree (3 first guesses, 2 after each) plus the
    bonus: the joint law of the triple is the target's, each row penalised along its own path."""
    model = _model(kind)
    config = SamplingConfig(top_k=6, top_p=0.9, repetition_penalty=1.5, repetition_window=2)
    exact = exact_triple_distribution(model, PROMPT, config)
    target = Target(model, forward=_forward(kind))
    drafter = TreeDrafter(form)
    counts = torch.zeros(VOCAB**3)
    depths = []
    for seed in range(2000):
        result = generate(target, drafter, PROMPT, gamma=2, max_new_tokens=3,
                          sampling=SamplingConfig(**{**config.to_dict(), "seed": seed}))
        t1, t2, t3 = result.token_ids
        counts[(t1 * VOCAB + t2) * VOCAB + t3] += 1
        depths.append(result.accepted_per_step[0])
    assert {0, 1, 2} <= set(depths)  # every depth of the tree was reached
    assert chi_square_pvalue(counts, exact) > 1e-3


def test_the_tree_rule_tries_point_mass_children_in_order():
    """Point-mass candidates a, b at one position: P(a) = q(a), P(b) = q(b), every other token
    its own q: the multi-candidate rule with the residual renormalised after each rejection."""
    q = np.array([0.1, 0.4, 0.2, 0.3], dtype=np.float32)
    rows = Probs(np.tile(q, (3, 1)))
    draft = Draft.tree([1, 3], [-1, -1], Probs.point([1, 3]))
    rng = np.random.default_rng(0)
    counts = np.zeros(4)
    for _ in range(20000):
        path, nxt = accept_tree(rows, draft, rng)
        counts[draft.tokens[path[0]].item() if path else nxt] += 1
    assert chi_square_pvalue(counts, q) > 1e-3


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_greedy_tree_decoding_equals_plain_greedy(kind, dtype):
    model = _model(kind).to(dtype)
    target = Target(model, forward=_forward(kind))
    greedy = SamplingConfig(greedy=True)
    plain = generate(target, _none(), PROMPT, max_new_tokens=12, sampling=greedy)
    # the target's own most frequent tokens as the point-mass candidates
    likely = torch.bincount(torch.tensor(plain.token_ids), minlength=VOCAB).float()
    tree = generate(target, TreeDrafter("point", p=likely), PROMPT, gamma=2, max_new_tokens=12, sampling=greedy)
    assert tree.token_ids == plain.token_ids
    assert tree.accepted > 0 and max(tree.proposed_per_step) == 9  # whole trees verified


def _none():
    from babelspec.drafters import make_drafter

    return make_drafter("none", None)


@pytest.fixture(scope="module")
def real_bigram(tmp_path_factory):
    from babelspec.data.corpus import monolingual
    from babelspec.models import DEFAULT_TARGET, load_tokenizer
    from babelspec.ngram import CountConfig, train

    path = tmp_path_factory.mktemp("tree") / "yor.ngram"
    train(monolingual("yor", "train"), load_tokenizer(DEFAULT_TARGET), CountConfig(order=2)).save(path)
    return path


@pytest.mark.parametrize(("dtype", "forward"), [("float32", "hf")])
def test_greedy_ngram_trees_on_the_default_model_equal_plain_greedy(real_bigram, dtype, forward):
    """The real target and a real bigram: a tree of 12 nodes per step decodes greedily to the
    same tokens as plain decoding, and keeps more drafted tokens per step than the chain; on
    Hugging Face's forward, in float32 (the lean forward's trees, bit for bit in bf16 on real
    prompts in the paper's languages: ``tests/test_exact_greedy_*.py``)."""
    from babelspec.drafters import make_drafter
    from babelspec.models import DEFAULT_TARGET, load_model

    target = Target(*load_model(DEFAULT_TARGET, dtype=dtype), forward=forward, options=OPTIONS)
    assert (target.lean is None) == (forward == "hf") and target.supports_trees
    greedy = SamplingConfig(greedy=True)
    prompt = target.tokenizer("Ẹnì kọ̀ọ̀kan ló ní ẹ̀tọ́ láti").input_ids
    plain = generate(target, make_drafter("none", target), prompt, max_new_tokens=24, sampling=greedy)
    chain = generate(target, make_drafter(f"ngram:{real_bigram},tree=0", target), prompt, gamma=4,
                     max_new_tokens=24, sampling=greedy)
    tree = generate(target, make_drafter(f"ngram:{real_bigram},tree=12", target), prompt, gamma=4,
                    max_new_tokens=24, sampling=greedy)
    recycled = generate(target, make_drafter(f"ngram:{real_bigram},tree=12,recycle=8", target), prompt, gamma=4,
                        max_new_tokens=24, sampling=greedy)  # fmt: skip
    assert recycled.token_ids == tree.token_ids == chain.token_ids == plain.token_ids
    assert tree.accepted / tree.steps >= chain.accepted / chain.steps


def test_the_tree_oracle_replays_the_chain_and_bounds_real_trees(real_bigram):
    """``bench tree``'s oracle on the real model and a real bigram: with one candidate per node it
    replays the chain's greedy run step for step; with four it needs fewer verifications, and
    never more than a real tree of that budget and branching."""
    from babelspec.bench.tree import oracle_steps
    from babelspec.drafters import make_drafter
    from babelspec.models import DEFAULT_TARGET, load_model

    target = Target(*load_model(DEFAULT_TARGET, dtype="float32"))
    greedy = SamplingConfig(greedy=True)
    prompt = target.tokenizer("Ẹnì kọ̀ọ̀kan ló ní ẹ̀tọ́ láti").input_ids
    truth = generate(target, make_drafter("none", target), prompt, max_new_tokens=24, sampling=greedy).token_ids
    chain = generate(target, make_drafter(f"ngram:{real_bigram},tree=0", target), prompt, gamma=8,
                     max_new_tokens=24, sampling=greedy)
    tree = generate(target, make_drafter(f"ngram:{real_bigram},tree=8,branch=4", target), prompt, gamma=8,
                    max_new_tokens=24, sampling=greedy)
    assert chain.token_ids == tree.token_ids == truth and len(truth) == 24
    probe = make_drafter(f"ngram:{real_bigram},tree=0", target)
    assert oracle_steps(probe, prompt, truth, 8, 1) == chain.steps
    assert oracle_steps(probe, prompt, truth, 8, 4) <= tree.steps
    assert oracle_steps(probe, prompt, truth, 8, 4) < chain.steps


class LeafTreeDrafter(Drafter):
    """Four chains of two from the pending token, the first one the target's own greedy
    continuation (``truth``): under greedy decoding every step ends at a leaf."""

    name = "leaf-tree"
    vocab_size = VOCAB

    def __init__(self, truth: list[int]) -> None:
        self.truth = truth

    def start(self, context_ids, sampling, generator) -> None:
        self.pos = 0

    def propose(self, gamma: int) -> Draft:
        right = self.truth[self.pos : self.pos + 2]
        wrong = [t for t in range(VOCAB) if t != right[0]][:3]
        tokens = right + [x for w in wrong for x in (w, w)]
        return Draft.tree(tokens, [-1, 0, -1, 2, -1, 4, -1, 6], Probs.point(tokens), forwards=len(tokens))

    def commit(self, verdict: Verdict) -> None:
        assert verdict.kept == self.truth[self.pos : self.pos + 2]  # the leaf of the right chain
        assert verdict.drafted == 8 and verdict.depth == 2 and not verdict.rejected
        self.pos += len(verdict.kept) + 1


def test_f_of_a_tree_whose_steps_all_end_at_a_leaf_is_its_bound(gemma):
    """A step keeps at most depth + 1 = 3 tokens; it pays for 8 nodes: f = 3 / (8 c + 1)."""
    target = Target(gemma, forward="lean")
    greedy = SamplingConfig(greedy=True)
    plain = generate(target, _none(), PROMPT, max_new_tokens=12, sampling=greedy)
    res = generate(target, LeafTreeDrafter(plain.token_ids), PROMPT, gamma=2, max_new_tokens=12, sampling=greedy)
    assert res.token_ids == plain.token_ids and res.steps == 4
    assert res.proposed_per_step == [8] * 4 and res.depth_per_step == [2] * 4
    assert res.accepted_per_step == [2] * 4 and res.rejected_per_step == [0] * 4
    assert res.alpha == 1.0 and res.rejections == 0
    assert res.theoretical_speedup() == pytest.approx(3 / (8 * res.c + 1))
    assert res.theoretical_speedup(c=0.0) == pytest.approx(3.0)  # never above what a step keeps
