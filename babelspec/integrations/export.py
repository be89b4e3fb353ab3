"""babelspec's n-gram tables as each engine's artifact, per language, with the line that starts
that engine with it (``babelspec ngram export``).

* ``llama.cpp``: llama.cpp's static lookup cache, one ``LANG.lookup`` per language, for
  ``llama-server --spec-type ngram-cache --lookup-cache-static FILE`` (2-token keys: order 3 or
  more). llama-server takes one static cache per process, so a server per language.
* ``vllm``: the tables folder of babelspec's vLLM proposer (``babelspec.integrations.vllm``):
  ``manifest.json`` and one ``LANG.ngram`` per language; one server for every language.
* ``transformers``: the same folder; ``babelspec.integrations.transformers.generate`` takes a
  file as ``drafter="ngram:FOLDER/LANG.ngram"``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from babelspec.data.languages import canonical_tables
from babelspec.errors import UserError
from babelspec.ngram import NgramModel

FORMATS = ("llama.cpp", "vllm", "transformers")


@dataclass
class Exported:
    lang: str
    path: Path | None  # None: not exported (``detail`` says why)
    detail: str  # sizes, or why it was left out
    start: str  # the line that starts the engine with it


def language_of(model: NgramModel, path: Path) -> str:
    """A table's language: its training corpus's (``LANG:...``), else its file name's stem."""
    corpus = str(model.training.get("corpus", ""))
    return corpus.split(":", 1)[0] if ":" in corpus else path.stem.split(".")[0]


def start_line(fmt: str, path: Path, lang: str) -> str:
    """How to start the engine with an exported artifact."""
    if fmt == "llama.cpp":
        return (f"llama-server -m MODEL.gguf -t 2 --spec-type ngram-cache --lookup-cache-static {path}"
                f"   # {lang}: one server per language")  # fmt: skip
    if fmt == "vllm":
        return ("vllm serve MODEL --speculative-config '{\"method\": \"custom_class\", \"num_speculative_tokens\": 4, "
                "\"model\": \"babelspec.integrations.vllm.NgramProposer\"}' "
                f"--additional-config '{{\"babelspec\": {{\"tables\": \"{path}\"}}}}'")  # fmt: skip
    return (f"generate(model, ids, tokenizer=tokenizer, drafter=\"ngram:{path}\")"
            "   # from babelspec.integrations.transformers import generate")  # fmt: skip


def export_tables(tables: dict[str, Path], fmt: str, out: str | os.PathLike) -> list[Exported]:
    """Write ``tables`` ({language: n-gram file}) in ``fmt`` under the folder ``out``; per
    language, what was written (or why not) and the line that starts the engine with it."""
    from babelspec.integrations.vllm import write_tables
    from babelspec.ngram.llamacpp import export_llamacpp

    if fmt not in FORMATS:
        raise UserError(f"unknown export format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if not tables:
        raise UserError("nothing to export: name n-gram files (LANG=FILE) or a router whose routes draft with them")
    out = Path(out)
    tables = canonical_tables(tables)
    models = {lang: NgramModel.load(path) for lang, path in tables.items()}
    if fmt == "llama.cpp":
        out.mkdir(parents=True, exist_ok=True)
        done = []
        for lang, model in models.items():
            target = out / f"{lang}.lookup"
            try:
                sizes = export_llamacpp(model, target)
            except ValueError as err:  # a bigram has no 2-token keys
                done.append(Exported(lang, None, str(err), ""))
                continue
            detail = f"{sizes['contexts']:,} two-token contexts, {sizes['continuations']:,} continuations"
            done.append(Exported(lang, target, detail, start_line(fmt, target, lang)))
        return done
    write_tables(models, out)
    if fmt == "vllm":
        return [Exported(lang, out / f"{lang}.ngram", f"order {m.order}", start_line(fmt, out, lang))
                for lang, m in models.items()]  # fmt: skip
    return [Exported(lang, out / f"{lang}.ngram", f"order {m.order}", start_line(fmt, out / f"{lang}.ngram", lang))
            for lang, m in models.items()]  # fmt: skip
