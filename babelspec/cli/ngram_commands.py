"""``babelspec ngram train|distil|stats`` and ``babelspec bench ngram``."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from babelspec.bench.cli import forward_choice
from babelspec.errors import UserError

ngram_app = typer.Typer(help="Train and inspect n-gram drafters.", no_args_is_help=True)


def _human_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _load_tokenizer(spec: str):
    """A tokenizer preset or model spec (babelspec.models), or a folder of tokenizer files."""
    path = Path(spec)
    if path.is_dir() and any((path / f).exists() for f in ("tokenizer.json", "tokenizer_config.json")):
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(path)
    from babelspec.models import load_tokenizer

    return load_tokenizer(spec)


@ngram_app.command("train")
def train_command(
    corpus: str = typer.Option(
        ..., "--corpus", help="A language code (the bundled data of the 11, e.g. amh; any other FLORES-200 "
        "language's real training text from the corpora folder), FORMAT:PATH, or a text file."
    ),
    data_root: str = typer.Option("", "--data-root", help="The corpora folder, for a language beyond the 11 "
                                  "[default: $BABELSPEC_CORPORA, else the user's corpora folder]"),
    tokenizer: str = typer.Option(
        "gemma-3-270m", "--tokenizer", help="The target's tokenizer: preset, model spec or local folder."
    ),
    order: int = typer.Option(2, "--order", "-n", help="n: longest n-gram counted (2 = the paper's bigram)."),
    min_count: int = typer.Option(1, help="Drop continuations seen fewer times than this."),
    max_continuations: int = typer.Option(0, help="Keep at most this many continuations per context (0 = all)."),
    split: str = typer.Option("train", help="Split of the bundled data to train on."),
    output: Path = typer.Option(..., "--output", "-o", help="The n-gram file to write."),
) -> None:
    """Count an n-gram model on a corpus with the target's tokenizer and write it to a file."""
    from babelspec.ngram import CountConfig, train
    from babelspec.ngram.corpus import corpus_texts

    try:
        config = CountConfig(order=order, min_count=min_count, max_continuations=max_continuations)
    except ValueError as err:
        raise typer.BadParameter(str(err)) from None
    try:
        texts, name = corpus_texts(corpus, split, data_root or None)
    except ValueError as err:
        raise typer.BadParameter(str(err), param_hint="--corpus") from None
    try:
        tok = _load_tokenizer(tokenizer)
    except ValueError as err:
        raise typer.BadParameter(str(err), param_hint="--tokenizer") from None
    total = len(texts) if hasattr(texts, "__len__") else None
    try:
        model = train(texts, tok, config, corpus_name=name, progress=total is None or total > 2000)
    except ValueError as err:
        raise typer.BadParameter(str(err)) from None
    if model.training["tokens"] == 0:
        raise typer.BadParameter(f"corpus {corpus!r} holds no text", param_hint="--corpus")
    size = model.save(output)
    t = model.training
    typer.echo(
        f"{output}: order {model.order}, {t['tokens']:,} tokens from {t['texts']:,} texts of {name}, "
        f"{model.base:,} distinct tokens; "
        + ", ".join(f"{tb.n_contexts:,} contexts/{tb.n_entries:,} continuations (k={tb.context_length})"
                    for tb in model.tables[1:])
        + f"; {_human_bytes(size)} ({size / max(model.raw_triples_bytes(), 1):.2f}× the raw triples); "
        f"counted in {t['count_seconds']:.3f} s"
    )


@ngram_app.command("distil")
def distil_command(
    corpus: str = typer.Option(
        ..., "--corpus", help="Language code of the bundled data (e.g. amh), FORMAT:PATH, or a text file."
    ),
    target: str = typer.Option("gemma-3-270m", "--target", help="The target whose distributions are counted."),
    tokens: int = typer.Option(8192, help="Positions of the corpus scored teacher-forced (general mode; 0 = none)."),
    task: str = typer.Option("", help="Also answer this task's train prompts (translation or story) and count "
                                      "the target's distributions on its own responses (task mode)."),
    lang: str = typer.Option("", help="Language of the task prompts (default: --corpus when it is a language code)."),
    prompts: int = typer.Option(16, help="Task-mode train prompts."),
    max_new_tokens: int = typer.Option(48, help="Task-mode response length."),
    top_k: int = typer.Option(20, help="The target's most likely tokens kept per position."),
    corpus_weight: float = typer.Option(0.0, help="Also count the corpus itself, at this weight per occurrence "
                                                  "(in positions of soft counts)."),
    greedy: bool = typer.Option(False, "--greedy", help="Distil for greedy decoding (default: the paper's sampling)."),
    dtype: str = typer.Option("auto", help="auto, bfloat16 or float32."),
    output: Path = typer.Option(..., "--output", "-o", help="The n-gram file to write."),
) -> None:
    """Count a bigram on the target's own next-token distributions (a distilled n-gram drafter)."""
    from babelspec.distill.ngram_distill import DistillConfig, distil_texts
    from babelspec.ngram.corpus import corpus_texts
    from babelspec.sampling import SamplingConfig

    if task not in ("", "translation", "story"):
        raise typer.BadParameter(f"--task takes translation or story, got {task!r}", param_hint="--task")
    try:
        config = DistillConfig(max_tokens=tokens, top_k=top_k, corpus_weight=corpus_weight)
    except ValueError as err:
        raise typer.BadParameter(str(err)) from None
    try:
        texts, name = corpus_texts(corpus, "train")
    except ValueError as err:
        raise typer.BadParameter(str(err), param_hint="--corpus") from None
    from babelspec.target import load_target

    try:
        tgt = load_target(target, dtype=dtype, **forward_choice())
    except ValueError as err:
        raise typer.BadParameter(str(err), param_hint="--target") from None
    sampling = SamplingConfig(greedy=True) if greedy else SamplingConfig.paper()
    try:
        model = distil_texts(tgt, texts, sampling=sampling, config=config, task=task, lang=lang or corpus,
                             prompts=prompts, max_new_tokens=max_new_tokens,
                             training={"corpus": f"{name}:distilled", "target": target},
                             log=lambda m: typer.echo(m, err=True))  # fmt: skip
    except ValueError as err:  # an unknown task language, nothing to score
        raise typer.BadParameter(str(err)) from None
    size = model.save(output)
    t = model.training
    typer.echo(f"{output}: order {model.order}, {t['general_positions']:,} corpus and {t['task_positions']:,} "
               f"response positions of {target}, {model.base:,} distinct tokens, {_human_bytes(size)}")


@ngram_app.command("export")
def export_command(
    tables: list[str] = typer.Argument(None, help="N-gram files, each FILE or LANG=FILE (the language: LANG, else "
                                       "the file's training corpus, else its name)."),
    out: Path = typer.Option(..., "-o", "--out", help="The folder to write (llama.cpp with one FILE: the file)."),
    fmt: str = typer.Option("llama.cpp", "--format", help="llama.cpp (llama-server's static lookup cache), vllm "
                            "(babelspec's vLLM proposer's tables) or transformers (babelspec's helper)."),
    router: Path | None = typer.Option(None, help="Also every language whose route (router.json) drafts with an "
                                       "n-gram file."),
) -> None:
    """Write n-gram models as another engine's artifact, per language, and print the line that
    starts that engine with each."""
    from babelspec.integrations.export import FORMATS, export_tables, language_of
    from babelspec.ngram import NgramFileError, NgramModel
    from babelspec.ngram.llamacpp import export_llamacpp

    if fmt not in FORMATS:
        raise typer.BadParameter(f"{fmt!r}; choose one of {', '.join(FORMATS)}", param_hint="--format")
    named: dict[str, Path] = {}
    try:
        for item in tables or []:
            lang, eq, path = item.partition("=")
            path = Path(path if eq else item)
            if not path.is_file():
                raise UserError(f"no n-gram file {str(path)!r}")
            named[lang.strip() if eq else language_of(NgramModel.load(path), path)] = path
        if router is not None:
            named.update({lang: path for lang, path in _router_tables(router).items() if lang not in named})
        if fmt == "llama.cpp" and len(tables or []) == 1 and router is None and "=" not in tables[0] \
                and out.suffix:  # the one-file form: OUT is the cache file
            sizes = export_llamacpp(NgramModel.load(named[next(iter(named))]), out)
            typer.echo(f"wrote {out}: {sizes['contexts']:,} two-token contexts, {sizes['continuations']:,} "
                       f"continuations, {_human_bytes(sizes['bytes'])}")
            return
        written = export_tables(named, fmt, out)
    except (ValueError, NgramFileError) as err:
        raise typer.BadParameter(str(err), param_hint="TABLES") from None
    for e in written:
        typer.echo(f"{e.lang}: wrote {e.path} ({e.detail})" if e.path else f"{e.lang}: not exported: {e.detail}")
    for line in dict.fromkeys(e.start for e in written if e.start):
        typer.echo(f"  start: {line}")


def _router_tables(path: Path) -> dict[str, Path]:
    """{language: n-gram file} of a router's routes that draft with an n-gram file: the
    per-language route's where it has one, else the first task's."""
    from babelspec.drafters.ngram_drafter import parse_spec
    from babelspec.router import ANY_TASK, Router

    found: dict[str, Path] = {}
    routes = sorted(Router.load(path).routes, key=lambda r: r.task != ANY_TASK)  # per-language routes first
    for route in routes:
        if route.spec.startswith("ngram:") and route.language not in found:
            found[route.language] = Path(parse_spec(route.spec.removeprefix("ngram:"))[0])
    if not found:
        raise UserError(f"{path}: no per-language route drafts with an n-gram file")
    return found


@ngram_app.command("stats")
def stats_command(
    path: Path = typer.Argument(..., help="An n-gram file."),
    json_output: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Print what an n-gram file holds: sizes per order, tokenizer and training metadata."""
    from babelspec.ngram import NgramModel

    try:
        model = NgramModel.load(path)
    except ValueError as err:
        raise typer.BadParameter(str(err), param_hint="FILE") from None
    stats = {"file": str(path), "file_bytes": path.stat().st_size, **model.stats()}
    if json_output:
        typer.echo(json.dumps(stats, ensure_ascii=False))
        return
    tok, tr = model.tokenizer, model.training
    typer.echo(f"{path}: order-{model.order} n-gram model, {_human_bytes(stats['file_bytes'])}")
    typer.echo(f"  tokenizer  {tok.get('name')} (vocabulary {tok.get('vocab_size')}, sha256 {tok.get('vocab_sha256', '')[:16]}…)")
    typer.echo(
        f"  corpus     {tr.get('corpus')}: {tr.get('tokens', 0):,} tokens, {tr.get('texts', tr.get('documents', 0)):,} texts, "
        f"{model.base:,} distinct tokens"
    )
    if "distilled" in tr:
        typer.echo(f"  distilled  {tr.get('general_positions', 0):,} corpus and {tr.get('task_positions', 0):,} response "
                   f"positions, top-{tr['distilled'].get('top_k')} soft counts")
    typer.echo(f"  pruning    min_count={tr.get('min_count')}, max_continuations={tr.get('max_continuations')}")
    for t in stats["tables"]:
        typer.echo(
            f"  context {t['context_length']}  {t['contexts']:>10,} contexts  {t['entries']:>11,} continuations  "
            f"{t['mean_continuations']:.2f} per context"
        )
    typer.echo(f"  {stats['triples']:,} triples; {stats['file_bytes'] / max(stats['raw_triples_bytes'], 1):.2f}× their raw int32 size")
