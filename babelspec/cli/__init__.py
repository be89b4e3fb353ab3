"""The ``babelspec`` command line: thin wrappers that parse, call the library and print.

One module per command group; this one only assembles them. The benchmarks' commands live
with their code in ``babelspec.bench``.
"""

from __future__ import annotations

import typer

from babelspec.bench.cli import bench_app
from babelspec.cli.data import data_app
from babelspec.cli.distill import distill_command
from babelspec.cli.generate import generate
from babelspec.cli.ngram_commands import ngram_app
from babelspec.cli.serve import serve_command
from babelspec.cli.study import report_command, run_command

app = typer.Typer(
    help="Lossless speculative decoding for low-resource languages, measured honestly.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        import babelspec

        typer.echo(f"babelspec {babelspec.__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print babelspec's version and exit."),  # fmt: skip
) -> None:
    """Lossless speculative decoding for low-resource languages, measured honestly."""


app.command()(generate)
app.command("run")(run_command)
app.command("report")(report_command)
app.command("distill")(distill_command)
app.command("serve")(serve_command)
app.add_typer(data_app, name="data")
app.add_typer(ngram_app, name="ngram")
app.add_typer(bench_app, name="bench")
