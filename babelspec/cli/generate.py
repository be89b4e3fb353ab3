"""``babelspec generate``: one generation with a drafter, its text and one line of statistics."""

from __future__ import annotations

import typer

from babelspec.bench.cli import forward_choice
from babelspec.sampling import PAPER_REPETITION_PENALTY, PAPER_REPETITION_WINDOW, PAPER_TOP_K, PAPER_TOP_P

DTYPE_HELP = ("auto (bf16 where the hardware computes in it natively: CUDA, AVX-512 BF16/AMX CPUs; "
              "else float32), bfloat16 (bit-exact on the lean forward where oneDNN packs bf16) or float32 (as near "
              "exact as the dtype gets, not bit-invariant: docs/statistics.md).")
PRECISION_HELP = ("Target mode: gguf (every product on the GGUF file's own quantized blocks: the file's model, "
                  "the default for GGUF models under --dtype auto on a CPU), w8a8 (int8 weights and activations, "
                  "MLP down-projections bf16; another model than the bf16 one), none (the dtype's own weights, "
                  "bf16 or float32), or empty for the default.")
HEAD_HELP = ("Output head: full, or certified (bf16: greedy and top-k steps of one row take each row's k largest "
             "logits exactly from an int8 pass and exact products on the candidates its error bound keeps; the "
             "same tokens, about 1.1-1.2x faster plain decoding steps here; `babelspec bench head`).")


def generate(
    prompt: str = typer.Option(..., "--prompt", "-p", help="Text to continue."),
    target: str = typer.Option("gemma-3-270m", help="Target model: preset, local path or hub name."),
    dtype: str = typer.Option("auto", help=DTYPE_HELP),
    precision: str = typer.Option("", help=PRECISION_HELP),
    head: str = typer.Option("full", help=HEAD_HELP),
    drafter: str = typer.Option("none", help="Drafter spec: none, model:X, ngram:FILE, self:K, distilled:DIR, auto."),
    gamma: int | None = typer.Option(
        None, help="Tokens drafted per step (γ); default: the router's choice with --drafter auto, else 4."),
    greedy: bool = typer.Option(False, "--greedy", help="Arg-max decoding."),
    temperature: float = typer.Option(1.0, help="Sampling temperature."),
    top_k: int = typer.Option(PAPER_TOP_K, help="Top-k filter (0 = off); the paper's by default."),
    top_p: float = typer.Option(PAPER_TOP_P, help="Top-p (nucleus) filter (1 = off); the paper's by default."),
    repetition_penalty: float | None = typer.Option(
        None, help=f"Windowed repetition penalty (1 = off); default {PAPER_REPETITION_PENALTY} when sampling "
                   "(the paper's), 1 with --greedy."),
    repetition_window: int = typer.Option(PAPER_REPETITION_WINDOW, help="Window of the repetition penalty, in tokens."),
    seed: int = typer.Option(0, help="Seed of the sampling generator."),
    max_new_tokens: int = typer.Option(128, help="Most tokens to generate."),
    lang: str | None = typer.Option(None, help="Language code, for drafters that depend on it (auto, self:K@LANG)."),
    task: str | None = typer.Option(None, help="Task (translation, story), for the auto drafter."),
    stop: list[str] | None = typer.Option(None, help="Stop string (repeatable)."),
    json_output: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Generate text with speculative decoding and print it with one line of statistics."""
    import json

    from babelspec.engine import generate as run_generation
    from babelspec.sampling import SamplingConfig

    try:
        sampling = SamplingConfig.paper(seed, greedy=greedy, repetition_penalty=repetition_penalty,
                                        temperature=temperature, top_k=top_k, top_p=top_p,
                                        repetition_window=repetition_window)
    except ValueError as err:
        raise typer.BadParameter(str(err)) from None
    if gamma is not None and gamma < 1:
        raise typer.BadParameter(f"--gamma must be >= 1 (got {gamma}); use --drafter none for plain decoding")
    if max_new_tokens < 0:
        raise typer.BadParameter(f"--max-new-tokens must be >= 0 (got {max_new_tokens})")
    if lang is not None:
        from babelspec.data.languages import get_language

        try:
            lang = get_language(lang).code
        except ValueError as err:
            raise typer.BadParameter(str(err), param_hint="--lang") from None
    from babelspec.drafters import check_spec, make_drafter
    from babelspec.drafters.base import resolve_gamma
    from babelspec.target import load_target

    check_spec(drafter)  # before the target loads
    tgt = load_target(target, dtype=dtype, precision=precision or None, head=head, **forward_choice())
    context = {k: v for k, v in (("lang", lang), ("task", task)) if v is not None}
    drf = make_drafter(drafter, tgt, **context)
    prompt_ids = tgt.tokenizer(prompt)["input_ids"]
    gamma = resolve_gamma(gamma, drf)
    result = run_generation(tgt, drf, prompt_ids, gamma=gamma, max_new_tokens=max_new_tokens,
                            sampling=sampling, stop_strings=tuple(stop or ()))
    if json_output:
        from babelspec.machine import execution_info

        typer.echo(json.dumps({"text": result.text, "target": target, "drafter": drafter,
                               "execution": execution_info(tgt), **result.to_dict()}, ensure_ascii=False))
        return
    typer.echo(prompt + result.text)
    typer.echo(
        f"[{drafter} γ={gamma}] {result.n_tokens} tokens, {result.n_chars} chars in "
        f"{result.wall_seconds:.2f} s ({result.n_tokens / max(result.wall_seconds, 1e-9):.1f} tok/s); "
        f"α={result.alpha:.3f} ({result.accepted}/{result.proposed} accepted, {result.steps} steps); "
        f"draft {result.draft_seconds:.2f} s, target {result.target_seconds:.2f} s; "
        f"c={result.c:.3f}, f={result.theoretical_speedup():.2f}×",
        err=True,
    )
