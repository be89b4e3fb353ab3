"""What distillation reads from the data layer: task prompts and monolingual text.

Translation and story prompts come from the task registry (``babelspec.data.tasks``); training
prompts use the parallel *train* split, evaluation prompts the *test* split, so nothing the
student is evaluated on was seen in training.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from babelspec.distill.teacher import PromptItem
from babelspec.errors import UserError


def task_prompts(task_name: str, lang: str, tokenizer: Any, split: str, limit: int | None,
                 seed: int = 0, sources: tuple[str, str] | None = None, root: str = "") -> list[PromptItem]:
    """Prompts of ``task_name`` ("translation" or "story") for ``lang`` on ``split``, rendered
    by the task's own templates (few-shot completion for base models, chat otherwise).

    ``sources``: (sentences, few-shot examples) as source strings of ``babelspec.data.sources``
    (e.g. ``sib200:sib200@train``, ``sib200:sib200@dev``), relative to ``root``: translation
    prompts of real sentences instead of the bundled split."""
    from babelspec.data.tasks import get_task

    task = get_task(task_name)
    data = None
    if sources is not None:
        from babelspec.data.sources import parallel_records, parse_source
        from babelspec.data.tasks import PromptData

        test, shots = (parse_source(s).resolve(root or None) for s in sources)
        data = PromptData(test=parallel_records(test, lang), shots=parallel_records(shots, lang))
    prompts = task.prompts(lang, tokenizer, limit or 10**9, split=split, seed=seed, data=data)
    texts = [p.text for p in prompts]
    if not texts:
        raise UserError(f"no {task_name} prompts for {lang!r} on the {split} split")
    ids = tokenizer(texts, add_special_tokens=True).input_ids
    return [PromptItem(prompt_ids=tuple(i), stop_strings=tuple(p.stop_strings))
            for i, p in zip(ids, prompts)]


def monolingual_token_ids(lang: str, tokenizer: Any, split: str = "train",
                          limit_texts: int | None = None, sources: Sequence[str] = (),
                          root: str = "") -> list[list[int]]:
    """The language's monolingual text, tokenized with the target's tokenizer (with BOS): the
    bundled split, or the texts of ``sources`` (source strings, relative to ``root``) in order."""
    from babelspec.data.corpus import monolingual

    if sources:
        from babelspec.data.sources import monolingual_texts, parse_source

        texts = list(dict.fromkeys(t for s in sources for t in monolingual_texts(parse_source(s).resolve(root or None), lang)))
    else:
        texts = monolingual(lang, split)
    if limit_texts is not None:
        texts = texts[:limit_texts]
    if not texts:
        raise UserError(f"no monolingual {split} text for {lang!r}; see `babelspec data list`")
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
