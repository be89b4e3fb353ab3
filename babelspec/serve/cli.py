"""``babelspec serve`` and ``babelspec bench serve``."""

from __future__ import annotations

import sys

import typer


def serve_command(
    target: str = typer.Option("gemma-3-270m", help="Target model: preset, local path or hub name."),
    drafter: str = typer.Option("none", help="Default drafter spec (a request's 'drafter' overrides it); "
                                "auto = the router's route for the request's language."),
    router: str | None = typer.Option(None, help="Router file for auto (default: the installed router)."),
    host: str = typer.Option("127.0.0.1", help="Address to listen on."),
    port: int = typer.Option(8000, help="Port to listen on."),
    queue_size: int = typer.Option(16, min=0, help="Requests that may wait for the engine; more get 429."),
    request_timeout: float = typer.Option(600.0, min=0.001, help="Seconds from arrival to the last token; "
                                          "later, the request ends with 504."),
    max_body_bytes: int = typer.Option(1 << 20, min=1, help="Largest request body; larger ones get 413."),
    served_model_name: str | None = typer.Option(None, help="Model id clients send (default: --target)."),
    threads: int = typer.Option(0, min=0, help="Torch CPU threads (0: torch's default); 1 on a busy shared CPU."),
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
    from babelspec.serve.worker import Worker, is_auto

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        from babelspec.drafters import make_drafter
        from babelspec.experiments.checks import OutputChecker
        from babelspec.models import load_target
        from babelspec.serve.protocol import APIError

        if threads:
            import torch

            torch.set_num_threads(threads)
        tgt = load_target(target)
        if not is_auto(drafter):
            make_drafter(drafter, tgt)  # a bad spec fails now, not on the first request
        detector = OutputChecker.from_corpora([], use_langid=False).classifier
        worker = Worker(tgt, served_model_name or target, drafter=drafter, router=router, queue_size=queue_size,
                        request_timeout=request_timeout, detector=detector)  # fmt: skip
    except APIError as err:
        typer.echo(f"error: {err.message}", err=True)
        raise typer.Exit(2) from None
    except (ValueError, FileNotFoundError) as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None
    app = create_app(worker, max_body_bytes=max_body_bytes)
    print(f"babelspec serve: {served_model_name or target} with drafter {worker.default_drafter} on "
          f"http://{host}:{port}/v1", file=sys.stderr, flush=True)  # fmt: skip
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False, timeout_graceful_shutdown=3)


def bench_serve_command(
    target: str = typer.Option("gemma-3-270m", help="Target model."),
    drafters: str = typer.Option("none,auto", help="Comma-separated drafter specs to compare (one server)."),
    router: str | None = typer.Option(None, help="Router file for auto."),
    clients: int = typer.Option(4, min=1, help="Concurrent clients."),
    requests: int = typer.Option(16, min=1, help="Requests per drafter."),
    max_tokens: int = typer.Option(32, min=1, help="Tokens per request."),
    langs: str = typer.Option("npi,amh,yor", help="Languages of the prompts (translation task), detected by the server."),
    port: int = typer.Option(0, help="Port (0: a free one)."),
    threads: int = typer.Option(0, min=0, help="The server's torch CPU threads (0: torch's default)."),
) -> None:
    """Latency (p50, p99) and tokens/s of a real server under concurrent clients, per drafter."""
    import json

    from babelspec.serve.bench import bench_serve

    figures = bench_serve(target=target, drafters=[d for d in drafters.split(",") if d], router=router,
                          clients=clients, requests=requests, max_tokens=max_tokens,
                          langs=[x for x in langs.split(",") if x], port=port, threads=threads)  # fmt: skip
    typer.echo(json.dumps(figures))
