"""The n-gram drafter: modes, unseen-context policies, rollback, spec errors, and losslessness
of its drafts through the engine on a tiny random target."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch
from ngram_tiny import CORPUS, WORDS, ids, word_tokenizer
from stats import chi_square_pvalue, exact_pair_distribution
from tiny import tiny_qwen3

from babelspec.drafters import make_drafter
from babelspec.drafters.base import Verdict
from babelspec.drafters.ngram_drafter import NgramDraftConfig, NgramDrafter
from babelspec.engine import generate
from babelspec.ngram import CountConfig, TokenizerMismatchError, count_ngrams, train
from babelspec.sampling import SamplingConfig
from babelspec.target import Target

V = len(WORDS)


@pytest.fixture(scope="module")
def tokenizer():
    return word_tokenizer()


@pytest.fixture(scope="module")
def bigram(tokenizer):
    return train(CORPUS, tokenizer, CountConfig(order=2))


@pytest.fixture(scope="module")
def bigram_file(bigram, tmp_path_factory):
    path = tmp_path_factory.mktemp("ngram") / "tiny.ngram"
    bigram.save(path)
    return path


def drafter(model, prompt: str, sampling: SamplingConfig = SamplingConfig(), seed: int = 0, **options):
    options.setdefault("lookup", 0)  # the trained model alone, unless a test asks for lookup
    d = NgramDrafter(model, NgramDraftConfig(**options), vocab_size=V)
    d.start(ids(prompt), sampling, torch.Generator().manual_seed(seed))
    return d


def words(draft) -> list[str]:
    return [WORDS[t] for t in draft.tokens.tolist()]


def test_point_mass_walks_the_most_likely_path(bigram):
    draft = drafter(bigram, "d", mode="top1").propose(4)
    # "f" was never seen as a context: the default backs off to the unigram, whose top is "a"
    assert words(draft) == ["e", "f", "a", "b"]
    assert draft.probs.width == 1  # a point mass


def test_unseen_context_stop(bigram):
    d = drafter(bigram, "a b d e f", mode="top1", unseen="stop")
    assert len(d.propose(4)) == 0
    d = drafter(bigram, "d", mode="top1", unseen="stop")
    assert words(d.propose(4)) == ["e", "f"]


def test_unseen_context_backoff_uses_the_unigram(bigram):
    d = drafter(bigram, "f", mode="sample", unseen="backoff")
    draft = d.propose(1)
    assert draft.probs.ids is not None  # compact rows
    row = draft.probs.dense(V)[0]
    expected = torch.tensor([0, 4, 4, 3, 2, 1, 1]) / 15
    assert torch.allclose(row, expected.float())
    # min_backoff=1: a bigram model then never falls back to the unigram
    assert len(drafter(bigram, "f", unseen="backoff", min_backoff=1).propose(4)) == 0


def test_unseen_context_uniform_is_the_papers_fallback(bigram):
    d = drafter(bigram, "f", mode="sample", unseen="uniform")
    draft = d.propose(3)
    assert len(draft) == 3 and draft.probs.ids is None and draft.probs.probs.shape == (3, V)  # full rows
    assert np.allclose(draft.probs.probs[0], 1 / V)
    assert np.allclose(draft.probs.probs.sum(1), 1.0)


def test_sampled_drafts_follow_the_ngram_distribution(bigram):
    first = [drafter(bigram, "a b", seed=s, mode="sample").propose(1).tokens.item() for s in range(3000)]
    freq = np.bincount(first, minlength=V) / len(first)
    assert freq[ids("c")[0]] == pytest.approx(2 / 3, abs=0.03)
    assert freq[ids("d")[0]] == pytest.approx(1 / 3, abs=0.03)
    draft = drafter(bigram, "a b", seed=0, mode="sample").propose(4)
    # each row is the context's distribution, and the drafted token lies in its support
    assert np.allclose(draft.probs.probs.sum(1), 1.0)
    assert (draft.probs.prob_of(draft.tokens.numpy()) > 0).all()


def test_confidence_threshold_stops_early(bigram):
    assert words(drafter(bigram, "a", mode="top1", threshold=0.7).propose(4)) == ["b"]  # p(c|b) = 2/3
    assert words(drafter(bigram, "a", mode="top1", threshold=0.6).propose(4)) == ["b", "c", "a", "b"]


def test_nucleus_mode_cuts_rows_like_the_target(bigram):
    d = drafter(bigram, "a b", SamplingConfig(top_p=0.5), mode="nucleus")
    draft = d.propose(1)
    assert words(draft) == ["c"] and draft.probs.dense(V)[0, ids("c")[0]] == 1.0


def test_auto_mode_is_point_mass_under_greedy_decoding(bigram):
    assert drafter(bigram, "a", SamplingConfig(greedy=True)).propose(2).probs.width == 1
    assert drafter(bigram, "a", SamplingConfig()).propose(2).probs is not None


def test_commit_rolls_back_to_the_accepted_prefix(bigram):
    d = drafter(bigram, "a", mode="top1")
    assert words(d.propose(4)) == ["b", "c", "a", "b"]
    d.commit(Verdict(ids("b"), ids("d")[0]))  # kept "b", then the verifier appended "d"
    assert words(d.propose(2)) == ["e", "f"]
    d.commit(Verdict(ids("e f"), ids("a")[0]))
    assert words(d.propose(1)) == ["b"]


def test_prompt_lookup_prefers_a_longer_match_in_the_text(bigram):
    plain = drafter(bigram, "c d a c d", mode="top1")
    assert words(plain.propose(1)) == ["e"]  # the bigram says d -> e
    looked = drafter(bigram, "c d a c d", mode="top1", lookup=3, lookup_min=2)
    assert words(looked.propose(3)) == ["a", "c", "d"]  # "c d" was followed by "a" in the prompt


def test_bad_specs_fail_clearly(bigram_file, tokenizer):
    target = Target(tiny_qwen3(vocab=V, seed=1), tokenizer)
    with pytest.raises(ValueError, match="unknown n-gram mode 'best'"):
        make_drafter(f"ngram:{bigram_file},mode=best", target)
    with pytest.raises(ValueError, match="unknown n-gram drafter option 'gama'"):
        make_drafter(f"ngram:{bigram_file},gama=3", target)
    with pytest.raises(ValueError, match="is not a float"):
        make_drafter(f"ngram:{bigram_file},threshold=high", target)
    with pytest.raises(ValueError, match="name=value"):
        make_drafter(f"ngram:{bigram_file},top1", target)
    with pytest.raises(ValueError, match="does not exist"):
        make_drafter("ngram:missing.ngram", target)
    other = Target(tiny_qwen3(vocab=V, seed=1), word_tokenizer(["<unk>", "a", "b", "c", "d", "f", "e"]))
    with pytest.raises(TokenizerMismatchError, match="retrain it"):
        make_drafter(f"ngram:{bigram_file}", other)
    assert make_drafter(f"ngram:{bigram_file},mode=top1,unseen=stop", target).config.unseen == "stop"


def test_proposals_take_microseconds():
    rng = np.random.default_rng(0)
    model = count_ngrams((rng.zipf(1.3, 300_000) % 20000).astype(np.int64), config=CountConfig(order=2))
    d = NgramDrafter(model, NgramDraftConfig(mode="sample", lookup=0), vocab_size=20000)
    d.start([1, 2, 3], SamplingConfig(), torch.Generator().manual_seed(0))
    per_token = []
    for i in range(3000):
        t0 = time.perf_counter()
        draft = d.propose(4)
        per_token.append((time.perf_counter() - t0) / max(len(draft), 1))
        d.commit(Verdict(draft.tokens.tolist()[: i % 3], 1 + i % 50))
    assert np.median(per_token) < 20e-6  # the benchmark holds the real goal (2 µs)


# --- losslessness through the engine ------------------------------------------------------
WARPED = SamplingConfig(temperature=0.9, top_k=5, top_p=0.9, repetition_penalty=1.3, repetition_window=3)


@pytest.fixture(scope="module")
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model is fastest on one thread
    yield
    torch.set_num_threads(before)


# (prompt, drafter options, sampling): sparse sampled rows, point masses, the dense uniform
# fallback (the prompt ends in the unseen context "f"), nucleus rows and prompt-lookup rows.
LOSSLESS_CASES = {
    "sample-backoff": ("a b", "mode=sample,unseen=backoff", WARPED),
    "top1-stop": ("a b", "mode=top1,unseen=stop", SamplingConfig()),
    "uniform-nucleus-lookup": ("c a b d e f", "mode=nucleus,unseen=uniform,lookup=3,lookup_min=1", WARPED),
    # Token Recycling: from the second step on, rows mix in the target's own candidates
    "sample-recycle": ("a b", "mode=sample,recycle=3", WARPED),
    "top1-recycle": ("a b", "mode=top1,recycle=2", SamplingConfig()),
}


def first_pairs(target, d, prompt, sampling, samples):
    """(counts of the first two tokens, drafted, accepted) over ``samples`` seeded generations."""
    counts = np.zeros(V * V)
    proposed = accepted = 0
    for seed in range(samples):
        config = SamplingConfig(**{**sampling.to_dict(), "seed": seed})
        out = generate(target, d, prompt, gamma=2, max_new_tokens=3, sampling=config)
        counts[out.token_ids[0] * V + out.token_ids[1]] += 1
        proposed += out.proposed
        accepted += out.accepted
    return counts, proposed, accepted


@pytest.mark.parametrize("case", sorted(LOSSLESS_CASES))
def test_ngram_drafts_keep_the_engine_lossless(case, bigram_file, tokenizer, one_thread):
    prompt_text, options, sampling = LOSSLESS_CASES[case]
    model = tiny_qwen3(vocab=V, seed=4)
    target = Target(model, tokenizer)
    d = make_drafter(f"ngram:{bigram_file},{options}", target)
    prompt = ids(prompt_text)
    samples = 700
    counts, proposed, accepted = first_pairs(target, d, prompt, sampling, samples)
    assert 0 < accepted < proposed  # drafts were both kept and rejected: the test has teeth
    exact = exact_pair_distribution(model, prompt, sampling).numpy()
    assert chi_square_pvalue(counts, exact) > 1e-3
    assert 0.5 * np.abs(counts / samples - exact).sum() < 0.1


# --- token trees ----------------------------------------------------------------------------
def test_a_tree_expands_the_most_probable_paths_first(bigram):
    d = drafter(bigram, "a", mode="top1", tree=6, branch=2)
    draft = d.propose(3)
    parents = draft.parents.tolist()
    assert draft.is_tree and 3 <= len(draft) <= 6 and draft.depth() <= 3  # contexts with one continuation end early
    assert all(-1 <= p < i for i, p in enumerate(parents))
    chain = drafter(bigram, "a", mode="top1").propose(3)
    assert draft.first_chain().tokens.tolist() == chain.tokens.tolist()  # the first guesses: the top-1 walk
    for node in set(parents):  # siblings are distinct candidates
        kids = [draft.tokens[i].item() for i, p in enumerate(parents) if p == node]
        assert len(kids) == len(set(kids)) <= 2
    assert draft.probs.width == 1  # point masses: the multi-candidate rule keeps them lossless
    d.commit(Verdict([draft.tokens[0].item()], 3))
    assert d._history[-2:] == [draft.tokens[0].item(), 3]


def test_a_sampled_tree_is_independent_chains_from_the_pending_token(bigram):
    """Drawing: ``branch`` chains of depth min(gamma, budget // branch), each node drawn from the
    row of its own path, carried as the node's probability row (not a point mass)."""
    d = drafter(bigram, "a", tree=8, branch=2)
    draft = d.propose(4)
    parents = draft.parents.tolist()
    roots = [i for i, p in enumerate(parents) if p == -1]
    assert len(roots) == 2 and draft.depth() <= 4 and len(draft) <= 8
    for i, p in enumerate(parents):  # below the root, each node has at most one child, its next in the chain
        assert p == -1 or p == i - 1
        assert parents.count(i) <= 1
    assert draft.probs.width > 1  # each node's n-gram row, for the residual rule
    for i, t in enumerate(draft.tokens.tolist()):
        assert draft.probs.prob(i, t) > 0  # drawn from its own row
    firsts = {tuple(drafter(bigram, "a b", seed=s, tree=8, branch=4).propose(2).tokens[[0, 2, 4, 6]].tolist())
              for s in range(20)}  # fmt: skip
    assert len(firsts) > 1  # the first guesses ("b" is followed by c or d) are draws, not the top-4


def test_tree_and_recycling_options_are_checked(bigram_file, tokenizer):
    target = Target(tiny_qwen3(vocab=V, seed=4), tokenizer)
    for options, message in (("tree=-2", "tree must be >= 0"), ("tree=8,branch=0", "branch"),
                             ("recycle=40", r"recycle must be in \[0, width=32\]"), ("recycle=-1", "recycle must be in")):
        with pytest.raises(ValueError, match=message):
            make_drafter(f"ngram:{bigram_file},{options}", target)


@pytest.mark.parametrize("recycle", [0, 3], ids=["bigram", "recycling"])
@pytest.mark.parametrize("sampling", [WARPED, SamplingConfig()], ids=["warped", "plain"])
def test_ngram_trees_keep_the_engine_lossless(sampling, recycle, bigram_file, tokenizer, one_thread):
    from tiny import tiny_gemma3

    model = tiny_gemma3(vocab=V, seed=3, sliding_window=4)
    model.set_attn_implementation("eager")  # the lean forward, which verifies trees
    target = Target(model, tokenizer)
    assert target.supports_trees
    d = make_drafter(f"ngram:{bigram_file},tree=6,branch=3,lookup=0,recycle={recycle}", target)
    prompt = ids("a b")
    samples = 700
    counts, proposed, accepted = first_pairs(target, d, prompt, sampling, samples)
    assert 0 < accepted < proposed
    exact = exact_pair_distribution(model, prompt, sampling).numpy()
    assert chi_square_pvalue(counts, exact) > 1e-3


def test_the_default_is_a_tree_under_greedy_decoding_where_the_target_verifies_trees(bigram_file, tokenizer):
    from tiny import tiny_gemma3

    from babelspec.drafters.ngram_drafter import DEFAULT_TREE

    gemma = tiny_gemma3(vocab=V, seed=3)
    gemma.set_attn_implementation("eager")
    from tiny import tiny_qwen35

    qwen = tiny_qwen3(vocab=V, seed=4)  # Hugging Face's forward verifies its trees too
    recurrent = tiny_qwen35(vocab=V)  # linear attention: no trees
    for model, trees in ((gemma, True), (qwen, True), (recurrent, False)):
        d = make_drafter(f"ngram:{bigram_file},lookup=0", Target(model, tokenizer))
        for sampling, budget in ((SamplingConfig(greedy=True), DEFAULT_TREE["greedy"]), (WARPED, DEFAULT_TREE["sample"])):
            d.start(ids("a b"), sampling, torch.Generator().manual_seed(0))
            draft = d.propose(3)
            assert draft.is_tree == (trees and budget > 0)
        explicit = make_drafter(f"ngram:{bigram_file},lookup=0,tree=0", Target(model, tokenizer))
        explicit.start(ids("a b"), SamplingConfig(greedy=True), torch.Generator().manual_seed(0))
        assert not explicit.propose(3).is_tree  # tree=0: a chain, whatever the target
        assert explicit.preferred_gamma is None and d.preferred_gamma is None


def test_an_explicit_tree_prefers_a_depth_up_to_its_budget(bigram_file, tokenizer):
    """``tree=N`` without a γ: best-first growth may go N deep (bench tree's "deep" trees)."""
    from babelspec.drafters.base import DEFAULT_GAMMA, resolve_gamma

    target = Target(tiny_qwen3(vocab=V, seed=4), tokenizer)
    tree = make_drafter(f"ngram:{bigram_file},tree=8", target)
    assert resolve_gamma(None, tree) == 8 and resolve_gamma(3, tree) == 3
    assert resolve_gamma(None, make_drafter(f"ngram:{bigram_file}", target)) == DEFAULT_GAMMA


# --- Token Recycling -----------------------------------------------------------------------
def test_recycled_candidates_mix_evenly_with_the_corpus_row(bigram):
    d = drafter(bigram, "a b", mode="sample", recycle=2)
    b, c, dd, e, f = (ids(w)[0] for w in "b c d e f".split())
    d.recycle([b], np.array([[e, c]]), np.array([[0.8, 0.2]], dtype=np.float32))
    row = d.propose(1).probs.dense(V)[0].numpy()
    expected = np.zeros(V)
    expected[[c, dd, e]] = [(2 / 3 + 0.2) / 2, (1 / 3) / 2, 0.8 / 2]  # the bigram says c 2/3, d 1/3 after b
    assert np.allclose(row, expected, atol=1e-5)
    top1 = drafter(bigram, "a b", mode="top1", recycle=2)
    top1.recycle([b], np.array([[e, f]]), np.array([[0.9, 0.1]], dtype=np.float32))
    assert words(top1.propose(1)) == ["e"]  # 0.45 against c's 1/3
    top1.start(ids("a b"), SamplingConfig(), torch.Generator().manual_seed(0))
    assert words(top1.propose(1)) == ["c"]  # per request: a new start forgets what was recycled


def test_recycled_candidates_serve_contexts_the_corpus_never_saw(bigram):
    d = drafter(bigram, "d e f", mode="top1", recycle=2, min_backoff=1)
    assert len(d.propose(2)) == 0  # "f" never begins a bigram, and no unigram fallback
    d.recycle(ids("f"), np.array([ids("c a")]), np.array([[0.7, 0.3]], dtype=np.float32))
    assert words(d.propose(2)) == ["c", "a"]  # recycled after f, then the bigram after c


def test_the_engine_hands_the_target_top_candidates_of_every_verified_row(bigram_file, tokenizer):
    model = tiny_qwen3(vocab=V, seed=4)
    target = Target(model, tokenizer)
    d = make_drafter(f"ngram:{bigram_file},mode=top1,tree=0,recycle=3,lookup=0", target)  # a chain: rows in order
    seen: list[tuple[list[int], np.ndarray, np.ndarray]] = []
    commit = d.commit
    d.commit = lambda v: (seen.append((list(v.inputs), v.top[0].copy(), v.top[1].copy())), commit(v))
    prompt = ids("a b c")
    out = generate(target, d, prompt, gamma=3, max_new_tokens=6, sampling=SamplingConfig(greedy=True))
    assert len(seen) == out.steps
    inputs, top, probs = seen[0]
    assert inputs[0] == prompt[-1] and len(inputs) == 1 + out.proposed_per_step[0]
    with torch.no_grad():
        logits = model(torch.tensor([prompt[:-1] + inputs])).logits[0, len(prompt) - 1 :].float()
    best = logits.topk(3).values.numpy()
    picked = np.take_along_axis(logits.numpy(), top, axis=1)
    # each row's 3 most likely candidates, most likely first (up to the rounding of a whole-sequence
    # forward against the engine's cached steps, which may swap near ties)
    assert np.allclose(picked, best, atol=1e-4) and (np.diff(picked, axis=1) <= 1e-4).all()
    assert np.allclose(probs, torch.softmax(torch.from_numpy(best), -1).numpy(), atol=1e-4)
