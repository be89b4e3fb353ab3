"""``babelspec bench ...``: every benchmark command; each prints one JSON object."""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from typing import Any

import typer

from babelspec.models.presets import DEFAULT_TARGET

# The click under typer: its own copy (typer._click) in newer typers, the click package before.
click_globals = importlib.import_module(typer.BadParameter.__module__.rpartition(".")[0] + ".globals")
click_exceptions = importlib.import_module(typer.BadParameter.__module__.rpartition(".")[0] + ".exceptions")


def root_choice() -> dict[str, Any]:
    """What ``babelspec --forward/--native`` (or their variables) set: the root command's values
    that were given, not defaulted; empty outside a command."""
    ctx = click_globals.get_current_context(silent=True)
    return dict((ctx.find_root().obj if ctx is not None else None) or {})


bench_app = typer.Typer(help="Benchmarks: each prints one JSON object.", no_args_is_help=True)


def forward_choice() -> dict[str, Any]:
    """The forward the command line chose (``babelspec --forward``, ``--native/--no-native`` or
    their environment variables, read once at the edge), as ``load_target``'s ``forward=`` and
    ``options=``; empty where none was given, and outside a command."""
    given = root_choice()
    choice: dict[str, Any] = {}
    if "forward" in given:
        choice["forward"] = given["forward"]
    if "native" in given:
        from babelspec.forward import ForwardOptions

        choice["options"] = ForwardOptions(native=given["native"])
    return choice


def root_args() -> list[str]:
    """The root command's ``--forward``/``--native`` choices as command-line arguments, for the
    ``babelspec serve`` processes a bench starts: they see the same forward as the bench's own
    targets, however the choice was given (flag or environment variable)."""
    given = root_choice()
    args = ["--forward", given["forward"]] if "forward" in given else []
    if "native" in given:
        args.append("--native" if given["native"] else "--no-native")
    return args


def _emit(result: dict, output: str | None) -> None:
    """Print ``result`` as JSON, and write it to ``output`` too when given."""
    from babelspec.fileio import emit_json

    emit_json(result, output)


def _run(output: str | None, bench: Callable[..., dict], *args: Any, **kwargs: Any) -> None:
    """Run a bench and emit its JSON; what it cannot run (a bad value, a missing file or
    program) ends as every command's user error does (``babelspec.cli.ErrorExitGroup``)."""
    result = bench(*args, **kwargs)
    _emit(result, output)


@bench_app.command("engine")
def bench_engine(
    steps: int = typer.Option(300, help="Speculative steps to time."),
    gamma: int = typer.Option(4, help="Tokens drafted per step."),
) -> None:
    """Overhead of one speculative step beyond its model forwards, on a tiny model."""
    from babelspec.bench.engine import engine_overhead

    typer.echo(json.dumps(engine_overhead(steps=steps, gamma=gamma)))


@bench_app.command("exact")
def bench_exact(
    target: str = typer.Option(DEFAULT_TARGET, help="Target model (bf16, a Gemma-3 text model)."),
    rounds: int = typer.Option(15, help="Rounds over every shape, the order reversed every round."),
    context: int = typer.Option(300, help="Tokens cached before the timed decode and verification blocks."),
    data_root: str = typer.Option(None, "--data-root", help="A corpora folder with SIB-200: adds the exactness "
                                  "grid on a 4-shot FLORES-200 Amharic prompt."),
    output: str = typer.Option(None, help="Also write the JSON here."),
) -> None:
    """The exact bf16 forward's costs: decode, verification of 2-16 tokens and a tree of 8 in
    decode steps, prefill tokens/s at 300 and 1,000 tokens, and (with --data-root) which (context,
    block) cells give a block's rows the bits of one-token steps (all of them, or it is not exact)."""
    from babelspec.bench.exact import exact_costs

    if rounds < 1 or context < 1:
        raise typer.BadParameter("--rounds and --context must be >= 1")
    _run(output, exact_costs, target, data_root, rounds=rounds, context=context, **forward_choice())


@bench_app.command("head")
def bench_head(
    target: str = typer.Option(DEFAULT_TARGET, help="Target model (bf16, a Gemma-3 text model)."),
    positions: int = typer.Option(10_000, help="Positions of real text compared bit for bit, over the languages."),
    languages: str = typer.Option("", help="Comma-separated language codes (default: every one with bundled text)."),
    rounds: int = typer.Option(22, help="Rounds over every (head, block size), the languages in turn."),
    output: str = typer.Option(None, help="Also write the JSON here."),
) -> None:
    """The certified output head against the full one, side by side: forwards, plain decoding
    steps (greedy and the paper's sampling), the certificate per language, and exactness."""
    from babelspec.bench.head import head_costs

    codes = tuple(c.strip() for c in languages.split(",") if c.strip())
    if positions < 1 or rounds < 1:
        raise typer.BadParameter("--positions and --rounds must be >= 1")
    _run(output, head_costs, target, codes, positions, rounds=rounds)


@bench_app.command("forward")
def bench_forward(
    target: str = typer.Option(DEFAULT_TARGET, help="Target model: preset, local path or hub name."),
    dtypes: str = typer.Option("float32,bfloat16", help="Comma-separated dtypes, measured side by side; gguf: the "
                               "gguf target mode (products on the GGUF's own blocks, lean forward only)."),
    repeats: int = typer.Option(15, help="Rounds over every (dtype, block size)."),
    max_block: int = typer.Option(9, help="Largest verification block (gamma + 1)."),
    threads: int = typer.Option(0, help="torch threads (0 = torch's default)."),
    forwards: str = typer.Option("lean,hf", help="Forward implementations side by side: lean "
                                 "(babelspec's, where the family has one) and hf (Hugging Face's)."),
) -> None:
    """Decode and verify forward times per dtype, forward and block size 1..max-block; prints JSON."""
    import torch

    from babelspec.bench.forward import forward_costs
    from babelspec.models import DTYPES

    names = tuple(d.strip() for d in dtypes.split(",") if d.strip())
    bad = [d for d in names if d not in (*DTYPES, "gguf")]
    if bad or not names:
        raise typer.BadParameter(f"--dtypes takes {', '.join(DTYPES)} or gguf; got {dtypes!r}")
    if max_block < 2 or repeats < 1:
        raise typer.BadParameter("--max-block must be >= 2 and --repeats >= 1")
    if threads:
        torch.set_num_threads(threads)
    from babelspec.forward import FORWARDS

    impls = tuple(f.strip() for f in forwards.split(",") if f.strip())
    if not impls or any(f not in FORWARDS for f in impls) or len(set(impls)) < len(impls):
        raise typer.BadParameter(f"--forwards takes {', '.join(FORWARDS)} (each once); got {forwards!r}")
    blocks = tuple(range(1, max_block + 1))
    typer.echo(json.dumps(forward_costs(target, names, blocks, repeats, forwards=impls), indent=1))


def _langs(value: str, default: tuple[str, ...]) -> tuple[str, ...]:
    from babelspec.data.languages import get_language

    if not value:
        return default
    try:
        return tuple(get_language(code.strip()).code for code in value.split(",") if code.strip())
    except ValueError as err:
        raise typer.BadParameter(str(err)) from None


def _positive(name: str, value: int) -> int:
    if value < 1:
        raise typer.BadParameter(f"{name} must be >= 1 (got {value})")
    return value


def _modes(value: str) -> tuple[str, ...]:
    """``--modes``: greedy and/or sample, comma-separated."""
    modes = tuple(m.strip() for m in value.split(",") if m.strip())
    if not modes or any(m not in ("greedy", "sample") for m in modes):
        raise typer.BadParameter(f"--modes takes greedy and/or sample, got {value!r}")
    return modes


def _counts(name: str, value: str) -> list[int]:
    """Comma-separated positive integers, e.g. ``1,4,16``."""
    try:
        counts = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise typer.BadParameter(f"{name} takes comma-separated integers, got {value!r}") from None
    if not counts or min(counts) < 1:
        raise typer.BadParameter(f"{name} takes counts of at least 1, got {value!r}")
    return counts


def _spec_list(text: str) -> list[str]:
    """Comma-separated drafter specs, where an n-gram spec's own ``option=value`` items stay
    with it: ``none,real-bigram@,tree=15,int8`` is none, real-bigram@,tree=15 and int8."""
    from dataclasses import fields

    from babelspec.drafters.ngram_drafter import NgramDraftConfig

    options = {f.name for f in fields(NgramDraftConfig)}
    specs: list[str] = []
    for item in (t.strip() for t in text.split(",") if t.strip()):
        name = item.partition("=")[0]
        if name in options and specs and ("@" in specs[-1] or specs[-1].startswith("ngram:")):
            specs[-1] += "," + item
        else:
            specs.append(item)
    return specs


def _spec_gammas(text: str) -> dict[str, int]:
    """``--gammas``: comma-separated SPEC=γ (γ a positive integer; an n-gram spec may carry its
    options, ``real-bigram@,tree=0,recycle=8=8``)."""
    out = {}
    for item in _spec_list(text):
        spec, _, value = item.rpartition("=")
        if not spec or not value.isdigit() or int(value) < 1:
            raise typer.BadParameter(f"--gammas takes SPEC=γ with γ a positive integer, got {item!r}")
        out[spec] = int(value)
    return out


@bench_app.command("peers")
def bench_peers(
    target: str = typer.Option(DEFAULT_TARGET, help="Target model: preset, local path or hub name."),
    langs: str = typer.Option("", help="Comma-separated language codes (default: all 11; --quick: amh,npi,yor)."),
    prompts_per_lang: int = typer.Option(2, help="Prompts per language."),
    max_new_tokens: int = typer.Option(64, help="Tokens generated per run."),
    gamma: int = typer.Option(3, help="Tokens drafted per step for the babelspec drafters."),
    gammas: str = typer.Option("", help="Comma-separated SPEC=γ: a drafter's own γ (e.g. bigram@=8; default: a "
                               "tree's budget, else --gamma)."),
    repeats: int = typer.Option(1, help="Rounds over all prompts (medians over all runs)."),
    drafters: str = typer.Option("", help="Comma-separated drafter specs (default: self:6, self:12, head, self:12@; "
                                           "'head', 'self:K@', 'int8', 'int8:K@', 'gguf', 'gguf:K@', 'bigram@', 'distilled-bigram@' and "
                                           "'real-bigram@' take each prompt's language; the n-grams take options: "
                                           "real-bigram@,tree=15,branch=8)."),
    modes: str = typer.Option("greedy,sample", help="greedy, sample (top-k 100, top-p 0.9), or both."),
    assistant: str = typer.Option("self:12", help="Assistant for HF assisted generation (self:K), or 'none'."),
    task: str = typer.Option("translation", help="Prompts: translation, story, prefix (short in-language text) or "
                             "flores (held-out FLORES-200 test sentences from the corpora folder)."),
    data_root: str = typer.Option("", "--data-root", help="The corpora folder of --task flores [default: "
                                  "$BABELSPEC_CORPORA, else the user's corpora folder]"),
    quick: bool = typer.Option(False, "--quick", help="3 languages, 1 short prefix prompt each, 32 tokens, no HF assisted run: a few minutes."),
    dtype: str = typer.Option("auto", help="auto, bfloat16 or float32: babelspec and HF run in the same dtype."),
    precision: str = typer.Option("", help="babelspec's target mode: gguf (the file's blocks; the default of a "
                                  "GGUF model under --dtype auto), w8a8 (int8 weights and activations, another "
                                  "model; its agreement with the loaded dtype's is measured and printed), or "
                                  "none for the loaded dtype's own."),
    llama_cpp: bool = typer.Option(True, help="Also time llama.cpp plain decoding of the same GGUF (needs llama-cpp-python)."),
    llama_cpp_lookup: int = typer.Option(10, min=0, help="And llama.cpp with llama-cpp-python's prompt-lookup "
                                         "drafter (LlamaPromptLookupDecoding), drafting this many tokens; 0: not."),
    output: str | None = typer.Option(None, "-o", "--output", help="Also write the JSON to this file."),
) -> None:
    """HF generate (plain, prompt lookup, assisted) against babelspec with each drafter."""
    from babelspec.bench.peers import DEFAULT_LANGS, QUICK_LANGS, PeersConfig, peers

    mode_list = _modes(modes)
    drafter_specs, spec_gammas = _spec_list(drafters), _spec_gammas(gammas)
    unknown = [spec for spec in spec_gammas if drafter_specs and spec not in drafter_specs]
    if unknown:
        raise typer.BadParameter(f"--gammas names {', '.join(unknown)}, not among --drafters; give each SPEC as "
                                 "in --drafters")
    if assistant != "none" and not assistant.removeprefix("self:").isdigit():
        raise typer.BadParameter(f"--assistant must be self:K or none, got {assistant!r}")
    if quick:
        prompts_per_lang, max_new_tokens, assistant = 1, min(max_new_tokens, 32), "none"
        task = "prefix"  # short prompts: the minutes go to decoding, which is what is compared
    cfg = PeersConfig(
        target=target,
        langs=_langs(langs, QUICK_LANGS if quick else DEFAULT_LANGS),
        prompts_per_lang=_positive("--prompts-per-lang", prompts_per_lang),
        max_new_tokens=_positive("--max-new-tokens", max_new_tokens),
        gamma=_positive("--gamma", gamma),
        gammas=spec_gammas,
        repeats=_positive("--repeats", repeats),
        modes=mode_list,
        drafters=tuple(drafter_specs) or None,
        assistant=None if assistant == "none" else assistant,
        task=task,
        data_root=data_root,
        dtype=dtype,
        precision=precision or None,
        llama_cpp=llama_cpp,
        llama_cpp_lookup=llama_cpp_lookup,
        **forward_choice(),
    )
    result = peers(cfg)
    _emit(result, output)


@bench_app.command("equivalence")
def bench_equivalence(
    target: str = typer.Option(DEFAULT_TARGET, help="Target model: preset, local path or hub name."),
    langs: str = typer.Option("", help="Comma-separated language codes (default: all 11)."),
    prompts_per_lang: int = typer.Option(2, help="Prompts per language."),
    max_new_tokens: int = typer.Option(16, help="Tokens generated per prompt."),
    gamma: int = typer.Option(4, help="Tokens drafted per step."),
    drafters: str = typer.Option("none,self:6,self:12,head,self:12@", help="Comma-separated drafter specs."),
    task: str = typer.Option("prefix", help="Prompts: prefix (short in-language text), translation or story."),
    costs: bool = typer.Option(True, help="Also measure c (draft / target forward) per drafter."),
    dtype: str = typer.Option("float32", help="float32 (near-ties rare: any mismatch fails, exit 1), bfloat16 "
                              "(the fast mode: agreement rates measured and printed) or auto."),
    attention: str = typer.Option("eager", help="Attention implementation (eager, the loader's default; sdpa, "
                                  "whose rounding depends on the block size, to compare)."),
) -> None:
    """Greedy babelspec (each drafter) against HF generate greedy, token for token; prints JSON."""
    from babelspec.bench.peers import DEFAULT_LANGS, benchmark_prompts, drafter_costs, equivalence
    from babelspec.target import load_target

    tgt = load_target(target, dtype=dtype, attention=attention, **forward_choice())
    prompts = benchmark_prompts(tgt.tokenizer, list(_langs(langs, DEFAULT_LANGS)),
                                _positive("--prompts-per-lang", prompts_per_lang), task)
    specs = [d.strip() for d in drafters.split(",") if d.strip()]
    report = equivalence(tgt, prompts, specs, max_new_tokens=_positive("--max-new-tokens", max_new_tokens),
                         gamma=_positive("--gamma", gamma)).to_dict()
    if costs:
        report["costs"] = drafter_costs(tgt, prompts[0], [s for s in specs if s != "none"], gamma=gamma)
    typer.echo(json.dumps(report, indent=1))
    if not report["all_equal"] and report["execution"]["mode"] == "exact":
        raise typer.Exit(1)


@bench_app.command("ngram")
def bench_ngram(
    tokens: int = typer.Option(10_000_000, help="Synthetic tokens to count (Zipf-distributed)."),
    vocab: int = typer.Option(262_144, help="Vocabulary of the synthetic corpus (Gemma-3's by default)."),
    order: int = typer.Option(2, help="n of the model counted."),
    proposals: int = typer.Option(20_000, help="γ = 4 proposals to time."),
    corpus: str | None = typer.Option(
        None, help="Also time proposals on a model of this corpus (language code) with the default tokenizer."
    ),
) -> None:
    """Counting throughput, proposal latency, file size and memory of the n-gram drafter."""
    from babelspec.bench.ngram_speed import run_bench

    try:
        result = run_bench(n_tokens=tokens, vocab=vocab, order=order, proposals=proposals, corpus=corpus)
    except ValueError as err:
        raise typer.BadParameter(str(err)) from None
    typer.echo(json.dumps(result))


@bench_app.command("tree")
def bench_tree(
    target: str = typer.Option(DEFAULT_TARGET, help="Target model (it must verify trees: attention layers only)."),
    langs: str = typer.Option("", help="Comma-separated language codes (default: amh,npi,yor,grn,oci,ibo)."),
    prompts_per_lang: int = typer.Option(4, help="FLORES-200 test sentences per language."),
    max_new_tokens: int = typer.Option(48, help="Tokens generated per run."),
    gamma: int = typer.Option(4, help="The chain's length and the tree's depth."),
    budgets: str = typer.Option("8,15", help="Comma-separated tree node budgets."),
    branches: str = typer.Option("4", help="Comma-separated tree branchings: candidates per node under greedy, "
                                 "independent chains under sampling."),
    deep: bool = typer.Option(True, help="Also each tree of depth up to its budget, not only γ."),
    recycle: int = typer.Option(0, help="Also every chain and tree with Token Recycling of this many of the "
                                "target's candidates per token (0: not)."),
    modes: str = typer.Option("greedy,sample", help="greedy, sample (the paper's settings), or both."),
    data_root: str = typer.Option("", "--data-root", help="The corpora folder [default: "
                                  "$BABELSPEC_CORPORA, else the user's corpora folder]"),
    dtype: str = typer.Option("auto", help="auto, bfloat16 or float32."),
    output: str | None = typer.Option(None, "-o", "--output", help="Also write the JSON to this file."),
) -> None:
    """Token trees against chains of the corpus bigram on held-out FLORES-200 sentences."""
    from babelspec.bench.tree import TREE_LANGS, TreeBenchConfig, tree_bench

    mode_list = _modes(modes)
    budget_list, branch_list = tuple(_counts("--budgets", budgets)), tuple(_counts("--branches", branches))
    if recycle < 0:
        raise typer.BadParameter(f"--recycle takes a count of candidates, 0 for none (got {recycle})")
    cfg = TreeBenchConfig(target=target, langs=_langs(langs, TREE_LANGS),
                          prompts_per_lang=_positive("--prompts-per-lang", prompts_per_lang),
                          max_new_tokens=_positive("--max-new-tokens", max_new_tokens),
                          gamma=_positive("--gamma", gamma), budgets=budget_list, branches=branch_list,
                          deep=deep, modes=mode_list, recycle=recycle,
                          data_root=data_root, dtype=dtype, **forward_choice())  # fmt: skip
    result = tree_bench(cfg)
    _emit(result, output)


@bench_app.command("quant")
def bench_quant(
    target: str = typer.Option(DEFAULT_TARGET, help="Target model (its lean forward runs int8 drafts: Gemma-3)."),
    langs: str = typer.Option("", help="Comma-separated language codes (default: amh,npi,yor,ibo,grn)."),
    prompts_per_lang: int = typer.Option(4, help="FLORES-200 test sentences per language."),
    max_new_tokens: int = typer.Option(48, help="Tokens generated per run."),
    gammas: str = typer.Option("4", "--gammas", "--gamma", help="Tokens drafted per step; several (e.g. 2,3,4) run "
                               "each drafter at each, side by side."),
    drafters: str = typer.Option("head,int8,int8:12@,bigram", help="Comma-separated drafter specs; 'head', 'int8' and "
                                 "'int8:K@' take each prompt's language, 'bigram' is the corpus bigram."),
    modes: str = typer.Option("greedy,sample", help="greedy, sample (the paper's settings), or both."),
    data_root: str = typer.Option("", "--data-root", help="The corpora folder [default: "
                                  "$BABELSPEC_CORPORA, else the user's corpora folder]"),
    dtype: str = typer.Option("auto", help="auto, bfloat16 or float32."),
    output: str | None = typer.Option(None, "-o", "--output", help="Also write the JSON to this file."),
) -> None:
    """The target drafting for itself in int8, per language, beside its bf16 form and the bigram."""
    from babelspec.bench.quant import QUANT_LANGS, QuantBenchConfig, quant_bench

    mode_list = _modes(modes)
    drafter_list = tuple(d.strip() for d in drafters.split(",") if d.strip())
    if not drafter_list:
        raise typer.BadParameter("--drafters needs at least one drafter spec")
    cfg = QuantBenchConfig(target=target, langs=_langs(langs, QUANT_LANGS),
                           prompts_per_lang=_positive("--prompts-per-lang", prompts_per_lang),
                           max_new_tokens=_positive("--max-new-tokens", max_new_tokens),
                           gammas=tuple(_counts("--gammas", gammas)), drafters=drafter_list, modes=mode_list,
                           data_root=data_root, dtype=dtype, **forward_choice())  # fmt: skip
    result = quant_bench(cfg)
    _emit(result, output)


@bench_app.command("serve")
def bench_serve_command(
    target: str = typer.Option("gemma-3-270m", help="Target model."),
    drafters: str = typer.Option("none,auto", help="Comma-separated drafter specs to compare (one server)."),
    router: str | None = typer.Option(None, help="Router file for auto."),
    clients: str = typer.Option("4", help="Concurrent clients; comma-separated counts are compared, e.g. 1,4,16."),
    requests: int = typer.Option(16, min=1, help="Requests per cell (batch size, clients, drafter)."),
    max_tokens: int = typer.Option(32, min=1, help="Tokens per request."),
    langs: str = typer.Option("npi,amh,yor", help="Languages of the prompts (translation task), detected by the server."),
    port: int = typer.Option(0, help="Port (0: a free one)."),
    threads: int = typer.Option(0, min=0, help="The server's torch CPU threads (0: torch's default)."),
    batch: str = typer.Option("4", help="Comma-separated server batch sizes (one server each, compared side by "
                              "side), e.g. 1,4."),
) -> None:
    """Latency (p50, p99) and tokens/s of a real server under concurrent clients, per drafter."""
    from babelspec.bench.serve import bench_serve

    batches, client_counts = _counts("--batch", batch), _counts("--clients", clients)
    figures = bench_serve(target=target, drafters=[d for d in drafters.split(",") if d], router=router,
                          clients=client_counts, requests=requests, max_tokens=max_tokens,
                          langs=[x for x in langs.split(",") if x], port=port, threads=threads,
                          batches=batches, babelspec_args=root_args())  # fmt: skip
    typer.echo(json.dumps(figures))


@bench_app.command("transformers")
def bench_transformers(
    langs: str = typer.Option("yor,amh,npi", help="Comma-separated language codes."),
    target: str = typer.Option("gemma-3-270m", help="Target model: preset, local path or hub name."),
    dtype: str = typer.Option("float32", help="The model's dtype in all three runs."),
    drafter: str = typer.Option("real-bigram@", help="babelspec's drafter (bigram@, real-bigram@, ... or a spec)."),
    prompts_per_lang: int = typer.Option(2, help="Prompts per language."),
    max_new_tokens: int = typer.Option(48, help="Tokens per generation."),
    prompt_lookup: int = typer.Option(10, help="transformers' prompt_lookup_num_tokens."),
    task: str = typer.Option("flores", help="Prompts: flores (held-out FLORES-200 translation), translation, prefix."),
    data_root: str = typer.Option("", help="The corpora folder (default: $BABELSPEC_CORPORA)."),
    output: str | None = typer.Option(None, "-o", "--output", help="Also write the JSON to this file."),
) -> None:
    """transformers' generate (plain, prompt lookup) against babelspec's drafter inside it, greedy."""
    from babelspec.bench.transformers_helper import transformers_helper

    _run(output, transformers_helper, list(_langs(langs, ("yor",))), target=target, dtype=dtype, drafter=drafter,
         prompts_per_lang=_positive("--prompts-per-lang", prompts_per_lang),
         max_new_tokens=_positive("--max-new-tokens", max_new_tokens),
         prompt_lookup=prompt_lookup, task=task, data_root=data_root)  # fmt: skip


@bench_app.command("vllm")
def bench_vllm_command(
    langs: str = typer.Option("yor,amh,npi", help="Comma-separated language codes."),
    model: str = typer.Option("gemma-3-270m", help="A packaged preset (its bf16 conversion) or a checkpoint folder."),
    tables: str = typer.Option("", help="babelspec's proposer tables (ngram export --format vllm); default: "
                               "each language's trigram of its real text, built here."),
    configs: str = typer.Option("plain,ngram,babelspec", help="vLLM configurations: plain, ngram, babelspec."),
    prompts_per_lang: int = typer.Option(4, help="Held-out FLORES-200 prompts per language."),
    max_new_tokens: int = typer.Option(48, help="Tokens per generation."),
    concurrency: str = typer.Option("1,4", help="Concurrent requests, comma-separated."),
    speculative_tokens: int = typer.Option(4, help="vLLM's num_speculative_tokens."),
    modes: str = typer.Option("greedy,sample", help="greedy and/or sample (top-p 0.9, T 1)."),
    proposer_options: str = typer.Option("", help="babelspec's proposer options, e.g. threshold=0.2,min_backoff=1."),
    data_root: str = typer.Option("", help="The corpora folder (default: $BABELSPEC_CORPORA)."),
    output: str | None = typer.Option(None, "-o", "--output", help="Also write the JSON to this file."),
) -> None:
    """vLLM plain, with its ngram prompt lookup, and with babelspec's proposer, per language (needs vLLM)."""
    from babelspec.bench.vllm_peer import bench_vllm

    _run(output, bench_vllm, list(_langs(langs, ("yor",))), model=model, tables=tables,
         configs=tuple(c.strip() for c in configs.split(",") if c.strip()),
         prompts_per_lang=_positive("--prompts-per-lang", prompts_per_lang),
         max_new_tokens=_positive("--max-new-tokens", max_new_tokens),
         concurrency=tuple(_counts("--concurrency", concurrency)), modes=_modes(modes),
         proposer_options=dict(o.split("=", 1) for o in proposer_options.split(",") if "=" in o),
         speculative_tokens=_positive("--speculative-tokens", speculative_tokens),
         data_root=data_root)  # fmt: skip


@bench_app.command("llama-server")
def bench_llama_server_command(
    langs: str = typer.Option("yor,amh,npi", help="Comma-separated language codes."),
    target: str = typer.Option("gemma-3-270m", help="A packaged preset with a GGUF (llama-server loads the GGUF)."),
    server: str = typer.Option("", help="llama-server binary (default: the one `make test-peers` puts in .venv/bin)."),
    methods: str = typer.Option(",".join(("plain", "ngram-simple", "ngram-cache", "ngram-cache+babelspec")),
                                help="llama-server methods compared."),
    prompts_per_lang: int = typer.Option(4, help="Held-out FLORES-200 prompts per language."),
    max_new_tokens: int = typer.Option(48, help="Tokens per generation."),
    slots: str = typer.Option("1,4", help="Parallel slots (llama-server -np, babelspec --batch), comma-separated."),
    modes: str = typer.Option("greedy,sample", help="greedy and/or sample (the paper's sampling)."),
    babelspec_server: bool = typer.Option(True, help="Also babelspec's server, plain and with the same table."),
    threads: int = typer.Option(2, help="Threads of either server."),
    data_root: str = typer.Option("", help="The corpora folder (default: $BABELSPEC_CORPORA)."),
    output: str | None = typer.Option(None, "-o", "--output", help="Also write the JSON to this file."),
) -> None:
    """llama.cpp's server plain, with its n-gram types and with babelspec's cache, per language."""
    from babelspec.bench.llama_server import bench_llama_server

    _run(output, bench_llama_server, list(_langs(langs, ("yor",))), target=target, server=server,
         prompts_per_lang=_positive("--prompts-per-lang", prompts_per_lang),
         max_new_tokens=_positive("--max-new-tokens", max_new_tokens),
         slots=tuple(_counts("--slots", slots)), modes=_modes(modes),
         methods=tuple(m.strip() for m in methods.split(",") if m.strip()),
         with_babelspec=babelspec_server, threads=_positive("--threads", threads),
         data_root=data_root, babelspec_args=root_args())  # fmt: skip
