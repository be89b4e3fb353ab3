"""``babelspec run`` (the experiment grid, resumable, with a progress bar) and ``babelspec report``."""

from __future__ import annotations

from pathlib import Path

import typer


def run_command(
    out: Path = typer.Option(..., "--out", "-o", help="Run directory, e.g. runs/demo (resumed if it exists)."),
    config: Path = typer.Option(None, "--config", "-c", help="An experiment TOML file (see babelspec/profiles/)."),
    profile: str = typer.Option(None, "--profile", "-p", help="A shipped profile: quick or full (default quick)."),
    data_root: Path = typer.Option(None, "--data-root", help="Folder the [data] section's relative sources are in (the corpora folder)."),
    no_progress: bool = typer.Option(False, "--no-progress", help="No progress bar (logs only)."),
    install_router: bool = typer.Option(
        False, help="Also install the run's router as the default of `--drafter auto` and `serve` (replacing "
        "the one installed); without it, use auto:RUN/router.json."),
    ray: str = typer.Option(None, "--ray", help="Run the units on a Ray cluster: auto (the one this machine is in) or HOST:PORT of its head."),
    ray_workers: int = typer.Option(None, "--ray-workers", help="Ray workers to start (default: as many as the cluster holds)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan (units, generations, estimated hours) and run nothing."),
) -> None:
    """Run languages x tasks x drafters x gamma plus plain decoding; resume where a run stopped."""
    from babelspec.experiments.config import ConfigError, load_config

    try:
        cfg = load_config(config, profile, data_root=data_root)
    except ConfigError as exc:
        raise typer.BadParameter(str(exc), param_hint="--config/--profile") from exc
    from babelspec.bench.cli import root_choice

    chosen = root_choice()  # babelspec --forward/--native
    cfg.forward, cfg.native = chosen.get("forward", cfg.forward), chosen.get("native", cfg.native)
    if ray is not None:
        cfg.ray = "" if ray in ("", "off", "no") else ray
    if ray_workers is not None:
        cfg.ray_workers = ray_workers
    from babelspec.experiments.runner import dry_run as plan_run
    from babelspec.experiments.runner import install_router as install
    from babelspec.experiments.runner import run_experiment

    def log(msg: str) -> None:
        typer.echo(msg, err=True)

    try:
        if dry_run:
            typer.echo(plan_run(cfg, out, log=log).describe())
            return
        summary = run_experiment(cfg, out, progress=not no_progress, log=log)
    except KeyboardInterrupt:
        typer.echo(f"interrupted: every finished example is in {out}; run the same command to resume",
                   err=True)  # fmt: skip
        raise typer.Exit(130) from None
    log(f"{summary.generated} generated this time, {summary.done_before} resumed; "
        f"{len(summary.skipped)} settings skipped; {summary.seconds / 60:.1f} min")  # fmt: skip
    if install_router:
        dest = install(out / "router.json")
        if dest:
            log(f"router installed at {dest} (used by `babelspec generate --drafter auto --lang L`)")
    elif (out / "router.json").exists():
        log(f"router at {out / 'router.json'}: use --drafter auto:{out / 'router.json'}, or rerun with "
            "--install-router to make it the default")
    typer.echo(str(out))


def report_command(
    run_dir: Path = typer.Argument(..., help="A run directory written by `babelspec run -o DIR`."),
    out: Path = typer.Option(None, "--out", "-o", help="Where to write the report (default: the run directory)."),
) -> None:
    """Write report.md (+ figures/) and a self-contained report.html for a run."""
    from babelspec.report import build_report

    try:
        paths = build_report(run_dir, out)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="RUN_DIR") from exc
    typer.echo(f"wrote {paths['markdown']} and {paths['html']}")
