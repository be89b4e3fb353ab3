"""A drafter around another (``DrafterWrapper``, the router's ``auto``) keeps the whole drafter
contract: ``auto`` routed to each kind of drafter behaves as that drafter does on its own,
trees, the target's candidates for recycling, self and int8 drafters included, under greedy
decoding and the paper's sampling."""

from __future__ import annotations

import inspect
import json

import pytest
from experiments_fixtures import tiny_model_dir

from babelspec.data import corpus
from babelspec.drafters import make_drafter
from babelspec.drafters.base import Drafter, DrafterWrapper
from babelspec.engine import generate
from babelspec.ngram import CountConfig, train
from babelspec.sampling import SamplingConfig
from babelspec.target import load_target


def _contract() -> set[str]:
    """Every public method and attribute a drafter has: what a wrapper must forward."""
    names = {n for n, _ in inspect.getmembers(Drafter) if not n.startswith("_")}
    return names | {n for n in Drafter.__annotations__ if not n.startswith("_")}


class _Recording(Drafter):
    """A drafter that records every call of the contract and returns marked values."""

    name, vocab_size, preferred_gamma, observes_top = "recorded", 123, 7, 5

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def start(self, context_ids, sampling, generator) -> None:
        self.calls.append(("start", tuple(context_ids), sampling, generator))

    def propose(self, gamma: int):
        self.calls.append(("propose", gamma))
        return ("draft", gamma)

    def commit(self, verdict) -> None:
        self.calls.append(("commit", verdict))

    def forward_seconds(self) -> list[float]:
        self.calls.append(("forward_seconds",))
        return [0.25]


def test_the_wrapper_forwards_every_part_of_the_contract():
    """Each method of the contract called on a wrapper reaches the drafter inside with its
    arguments and returns its value; each attribute reads the inner drafter's."""
    assert {"start", "propose", "commit", "observes_top", "forward_seconds"} <= _contract()
    inner = _Recording()
    wrapper = DrafterWrapper(inner)
    sampling, generator, verdict = SamplingConfig(greedy=True), object(), object()
    calls = {"start": lambda: wrapper.start([1, 2], sampling, generator), "propose": lambda: wrapper.propose(3),
             "commit": lambda: wrapper.commit(verdict), "forward_seconds": wrapper.forward_seconds}  # fmt: skip
    expected = {"start": ("start", (1, 2), sampling, generator), "propose": ("propose", 3),
                "commit": ("commit", verdict), "forward_seconds": ("forward_seconds",)}  # fmt: skip
    returns = {"propose": ("draft", 3), "forward_seconds": [0.25]}
    for name in sorted(_contract()):
        if callable(getattr(Drafter, name)):
            assert name in calls, f"the contract's {name} is not exercised here: add it to this test"
            before = len(inner.calls)
            assert calls[name]() == returns.get(name), name
            assert inner.calls[before:] == [expected[name]], f"DrafterWrapper.{name} does not reach the inner drafter"
        else:
            assert getattr(wrapper, name) == getattr(inner, name), f"DrafterWrapper drops {name}"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("wrapped")
    target = load_target(tiny_model_dir(root / "model"), dtype="float32")
    assert target.supports_trees  # the n-gram drafts trees under greedy decoding here
    table = root / "yor.ngram"
    train(corpus.monolingual("yor", "train")[:400], target.tokenizer, CountConfig(order=2)).save(table)
    return target, table, root


KINDS = {  # route name -> spec ({ngram}: the table trained above)
    "chain": "ngram:{ngram},tree=0,lookup=0",
    "tree": "ngram:{ngram},lookup=0",  # the default: a tree under greedy, chains under sampling
    "sampled-tree": "ngram:{ngram},tree=8,branch=4,lookup=0",
    "recycle": "ngram:{ngram},recycle=4,lookup=0",
    "self": "self:1",
    "int8": "int8:yor",
}
SAMPLINGS = {"greedy": SamplingConfig(greedy=True), "paper": SamplingConfig.paper(seed=11)}


@pytest.mark.parametrize("sampling", sorted(SAMPLINGS))
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_auto_drafts_as_its_route_drafts(tiny, kind, sampling):
    target, table, root = tiny
    spec = KINDS[kind].format(ngram=table)
    router = root / f"router-{kind}.json"
    router.write_text(json.dumps({"version": 1, "target": "tiny", "min_speedup": 0.0, "routes": [
        {"language": "yor", "task": "translation", "drafter": kind, "spec": spec, "gamma": 3, "c": 0.01,
         "alpha": 0.5, "theoretical_f": 1.2, "predicted_speedup": 1.3, "source": "measured"}]}))  # fmt: skip
    prompt = target.tokenizer("Translate English: Good morning\nYoruba:")["input_ids"]
    cfg = SAMPLINGS[sampling]
    runs = {}
    for name, drafter_spec in (("auto", f"auto:{router}"), ("direct", spec)):
        drafter = make_drafter(drafter_spec, target, lang="yor", task="translation")
        runs[name] = generate(target, drafter, prompt, gamma=3, max_new_tokens=24, sampling=cfg)
    auto, direct = runs["auto"], runs["direct"]
    assert auto.proposed > 0
    # the same drafter: the same drafts, the same verdicts, the same tokens
    assert auto.proposed_per_step == direct.proposed_per_step
    assert auto.accepted_per_step == direct.accepted_per_step
    assert auto.token_ids == direct.token_ids
    if kind == "tree" and sampling == "greedy" or kind == "sampled-tree":
        assert any(d < p for d, p in zip(auto.depth_per_step, auto.proposed_per_step))  # trees were drafted
    if sampling == "greedy":
        plain = generate(target, make_drafter("none", target), prompt, gamma=1, max_new_tokens=24, sampling=cfg)
        assert auto.token_ids == plain.token_ids


def test_auto_hands_the_target_candidates_to_a_recycling_route(tiny):
    target, table, root = tiny
    spec = KINDS["recycle"].format(ngram=table)
    router = root / "router-recycle-only.json"
    router.write_text(json.dumps({"version": 1, "target": "tiny", "min_speedup": 0.0, "routes": [
        {"language": "yor", "task": "*", "drafter": "recycle", "spec": spec, "gamma": 3, "c": 0.01,
         "alpha": 0.5, "theoretical_f": 1.2, "predicted_speedup": 1.3, "source": "measured"}]}))  # fmt: skip
    drafter = make_drafter(f"auto:{router}", target, lang="yor")
    assert drafter.observes_top == 4
    generate(target, drafter, target.tokenizer("Ẹ kú àárọ̀")["input_ids"], gamma=3, max_new_tokens=8,
             sampling=SamplingConfig(greedy=True))  # fmt: skip
    assert drafter.inner._recycled  # the target's candidates reached the n-gram
