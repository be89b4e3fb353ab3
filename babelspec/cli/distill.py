"""``babelspec distill``: train a drafter by knowledge distillation from the target."""

from __future__ import annotations

import json
from pathlib import Path

import typer


def distill_command(
    mode: str = typer.Option(..., "--mode", help="task (teacher translations) or general "
                             "(monolingual text)"),
    lang: str = typer.Option(..., "--lang", help="language code, e.g. yor, amh, npi"),
    out: Path = typer.Option(..., "-o", "--out", help="output directory (a distilled:DIR drafter)"),
    teacher: str = typer.Option(None, "--teacher", help="teacher (= target) preset or path "
                                "[default: gemma-3-270m]"),
    student: str = typer.Option(None, "--student", help="self:K, self:K,head=corpus or "
                                "model:PATH_OR_PRESET [default: self:6,head=corpus]"),
    config: Path = typer.Option(None, "--config", help="TOML config [default: the CPU recipe, "
                                "babelspec/profiles/distill/cpu.toml; babelspec/profiles/distill/paper.toml is the paper's]"),
    steps: int = typer.Option(None, "--steps", help="optimizer steps"),
    batch_size: int = typer.Option(None, "--batch-size"),
    grad_accum: int = typer.Option(None, "--grad-accum"),
    lr: float = typer.Option(None, "--lr"),
    loss: str = typer.Option(None, "--loss", help="ce (the paper's) or kl (renormalised top-k)"),
    k: int = typer.Option(None, "--k", help="teacher top-k log-probs kept per position (the paper: 20)"),
    max_examples: int = typer.Option(None, "--max-examples"),
    eval_prompts: int = typer.Option(None, "--eval-prompts", help="held-out prompts per task"),
    data_root: str = typer.Option(None, "--data-root", help="The corpora folder: the language's real sets "
                                  "(babelspec.data.real) are read from it wherever no source is given "
                                  "[default: $BABELSPEC_CORPORA, else the user's corpora folder]"),
    bundled: bool = typer.Option(False, "--bundled", help="Read only the bundled dataset, even where a "
                                 "corpora folder holds the language's real sets."),
    train_source: str = typer.Option(None, "--train-source", help="Task mode: real sentences to translate, "
                                     "e.g. sib200:sib200@train [default: the bundled train split]"),
    shots_source: str = typer.Option(None, "--shots-source", help="Task mode: few-shot pairs, e.g. "
                                     "sib200:sib200@dev [default: --train-source]"),
    text_source: list[str] = typer.Option(None, "--text-source", help="General mode: real monolingual text "
                                          "(repeatable), e.g. oldi-seed:nllb_oldi_seed [default: bundled]"),
    cache_dir: str = typer.Option(None, "--cache-dir", help="Where the soft-target shards go (default: the user cache directory)."),
    threads: int = typer.Option(None, "--threads", help="torch CPU threads"),
    dtype: str = typer.Option(None, "--dtype", help="teacher and student dtype: float32 (default: training "
                              "updates are kept in full precision), bfloat16 or auto"),
    as_json: bool = typer.Option(False, "--json", help="print the metadata as JSON"),
    no_progress: bool = typer.Option(False, "--no-progress"),
) -> None:
    """Distil a drafter for one language: cache the teacher's top-k, train, evaluate, save."""
    from babelspec.distill.pipeline import MODES, load_config, run_distill, with_real_data

    if mode not in MODES:
        raise typer.BadParameter(f"{mode!r}; choose one of {', '.join(MODES)}", param_hint="--mode")
    if config is not None and not config.exists():
        raise typer.BadParameter(f"{config} does not exist", param_hint="--config")
    try:
        cfg = load_config(config, mode=mode, lang=lang, teacher=teacher, student=student,
                          cache_dir=cache_dir, dtype=dtype, data_root=data_root,
                          **{"data.train_source": train_source, "data.shots_source": shots_source,
                             "data.text_sources": text_source or None, "train.steps": steps,
                                                  "train.batch_size": batch_size,
                                                  "train.grad_accum": grad_accum,
                                                  "train.lr": lr, "train.loss": loss,
                                                  "data.k": k, "data.max_examples": max_examples,
                                                  "eval.prompts": eval_prompts})
        if not bundled:
            from babelspec.data.real import corpora_root

            cfg = with_real_data(cfg, corpora_root(data_root))
        cfg.validate()
    except ValueError as err:
        raise typer.BadParameter(str(err)) from err
    if threads:
        import torch

        torch.set_num_threads(threads)
    meta = run_distill(cfg, out, progress=not no_progress)
    if as_json:
        typer.echo(json.dumps({k: v for k, v in meta.items() if k != "losses"}, indent=2))
        return
    _print_summary(cfg, meta, out)


def _print_summary(cfg, meta: dict, out: Path) -> None:
    """What was read and held out, where the drafter went, and its acceptance before and after."""
    d = cfg.data
    read = ", ".join(filter(None, [d.train_source, *d.text_sources, *(f"mix {m}" for m in d.mix)])) or "bundled train split"
    typer.echo(f"trained on {read}; held out: {d.test_source or 'bundled test split'}")
    typer.echo(f"wrote {out} ({meta['steps']} steps, stopped by {meta['stopped']}, weights of step "
               f"{meta['best_step'] if meta['best_step'] >= 0 else meta['steps']})")
    for task in cfg.eval.tasks:
        b, a = meta["eval_before"].get(task), meta["eval_after"].get(task)
        if b and a:
            typer.echo(f"  {task}: expected acceptance {b['expected_acceptance']:.4f} -> "
                       f"{a['expected_acceptance']:.4f}, KD loss {b['kd_loss']:.4f} -> "
                       f"{a['kd_loss']:.4f}")
    typer.echo("  wall seconds: " + ", ".join(f"{k}={v:.1f}"
                                              for k, v in meta["wall_seconds"].items()))
