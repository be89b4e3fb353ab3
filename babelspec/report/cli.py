"""``babelspec report runs/NAME``: Markdown and HTML report of a run."""

from __future__ import annotations

from pathlib import Path

import typer


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
