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
    from babelspec.serve.scheduler import Scheduler, is_auto

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        from babelspec.data.langid import OutputChecker
        from babelspec.drafters import make_drafter
        from babelspec.serve.protocol import APIError
        from babelspec.target import load_target

        if threads:
            import torch

            torch.set_num_threads(threads)
        tgt = load_target(target)
        if not is_auto(drafter):
            make_drafter(drafter, tgt)  # a bad spec fails now, not on the first request
        detector = OutputChecker.from_corpora([], use_langid=False).classifier
        worker = Scheduler(tgt, served_model_name or target, drafter=drafter, router=router, queue_size=queue_size,
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
