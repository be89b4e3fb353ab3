"""Token trees against chains on held-out real sentences: ``babelspec bench tree``.

Per language, FLORES-200 test sentences (SIB-200's test split, dev-split shots) are translated
from English by the target: plain decoding, the corpus bigram as a chain of γ tokens, the same
bigram as a chain of the tree's node budget, and as token trees of each budget, of depth γ and
("deep") of depth up to the budget, where best-first growth decides how deep to go. The
bigram is counted on the language's real monolingual sets (``babelspec.data.real``), never the
test split. Runs are interleaved per prompt, the order rotated, so a busy machine slows every
setting alike; speedups are medians of per-prompt ratios of decode seconds per token against
plain decoding in the same round. Greedy and the paper's sampling. With ``recycle`` every chain
and tree also runs with Token Recycling (the target's own top candidates mixed into the rows).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from babelspec.errors import UserError
from babelspec.models.presets import DEFAULT_TARGET
from babelspec.numeric import json_number, median

TREE_LANGS = ("amh", "npi", "yor", "grn", "oci", "ibo")


@dataclass
class TreeBenchConfig:
    target: str = DEFAULT_TARGET
    langs: tuple[str, ...] = TREE_LANGS
    prompts_per_lang: int = 4
    max_new_tokens: int = 48
    gamma: int = 4  # the chain's length and the tree's depth
    budgets: tuple[int, ...] = (8, 15)  # tree node budgets (15 nodes + the pending token = 16 rows)
    branches: tuple[int, ...] = (4,)  # candidates per node (greedy) / chains (sampling): the spec's branch
    deep: bool = True  # also each tree of depth up to its budget ("tree N deep")
    modes: tuple[str, ...] = ("greedy", "sample")
    recycle: int = 0  # > 0: every chain and tree also with Token Recycling of this many candidates
    data_root: str = ""  # the corpora folder ("" = $BABELSPEC_CORPORA)
    dtype: str = "auto"
    forward: str | None = None  # babelspec's target forward (load_target), None: lean
    options: Any = None  # its ForwardOptions, None: the defaults


def real_ngram(lang: str, tokenizer: Any, root: Path, order: int = 2) -> Any:
    """The bigram (or n-gram of ``order``) of ``lang``'s real monolingual sets in the corpora
    folder ``root``, the FLORES-200 test sentences the benches translate left out."""
    from babelspec.data.real import real_data
    from babelspec.data.sources import parse_source, training_texts
    from babelspec.ngram import CountConfig, train

    real = real_data(lang, root)
    if real is None:
        raise UserError(f"{root} holds no real sets for {lang}; see babelspec.data.real")
    sources = [parse_source(s).resolve(root) for s in real.monolingual]
    texts, _ = training_texts(sources, lang, parse_source(real.test).resolve(root))
    return train(texts, tokenizer, CountConfig(order=order), corpus_name=f"{lang}:real")


def _bigram_file(lang: str, tokenizer: Any, root: Path, folder: Path) -> Path:
    path = folder / f"{lang}.ngram"
    real_ngram(lang, tokenizer, root).save(path)
    return path


def real_root(bench: str, data_root: str) -> Path:
    """The corpora folder a real-sentence bench reads (``--data-root``, else $BABELSPEC_CORPORA),
    or a clear error naming how to give it."""
    from babelspec.data.real import corpora_root

    root = corpora_root(data_root or None)
    if root is None:
        raise UserError(f"bench {bench} runs on FLORES-200 test sentences: pass --data-root (the corpora folder) "
                         "or set BABELSPEC_CORPORA")
    return root


def flores_prompts(lang: str, tokenizer: Any, n: int, root: Path) -> list[Any]:
    """``n`` translation prompts (``distill.data.task_prompts``) of held-out FLORES-200 test
    sentences from English into ``lang`` (SIB-200's test split, dev-split shots) in ``root``."""
    from babelspec.data.real import real_data
    from babelspec.distill.data import task_prompts

    real = real_data(lang, root)
    if real is None:
        raise UserError(f"{root} holds no real sets for {lang}; see babelspec.data.real")
    return task_prompts("translation", lang, tokenizer, "test", n, sources=(real.test, real.shots), root=str(root))


def real_sentence_runs(target: Any, langs: tuple[str, ...], prompts_per_lang: int, max_new_tokens: int,
                       modes: tuple[str, ...], root: Path,
                       settings_for: Callable[[str, Path], dict[str, tuple[Any, int]]],
                       progress: bool = True,
                       after_prompt: Callable[[dict[str, tuple[Any, int]], list[int], list[dict]], None] | None = None,
                       ) -> tuple[list[dict], list[str]]:  # fmt: skip
    """Per language, ``prompts_per_lang`` FLORES-200 test sentences translated by ``target`` under
    every setting ``settings_for(lang, bigram_file)`` returns ({name: (drafter, γ)}, plain first),
    per mode (greedy; the paper's sampling, seeded by the prompt), the settings' order rotated
    per prompt. One record per run (with its ``token_ids``); the settings' names in order.
    ``after_prompt(settings, prompt_ids, records)``, if given, sees each prompt's records."""
    import tempfile

    from babelspec.engine import generate
    from babelspec.sampling import SamplingConfig

    records: list[dict[str, Any]] = []
    names: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        for lang in langs:
            prompts = flores_prompts(lang, target.tokenizer, prompts_per_lang, root)
            settings = settings_for(lang, _bigram_file(lang, target.tokenizer, root, Path(tmp)))
            names = list(settings)
            for i, prompt in enumerate(prompts):
                first = len(records)
                for mode in modes:
                    sampling = SamplingConfig.paper(seed=i, greedy=mode == "greedy")
                    shift = i % len(names)
                    for name in names[shift:] + names[:shift]:  # the order rotated per prompt
                        drafter, gamma = settings[name]
                        out = generate(target, drafter, list(prompt.prompt_ids), gamma=gamma,
                                       max_new_tokens=max_new_tokens, sampling=sampling,
                                       stop_strings=prompt.stop_strings)  # fmt: skip
                        decode = out.wall_seconds - out.prefill_seconds
                        records.append({"lang": lang, "prompt": i, "mode": mode, "setting": name,
                                        "tokens": out.n_tokens, "decode_seconds": decode, "steps": out.steps,
                                        "accepted": out.accepted, "proposed": out.proposed,
                                        "rejections": out.rejections, "c": out.c,
                                        "token_ids": out.token_ids})  # fmt: skip
                if after_prompt is not None:
                    after_prompt(settings, list(prompt.prompt_ids), records[first:])
                if progress:
                    print(f"{lang} prompt {i + 1}/{len(prompts)} done", flush=True)
    return records, names


def tree_names(cfg: TreeBenchConfig, budget: int) -> dict[tuple[int, int], str]:
    """The settings' names of the trees of ``budget`` nodes, by (branching, depth)."""
    depths = [cfg.gamma] + ([budget] if cfg.deep and budget > cfg.gamma else [])
    names = {}
    for branch in cfg.branches:
        for depth in depths:
            name = f"tree {budget}" + (f" branch {branch}" if len(cfg.branches) > 1 else "")
            names[branch, depth] = name + (" deep" if depth != cfg.gamma else "")
    return names


def tree_specs(cfg: TreeBenchConfig) -> dict[str, tuple[str, int]]:
    """{setting: (drafter spec with ``{ngram}`` for the bigram's, γ)}: plain first, then the
    chains and trees. Chains say ``tree=0``: with no tree option the n-gram drafter drafts its
    default tree under greedy decoding."""
    specs = {"plain": ("none", 1), f"chain γ={cfg.gamma}": ("{ngram},tree=0", cfg.gamma)}
    for budget in cfg.budgets:
        specs[f"chain γ={budget}"] = ("{ngram},tree=0", budget)
        for (branch, depth), name in tree_names(cfg, budget).items():
            specs[name] = (f"{{ngram}},tree={budget},branch={branch}", depth)
    if cfg.recycle:
        specs.update({name + RECYCLING: (f"{spec},recycle={cfg.recycle}", gamma)
                      for name, (spec, gamma) in list(specs.items())[1:]})  # fmt: skip
    return specs


RECYCLING = " + recycling"  # the suffix of the settings with Token Recycling


def tree_bench(cfg: TreeBenchConfig, progress: bool = True) -> dict[str, Any]:
    from babelspec.drafters import make_drafter
    from babelspec.machine import execution_info
    from babelspec.target import load_target

    root = real_root("tree", cfg.data_root)
    target = load_target(cfg.target, dtype=cfg.dtype, forward=cfg.forward, options=cfg.options)
    if not target.supports_trees:
        raise UserError(f"{cfg.target} cannot verify token trees (recurrent layers, or an attention without "
                         "custom masks)")
    specs = tree_specs(cfg)

    def settings_for(lang: str, bigram: Path) -> dict[str, tuple[Any, int]]:
        return {name: (make_drafter(spec.format(ngram=f"ngram:{bigram}"), target), gamma)
                for name, (spec, gamma) in specs.items()}  # fmt: skip

    oracles: list[dict] = []

    def bound(settings: dict[str, tuple[Any, int]], prompt: list[int], mine: list[dict]) -> None:
        plain = next((r for r in mine if r["mode"] == "greedy" and r["setting"] == "plain"), None)
        if plain is None:
            return
        drafter = settings[f"chain γ={cfg.gamma}"][0]
        for budget, branch in itertools.product(cfg.budgets, (1, *cfg.branches)):
            steps = oracle_steps(drafter, prompt, plain["token_ids"], budget, branch)
            oracles.append({"lang": plain["lang"], "prompt": plain["prompt"], "budget": budget, "branch": branch,
                            "tokens": len(plain["token_ids"]), "steps": steps})  # fmt: skip

    started = time.perf_counter()
    records, settings = real_sentence_runs(target, cfg.langs, cfg.prompts_per_lang, cfg.max_new_tokens,
                                           cfg.modes, root, settings_for, progress, bound)  # fmt: skip
    out = summarise(records, cfg, settings, time.perf_counter() - started, execution_info(target))
    if oracles:
        out["oracle"] = clean(oracle_table(oracles, cfg))
    return out


def oracle_steps(drafter: Any, prompt: list[int], truth: list[int], budget: int, branch: int) -> int:
    """Verifications greedy decoding of ``truth`` after ``prompt`` would take if every step
    accepted the longest prefix of the remaining truth, up to ``budget`` tokens (and the last
    token left to the verifier), whose every token is among the n-gram ``drafter``'s ``branch``
    candidates at its node. An upper bound on what any tree of ``budget`` nodes with ``branch``
    point-mass candidates per node can keep, as the target's own tokens were known in advance;
    with ``branch`` 1 it is exactly the chain of ``budget`` tokens."""
    from babelspec.drafters.base import Verdict
    from babelspec.sampling import SamplingConfig

    drafter.start(list(prompt), SamplingConfig(greedy=True), torch.Generator().manual_seed(0))
    done = steps = 0
    while done < len(truth):
        limit = min(budget, len(truth) - done - 1)
        n = 0
        while n < limit and truth[done + n] in drafter.candidates(truth[done : done + n], branch):
            n += 1
        drafter.commit(Verdict(truth[done : done + n], truth[done + n]))
        done += n + 1
        steps += 1
    return steps


def oracle_table(oracles: list[dict], cfg: TreeBenchConfig) -> dict[str, Any]:
    """Per budget and branching: the oracle's tokens per verification (``oracle_steps``) overall
    and per language, and its ratio over the oracle chain (branch 1) of the same budget."""
    def per_verification(rows: list[dict]) -> float:
        return sum(r["tokens"] for r in rows) / max(sum(r["steps"] for r in rows), 1)

    table: dict[str, Any] = {}
    for budget in cfg.budgets:
        chain = [r for r in oracles if r["budget"] == budget and r["branch"] == 1]
        for branch in cfg.branches:
            mine = [r for r in oracles if r["budget"] == budget and r["branch"] == branch]
            tree_rate, chain_rate = per_verification(mine), per_verification(chain)
            table[f"tree {budget} branch {branch}"] = {
                "tokens_per_verification": tree_rate,
                "chain_tokens_per_verification": chain_rate,
                "vs_chain_same_budget": tree_rate / chain_rate,
                "per_lang": {lang: per_verification([r for r in mine if r["lang"] == lang])
                             / per_verification([r for r in chain if r["lang"] == lang]) for lang in cfg.langs}}  # fmt: skip
    return table


def setting_table(records: list[dict], langs: tuple[str, ...], mode: str, settings: list[str]) -> dict[str, Any]:
    """Per setting under ``mode``: the median speedup over plain decoding (per-prompt ratios of
    decode seconds per token, plain in the same round), tokens/s, and for drafting settings the
    tokens one verification yields, α and the cost ratio c, overall and per language."""
    rows = [r for r in records if r["mode"] == mode]
    plain = {(r["lang"], r["prompt"]): r for r in rows if r["setting"] == "plain"}

    def per_token(r: dict) -> float:
        return r["decode_seconds"] / max(r["tokens"], 1)

    def figures(mine: list[dict]) -> dict[str, Any]:
        from babelspec.speedup import acceptance_rate

        return {"tokens_per_verification": sum(r["accepted"] + r["steps"] for r in mine) / max(
                    sum(r["steps"] for r in mine), 1),
                "alpha": acceptance_rate(sum(r["accepted"] for r in mine), sum(r["rejections"] for r in mine)),
                "c": median([r["c"] for r in mine]),
                "speedup": median([per_token(plain[(r["lang"], r["prompt"])]) / per_token(r)
                                   for r in mine if r["tokens"]])}  # fmt: skip

    table: dict[str, Any] = {}
    for name in settings:
        mine = [r for r in rows if r["setting"] == name]
        entry: dict[str, Any] = {"speedup": median([per_token(plain[(r["lang"], r["prompt"])]) / per_token(r)
                                                    for r in mine if r["tokens"]]),
                                 "tokens_per_s": median([r["tokens"] / r["decode_seconds"]
                                                         for r in mine if r["decode_seconds"] > 0])}  # fmt: skip
        if name != "plain":
            entry.update({k: v for k, v in figures(mine).items() if k != "speedup"})
            entry["per_lang"] = {lang: figures([r for r in mine if r["lang"] == lang]) for lang in langs}
            entry["worst_lang_speedup"] = min((row["speedup"] for row in entry["per_lang"].values()),
                                              default=float("nan"))  # fmt: skip
        table[name] = entry
    return table


def summarise(records: list[dict], cfg: TreeBenchConfig, settings: list[str], seconds: float,
              execution: dict) -> dict[str, Any]:  # fmt: skip
    """Per mode and setting: ``setting_table``, and for each tree its tokens per verification
    against the chain at the same node budget and the chain of γ."""
    out: dict[str, Any] = {"benchmark": "tree", "config": asdict(cfg), "wall_seconds": round(seconds, 1),
                           "threads": torch.get_num_threads(), "execution": execution, "modes": {}}
    for mode in cfg.modes:
        table = setting_table(records, cfg.langs, mode, settings)
        for budget, suffix in itertools.product(cfg.budgets, ("", RECYCLING) if cfg.recycle else ("",)):
            chain = table[f"chain γ={budget}{suffix}"]
            for name in tree_names(cfg, budget).values():
                tree = table[name + suffix]
                tree["vs_chain_same_budget"] = tree["tokens_per_verification"] / chain["tokens_per_verification"]
                tree["vs_chain_gamma"] = (tree["tokens_per_verification"]
                                          / table[f"chain γ={cfg.gamma}{suffix}"]["tokens_per_verification"])  # fmt: skip
                for lang, row in tree["per_lang"].items():
                    row["vs_chain_same_budget"] = row["tokens_per_verification"] / \
                        chain["per_lang"][lang]["tokens_per_verification"]
        out["modes"][mode] = table
    return clean(out)


def clean(obj: Any) -> Any:
    """JSON-ready: NaN and infinities as null, floats rounded to 4 digits."""
    if isinstance(obj, float):
        return json_number(obj, 4)
    if isinstance(obj, dict):
        return {k: clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean(v) for v in obj]
    return obj
