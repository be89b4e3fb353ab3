"""Tasks and their prompts: translation English → language, and story generation.

A task turns (language, tokenizer, n) into :class:`Prompt` objects. Two template families:

* **chat** — for instruction-tuned models: one user turn rendered with the tokenizer's own chat
  template (``apply_chat_template(..., add_generation_prompt=True)``); an English instruction that
  names the language (no instruction templates exist in these languages that we could check, so
  none are made up).
* **base** — for base models such as the default gemma-3-270m: a completion prompt.
  Translation is few-shot: ``English: …`` / ``<Language>: …`` pairs from the parallel *train*
  split, then the test sentence, stop at the newline. The labels are English names: naming
  the language by its endonym as well ("Amharic (አማርኛ):") or instead did not raise the
  default model's log-probability of the reference (per token, 4 test prompts: amh −3.14
  English name vs −3.18 both vs −3.24 endonym; npi −3.86/−3.86/−3.89; oci −4.03/−4.02/−4.03).
  Story generation shows one paragraph of real text in the language (a UDHR paragraph from the
  *train* split, under an English title) and then opens a new entry whose English title is the
  story topic; the model continues after ``Text (<Language>):``. The in-language paragraph is
  there to put a base model in the language; English titles name the topic without inventing a
  translation. Seen once per language with greedy decoding on gemma-3-270m: the continuation
  was Nepali for npi and Yoruba (looping) for yor, but French for oci and not Amharic for amh, so
  the language checks of the experiments matter.

``chat=None`` picks chat when the tokenizer has a chat template and the model does not look
like a base model (name without "base"/"-pt"), else base.

A third task is one small module: subclass :class:`Task`, decorate with :func:`register_task`.
"""

from __future__ import annotations

import json
import random
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from babelspec.data import corpus
from babelspec.data.languages import Language, get_language
from babelspec.errors import UserError


@dataclass(frozen=True)
class Prompt:
    text: str  # what the model is given (chat templates already applied)
    stop_strings: tuple[str, ...]  # generation stops when the output contains one of these
    reference: str | None  # the expected output where one exists (translation), else None
    meta: dict = field(default_factory=dict)  # task, lang, template, index, source, topic …


class UnknownTaskError(UserError):
    """A task name that is not registered."""


_TASKS: dict[str, Task] = {}


def register_task(cls: type[Task]) -> type[Task]:
    """Class decorator: make a task available to :func:`get_task` under ``cls.name``."""
    _TASKS[cls.name] = cls()
    return cls


def get_task(name: str) -> Task:
    try:
        return _TASKS[name]
    except KeyError:
        raise UnknownTaskError(f"unknown task {name!r}; known tasks: {', '.join(sorted(_TASKS))}") from None


def task_names() -> list[str]:
    return sorted(_TASKS)


_BASE_NAME = re.compile(r"(^|[-_/ .])(base|pt)([-_/ .]|$)", re.IGNORECASE)


def uses_chat(tokenizer: Any, chat: bool | None) -> bool:
    """Resolve ``chat=None``: chat template if the tokenizer has one and the model is not a base model."""
    has_template = bool(getattr(tokenizer, "chat_template", None))
    if chat is None:
        name = str(getattr(tokenizer, "name_or_path", "") or "")
        return has_template and not _BASE_NAME.search(name)
    if chat and not has_template:
        raise UserError(
            "chat=True but this tokenizer has no chat template; use chat=False (base few-shot "
            "templates) or a tokenizer of an instruction-tuned model"
        )
    return chat


def render_chat(tokenizer: Any, user_message: str) -> str:
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": user_message}], tokenize=False, add_generation_prompt=True
    )


@dataclass(frozen=True)
class PromptData:
    """Translation prompts from other text than the bundled splits (a run's ``[data]`` section):
    English-aligned records (``en``, ``text``, ``source``, ``domain``, ``sent``) to translate
    and to take few-shot examples from. Shots equal to a test sentence on either side are dropped."""

    test: list[dict]
    shots: list[dict]


class Task(ABC):
    name: str = ""
    description: str = ""

    @abstractmethod
    def prompts(self, lang: str | Language, tokenizer: Any, n: int, *, split: str = "test",
                chat: bool | None = None, seed: int = 0, data: PromptData | None = None) -> list[Prompt]:
        """Up to ``n`` prompts for ``lang`` (fewer when the split holds fewer items)."""


def _token_counts(tokenizer: Any, texts: list[str]) -> list[int]:
    if not texts:
        return []
    return [len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]


def _check_n(n: int) -> None:
    if not isinstance(n, int) or n < 1:
        raise UserError(f"n must be a positive integer, got {n!r}")


def _norm(text: str) -> str:
    return " ".join(text.split()).casefold()


# --- translation ------------------------------------------------------------------------------

MAX_SHOT_CHARS = 220  # keep few-shot examples short so the prompt stays a few hundred tokens
SHOT_BUDGET_TOKENS = 400  # languages with only long (UDHR) examples get fewer shots, at least one


@register_task
class TranslationTask(Task):
    name = "translation"
    description = "English → language translation of parallel test sentences"
    shots = 4

    def _shot_pool(self, lang: Language, records: list[dict] | None = None) -> dict[str, list[tuple[str, str]]]:
        """Few-shot candidates by domain: short sentence-like train pairs (or ``records``)."""
        pool: dict[str, list[tuple[str, str]]] = {}
        records = corpus.parallel_records(lang, "train") if records is None else records
        for r in records:
            if r.get("sent") and len(r["en"]) <= MAX_SHOT_CHARS and len(r["text"]) <= 2 * MAX_SHOT_CHARS:
                pool.setdefault(r["domain"], []).append((r["en"], r["text"]))
        if sum(len(v) for v in pool.values()) < self.shots:  # languages with almost nothing
            pairs = [(r["en"], r["text"]) for r in records]
            pool = {"any": sorted(pairs, key=lambda p: len(p[0]))[: 4 * self.shots]}
        return pool

    def prompts(self, lang: str | Language, tokenizer: Any, n: int, *, split: str = "test",
                chat: bool | None = None, seed: int = 0, data: PromptData | None = None) -> list[Prompt]:
        _check_n(n)
        language = get_language(lang)
        items = corpus.parallel_records(language, split) if data is None else data.test
        rng = random.Random(f"translation:{language.code}:{split}:{seed}")
        order = list(range(len(items)))
        rng.shuffle(order)
        use_chat = uses_chat(tokenizer, chat)
        shot_records = None
        if data is not None:  # never a test sentence among the shots, on either side
            seen = {_norm(r["en"]) for r in data.test} | {_norm(r["text"]) for r in data.test}
            shot_records = [r for r in data.shots if _norm(r["en"]) not in seen and _norm(r["text"]) not in seen]
        pool = self._shot_pool(language, shot_records) if not use_chat else {}
        everything = [p for v in pool.values() for p in v]
        out = []
        for index in order[:n]:
            item = items[index]
            meta = {"task": self.name, "lang": language.code, "split": split, "index": index,
                    "source": item["source"], "domain": item["domain"], "english": item["en"]}
            if use_chat:
                text = render_chat(tokenizer, (
                    f"Translate the following English text into {language.display}. "
                    f"Reply with the {language.display} translation only.\n\n{item['en']}"))
                out.append(Prompt(text, ("\n\n",), item["text"], {**meta, "template": "chat"}))
                continue
            same = [p for p in pool.get(item["domain"], []) if p != (item["en"], item["text"])]
            cands = same if len(same) >= self.shots else [p for p in everything if p != (item["en"], item["text"])]
            picked = rng.sample(cands, min(self.shots, len(cands)))
            blocks = [f"English: {en}\n{language.display}: {tgt}\n" for en, tgt in picked]
            cost = _token_counts(tokenizer, blocks)
            lines, used = [], 0
            for block, n_tokens in zip(blocks, cost):
                if lines and used + n_tokens > SHOT_BUDGET_TOKENS:
                    break
                lines.append(block)
                used += n_tokens
            shots = picked[: len(lines)]
            text = "\n".join(lines) + f"\nEnglish: {item['en']}\n{language.display}:"
            out.append(Prompt(text, ("\n",), item["text"], {**meta, "template": "base", "shots": len(shots)}))
        return out


# --- story ------------------------------------------------------------------------------------


@cache
def _topics_cached(root: str) -> tuple[dict, ...]:
    from pathlib import Path

    path = Path(root) / "topics.json"
    if not path.exists():
        raise corpus.DataNotFoundError(f"{path} is missing; rebuild it with `babelspec data build`")
    return tuple(json.loads(path.read_text(encoding="utf-8"))["topics"])


def topics(n: int = 200, seed: int = 0) -> list[dict]:
    """``n`` story topics (``{"adjective", "noun", "similarity"}``), the same for the same seed.

    Seed 0 gives the first ``n`` of the committed list (itself in a fixed random order).
    """
    _check_n(n)
    all_topics = list(_topics_cached(str(corpus.data_dir().resolve())))
    if n > len(all_topics):
        raise UserError(f"asked for {n} topics but the dataset holds {len(all_topics)}")
    if seed:
        random.Random(f"topics:{seed}").shuffle(all_topics)
    return all_topics[:n]


def _article(phrase: str) -> str:
    return ("an " if phrase[:1].lower() in "aeiou" else "a ") + phrase


MAX_DEMO_CHARS = 450
MAX_DEMO_TOKENS = 200  # Cherokee and Tifinagh take many tokens per character


@register_task
class StoryTask(Task):
    name = "story"
    description = "a short story in the language about an adjective–noun topic"

    def _demos(self, lang: Language, tokenizer: Any) -> list[str]:
        """UDHR train paragraphs of moderate length, as the in-language opener of base prompts."""
        texts = [r["text"] for r in corpus.records(lang, "train") if r["source"] == "udhr"]
        texts = [t for t in texts if 80 <= len(t) <= MAX_DEMO_CHARS] or sorted(texts, key=len)[:3]
        fits = [t for t, k in zip(texts, _token_counts(tokenizer, texts)) if k <= MAX_DEMO_TOKENS]
        return fits or sorted(texts, key=len)[:1]

    def prompts(self, lang: str | Language, tokenizer: Any, n: int, *, split: str = "test",
                chat: bool | None = None, seed: int = 0, data: PromptData | None = None) -> list[Prompt]:
        # ``data`` is not used: topics are English and shared by all languages, and the opener
        # paragraph stays a bundled UDHR train paragraph.
        _check_n(n)
        language = get_language(lang)
        corpus._check_split(split)
        # Topics are the same for every language (so languages compare on the same content);
        # the train and test splits take disjoint halves of the topic list.
        pool = topics(len(_topics_cached(str(corpus.data_dir().resolve()))), 0)
        half = len(pool) // 2
        pool = pool[:half] if split == "test" else pool[half:]
        if seed:
            random.Random(f"story:{seed}").shuffle(pool)
        chosen = pool[:n]
        use_chat = uses_chat(tokenizer, chat)
        demos = self._demos(language, tokenizer) if not use_chat else []
        rng = random.Random(f"story:{language.code}:{split}:{seed}")
        out = []
        for index, topic in enumerate(chosen):
            subject = _article(f"{topic['adjective']} {topic['noun']}")
            meta = {"task": self.name, "lang": language.code, "split": split, "index": index,
                    "topic": {"adjective": topic["adjective"], "noun": topic["noun"]}}
            if use_chat:
                text = render_chat(tokenizer, (
                    f"Write a short story in {language.display} about {subject}. "
                    f"Write only the story, in {language.display}."))
                out.append(Prompt(text, (), None, {**meta, "template": "chat"}))
                continue
            demo = demos[rng.randrange(len(demos))]
            name = language.display
            text = (f"The following texts are written in {name}.\n\n"
                    f"Title (English): Human rights\nText ({name}): {demo}\n\n"
                    f"Title (English): A short story about {subject}\nText ({name}):")
            out.append(Prompt(text, ("\n\nTitle", "\nTitle (English)"), None, {**meta, "template": "base"}))
        return out
