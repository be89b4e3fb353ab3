"""``babelspec bench serve``: real server processes and concurrent ``openai`` clients.

One server per batch size compared (``--batch 1,4``; one model in memory each) serves every
drafter compared, each request naming its drafter; every cell (batch size, number of clients,
drafter) runs in each round, the order reversed every round, so a change in machine load hits
them alike. The prompts are the translation task's, in several languages, without ``lang``:
with ``auto`` the server detects the language and takes the router's route. Each request
samples with the paper's settings and a seed equal to its index, the same in every cell, so
answers can be compared across cells: a batched request must answer as it does alone.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from babelspec.bench.processes import free_port, start, stop

ROUNDS = 2


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def _prompts(target: str, langs: list[str], n: int) -> list[tuple[str, str]]:
    from babelspec.data.tasks import get_task
    from babelspec.models import load_tokenizer

    tokenizer = load_tokenizer(target)
    per_lang = max(1, n // len(langs))
    return [(lang, p.text) for lang in langs for p in get_task("translation").prompts(lang, tokenizer, per_lang)]


def _start(target: str, drafters: list[str], router: str | None, port: int, queue: int,
           threads: int, batch: int, babelspec_args: Sequence[str] = ()) -> subprocess.Popen:  # fmt: skip
    cmd = [sys.executable, "-m", "babelspec", *babelspec_args, "serve", "--target", target, "--port", str(port), "--queue-size",
           str(queue), "--threads", str(threads), "--batch", str(batch)] + (["--router", router] if router else [])  # fmt: skip
    for spec in drafters:  # the server offers exactly the drafters compared, each named by its spec
        cmd += ["--drafter", spec]
    return start(cmd, port, "the server")


def _cell_entry(b: int, c: int, d: str, rec: list[dict], wall: float, reference: dict[int, str],
                langs: list[str]) -> dict:  # fmt: skip
    """One (batch, clients, drafter) cell: latency percentiles, tokens/s, α, and whether each
    seeded request was answered as in the first cell of its drafter (``reference``)."""
    latencies = [x["latency"] for x in rec]
    alphas = [x["alpha"] for x in rec if x["alpha"] is not None]
    return {
        "batch": b, "clients": c, "drafter": d,
        "p50_latency_s": round(statistics.median(latencies), 3),
        "p99_latency_s": round(_percentile(latencies, 0.99), 3),
        "tokens_per_s": round(sum(x["tokens"] for x in rec) / wall, 2),
        "tokens": sum(x["tokens"] for x in rec), "wall_s": round(wall, 2),
        "mean_alpha": round(statistics.mean(alphas), 3) if alphas else None,
        # the same seeded request answered as in the first cell (batch, clients) of its drafter
        "answers_equal_to_first_cell": all(x["text"] == reference[x["request"]] for x in rec),
        "drafter_by_lang": {lang: sorted({x["drafter"] for x in rec if x["lang"] == lang}) for lang in langs},
        "detected_by_lang": {lang: sorted({str(x["detected"]) for x in rec if x["lang"] == lang}) for lang in langs},
    }  # fmt: skip


def bench_serve(target: str = "gemma-3-270m", drafters: list[str] | None = None, router: str | None = None,
                clients: int | list[int] = 4, requests: int = 16, max_tokens: int = 32, langs: list[str] | None = None,
                port: int = 0, threads: int = 0, batches: list[int] | None = None,
                babelspec_args: Sequence[str] = ()) -> dict:  # fmt: skip
    """Per server batch size, number of concurrent clients and drafter: p50/p99 latency and
    aggregate tokens/s; ratios against the first client count and the first batch size.
    ``babelspec_args``: the root command's options each server starts with (``--no-native``)."""
    import openai

    drafters = drafters or ["none", "auto"]
    langs = langs or ["npi", "amh", "yor"]
    batches = batches or [4]
    client_counts = [clients] if isinstance(clients, int) else list(clients)
    prompts = _prompts(target, langs, max(len(langs), requests // 4))
    load_before = os.getloadavg()
    servers: dict[int, tuple[subprocess.Popen, openai.OpenAI]] = {}
    cells = [(b, c, d) for b in batches for c in client_counts for d in drafters]
    records: dict[tuple[int, int, str], list[dict]] = {cell: [] for cell in cells}
    walls: dict[tuple[int, int, str], float] = dict.fromkeys(cells, 0.0)

    def one(batch: int, drafter: str, i: int, tokens: int = max_tokens) -> dict:
        lang, prompt = prompts[i % len(prompts)]
        started = time.perf_counter()
        r = servers[batch][1].completions.create(model=target, prompt=prompt, max_tokens=tokens, seed=i,
                                                 extra_body={"drafter": drafter})  # fmt: skip
        extra = r.model_extra["babelspec"]
        return {"lang": lang, "latency": time.perf_counter() - started, "tokens": r.usage.completion_tokens,
                "alpha": extra["alpha"], "drafter": extra["drafter_name"], "detected": extra["detected_lang"],
                "text": r.choices[0].text, "request": i}  # fmt: skip

    per_round = max(1, requests // ROUNDS)
    try:
        for b in batches:
            p = (port + len(servers)) if port else free_port()
            proc = _start(target, drafters, router, p, queue=2 * max(client_counts), threads=threads, batch=b,
                          babelspec_args=babelspec_args)
            servers[b] = (proc, openai.OpenAI(base_url=f"http://127.0.0.1:{p}/v1", api_key="unused",
                                              max_retries=0, timeout=3600))  # fmt: skip
        for b in batches:  # warm-up: builds each drafter for each language, outside the timing
            for d in drafters:
                for i in range(len(prompts)):
                    one(b, d, i, tokens=2)
        for r in range(ROUNDS):
            for b, c, d in (cells if r % 2 == 0 else cells[::-1]):
                with ThreadPoolExecutor(c) as pool:
                    started = time.perf_counter()
                    records[(b, c, d)] += pool.map(lambda i, b=b, d=d: one(b, d, i),
                                                   range(r * per_round, (r + 1) * per_round))  # fmt: skip
                    walls[(b, c, d)] += time.perf_counter() - started
    finally:
        for proc, _ in servers.values():
            stop(proc)
    figures: dict = {
        "target": target, "requests_per_cell": per_round * ROUNDS, "max_tokens": max_tokens,
        "languages": langs, "server_threads": threads or "torch default", "batches": batches,
        "clients": client_counts, "sampling": "paper (top-k 100, top-p 0.9, penalty 1.1/16), seed = request index",
        "machine": {"cpus": os.cpu_count(), "load_average_before": [round(x, 2) for x in load_before],
                    "load_average_after": [round(x, 2) for x in os.getloadavg()]},
        "cells": [],
    }  # fmt: skip
    reference = {d: {x["request"]: x["text"] for x in records[(batches[0], client_counts[0], d)]} for d in drafters}
    table = {}
    for b, c, d in cells:
        table[(b, c, d)] = entry = _cell_entry(b, c, d, records[(b, c, d)], walls[(b, c, d)], reference[d], langs)
        first = table[(b, client_counts[0], d)]
        if c != client_counts[0]:
            entry[f"tokens_per_s_over_{client_counts[0]}_clients"] = round(entry["tokens_per_s"] / first["tokens_per_s"], 3)
            entry[f"p50_latency_over_{client_counts[0]}_clients"] = round(entry["p50_latency_s"] / first["p50_latency_s"], 3)
        if b != batches[0]:
            base = table[(batches[0], c, d)]
            entry[f"tokens_per_s_over_batch_{batches[0]}"] = round(entry["tokens_per_s"] / base["tokens_per_s"], 3)
        figures["cells"].append(entry)
    return figures
