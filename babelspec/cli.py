"""The ``babelspec`` command line: thin wrappers that parse, call the library and print."""

from __future__ import annotations

import typer

app = typer.Typer(
    help="Lossless speculative decoding for low-resource languages, measured honestly.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
bench_app = typer.Typer(help="Benchmarks: each prints one JSON object.", no_args_is_help=True)
app.add_typer(bench_app, name="bench")

# --- sub-command groups owned by the other packages (one line each) ---
