"""What distillation reads from the data layer: task prompts and monolingual text.

Translation and story prompts come from the task registry (``babelspec.data.tasks``); training
prompts use the parallel *train* split, evaluation prompts the *test* split, so nothing the
student is evaluated on was seen in training.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from babelspec.distill.teacher import PromptItem


def task_prompts(task_name: str, lang: str, tokenizer: Any, split: str, limit: int | None,
                 seed: int = 0) -> list[PromptItem]:
    """Prompts of ``task_name`` ("translation" or "story") for ``lang`` on ``split``, rendered
    by the task's own templates (few-shot completion for base models, chat otherwise)."""
    from babelspec.data.tasks import get_task

    task = get_task(task_name)
    prompts = task.prompts(lang, tokenizer, limit or 10**9, split=split, seed=seed)
    texts = [p.text for p in prompts]
    if not texts:
        raise ValueError(f"no {task_name} prompts for {lang!r} on the {split} split")
    ids = tokenizer(texts, add_special_tokens=True).input_ids
    return [PromptItem(prompt_ids=tuple(i), stop_strings=tuple(p.stop_strings))
            for i, p in zip(ids, prompts)]


def monolingual_token_ids(lang: str, tokenizer: Any, split: str = "train",
                          limit_texts: int | None = None) -> list[list[int]]:
    """The language's monolingual text, tokenized with the target's tokenizer (with BOS)."""
    from babelspec.data.corpus import monolingual

    texts = monolingual(lang, split)
    if limit_texts is not None:
        texts = texts[:limit_texts]
    if not texts:
        raise ValueError(f"no monolingual {split} text for {lang!r}; see `babelspec data list`")
    return [list(ids) for ids in tokenizer(list(texts), add_special_tokens=True).input_ids]


def corpus_vocabulary(lang: str, tokenizer: Any, extra: Sequence[Sequence[int]] = ()) -> list[int]:
    """Token ids a vocabulary-restricted head keeps: every id of the language's training text
    (monolingual and the target side of the parallel train split), the teacher's training
    responses (``extra``) and the tokenizer's special tokens."""
    import numpy as np

    from babelspec.data.corpus import monolingual, parallel

    texts = list(monolingual(lang, "train")) + [t for _, t in parallel(lang, "train")]
    ids = tokenizer(texts, add_special_tokens=True).input_ids if texts else []
    arrays = [np.asarray(x, dtype=np.int64) for x in ids] + \
             [np.asarray(x, dtype=np.int64) for x in extra]
    specials = [i for i in tokenizer.all_special_ids if i is not None]
    arrays.append(np.asarray(specials, dtype=np.int64))
    return np.unique(np.concatenate(arrays)).tolist()
