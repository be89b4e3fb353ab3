"""``babelspec bench peers`` and ``babelspec bench equivalence`` (registered on ``bench_app``)."""

from __future__ import annotations

import typer

from babelspec.models.presets import DEFAULT_TARGET


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


def bench_peers(
    target: str = typer.Option(DEFAULT_TARGET, help="Target model: preset, local path or hub name."),
    langs: str = typer.Option("", help="Comma-separated language codes (default: all 11; --quick: amh,npi,yor)."),
    prompts_per_lang: int = typer.Option(2, help="Prompts per language."),
    max_new_tokens: int = typer.Option(64, help="Tokens generated per run."),
    gamma: int = typer.Option(3, help="Tokens drafted per step for the babelspec drafters."),
    repeats: int = typer.Option(1, help="Rounds over all prompts (medians over all runs)."),
    drafters: str = typer.Option("", help="Comma-separated drafter specs (default: self:6, self:12, head, self:12@; "
                                           "'head', 'self:K@', 'bigram@' and 'distilled-bigram@' take each prompt's language)."),
    modes: str = typer.Option("greedy,sample", help="greedy, sample (top-k 100, top-p 0.9), or both."),
    assistant: str = typer.Option("self:12", help="Assistant for HF assisted generation (self:K), or 'none'."),
    task: str = typer.Option("translation", help="Prompts: translation, story or prefix (short in-language text)."),
    quick: bool = typer.Option(False, "--quick", help="3 languages, 1 short prefix prompt each, 32 tokens, no HF assisted run: a few minutes."),
    dtype: str = typer.Option("auto", help="auto, bfloat16 or float32: babelspec and HF run in the same dtype."),
    llama_cpp: bool = typer.Option(True, help="Also time llama.cpp plain decoding of the same GGUF (needs llama-cpp-python)."),
    output: str | None = typer.Option(None, "-o", "--output", help="Also write the JSON to this file."),
) -> None:
    """HF generate (plain, prompt lookup, assisted) against babelspec with each drafter."""
    import json

    from babelspec.models.peers import DEFAULT_LANGS, QUICK_LANGS, PeersConfig, peers

    mode_list = tuple(m.strip() for m in modes.split(",") if m.strip())
    bad = [m for m in mode_list if m not in ("greedy", "sample")]
    if bad or not mode_list:
        raise typer.BadParameter(f"--modes takes greedy and/or sample, got {modes!r}")
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
        repeats=_positive("--repeats", repeats),
        modes=mode_list,
        drafters=tuple(d.strip() for d in drafters.split(",") if d.strip()) or None,
        assistant=None if assistant == "none" else assistant,
        task=task,
        dtype=dtype,
        llama_cpp=llama_cpp,
    )
    try:
        result = peers(cfg)
    except ValueError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None
    text = json.dumps(result, indent=1)
    if output:
        from babelspec.fileio import write_text_atomic

        write_text_atomic(output, text + "\n")
    typer.echo(text)


def bench_equivalence(
    target: str = typer.Option(DEFAULT_TARGET, help="Target model: preset, local path or hub name."),
    langs: str = typer.Option("", help="Comma-separated language codes (default: all 11)."),
    prompts_per_lang: int = typer.Option(2, help="Prompts per language."),
    max_new_tokens: int = typer.Option(16, help="Tokens generated per prompt."),
    gamma: int = typer.Option(4, help="Tokens drafted per step."),
    drafters: str = typer.Option("none,self:6,self:12,head,self:12@", help="Comma-separated drafter specs."),
    task: str = typer.Option("prefix", help="Prompts: prefix (short in-language text), translation or story."),
    costs: bool = typer.Option(True, help="Also measure c (draft / target forward) per drafter."),
    dtype: str = typer.Option("float32", help="float32 (the exact mode: any mismatch fails, exit 1), bfloat16 "
                              "(the fast mode: agreement rates measured and printed) or auto."),
    attention: str = typer.Option("eager", help="Attention implementation (eager, the loader's default; sdpa, "
                                  "whose rounding depends on the block size, to compare)."),
) -> None:
    """Greedy babelspec (each drafter) against HF generate greedy, token for token; prints JSON."""
    import json

    from babelspec.models import load_target
    from babelspec.models.peers import DEFAULT_LANGS, benchmark_prompts, drafter_costs, equivalence

    try:
        tgt = load_target(target, dtype=dtype, attention=attention)
        prompts = benchmark_prompts(tgt.tokenizer, list(_langs(langs, DEFAULT_LANGS)),
                                    _positive("--prompts-per-lang", prompts_per_lang), task)
        specs = [d.strip() for d in drafters.split(",") if d.strip()]
        report = equivalence(tgt, prompts, specs, max_new_tokens=_positive("--max-new-tokens", max_new_tokens),
                             gamma=_positive("--gamma", gamma)).to_dict()
        if costs:
            report["costs"] = drafter_costs(tgt, prompts[0], [s for s in specs if s != "none"], gamma=gamma)
    except ValueError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None
    typer.echo(json.dumps(report, indent=1))
    if not report["all_equal"] and report["execution"]["mode"] == "exact":
        raise typer.Exit(1)
