"""Stopping: speculative decoding stops exactly where plain decoding does, whatever the drafter,
also when a stop string and an EOS arrive in the same verification step."""

from __future__ import annotations

import pytest
import torch
from tiny import ScriptedDrafter, tiny_qwen3
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from babelspec.drafters.base import NoDrafter
from babelspec.drafters.model import ModelDrafter
from babelspec.drafters.ngram_drafter import NgramDraftConfig, NgramDrafter
from babelspec.drafters.selfdraft import SelfDrafter, truncated_model
from babelspec.drafters.vocabhead import RestrictedHeadLM, VocabHeadDrafter
from babelspec.engine import generate
from babelspec.ngram import CountConfig, train
from babelspec.sampling import SamplingConfig
from babelspec.target import Target

V = 64
WORDS = [f"t{i:02d}" for i in range(V)]  # no word is part of another, or spans two
GREEDY = SamplingConfig(greedy=True, repetition_penalty=2.0, repetition_window=6)
PROMPT = [3, 17, 9, 40, 22]


def word_tokenizer() -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(WORDS)}, unk_token=WORDS[0]))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token=WORDS[0])


@pytest.fixture(scope="module")
def toy():
    """A tiny target whose greedy text has a token j (the stop string) followed by a token used
    as EOS, neither seen before: plain decoding stops at j on the stop string."""
    model, tokenizer = tiny_qwen3(vocab=V, seed=5), word_tokenizer()
    free = generate(Target(model, tokenizer), NoDrafter(), PROMPT, max_new_tokens=16, sampling=GREEDY).token_ids
    j = next(i for i in range(2, 14) if free[i] not in free[:i] and free[i + 1] not in free[: i + 1])
    return model, tokenizer, free, j


def drafters(model, tokenizer, free):
    ngram = train([tokenizer.decode(PROMPT + free)], tokenizer, CountConfig(order=2))
    return {
        "scripted": ScriptedDrafter(free + [0] * 8, vocab_size=V),
        "model": ModelDrafter(model),  # the target itself: every draft is right
        "self": SelfDrafter(truncated_model(model, 2), None, 2, name="self:2"),
        "head": VocabHeadDrafter(RestrictedHeadLM(model, torch.arange(V)), name="head"),
        "ngram": NgramDrafter(ngram, NgramDraftConfig(lookup=0), vocab_size=V),
    }


@pytest.mark.parametrize("kind", ["scripted", "model", "self", "head", "ngram"])
@pytest.mark.parametrize("gamma", [2, 3, 4])
def test_a_stop_string_and_an_eos_in_one_step_stop_as_plain_decoding_does(toy, kind, gamma):
    model, tokenizer, free, j = toy
    target = Target(model, tokenizer)
    stop, eos = (WORDS[free[j]],), (free[j + 1],)
    plain = generate(target, NoDrafter(), PROMPT, max_new_tokens=16, sampling=GREEDY,
                     stop_strings=stop, eos_token_ids=eos)
    assert (plain.token_ids, plain.stop_reason) == (free[: j + 1], "stop_string")
    drafter = drafters(model, tokenizer, free)[kind]
    ours = generate(target, drafter, PROMPT, gamma=gamma, max_new_tokens=16, sampling=GREEDY,
                    stop_strings=stop, eos_token_ids=eos)
    assert (ours.token_ids, ours.text, ours.stop_reason) == (plain.token_ids, plain.text, plain.stop_reason)


@pytest.mark.parametrize("gamma", [2, 3])
def test_an_eos_before_a_stop_string_in_one_step_stops_on_the_eos(toy, gamma):
    model, tokenizer, free, j = toy
    target = Target(model, tokenizer)
    stop, eos = (WORDS[free[j + 1]],), (free[j],)
    plain = generate(target, NoDrafter(), PROMPT, max_new_tokens=16, sampling=GREEDY,
                     stop_strings=stop, eos_token_ids=eos)
    assert (plain.token_ids, plain.stop_reason) == (free[: j + 1], "eos")
    ours = generate(target, ScriptedDrafter(free + [0] * 8, vocab_size=V), PROMPT, gamma=gamma,
                    max_new_tokens=16, sampling=GREEDY, stop_strings=stop, eos_token_ids=eos)
    assert (ours.token_ids, ours.text, ours.stop_reason) == (plain.token_ids, plain.text, plain.stop_reason)
