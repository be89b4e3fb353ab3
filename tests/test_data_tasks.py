"""Task prompts render for every language with the default model's tokenizer."""

from __future__ import annotations

import pytest

from babelspec.data import LANGUAGES, PAPER_LANGUAGES
from babelspec.data.corpus import monolingual, parallel
from babelspec.data.tasks import Prompt, UnknownTaskError, get_task, task_names, topics, uses_chat

CODES = list(PAPER_LANGUAGES)


@pytest.fixture(scope="session")
def gemma_tokenizer():
    from babelspec.models import load_tokenizer

    return load_tokenizer("gemma-3-270m")


GEMMA_IT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<start_of_turn>{{ 'model' if m['role'] == 'assistant' "
    "else m['role'] }}\n{{ m['content'] }}<end_of_turn>\n{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)


@pytest.fixture(scope="session")
def chat_tokenizer(gemma_tokenizer):
    """The real Gemma tokenizer with Gemma's instruction-tuned chat template (as gemma-3-270m-it has)."""
    import copy

    tok = copy.deepcopy(gemma_tokenizer)
    tok.chat_template = GEMMA_IT_TEMPLATE
    return tok


def test_registry() -> None:
    assert {"translation", "story"} <= set(task_names())
    with pytest.raises(UnknownTaskError, match="unknown task 'qa'; known tasks: .*story.*translation"):
        get_task("qa")


def test_default_model_is_base(gemma_tokenizer) -> None:
    assert uses_chat(gemma_tokenizer, None) is False
    with pytest.raises(ValueError, match="no chat template"):
        uses_chat(gemma_tokenizer, True)


@pytest.mark.parametrize("code", CODES)
def test_translation_prompts_render(code: str, gemma_tokenizer) -> None:
    prompts = get_task("translation").prompts(code, gemma_tokenizer, 5)
    test_pairs = set(parallel(code, "test"))
    train_pairs = parallel(code, "train")
    assert len(prompts) == 5
    for p in prompts:
        assert isinstance(p, Prompt) and p.meta["template"] == "base" and p.stop_strings == ("\n",)
        assert (p.meta["english"], p.reference) in test_pairs
        name = LANGUAGES[code].display
        assert p.text.endswith(f"English: {p.meta['english']}\n{name}:")
        # the few-shot examples come from the train split, never from the test split
        blocks = p.text.split("\n\n")[:-1]
        assert 1 <= len(blocks) == p.meta["shots"] <= 4
        for block in blocks:
            en_line, tgt_line = block.strip().split("\n")
            shot = (en_line.removeprefix("English: "), tgt_line.removeprefix(f"{name}: "))
            assert shot in train_pairs and shot not in test_pairs
        assert len(gemma_tokenizer(p.text)["input_ids"]) < 1024
    again = get_task("translation").prompts(code, gemma_tokenizer, 5)
    assert [p.text for p in again] == [p.text for p in prompts]  # deterministic
    other = get_task("translation").prompts(code, gemma_tokenizer, 5, seed=1)
    assert [p.text for p in other] != [p.text for p in prompts]


def test_translation_fewer_items_than_asked(gemma_tokenizer) -> None:
    prompts = get_task("translation").prompts("haw", gemma_tokenizer, 500)
    assert len(prompts) == len(parallel("haw", "test"))


@pytest.mark.parametrize("code", CODES)
def test_story_prompts_render(code: str, gemma_tokenizer) -> None:
    prompts = get_task("story").prompts(code, gemma_tokenizer, 3)
    assert len(prompts) == 3
    train_text = set(monolingual(code, "train"))
    for p in prompts:
        assert p.reference is None and p.meta["template"] == "base"
        topic = p.meta["topic"]
        assert f"about a {topic['adjective']} {topic['noun']}" in p.text or \
            f"about an {topic['adjective']} {topic['noun']}" in p.text
        assert p.text.endswith(f"Text ({LANGUAGES[code].display}):")
        demo = p.text.split("\n")[3].split("): ", 1)[1]
        assert demo in train_text  # the in-language opener is training text
        assert len(gemma_tokenizer(p.text)["input_ids"]) < 512


def test_story_topics_same_across_languages_and_splits_disjoint(gemma_tokenizer) -> None:
    story = get_task("story")
    a = [p.meta["topic"] for p in story.prompts("amh", gemma_tokenizer, 200)]
    b = [p.meta["topic"] for p in story.prompts("zgh", gemma_tokenizer, 200)]
    assert a == b and len({(t["adjective"], t["noun"]) for t in a}) == 200
    train = [p.meta["topic"] for p in story.prompts("amh", gemma_tokenizer, 200, split="train")]
    assert not {(t["adjective"], t["noun"]) for t in a} & {(t["adjective"], t["noun"]) for t in train}


def test_topics_deterministic() -> None:
    assert topics(200) == topics(200)
    assert topics(200, seed=3) == topics(200, seed=3) != topics(200)
    assert len(topics(1000)) == 1000
    with pytest.raises(ValueError, match="asked for 5000 topics"):
        topics(5000)
    with pytest.raises(ValueError, match="positive integer"):
        topics(0)


def test_chat_templates(chat_tokenizer) -> None:
    assert uses_chat(chat_tokenizer, None) is True
    p = get_task("translation").prompts("npi", chat_tokenizer, 1)[0]
    assert p.meta["template"] == "chat" and "into Nepali" in p.text and p.meta["english"] in p.text
    assert p.text.startswith("<bos><start_of_turn>user\n") and p.text.endswith("<start_of_turn>model\n")
    s = get_task("story").prompts("yor", chat_tokenizer, 1, chat=True)[0]
    assert "short story in Yoruba" in s.text
    assert p.text != get_task("translation").prompts("npi", chat_tokenizer, 1, chat=False)[0].text


def test_bad_inputs(gemma_tokenizer) -> None:
    with pytest.raises(ValueError, match="name a FLORES-200 code"):
        get_task("translation").prompts("xx", gemma_tokenizer, 1)
    with pytest.raises(ValueError, match="unknown split"):
        get_task("story").prompts("amh", gemma_tokenizer, 1, split="dev")
    with pytest.raises(ValueError, match="positive integer"):
        get_task("translation").prompts("amh", gemma_tokenizer, 0)
