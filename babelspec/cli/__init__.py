"""The ``babelspec`` command line: thin wrappers that parse, call the library and print.

One module per command group; this one only assembles them. The benchmarks' commands live
with their code in ``babelspec.bench``.

This is the edge: the environment is read here, once (``--forward`` and ``--native`` or their
variables, into ``load_target``'s values), and an error the library raises on a user's input or
data ends every command the same way: one line on stderr, exit status 2 (``ErrorExitGroup``).
"""

from __future__ import annotations

import typer
from typer.core import TyperGroup

from babelspec.bench.cli import bench_app, click_exceptions
from babelspec.cli.data import data_app
from babelspec.cli.distill import distill_command
from babelspec.cli.generate import generate
from babelspec.cli.ngram_commands import ngram_app
from babelspec.cli.serve import serve_command
from babelspec.cli.study import report_command, run_command
from babelspec.errors import UserError


def user_errors() -> tuple[type[BaseException], ...]:
    """What the library raises on a user's input or missing data: bad values (``UserError``:
    unknown languages, presets, configs, n-gram files, request fields ...; any other
    ``ValueError`` is babelspec's own fault and keeps its traceback), missing files and
    corpora (``FileNotFoundError``: ``DataNotFoundError``), paths that cannot be written where
    given (a file where a run's folder goes, a folder where a file goes, no permission), and what a run or bench cannot start
    (a Ray cluster, a data build, a peer engine)."""
    from babelspec.data.build import BuildError
    from babelspec.experiments.executors import ExecutorError
    from babelspec.experiments.prepare import DrafterUnavailable
    from babelspec.models.llamacpp import LlamaCppUnavailable

    return (UserError, FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError, PermissionError,
            ExecutorError, BuildError, DrafterUnavailable, LlamaCppUnavailable)  # fmt: skip


def error_exit(message: str) -> typer.Exit:
    """Say ``message`` on one line of stderr; the ``Exit`` (status 2) to raise."""
    typer.echo(f"error: {' '.join(message.split())}", err=True)
    return typer.Exit(2)


class ErrorExitGroup(TyperGroup):
    """The root group, the one error exit: a command's bad option or argument, and any error the
    library raises on a user's input or data (``user_errors``), end as one line on stderr and
    exit status 2, never a traceback."""

    def make_context(self, info_name, args, parent=None, **extra):  # noqa: ANN001, ANN201 - click's signature
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click_exceptions.NoArgsIsHelpError:
            raise
        except click_exceptions.UsageError as err:  # the root's own options (--forward ...)
            raise error_exit(f"{err.format_message()} (see babelspec --help)") from None

    def invoke(self, ctx: typer.Context):  # noqa: ANN201 - click's signature
        try:
            return super().invoke(ctx)
        except click_exceptions.NoArgsIsHelpError:
            raise
        except click_exceptions.UsageError as err:
            where = err.ctx.command_path if err.ctx is not None else "babelspec"
            raise error_exit(f"{err.format_message()} (see {where} --help)") from None
        except user_errors() as err:
            raise error_exit(str(err) or type(err).__name__) from None


app = typer.Typer(
    help="Lossless speculative decoding for low-resource languages, measured honestly.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    cls=ErrorExitGroup,
)


def _version(value: bool) -> None:
    if value:
        import babelspec

        typer.echo(f"babelspec {babelspec.__version__}")
        raise typer.Exit()


def _forward_name(value: str) -> str:
    name = value.strip().lower()
    if name not in ("lean", "hf"):
        raise typer.BadParameter(f"{value!r} is not a forward; use lean or hf")
    return name


@app.callback()
def main(
    ctx: typer.Context,
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print babelspec's version and exit."),  # fmt: skip
    forward: str = typer.Option("lean", "--forward", envvar="BABELSPEC_FORWARD",
                                callback=_forward_name,
                                help="The target's forward: lean (babelspec's own, where the family has one) "
                                "or hf (Hugging Face's)."),  # fmt: skip
    native: bool = typer.Option(True, "--native/--no-native", envvar="BABELSPEC_NATIVE",
                                help="The lean forward's C glue and row-by-row attention in C; --no-native "
                                "runs the same arithmetic in torch operations, slower."),  # fmt: skip
) -> None:
    """Lossless speculative decoding for low-resource languages, measured honestly."""
    given = {name for name in ("forward", "native")
             if getattr(ctx.get_parameter_source(name), "name", "DEFAULT") != "DEFAULT"}  # fmt: skip
    ctx.obj = {name: value for name, value in (("forward", forward), ("native", native)) if name in given}


app.command()(generate)
app.command("run")(run_command)
app.command("report")(report_command)
app.command("distill")(distill_command)
app.command("serve")(serve_command)
app.add_typer(data_app, name="data")
app.add_typer(ngram_app, name="ngram")
app.add_typer(bench_app, name="bench")
