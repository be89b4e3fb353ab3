"""``babelspec bench vllm``: vLLM's engine (its CPU build here, any platform it runs on) decoding the
same model plainly, with its own ``ngram`` prompt lookup, and with babelspec's n-gram proposer
(``babelspec.integrations.vllm``), per language on held-out FLORES-200 sentences.

Runs only where vLLM is installed: ``make vllm-env`` makes its own environment (``build/vllm-venv``)
with vLLM's CPU build and babelspec; ``build/vllm-venv/bin/babelspec bench vllm`` runs this. The
same command runs on a GPU machine with vLLM installed.

One engine per configuration (vLLM holds one model per engine), the configurations one after
another; within one, each language's prompts run one at a time (1 concurrent request), then all
at once (``--concurrency 4``: vLLM batches them), greedy and under top-p 0.9 sampling seeded per
prompt (not the paper's top-k 100: vLLM 0.32's CPU build fails on top-k with any speculation). vLLM's own counters give the drafted and accepted tokens of each run.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

from babelspec.errors import UserError

PROPOSER = "babelspec.integrations.vllm.NgramProposer"
CONFIGS = ("plain", "ngram", "babelspec")


def speculative_config(name: str, tokens: int) -> dict[str, Any] | None:
    """vLLM's ``speculative_config`` of a configuration compared."""
    if name == "plain":
        return None
    if name == "ngram":  # vLLM's prompt lookup, as its docs suggest it
        return {"method": "ngram", "num_speculative_tokens": tokens, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
    if name == "babelspec":
        return {"method": "custom_class", "model": PROPOSER, "num_speculative_tokens": tokens}
    raise UserError(f"unknown vLLM configuration {name!r}; choose from {', '.join(CONFIGS)}")


def _counters(llm: Any) -> dict[str, float]:
    names = {"vllm:spec_decode_num_draft_tokens": "drafted", "vllm:spec_decode_num_accepted_tokens": "accepted"}
    out = {"drafted": 0.0, "accepted": 0.0}
    for metric in llm.get_metrics():
        if metric.name in names:
            out[names[metric.name]] = float(metric.value)
    return out


def _run(llm: Any, prompts: list[list[int]], concurrency: int, greedy: bool, max_new_tokens: int) -> dict[str, Any]:
    from vllm import SamplingParams, TokensPrompt

    def params(seed: int) -> Any:
        if greedy:
            return SamplingParams(temperature=0.0, max_tokens=max_new_tokens, ignore_eos=False)
        # top-p alone: with top-k, vLLM 0.32's CPU build dies in its rejection sampler under any
        # speculative method (apply_top_k_top_p_pytorch: "index ... is out of bounds")
        return SamplingParams(temperature=1.0, top_p=0.9, seed=seed, max_tokens=max_new_tokens)

    before = _counters(llm)
    outputs, seconds = [], []
    for start in range(0, len(prompts), concurrency):
        group = prompts[start : start + concurrency]
        started = time.perf_counter()
        done = llm.generate([TokensPrompt(prompt_token_ids=ids) for ids in group],
                            [params(start + i) for i in range(len(group))], use_tqdm=False)  # fmt: skip
        seconds.append(time.perf_counter() - started)
        outputs += [list(o.outputs[0].token_ids) for o in done]
    after = _counters(llm)
    drafted, accepted = after["drafted"] - before["drafted"], after["accepted"] - before["accepted"]
    tokens = sum(len(o) for o in outputs)
    return {"tokens": tokens, "seconds": sum(seconds), "tokens_per_s": tokens / sum(seconds),
            "median_s": statistics.median(seconds), "drafted": int(drafted), "accepted": int(accepted),
            "acceptance": accepted / drafted if drafted else None, "outputs": outputs}  # fmt: skip


def write_language_tables(langs: list[str], tokenizer: Any, folder: Path, data_root: str = "", order: int = 3) -> Path:
    """The proposer's tables: each language's n-gram of ``order`` over its real monolingual
    sets, the FLORES-200 test sentences the bench translates left out."""
    from babelspec.bench.tree import real_ngram, real_root
    from babelspec.integrations.vllm import write_tables

    root = real_root("vllm", data_root)
    write_tables({lang: real_ngram(lang, tokenizer, root, order=order) for lang in langs}, folder)
    return folder


def model_folder(spec: str) -> str:
    """A checkpoint folder vLLM loads: a packaged preset's bf16 conversion (in the user cache,
    made on first use), or the folder given."""
    import torch

    from babelspec.models.loader import converted_dir
    from babelspec.models.presets import PRESETS

    if spec in PRESETS:
        return str(converted_dir(spec, torch.bfloat16))
    if not (Path(spec).expanduser() / "config.json").is_file():
        raise UserError(f"{spec!r} is neither a packaged preset ({', '.join(sorted(PRESETS))}) nor a folder holding "
                         "a Hugging Face checkpoint (config.json)")  # fmt: skip
    return str(Path(spec).expanduser())


def bench_vllm(langs: list[str], *, model: str = "gemma-3-270m", tables: str = "", configs: tuple[str, ...] = CONFIGS,
               prompts_per_lang: int = 4, max_new_tokens: int = 48, concurrency: tuple[int, ...] = (1, 4),
               speculative_tokens: int = 4, modes: tuple[str, ...] = ("greedy", "sample"), data_root: str = "",
               kv_cache_gib: float = 2.0, max_model_len: int = 1024,
               proposer_options: dict[str, str] | None = None) -> dict[str, Any]:  # fmt: skip
    """Per configuration, language, concurrency and mode: tokens/s, drafted and accepted tokens by
    vLLM's counters; ratios to plain; whether greedy outputs equal plain's."""
    try:
        import vllm
        from vllm import LLM
    except ImportError as err:
        raise UserError(f"vLLM is not installed in this environment ({err}); `make vllm-env` makes one with "
                         "its CPU build, then run build/vllm-venv/bin/babelspec bench vllm") from None  # fmt: skip
    from transformers import AutoTokenizer

    from babelspec.bench.peers import benchmark_prompts
    from babelspec.bench.warmup import WARM_UP_TOKENS, warm_up
    from babelspec.data.langid import OutputChecker, detect_language
    from babelspec.machine import cpu_model

    for name in configs:
        speculative_config(name, speculative_tokens)  # a bad name fails before any engine starts
    folder = model_folder(model)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    items = benchmark_prompts(tokenizer, langs, prompts_per_lang, "flores", data_root=data_root)
    with tempfile.TemporaryDirectory(prefix="babelspec-vllm-") as tmp:
        if "babelspec" in configs and not tables:
            tables = str(write_language_tables(langs, tokenizer, Path(tmp) / "tables", data_root))
        classifier = OutputChecker.from_corpora(langs, use_langid=False).classifier
        detected = {item.lang: [] for item in items}
        for item in items:
            detected[item.lang].append(detect_language(classifier, tokenizer.decode(item.ids[:512])))
        runs: dict[str, dict[str, Any]] = {}
        for name in configs:
            llm = LLM(model=folder, dtype="bfloat16", max_model_len=max_model_len, enforce_eager=True,
                      disable_log_stats=False, kv_cache_memory_bytes=int(kv_cache_gib * 2**30),
                      speculative_config=speculative_config(name, speculative_tokens),
                      additional_config={"babelspec": {"tables": tables, **(proposer_options or {})}}
                      if name == "babelspec" else {})  # fmt: skip
            try:
                warm_up({name: partial(_run, llm, [items[0].ids], 1, True, WARM_UP_TOKENS)})
                for lang in langs:
                    prompts = [item.ids for item in items if item.lang == lang]
                    for c in concurrency:
                        for mode in modes:
                            runs[f"{name}/{lang}/{c}/{mode}"] = _run(llm, prompts, c, mode == "greedy", max_new_tokens)
            finally:  # the engine's process goes before the next configuration's starts
                core = getattr(llm.llm_engine, "engine_core", None)
                if core is not None:
                    core.shutdown()
                del llm
    rows = []
    for lang in langs:
        for c in concurrency:
            for mode in modes:
                plain = runs.get(f"plain/{lang}/{c}/{mode}")
                for name in configs:
                    run = runs[f"{name}/{lang}/{c}/{mode}"]
                    row = {"lang": lang, "concurrency": c, "mode": mode, "config": name,
                           **{k: v for k, v in run.items() if k != "outputs"}}  # fmt: skip
                    if plain is not None:
                        row["ratio_to_plain"] = run["tokens_per_s"] / plain["tokens_per_s"]
                        if mode == "greedy":
                            row["greedy_equal_to_plain"] = run["outputs"] == plain["outputs"]
                    rows.append(row)
    return {"bench": "vllm", "vllm": vllm.__version__, "model": model, "dtype": "bfloat16",
            "speculative_tokens": speculative_tokens, "prompts_per_lang": prompts_per_lang,
            "max_new_tokens": max_new_tokens, "sampling": "greedy; top-p 0.9, T 1, seeded per prompt (top-k fails in vLLM 0.32 CPU under speculation)",
            "tables": "each language's real monolingual text, trigram" if "babelspec" in configs else None,
            "proposer_options": proposer_options or {},
            "detected": detected, "machine": cpu_model(), "rows": rows}  # fmt: skip
