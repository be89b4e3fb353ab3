"""``babelspec run``: the experiment grid, resumable, with a progress bar."""

from __future__ import annotations

from pathlib import Path

import typer


def run_command(
    out: Path = typer.Option(..., "--out", "-o", help="Run directory, e.g. runs/demo (resumed if it exists)."),
    config: Path = typer.Option(None, "--config", "-c", help="An experiment TOML file (see configs/)."),
    profile: str = typer.Option(None, "--profile", "-p", help="A shipped profile: quick or full (default quick)."),
    data_root: Path = typer.Option(None, "--data-root", help="Folder the [data] section's relative sources are in (e.g. ../shared/corpora)."),
    no_progress: bool = typer.Option(False, "--no-progress", help="No progress bar (logs only)."),
    install_router: bool = typer.Option(True, help="Also install the run's router where `--drafter auto` finds it."),
) -> None:
    """Run languages x tasks x drafters x gamma plus plain decoding; resume where a run stopped."""
    from babelspec.experiments.config import ConfigError, load_config

    try:
        cfg = load_config(config, profile, data_root=data_root)
    except ConfigError as exc:
        raise typer.BadParameter(str(exc), param_hint="--config/--profile") from exc
    from babelspec.experiments.runner import install_router as install, run_experiment

    def log(msg: str) -> None:
        typer.echo(msg, err=True)

    summary = run_experiment(cfg, out, progress=not no_progress, log=log)
    log(f"{summary.generated} generated this time, {summary.done_before} resumed; "
        f"{len(summary.skipped)} settings skipped; {summary.seconds / 60:.1f} min")  # fmt: skip
    if install_router:
        dest = install(out / "router.json")
        if dest:
            log(f"router installed at {dest} (used by `babelspec generate --drafter auto --lang L`)")
    typer.echo(str(out))
