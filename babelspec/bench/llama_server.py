"""``babelspec bench llama-server``: llama.cpp's own server (``llama-server``, built by ``make
test-peers``) per language on held-out FLORES-200 sentences: plain, with its own draft-free n-gram
types, and with babelspec's exported per-language cache; beside babelspec's server with the same
table as its drafter.

Per language, a trigram of the language's real monolingual text (the test sentences translated
left out) is written as babelspec's n-gram file and as llama.cpp's static lookup cache
(``babelspec ngram export --format llama.cpp``). llama-server loads the Q4_K_M GGUF the default
model ships as; babelspec's server its bf16 conversion (the same weights, dequantised).

For each number of slots (``-np``; babelspec's ``--batch``), a fresh llama-server per method (its
static cache is fixed at start), the methods' order rotated per language; the prompts are sent one
at a time for 1 slot and all at once otherwise, greedy and under the paper's sampling (top-k 100,
top-p 0.9, penalty 1.1 over 16 tokens, T 1, seeded per prompt). llama-server's own counters
(``timings.draft_n``, ``draft_n_accepted``) give its drafted and accepted tokens.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

from babelspec.bench.processes import serving
from babelspec.bench.warmup import WARM_UP_TOKENS, warm_up
from babelspec.errors import UserError

METHODS = ("plain", "ngram-simple", "ngram-cache", "ngram-cache+babelspec")
PAPER_SAMPLING = {"temperature": 1.0, "top_k": 100, "top_p": 0.9, "min_p": 0.0, "repeat_penalty": 1.1,
                  "repeat_last_n": 16}  # fmt: skip


def default_server() -> Path:
    """The llama-server ``make test-peers`` installs into the environment's ``bin/``."""
    return Path(sys.prefix) / "bin" / "llama-server"


def _post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=600) as response:
        return json.loads(response.read())


def llama_server_args(method: str, static: Path | None) -> list[str]:
    """llama-server's speculative options for a method compared."""
    if method == "plain":
        return []
    if method in ("ngram-simple", "ngram-cache"):
        return ["--spec-type", method]
    if method == "ngram-cache+babelspec":
        return ["--spec-type", "ngram-cache", "--lookup-cache-static", str(static)]
    raise UserError(f"unknown llama-server method {method!r}; choose from {', '.join(METHODS)}")


def _requests(send: Any, prompts: list[list[int]], slots: int) -> tuple[list[dict[str, Any]], float]:
    """Every prompt sent, one at a time (1 slot) or ``slots`` at once; the answers and wall time."""
    started = time.perf_counter()
    if slots == 1:
        answers = [send(i, ids) for i, ids in enumerate(prompts)]
    else:
        with ThreadPoolExecutor(slots) as pool:
            answers = list(pool.map(lambda pair: send(*pair), enumerate(prompts)))
    return answers, time.perf_counter() - started


def _llama_cell(port: int, prompts: list[list[int]], slots: int, greedy: bool, n: int) -> dict[str, Any]:
    def send(i: int, ids: list[int]) -> dict[str, Any]:
        body = {"prompt": ids, "n_predict": n, "cache_prompt": False, "seed": i,
                **({"temperature": 0.0} if greedy else PAPER_SAMPLING)}  # fmt: skip
        return _post(f"http://127.0.0.1:{port}/completion", body)

    answers, wall = _requests(send, prompts, slots)
    tokens = sum(a["timings"]["predicted_n"] for a in answers)
    drafted = sum(a["timings"].get("draft_n", 0) for a in answers)
    accepted = sum(a["timings"].get("draft_n_accepted", 0) for a in answers)
    decode_s = sum(a["timings"]["predicted_ms"] for a in answers) / 1000
    return {"tokens": tokens, "wall_s": wall, "tokens_per_s": tokens / wall, "drafted": drafted, "accepted": accepted,
            "acceptance": accepted / drafted if drafted else None, "texts": [a["content"] for a in answers],
            "prefill_s": sum(a["timings"]["prompt_ms"] for a in answers) / 1000,  # by its own timings
            "decode_tokens_per_s": tokens / decode_s if decode_s else None}  # fmt: skip


def _babelspec_cell(port: int, target: str, drafter: str, lang: str, prompts: list[list[int]], slots: int,
                    greedy: bool, n: int) -> dict[str, Any]:  # fmt: skip
    def send(i: int, ids: list[int]) -> dict[str, Any]:
        body = {"model": target, "prompt": ids, "max_tokens": n, "seed": i, "drafter": drafter, "lang": lang,
                **({"temperature": 0} if greedy else {})}  # the server's default sampling is the paper's
        return _post(f"http://127.0.0.1:{port}/v1/completions", body)

    answers, wall = _requests(send, prompts, slots)
    tokens = sum(a["usage"]["completion_tokens"] for a in answers)
    drafted = sum(a["babelspec"].get("proposed") or 0 for a in answers)
    accepted = sum(a["babelspec"].get("accepted") or 0 for a in answers)
    return {"tokens": tokens, "wall_s": wall, "tokens_per_s": tokens / wall, "drafted": drafted, "accepted": accepted,
            "acceptance": accepted / drafted if drafted else None, "texts": [a["choices"][0]["text"] for a in answers]}  # fmt: skip


def _babelspec_runs(target: str, folder: Path, items: list[Any], langs: list[str], slots: tuple[int, ...],
                    modes: tuple[str, ...], threads: int, max_new_tokens: int,
                    babelspec_args: Sequence[str] = ()) -> dict[tuple, dict[str, Any]]:  # fmt: skip
    """babelspec's server (batching ``max(slots)`` requests), plain and with each language's table;
    ``babelspec_args``: the root command's options it starts with (``--no-native``)."""
    cells = {}
    cmd = [sys.executable, "-m", "babelspec", *babelspec_args, "serve", "--target", target, "--threads", str(threads),
           "--batch", str(max(slots)), "--queue-size", str(2 * max(slots)), "--drafter", "none"]  # fmt: skip
    for lang in langs:
        cmd += ["--drafter", f"ngram:{folder / lang}.ngram"]
    with serving(cmd, "babelspec serve") as port:
        warm_up({"babelspec serve": lambda: _babelspec_cell(port, target, "none", langs[0], [items[0].ids], 1, True,
                                                            WARM_UP_TOKENS)})  # fmt: skip
        for lang in langs:
            prompts = [item.ids for item in items if item.lang == lang]
            for s in slots:
                for name, drafter in (("plain", "none"), ("ngram", f"ngram:{folder / lang}.ngram")):
                    for mode in modes:
                        cells[("babelspec/" + name, lang, s, mode)] = _babelspec_cell(
                            port, target, drafter, lang, prompts, s, mode == "greedy", max_new_tokens)
    return cells


def bench_llama_server(langs: list[str], *, target: str = "gemma-3-270m", server: str = "",
                       prompts_per_lang: int = 4, max_new_tokens: int = 48, slots: tuple[int, ...] = (1, 4),
                       modes: tuple[str, ...] = ("greedy", "sample"), methods: tuple[str, ...] = METHODS,
                       with_babelspec: bool = True, threads: int = 2, data_root: str = "",
                       babelspec_args: Sequence[str] = ()) -> dict[str, Any]:  # fmt: skip
    """Per language, slots, mode and method: tokens/s, drafted and accepted tokens, and the ratio
    to llama-server plain (and, for babelspec's server, to its own plain decoding)."""
    from babelspec.bench.peers import benchmark_prompts
    from babelspec.bench.tree import real_ngram, real_root
    from babelspec.machine import cpu_model
    from babelspec.models import load_tokenizer
    from babelspec.models.llamacpp import gguf_for
    from babelspec.ngram.llamacpp import export_llamacpp

    binary = Path(server) if server else default_server()
    if not binary.is_file():
        raise FileNotFoundError(f"no llama-server at {binary}; `make test-peers` builds it into .venv/bin, "
                                "or pass --server PATH")  # fmt: skip
    for method in methods:
        llama_server_args(method, None)  # a bad name fails before any server starts
    tokenizer = load_tokenizer(target)
    root = real_root("llama-server", data_root)
    items = benchmark_prompts(tokenizer, langs, prompts_per_lang, "flores", data_root=data_root)
    cells: dict[tuple[str, str, int, str], dict[str, Any]] = {}
    sizes: dict[str, dict[str, int]] = {}
    with tempfile.TemporaryDirectory(prefix="babelspec-llama-server-") as tmp:
        folder = Path(tmp)
        gguf = gguf_for(target, folder)
        for lang in langs:
            table = real_ngram(lang, tokenizer, root, order=3)
            table.save(folder / f"{lang}.ngram")
            sizes[lang] = {"training_tokens": int(table.training.get("tokens", 0)),
                           **export_llamacpp(table, folder / f"{lang}.lookup")}  # fmt: skip
        for li, lang in enumerate(langs):
            prompts = [item.ids for item in items if item.lang == lang]
            order = list(methods[li % len(methods) :] + methods[: li % len(methods)])
            for s in slots:
                for method in order:
                    cmd = [str(binary), "-m", str(gguf), "--host", "127.0.0.1", "-t", str(threads), "-c",
                           str(1024 * s), "-np", str(s), *llama_server_args(method, folder / f"{lang}.lookup")]  # fmt: skip
                    with serving(cmd, "llama-server") as port:
                        warm_up({"llama-server": partial(_llama_cell, port, prompts[:1], 1, True, WARM_UP_TOKENS)})
                        for mode in modes:
                            cells[("llama-server/" + method, lang, s, mode)] = _llama_cell(
                                port, prompts, s, mode == "greedy", max_new_tokens)
        if with_babelspec:
            cells.update(_babelspec_runs(target, folder, items, langs, slots, modes, threads, max_new_tokens,
                                         babelspec_args))
    rows = []
    for (engine_method, lang, s, mode), cell in cells.items():
        engine, method = engine_method.split("/", 1)
        llama_plain = cells.get(("llama-server/plain", lang, s, mode))
        own_plain = cells.get((f"{engine}/plain", lang, s, mode))
        row = {"lang": lang, "slots": s, "mode": mode, "engine": engine, "method": method,
               **{k: v for k, v in cell.items() if k != "texts"}}  # fmt: skip
        if llama_plain:
            row["ratio_to_llama_plain"] = cell["tokens_per_s"] / llama_plain["tokens_per_s"]
        if own_plain:
            row["ratio_to_own_plain"] = cell["tokens_per_s"] / own_plain["tokens_per_s"]
        if mode == "greedy" and own_plain:
            row["greedy_equal_to_own_plain"] = cell["texts"] == own_plain["texts"]
        rows.append(row)
    return {"bench": "llama-server", "target": target, "server": server or ".venv/bin/llama-server",
            "threads": threads,
            "prompts_per_lang": prompts_per_lang, "max_new_tokens": max_new_tokens, "slots": list(slots),
            "sampling": "greedy; the paper's (top-k 100, top-p 0.9, penalty 1.1 over 16 tokens, T 1), seeded per prompt",
            "llama_server_model": "Q4_K_M GGUF", "babelspec_model": "its bf16 conversion",
            "tables": sizes, "machine": cpu_model(), "cpus": os.cpu_count(), "rows": rows}  # fmt: skip
