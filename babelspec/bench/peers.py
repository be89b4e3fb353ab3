"""babelspec against its reference implementation, on the real default model.

* ``equivalence`` -- greedy babelspec (no drafter and each drafter) must produce exactly the
  tokens of Hugging Face ``generate`` greedy;
* ``peers`` -- wall-clock: HF ``generate`` plain, HF prompt lookup, HF assisted generation
  (with the self-draft as assistant), and babelspec with each drafter, on the same prompts,
  same budget, greedy and sampling. Runs are interleaved (every method on a prompt before the
  next prompt, the method order rotated per prompt) so that the load of a shared machine hits
  all methods alike; ratios to HF plain are medians of per-prompt paired ratios.
* ``drafter_costs`` -- c = draft forward / target forward for each drafter, interleaved.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from typing import Any

import torch

from babelspec.bench.warmup import WARM_UP_TOKENS, warm_up
from babelspec.errors import UserError
from babelspec.models.presets import DEFAULT_TARGET
from babelspec.numeric import json_number, median

DEFAULT_LANGS = ("amh", "ber", "chr", "grn", "haw", "ibo", "npi", "oci", "que", "yor", "zgh")
QUICK_LANGS = ("amh", "npi", "yor")
PREFIX_WORDS = 12
LLAMA_CPP = "llama.cpp-plain"
LLAMA_CPP_LOOKUP = "llama.cpp-prompt-lookup"  # llama-cpp-python's LlamaPromptLookupDecoding


def default_drafters(n_layers: int) -> list[str]:
    """The drafter specs for the default target: self-drafts and restricted heads."""
    half, two_thirds = n_layers // 3, (2 * n_layers) // 3
    return [f"self:{half}", f"self:{two_thirds}", "head", f"self:{two_thirds}@"]


# Per-language n-grams built for the benchmark: the paper's bigram on the bundled train split,
# the bigram distilled from the target's distributions over it (babelspec.distill.ngram_distill), and
# the bigram of the language's real monolingual sets in the corpora folder, FLORES-200's test
# sentences left out (``bench tree``'s). Each may carry n-gram options: ``real-bigram@,tree=15``.
LANGUAGE_NGRAMS = ("bigram@", "distilled-bigram@", "real-bigram@")


def drafter_spec_for(spec: str, lang: str) -> str:
    """Fill the language into specs that take it from the context (``head``, ``self:K@``,
    ``int8``, ``int8:K@``, ``gguf``, ``gguf:K@``, ``bigram@``, ``distilled-bigram@``,
    ``real-bigram@``, the last three before their options)."""
    if spec in ("head", "int8", "gguf"):
        return f"{spec}:{lang}"
    base, comma, options = spec.partition(",")
    if base in LANGUAGE_NGRAMS:
        return base + lang + comma + options
    if spec.startswith(("self:", "int8:", "gguf:")) and spec.endswith("@"):
        return spec + lang
    return spec


def _build_drafter(spec: str, full: str, target: Any, lang: str, data_root: str = "") -> Any:
    from babelspec.drafters import make_drafter

    if spec.partition(",")[0] in LANGUAGE_NGRAMS:
        return language_ngram(full, target, data_root)
    return make_drafter(full, target, lang=lang)


def language_ngram(spec: str, target: Any, data_root: str = "") -> Any:
    """The drafter of a filled ``bigram@LANG`` / ``distilled-bigram@LANG`` / ``real-bigram@LANG``
    spec (with its n-gram options, if any), built in memory."""
    from babelspec.data.corpus import monolingual
    from babelspec.distill.ngram_distill import distil_texts
    from babelspec.drafters.ngram_drafter import NgramDraftConfig, ngram_drafter_of, parse_spec
    from babelspec.ngram import CountConfig, train

    name, options = parse_spec(spec)
    kind, _, lang = name.partition("@")
    config = NgramDraftConfig.from_options(options)
    if kind == "real-bigram":
        from babelspec.bench.tree import real_ngram, real_root

        model = real_ngram(lang, target.tokenizer, real_root("peers with real-bigram@", data_root))
    elif kind == "bigram":
        model = train(monolingual(lang, "train"), target.tokenizer, CountConfig(order=2))
    else:  # distilled for the sampled runs' warping (greedy runs draft its top continuation)
        model = distil_texts(target, monolingual(lang, "train"), sampling=_sampling(False, 0))
    return ngram_drafter_of(model, config, target, spec)


@dataclass
class PromptItem:
    lang: str
    ids: list[int]
    text: str


def benchmark_prompts(tokenizer: Any, langs: list[str], per_lang: int, task: str = "translation",
                      seed: int = 0, data_root: str = "") -> list[PromptItem]:
    """Prompts of a task (the data layer's templates for base models), ``per_lang`` each.

    ``task="prefix"`` gives short in-language prompts instead: the first ``PREFIX_WORDS``
    words of monolingual test texts, for checks whose cost should be decoding, not prefill.
    ``task="flores"``: translations from English of held-out FLORES-200 test sentences (SIB-200's
    test split, dev-split shots) from the corpora folder ``data_root`` (else $BABELSPEC_CORPORA).
    """
    from babelspec.data.tasks import get_task

    items = []
    if task == "flores":
        from babelspec.bench.tree import flores_prompts, real_root

        root = real_root("peers --task flores", data_root)
        for lang in langs:
            for prompt in flores_prompts(lang, tokenizer, per_lang, root):
                ids = list(prompt.prompt_ids)
                items.append(PromptItem(lang, ids, tokenizer.decode(ids)))
        return items
    if task == "prefix":
        from babelspec.data.corpus import monolingual

        for lang in langs:
            for text in monolingual(lang, "test")[:per_lang]:
                text = " ".join(text.split()[:PREFIX_WORDS])
                items.append(PromptItem(lang, tokenizer(text)["input_ids"], text))
        return items
    for lang in langs:
        for prompt in get_task(task).prompts(lang, tokenizer, per_lang, chat=False, seed=seed):
            items.append(PromptItem(lang, tokenizer(prompt.text)["input_ids"], prompt.text))
    if not items:
        raise UserError(f"no {task} prompts for languages {langs}")
    return items


def _hf_generate(model: torch.nn.Module, ids: list[int], max_new_tokens: int, greedy: bool,
                 seed: int, **extra: Any) -> list[int]:
    input_ids = torch.tensor([ids], device=model.device)
    kwargs: dict[str, Any] = dict(max_new_tokens=max_new_tokens, attention_mask=torch.ones_like(input_ids))
    if greedy:
        kwargs.update(do_sample=False, top_k=None, top_p=None, temperature=None)
    else:
        torch.manual_seed(seed)
        kwargs.update(do_sample=True, top_k=100, top_p=0.9, temperature=1.0)
    with torch.inference_mode():
        out = model.generate(input_ids, **kwargs, **extra)
    return out[0, len(ids):].tolist()


def _sampling(greedy: bool, seed: int):
    from babelspec.sampling import SamplingConfig

    # Same warping as the HF runs (top-k 100, top-p 0.9, no penalty: HF's is not windowed).
    return SamplingConfig(greedy=True) if greedy else SamplingConfig(top_k=100, top_p=0.9, seed=seed)


# --- equivalence ----------------------------------------------------------------------------


@dataclass
class EquivalenceReport:
    prompts: int
    langs: list[str]
    drafters: list[str]
    max_new_tokens: int
    gamma: int
    compared: int = 0
    mismatches: list[dict] = field(default_factory=list)
    seconds: float = 0.0
    execution: dict = field(default_factory=dict)  # dtype, mode (exact/fast), threads, CPU
    attention: str = ""
    plain_compared: int = 0  # speculative runs compared with babelspec's own plain decoding
    plain_mismatches: int = 0

    @property
    def all_equal(self) -> bool:
        return self.compared > 0 and not self.mismatches

    @property
    def agreement_rate(self) -> float | None:
        """Share of (prompt, drafter) runs token-identical to HF greedy."""
        return 1 - len(self.mismatches) / self.compared if self.compared else None

    @property
    def agreement_with_plain(self) -> float | None:
        """Share of speculative runs token-identical to babelspec's greedy plain decoding."""
        return 1 - self.plain_mismatches / self.plain_compared if self.plain_compared else None

    def to_dict(self) -> dict:
        return {**asdict(self), "all_equal": self.all_equal, "agreement_rate": self.agreement_rate,
                "agreement_with_plain": self.agreement_with_plain}


def equivalence(target: Any, prompts: list[PromptItem], drafters: list[str], *,
                max_new_tokens: int = 16, gamma: int = 4) -> EquivalenceReport:
    """Greedy babelspec with each drafter spec against HF ``generate`` greedy, token for token,
    and each speculative run against babelspec's greedy plain decoding of the same prompt."""
    from babelspec.engine import generate
    from babelspec.machine import execution_info

    started = time.perf_counter()
    report = EquivalenceReport(len(prompts), sorted({p.lang for p in prompts}), drafters,
                               max_new_tokens, gamma, execution=execution_info(target),
                               attention=str(getattr(target.model.config, "_attn_implementation", "")))
    cache: dict[str, Any] = {}
    specs = sorted(drafters, key=lambda s: s != "none")  # plain first, as the reference
    for item in prompts:
        reference = _hf_generate(target.model, item.ids, max_new_tokens, True, 0)
        plain = None
        for spec in specs:
            full = drafter_spec_for(spec, item.lang)
            drafter = cache.get(full) or cache.setdefault(full, _build_drafter(spec, full, target, item.lang))
            ours = generate(target, drafter, item.ids, gamma=gamma, max_new_tokens=max_new_tokens,
                            sampling=_sampling(True, 0)).token_ids
            report.compared += 1
            if spec == "none":
                plain = ours
            elif plain is not None:
                report.plain_compared += 1
                report.plain_mismatches += ours != plain
            if ours != reference:
                first = next((i for i, (a, b) in enumerate(zip(ours, reference)) if a != b),
                             min(len(ours), len(reference)))
                report.mismatches.append({"lang": item.lang, "drafter": full, "first_diff": first,
                                          "ours": ours, "hf": reference})
    report.seconds = round(time.perf_counter() - started, 2)
    return report


# --- forward costs ----------------------------------------------------------------------------


def drafter_costs(target: Any, prompt: PromptItem, drafters: list[str], *, repeats: int = 10,
                  gamma: int = 4) -> dict[str, dict[str, float]]:
    """c per drafter: median one-token draft forward over the median target forward.

    ``c_decode`` divides by a one-token target forward (plain decoding); ``c_verify`` by a
    (gamma + 1)-token verification forward, the engine's c. All forwards interleaved.
    """
    from babelspec.drafters import make_drafter
    from babelspec.sampling import SamplingConfig

    made = {spec: make_drafter(drafter_spec_for(spec, prompt.lang), target, lang=prompt.lang)
            for spec in drafters}
    for drafter in made.values():
        drafter.start(prompt.ids, SamplingConfig(greedy=True), torch.Generator())
    target.prefill(prompt.ids)
    probe = prompt.ids[-1]
    times: dict[str, list[float]] = {"target_1": [], "target_verify": [], **{s: [] for s in made}}

    def timed(key: str, lm: Any, step: Callable[[], Any]) -> None:
        length = lm.cached_len
        t0 = time.perf_counter()
        step()
        times[key].append(time.perf_counter() - t0)
        lm.crop_or_replay(length)

    for _ in range(repeats + 1):  # the first round warms up and is dropped
        timed("target_1", target, lambda: target.forward([probe], logits_to_keep=0))
        timed("target_verify", target, lambda: target.forward([probe] * (gamma + 1), logits_to_keep=0))
        for spec, drafter in made.items():
            if hasattr(drafter, "lm"):
                timed(spec, drafter.lm, lambda lm=drafter.lm: lm.forward([probe], logits_to_keep=1))
            else:  # a drafter on the target's own steps (``stackhead``): one step's layers and its head
                timed(spec, target, lambda d=drafter: d.head.logits_of(target.forward_hidden([probe])))
    med = {k: statistics.median(v[1:]) for k, v in times.items()}
    out = {"target_forward_ms": round(med["target_1"] * 1e3, 2),
           "target_verify_ms": round(med["target_verify"] * 1e3, 2)}
    result: dict[str, dict[str, float]] = {"_target": out}
    for spec in made:
        result[drafter_spec_for(spec, prompt.lang)] = {
            "draft_forward_ms": round(med[spec] * 1e3, 2),
            "c_decode": round(med[spec] / med["target_1"], 3),
            "c_verify": round(med[spec] / med["target_verify"], 3),
        }
    return result


# --- peers ----------------------------------------------------------------------------------


@dataclass
class PeersConfig:
    target: str = DEFAULT_TARGET
    langs: tuple[str, ...] = DEFAULT_LANGS
    prompts_per_lang: int = 2
    max_new_tokens: int = 64
    gamma: int = 3
    gammas: dict[str, int] = field(default_factory=dict)  # drafter spec -> its own γ (else gamma)
    repeats: int = 1
    modes: tuple[str, ...] = ("greedy", "sample")
    drafters: tuple[str, ...] | None = None  # None: default_drafters(n_layers)
    prompt_lookup_num_tokens: int = 10
    assistant: str | None = "self:12"  # HF assisted generation with this self-draft; None: skip
    task: str = "translation"  # or story, prefix, flores (held-out FLORES-200 test sentences)
    data_root: str = ""  # the corpora folder of --task flores
    threads: int | None = None
    dtype: str = "auto"  # babelspec and HF alike: auto | bfloat16 | float32
    forward: str | None = None  # babelspec's target forward (load_target), None: lean
    options: Any = None  # its ForwardOptions, None: the defaults
    precision: str | None = None  # babelspec's target mode (w8a8; HF runs the loaded dtype's model)
    llama_cpp: bool = True  # also llama.cpp plain decoding of the same GGUF, if installed
    llama_cpp_lookup: int = 10  # and its prompt-lookup speculative decoding, drafting this many (0: not)


def _method_runner(target: Any, method: str, item: PromptItem, cfg: PeersConfig, greedy: bool,
                   seed: int, drafters: dict[str, Any], assistant: Any,
                   llama: Any = None) -> tuple[list[int], float, dict]:
    from babelspec.engine import generate

    t0 = time.perf_counter()
    extra: dict[str, Any] = {}
    if method in (LLAMA_CPP, LLAMA_CPP_LOOKUP):
        tokens = llama[method].generate(item.ids, cfg.max_new_tokens, greedy, seed)
        # decode: the tokens after the first, timed after it (the prompt's evaluation is prefill)
        first = llama[method].first_token_seconds
        extra = {"decode_tokens": len(tokens) - 1, "decode_seconds": time.perf_counter() - t0 - first}
    elif method == "hf-plain":
        tokens = _hf_generate(target.model, item.ids, cfg.max_new_tokens, greedy, seed)
    elif method == "hf-prompt-lookup":
        tokens = _hf_generate(target.model, item.ids, cfg.max_new_tokens, greedy, seed,
                              prompt_lookup_num_tokens=cfg.prompt_lookup_num_tokens)
    elif method == "hf-assisted":
        tokens = _hf_generate(target.model, item.ids, cfg.max_new_tokens, greedy, seed,
                              assistant_model=assistant)
    else:
        name = method.removeprefix("babelspec:")
        spec = drafter_spec_for(name, item.lang)
        drafter = drafters[spec]
        gamma = cfg.gammas.get(name) or drafter.preferred_gamma or cfg.gamma
        result = generate(target, drafter, item.ids, gamma=gamma,
                          max_new_tokens=cfg.max_new_tokens, sampling=_sampling(greedy, seed))
        tokens = result.token_ids
        extra = {"alpha": result.alpha, "c": result.c,
                 "mean_accepted_length": result.mean_accepted_length,
                 # decode: every token after the prompt's prefill (the first step's forward included)
                 "decode_tokens": len(tokens), "decode_seconds": result.wall_seconds - result.prefill_seconds}
    return tokens, time.perf_counter() - t0, extra


def _median(values: list[float]) -> float | None:
    """The median of the measured values (NaN: not measured), for JSON."""
    return json_number(median(v for v in values if v == v), 4)


def _open_llama_cpp(cfg: PeersConfig) -> tuple[dict[str, Any], str]:
    """llama.cpp's plain decoding (and prompt lookup) where asked and available: (method ->
    model, a note saying what ran or why not)."""
    llama: dict[str, Any] = {}
    if not cfg.llama_cpp:
        return llama, "not requested"
    from babelspec.models.llamacpp import LlamaCppUnavailable, open_llama_cpp

    try:
        llama[LLAMA_CPP] = open_llama_cpp(cfg.target, threads=torch.get_num_threads())
        if cfg.llama_cpp_lookup:
            llama[LLAMA_CPP_LOOKUP] = open_llama_cpp(cfg.target, threads=torch.get_num_threads(),
                                                     lookup=cfg.llama_cpp_lookup)  # fmt: skip
        return llama, "; ".join(m.description for m in llama.values())
    except LlamaCppUnavailable as err:
        return llama, f"skipped: {err}"


def _precision_agreement(cfg: PeersConfig, target: Any, prompts: list[PromptItem], with_llama_cpp: bool) -> dict:
    """How closely a target mode (``cfg.precision``) follows the loaded dtype's greedy decoding,
    beside llama.cpp's own execution of the same GGUF where it ran."""
    from babelspec.bench.agreement import greedy_agreement
    from babelspec.target import Target

    others: dict[str, Any] = {f"babelspec {cfg.precision}": target}
    if with_llama_cpp:  # the peer's own execution of the same GGUF, as a yardstick
        from babelspec.models.llamacpp import open_llama_cpp

        n_ctx = max(len(p.ids) for p in prompts) + cfg.max_new_tokens + 16  # every row's logits are kept
        others[LLAMA_CPP] = open_llama_cpp(cfg.target, torch.get_num_threads(), n_ctx, logits_all=True)
    agreement = greedy_agreement(Target(target.model, target.tokenizer), others, [(p.lang, p.ids) for p in prompts],
                                 cfg.max_new_tokens)  # fmt: skip
    if LLAMA_CPP in others:
        others[LLAMA_CPP].close()
    return {"mode": cfg.precision, "agreement_with_loaded_dtype": agreement}


def peers(cfg: PeersConfig, progress: bool = True) -> dict:
    from babelspec.drafters import make_drafter
    from babelspec.drafters.selfdraft import num_layers, truncated_model
    from babelspec.machine import execution_info
    from babelspec.target import load_target

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    target = load_target(cfg.target, dtype=cfg.dtype, precision=cfg.precision, forward=cfg.forward,
                         options=cfg.options)
    tokenizer = target.tokenizer
    llama, llama_note = _open_llama_cpp(cfg)
    specs = list(cfg.drafters) if cfg.drafters is not None else default_drafters(num_layers(target.model))
    prompts = benchmark_prompts(tokenizer, list(cfg.langs), cfg.prompts_per_lang, cfg.task, data_root=cfg.data_root)
    drafters: dict[str, Any] = {"none": make_drafter("none", target)}
    for item in prompts:
        for spec in specs:
            full = drafter_spec_for(spec, item.lang)
            if full not in drafters:
                drafters[full] = _build_drafter(spec, full, target, item.lang, cfg.data_root)
    assistant = None
    methods = ["hf-plain", "hf-prompt-lookup"]
    if cfg.assistant:
        assistant = truncated_model(target.model, int(cfg.assistant.removeprefix("self:")))
        methods.append("hf-assisted")
    methods += list(llama)
    methods += ["babelspec:none"] + [f"babelspec:{s}" for s in specs]

    records: list[dict] = []
    started = time.perf_counter()
    warm = PromptItem(prompts[0].lang, prompts[0].ids, prompts[0].text)
    short = replace(cfg, max_new_tokens=WARM_UP_TOKENS)
    warm_seconds = warm_up({method: partial(_method_runner, target, method, warm, short, True, 0, drafters, assistant,
                                            llama) for method in methods})  # fmt: skip
    total = len(cfg.modes) * cfg.repeats * len(prompts) * len(methods)
    done = 0
    for mode in cfg.modes:
        greedy = mode == "greedy"
        for rep in range(cfg.repeats):
            for p_index, item in enumerate(prompts):
                shift = (p_index + rep) % len(methods)
                for method in methods[shift:] + methods[:shift]:  # rotate the order
                    seed = 1000 * rep + p_index
                    tokens, seconds, extra = _method_runner(target, method, item, cfg, greedy, seed,
                                                            drafters, assistant, llama)
                    text = tokenizer.decode(tokens, skip_special_tokens=True)
                    records.append({"mode": mode, "rep": rep, "prompt": p_index, "lang": item.lang,
                                    "method": method, "tokens": len(tokens), "chars": len(text),
                                    "seconds": seconds, "first_tokens": tokens[:8], **extra})
                    done += 1
                    if progress:
                        import sys

                        print(f"[{done}/{total}] {mode} {item.lang} {method}: {len(tokens)} tok "
                              f"{seconds:.2f} s", file=sys.stderr, flush=True)
    out = summarise(records, cfg, methods, prompts, time.perf_counter() - started)
    out["warm_up_seconds"] = warm_seconds
    out["execution"] = execution_info(target)
    if cfg.precision:  # another model than the loaded one: how closely it follows it
        out["precision"] = _precision_agreement(cfg, target, prompts, with_llama_cpp=LLAMA_CPP in llama)
    out["llama_cpp"] = llama_note
    for model in llama.values():
        model.close()
    return out


def _peers_key(r: dict) -> tuple:
    return (r["mode"], r["rep"], r["prompt"])


def _method_entry(mine: list[dict], methods: list[str], base: dict, peer_runs: dict, cfg: PeersConfig) -> dict:
    """One method's medians in one mode, and its ratios to the runs of the same prompts by Hugging
    Face's plain decoding and llama.cpp's."""
    key = _peers_key
    tps = [r["tokens"] / r["seconds"] for r in mine]
    cps = [r["chars"] / r["seconds"] for r in mine]
    ratios = []
    for r in mine:
        b = base[key(r)]
        ratios.append((r["tokens"] / r["seconds"]) / (b["tokens"] / b["seconds"]))
    entry = {
        "tokens_per_s": _median(tps), "chars_per_s": _median(cps),
        "ratio_to_hf_plain": _median(ratios),
        "ratio_to_hf_plain_chars": _median(
            [(r["chars"] / r["seconds"]) / max(base[key(r)]["chars"] / base[key(r)]["seconds"], 1e-9)
             for r in mine]),
        "per_lang_ratio": {lang: _median([x for x, r in zip(ratios, mine) if r["lang"] == lang])
                           for lang in cfg.langs},
    }
    for peer, name in ((LLAMA_CPP, "ratio_to_llama_cpp"), (LLAMA_CPP_LOOKUP, "ratio_to_llama_cpp_lookup")):
        if peer in methods:
            runs = peer_runs[peer]
            entry[name] = _median([(r["tokens"] / r["seconds"]) / (runs[key(r)]["tokens"] / runs[key(r)]["seconds"])
                                   for r in mine if key(r) in runs])  # fmt: skip
    decoding = [r for r in mine if r.get("decode_seconds", 0) > 0 and r.get("decode_tokens", 0) > 0]
    if decoding:  # llama.cpp and babelspec: tokens/s after the prompt's prefill
        entry["decode_tokens_per_s"] = _median([r["decode_tokens"] / r["decode_seconds"] for r in decoding])
        if LLAMA_CPP in methods:
            runs = peer_runs[LLAMA_CPP]

            def decode_rate(r: dict) -> float:
                return r["decode_tokens"] / r["decode_seconds"]

            entry["decode_ratio_to_llama_cpp"] = _median(
                [decode_rate(r) / decode_rate(runs[key(r)]) for r in decoding
                 if key(r) in runs and runs[key(r)].get("decode_tokens", 0) > 0])  # fmt: skip
    if mine and "alpha" in mine[0]:
        entry["alpha"] = _median([r["alpha"] for r in mine])
        entry["c"] = _median([r["c"] for r in mine])
        entry["mean_accepted_length"] = _median([r["mean_accepted_length"] for r in mine])
    return entry


def summarise(records: list[dict], cfg: PeersConfig, methods: list[str], prompts: list[PromptItem],
              seconds: float) -> dict:
    """Medians per mode x method (and per language), ratios to HF plain from paired runs."""
    out: dict[str, Any] = {
        "benchmark": "peers", "target": cfg.target, "task": cfg.task, "gamma": cfg.gamma, "gammas": cfg.gammas,
        "max_new_tokens": cfg.max_new_tokens, "langs": list(cfg.langs),
        "prompts": len(prompts), "repeats": cfg.repeats, "threads": torch.get_num_threads(),
        "wall_seconds": round(seconds, 1), "modes": {},
    }
    key = _peers_key
    base = {key(r): r for r in records if r["method"] == "hf-plain"}
    peer_runs = {peer: {key(r): r for r in records if r["method"] == peer} for peer in (LLAMA_CPP, LLAMA_CPP_LOOKUP)}
    for mode in cfg.modes:
        rows = [r for r in records if r["mode"] == mode]
        table: dict[str, Any] = {}
        for method in methods:
            table[method] = _method_entry([r for r in rows if r["method"] == method], methods, base, peer_runs, cfg)
        drafted = [m for m in methods if m.startswith("babelspec:") and m != "babelspec:none"]
        best = {}
        for lang in cfg.langs:
            scores = {m: table[m]["per_lang_ratio"].get(lang) for m in drafted}
            scores = {m: s for m, s in scores.items() if s is not None}
            if scores:
                top = max(scores, key=scores.get)
                lookup = table["hf-prompt-lookup"]["per_lang_ratio"].get(lang)
                best[lang] = {"best": top, "ratio": scores[top], "hf_prompt_lookup": lookup,
                              "beats_prompt_lookup": lookup is not None and scores[top] > lookup}
        table["_best_drafter_per_lang"] = best
        for peer, name in ((LLAMA_CPP, "llama_cpp"), (LLAMA_CPP_LOOKUP, "llama_cpp_lookup")):
            if peer in methods and drafted:
                top = max(drafted, key=lambda m: table[m][f"ratio_to_{name}"] or 0.0)
                table[f"_best_babelspec_vs_{name}"] = {
                    "best": top, "ratio": table[top][f"ratio_to_{name}"],
                    "plain_ratio": table["babelspec:none"][f"ratio_to_{name}"]}
        if LLAMA_CPP in methods and drafted:
            top = max(drafted, key=lambda m: table[m].get("decode_ratio_to_llama_cpp") or 0.0)
            table["_best_babelspec_vs_llama_cpp_decode"] = {
                "best": top, "ratio": table[top].get("decode_ratio_to_llama_cpp"),
                "plain_ratio": table["babelspec:none"].get("decode_ratio_to_llama_cpp")}
        out["modes"][mode] = table
    none_ratios = [out["modes"][m]["babelspec:none"]["ratio_to_hf_plain"] for m in cfg.modes]
    out["goal_none_ratio_ge_0.95"] = all(r is not None and r >= 0.95 for r in none_ratios)
    out["goal_best_beats_prompt_lookup_every_lang"] = all(
        v["beats_prompt_lookup"] for m in cfg.modes for v in out["modes"][m]["_best_drafter_per_lang"].values())
    return out
