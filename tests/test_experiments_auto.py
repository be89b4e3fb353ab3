"""The `auto` drafter: builds the router's choice for the language, falls back to plain
decoding, and stops drafting online when its own acceptance says drafting does not pay."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from babelspec.drafters import make_drafter
from babelspec.drafters.auto import WARMUP_STEPS, RoutedDrafter
from babelspec.drafters.base import Draft, Drafter, Verdict
from babelspec.engine import generate
from babelspec.router import Route
from babelspec.sampling import SamplingConfig
from babelspec.target import Target


@pytest.fixture(scope="module")
def target():
    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                         max_position_embeddings=512)  # fmt: skip
    return Target(Qwen3ForCausalLM(config).eval())


def _router(path, routes):
    base = {"alpha": 0.5, "theoretical_f": 1.2, "predicted_speedup": 1.3, "source": "measured"}
    path.write_text(json.dumps({"version": 1, "target": "tiny", "min_speedup": 1.0,
                                "routes": [{**base, **r} for r in routes]}))  # fmt: skip
    return path


def test_auto_uses_the_route_of_the_language_and_task(target, tmp_path):
    path = _router(tmp_path / "router.json", [
        {"language": "amh", "task": "story", "drafter": "self1", "spec": "self:1", "gamma": 2, "c": 0.0},
        {"language": "amh", "task": "*", "drafter": "none", "spec": "none", "gamma": 0, "c": None},
    ])
    drafter = make_drafter(f"auto:{path}", target, lang="amh", task="story")
    assert drafter.route.drafter == "self1" and drafter.inner is not None
    res = generate(target, drafter, [1, 2, 3], gamma=4, max_new_tokens=24,
                   sampling=SamplingConfig.paper(seed=1))  # fmt: skip
    assert res.proposed > 0
    assert max(res.proposed_per_step) <= 2  # the route's gamma caps the engine's
    plain = make_drafter(f"auto:{path}", target, lang="amh")  # task unknown: the "*" route
    assert plain.routes_to_plain and not plain.drafting
    res = generate(target, plain, [1, 2, 3], gamma=4, max_new_tokens=8, sampling=SamplingConfig.paper())
    assert res.proposed == 0 and res.n_tokens == 8


def test_auto_stops_drafting_when_online_speedup_falls_below_one(target, tmp_path):
    # A drafter as costly as 5 target forwards can never pay: after the warm-up it stops.
    path = _router(tmp_path / "router.json", [
        {"language": "yor", "task": "translation", "drafter": "self1", "spec": "self:1", "gamma": 3, "c": 5.0},
    ])
    drafter = make_drafter(f"auto:{path}", target, lang="yo", task="translation")
    res = generate(target, drafter, [4, 5, 6], gamma=3, max_new_tokens=60, sampling=SamplingConfig.paper())
    assert not drafter.drafting
    drafted_steps = sum(1 for p in res.proposed_per_step if p)
    assert drafted_steps == 8 and res.n_tokens == 60  # warm-up steps only, then plain decoding


def test_auto_errors_are_clear(target, tmp_path):
    path = _router(tmp_path / "router.json", [
        {"language": "amh", "task": "story", "drafter": "none", "spec": "none", "gamma": 0, "c": None},
    ])
    with pytest.raises(ValueError, match="needs a language"):
        make_drafter(f"auto:{path}", target)
    with pytest.raises(ValueError, match="no route for language 'yor'"):
        make_drafter(f"auto:{path}", target, lang="yor")
    with pytest.raises(ValueError, match="babelspec run"):
        make_drafter(f"auto:{tmp_path / 'missing.json'}", target, lang="amh")


class _OneToken(Drafter):
    """Proposes one token (whatever gamma allows): a drafter that drafts less than gamma."""

    def start(self, context_ids, sampling, generator) -> None:
        pass

    def propose(self, gamma: int) -> Draft:
        return Draft.point([7])

    def commit(self, verdict: Verdict) -> None:
        pass


def _drive(drafter, accepted: list[int]) -> None:
    drafter.start([1], SamplingConfig.paper(), torch.Generator())
    for n in accepted:
        drafter.propose(8)
        drafter.commit(Verdict([7] * n, 3))


def _route(**costs) -> Route:
    return Route(language="amh", task="story", drafter="one", spec="one", gamma=8,
                 predicted_speedup=1.2, source="measured", **costs)  # fmt: skip


def test_online_switch_off_counts_the_measured_verification_cost():
    # a free drafter whose every token is accepted: f = 2 with a verify cost of 1, but here
    # verifying costs 3 plain steps, so 2 tokens per step for 3 steps' time does not pay
    drafter = RoutedDrafter(_OneToken(), _route(c=0.0, draft_cost=0.0, verify_cost=3.0))
    _drive(drafter, [1] * WARMUP_STEPS)
    assert drafter.online_speedup() == pytest.approx(2 / 3)
    assert not drafter.drafting


def test_online_switch_off_counts_the_tokens_actually_drafted():
    # one token drafted per step, half of them accepted, a draft forward costs 0.4 steps:
    # f(0.5, 1, 0.4) = 1.5 / 1.4 > 1 pays; f with the route's gamma 8 (0.48) would not
    drafter = RoutedDrafter(_OneToken(), _route(c=0.4, draft_cost=0.4, verify_cost=1.0))
    _drive(drafter, [1, 0] * (WARMUP_STEPS // 2))
    assert drafter.online_speedup() == pytest.approx(1.5 / 1.4)
    assert drafter.drafting


def test_a_route_for_every_task_fills_its_spec_with_the_requests_task(target, tmp_path):
    from ngram_tiny import CORPUS, word_tokenizer

    from babelspec.ngram import CountConfig, train

    train(CORPUS, word_tokenizer(), CountConfig(order=2)).save(tmp_path / "story.ngram")
    path = _router(tmp_path / "router.json", [
        {"language": "amh", "task": "*", "drafter": "bigram", "spec": f"ngram:{tmp_path}/{{task}}.ngram",
         "gamma": 2, "c": 0.0},
    ])  # fmt: skip
    drafter = make_drafter(f"auto:{path}", target, lang="amh", task="story")
    assert drafter.inner.name == "ngram:story.ngram"
