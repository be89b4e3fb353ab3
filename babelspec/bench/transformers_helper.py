"""babelspec's drafters inside transformers (``babelspec.integrations.transformers.generate``)
against transformers' own ``generate``: plain and with prompt lookup, per language, on the same
prompts and model, timed side by side (each prompt runs the three ways in turn, after one untimed warm-up each)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from babelspec.bench.peers import _hf_generate, benchmark_prompts, drafter_spec_for, language_ngram
from babelspec.bench.warmup import WARM_UP_TOKENS, warm_up
from babelspec.integrations.transformers import generate_with_stats
from babelspec.machine import describe, execution_info
from babelspec.target import Target, load_target


def _timed(seconds: list[float], run: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``run(*args, **kwargs)``, its wall time appended to ``seconds``."""
    started = time.perf_counter()
    value = run(*args, **kwargs)
    seconds.append(time.perf_counter() - started)
    return value


def transformers_helper(langs: list[str], *, target: str = "gemma-3-270m", dtype: str = "float32",
                        drafter: str = "real-bigram@", prompts_per_lang: int = 2, max_new_tokens: int = 48,
                        prompt_lookup: int = 10, task: str = "flores", data_root: str = "") -> dict[str, Any]:  # fmt: skip
    """Greedy tokens/s of the three ways per language, the helper's α, and whether its tokens
    equal plain ``generate``'s (they must: it is lossless)."""
    loaded = load_target(target, dtype=dtype)
    model, tokenizer = loaded.model, loaded.tokenizer
    hf_target = Target(model, tokenizer, forward="hf")  # the helper's own forward: transformers'
    prompts = benchmark_prompts(tokenizer, langs, prompts_per_lang, task, data_root=data_root)
    rows: dict[str, dict[str, Any]] = {}
    drafters = {lang: language_ngram(drafter_spec_for(drafter, lang), hf_target, data_root) for lang in langs}
    first = prompts[0]
    warm = warm_up({
        "plain": lambda: _hf_generate(model, first.ids, WARM_UP_TOKENS, True, 0),
        "prompt_lookup": lambda: _hf_generate(model, first.ids, WARM_UP_TOKENS, True, 0,
                                              prompt_lookup_num_tokens=prompt_lookup),
        "babelspec": lambda: generate_with_stats(model, [first.ids], tokenizer=tokenizer, drafter=drafters[first.lang],
                                                 max_new_tokens=WARM_UP_TOKENS),
    })  # fmt: skip
    for lang in langs:
        drafter_obj = drafters[lang]
        times: dict[str, list[float]] = {"plain": [], "prompt_lookup": [], "babelspec": []}
        tokens = dict.fromkeys(times, 0)
        equal, proposed, accepted = True, 0, 0
        for item in (p for p in prompts if p.lang == lang):  # the three ways in turn on each prompt
            plain = _timed(times["plain"], _hf_generate, model, item.ids, max_new_tokens, True, 0)
            lookup = _timed(times["prompt_lookup"], _hf_generate, model, item.ids, max_new_tokens, True, 0,
                            prompt_lookup_num_tokens=prompt_lookup)  # fmt: skip
            out, result = _timed(times["babelspec"], generate_with_stats, model, [item.ids], tokenizer=tokenizer,
                                 drafter=drafter_obj, max_new_tokens=max_new_tokens)  # fmt: skip
            ours = out[0, len(item.ids):].tolist()
            equal &= ours == plain
            proposed, accepted = proposed + result.proposed, accepted + result.accepted
            for key, toks in (("plain", plain), ("prompt_lookup", lookup), ("babelspec", ours)):
                tokens[key] += len(toks)
        speed = {key: tokens[key] / sum(times[key]) for key in times}
        rows[lang] = {**{f"{key}_tokens_per_s": speed[key] for key in times},
                      **{f"{key}_median_s": statistics.median(times[key]) for key in times},
                      "prompt_lookup_ratio": speed["prompt_lookup"] / speed["plain"],
                      "babelspec_ratio": speed["babelspec"] / speed["plain"],
                      "alpha": accepted / proposed if proposed else None, "equal_to_plain_greedy": equal}  # fmt: skip
    return {"bench": "transformers", "target": target, "dtype": dtype, "drafter": drafter, "task": task,
            "prompts_per_lang": prompts_per_lang, "max_new_tokens": max_new_tokens,
            "prompt_lookup_num_tokens": prompt_lookup, "machine": describe(execution_info(hf_target)),
            "warm_up_seconds": warm, "langs": rows}  # fmt: skip
