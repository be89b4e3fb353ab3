"""``babelspec serve`` and ``babelspec bench serve``."""

from __future__ import annotations

import sys

import typer

from babelspec.bench.cli import forward_choice
from babelspec.cli.generate import DTYPE_HELP, PRECISION_HELP
from babelspec.errors import UserError


def serve_command(
    target: str = typer.Option("gemma-3-270m", help="Target model: preset, local path or hub name."),
    dtype: str = typer.Option("auto", help=DTYPE_HELP),
    precision: str = typer.Option("", help=PRECISION_HELP),
    drafter: list[str] = typer.Option(
        ["none"], help="A drafter requests may choose, SPEC or NAME=SPEC (repeatable; the first is the default; "
        "requests name one, never a path or a model): e.g. bigram=ngram:amh.ngram, self:6, auto (the router's "
        "route for the request's language). Plain decoding is always offered as 'none'."),
    router: str | None = typer.Option(None, help="Router file for auto (default: the installed router); "
                                      "given, auto is offered."),
    host: str = typer.Option("127.0.0.1", help="Address to listen on."),
    port: int = typer.Option(8000, help="Port to listen on."),
    queue_size: int = typer.Option(16, min=0, help="Requests that may wait for the engine; more get 429."),
    request_timeout: float = typer.Option(600.0, min=0.001, help="Seconds from arrival to the last token; "
                                          "later, the request ends with 504."),
    max_body_bytes: int = typer.Option(1 << 20, min=1, help="Largest request body; larger ones get 413."),
    served_model_name: str | None = typer.Option(None, help="Model id clients send (default: --target)."),
    threads: int = typer.Option(0, min=0, help="Torch CPU threads (0: torch's default); 1 on a busy shared CPU."),
    batch: int = typer.Option(16, min=1, help="Requests generated at once, sharing each target forward (bench "
                              "serve --batch 1,4,16 measures it: on 2 cores 16 gave 3.9x one client's tokens/s at "
                              "16 clients, 4 gave 2.5x); 1: one at a time."),
) -> None:
    """An OpenAI-compatible server (completions, chat, streaming) that drafts per language."""
    import logging

    try:
        import uvicorn

        from babelspec.serve.app import create_app
    except ImportError as err:
        typer.echo(f"error: babelspec serve needs its extra ({err.name} is missing): pip install 'babelspec[serve]'",
                   err=True)  # fmt: skip
        raise typer.Exit(2) from None
    from babelspec.serve.scheduler import Scheduler, is_auto, parse_offers

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        from babelspec.drafters import make_drafter
        from babelspec.serve.protocol import APIError
        from babelspec.target import load_target

        if threads:
            import torch

            torch.set_num_threads(threads)
        offers = parse_offers(drafter)
        tgt = load_target(target, dtype=dtype, precision=precision or None, **forward_choice())
        for spec in offers.values():
            if not is_auto(spec):
                make_drafter(spec, tgt)  # a bad spec (or file) fails now, not on a request
        worker = Scheduler(tgt, served_model_name or target, drafter=offers, router=router, queue_size=queue_size,
                           request_timeout=request_timeout, detect=True, batch=batch)  # fmt: skip
    except APIError as err:
        raise UserError(err.message) from None  # the command line's one error exit
    app = create_app(worker, max_body_bytes=max_body_bytes)
    offered = ", ".join(f"{name} ({spec})" if name != spec else name for name, spec in worker.offers.items())
    print(f"babelspec serve: {served_model_name or target} on http://{host}:{port}/v1; drafters {offered}, "
          f"default {worker.default_offer}", file=sys.stderr, flush=True)  # fmt: skip
    if worker.batch > 1:
        print(f"babelspec serve: up to {worker.batch} requests at once, sharing forwards of up to "
              f"{worker.engine.max_rows} rows", file=sys.stderr, flush=True)  # fmt: skip
    else:
        print("babelspec serve: one request at a time", file=sys.stderr, flush=True)
    if worker.router_path:
        print(f"babelspec serve: auto routes with {worker.router_path}", file=sys.stderr, flush=True)
    run_server(uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False,
                                             timeout_graceful_shutdown=3)), worker)  # fmt: skip


def run_server(server, worker) -> None:
    """HTTP on a thread of its own, generation on this one, which loaded the model (forwards
    are slower on any other: ``babelspec.batching``). SIGINT and SIGTERM stop both: running
    requests end at their next step."""
    import signal
    import threading

    def stop(signum, frame) -> None:
        server.should_exit = True
        worker.close()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, stop)
    http = threading.Thread(target=server.run, name="babelspec-http", daemon=True)
    http.start()
    worker.run(stop=lambda: not http.is_alive())  # ends at close, or when HTTP has stopped
    server.should_exit = True
    worker.close()
    http.join(10)
    if not server.started:
        typer.echo(f"error: the server could not listen on {server.config.host}:{server.config.port} "
                   "(in use? choose another --port)", err=True)  # fmt: skip
        raise typer.Exit(1)
