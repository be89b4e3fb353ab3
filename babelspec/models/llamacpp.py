"""llama.cpp decoding of the same GGUF, as a peer in ``babelspec bench peers`` and as a study's
second baseline (``llama_cpp = true``): plain, and with llama-cpp-python's own speculative
prompt lookup (``LlamaPromptLookupDecoding``).

Needs the optional ``llama-cpp-python`` package (``pip install 'babelspec[llamacpp]'``; it
builds from source with a C++ compiler). Token ids in, token ids out, so the prompts are
exactly the ones babelspec and Hugging Face decode.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any


class LlamaCppUnavailable(RuntimeError):
    """llama.cpp cannot run this model here (package missing, or no GGUF for the spec)."""


def gguf_for(spec: str, workdir: Path) -> Path:
    """The GGUF file behind a model spec: a packaged preset's (assembled into ``workdir``) or a
    ``.gguf`` path."""
    from babelspec.models.presets import GGUF_LOCATORS, PRESETS

    if spec in PRESETS and spec in GGUF_LOCATORS:
        return GGUF_LOCATORS[spec](workdir)
    path = Path(spec).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return path
    raise LlamaCppUnavailable(f"{spec!r} has no GGUF file (a packaged preset or a .gguf path is needed)")


class LlamaCppModel:
    """A llama.cpp context over a GGUF: greedy or top-k/top-p sampled continuation of token ids."""

    def __init__(self, llama: Any, gguf: Path, threads: int, stack: ExitStack, lookup: int = 0) -> None:
        self.llama = llama
        self.gguf = gguf
        self.threads = threads
        self._stack = stack
        import llama_cpp

        self.first_token_seconds = 0.0  # of the last generate: prompt evaluation and first token
        self.description = f"llama-cpp-python {llama_cpp.__version__}, {gguf.name}, {threads} threads"
        if lookup:
            self.description += f", LlamaPromptLookupDecoding drafting {lookup} tokens"

    def generate(self, ids: list[int], max_new_tokens: int, greedy: bool = True, seed: int = 0, *,
                 top_k: int = 100, top_p: float = 0.9, temperature: float = 1.0, repeat_penalty: float = 1.0,
                 stop: Callable[[list[int]], bool] | None = None) -> list[int]:  # fmt: skip
        """The generated token ids (an EOS that ends generation included), prompt excluded:
        greedy, or sampled under ``temperature``, ``top_k`` (0: off), ``top_p`` and
        ``repeat_penalty`` (over llama.cpp's window, 64 tokens). ``stop(tokens)``, if given, ends
        generation when true (a stop string in the text so far)."""
        llm = self.llama
        llm.reset()  # no prefix reuse across prompts: every run prefills its whole prompt
        if greedy:
            kwargs = dict(top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0)
        else:
            llm.set_seed(seed)
            kwargs = dict(top_k=top_k, top_p=top_p, min_p=0.0, temp=temperature, repeat_penalty=repeat_penalty)
        eos = llm.token_eos()
        out: list[int] = []
        started = time.perf_counter()
        for token in llm.generate(ids, reset=True, **kwargs):
            if not out:  # the prompt's evaluation and the first token: the prefill
                self.first_token_seconds = time.perf_counter() - started
            out.append(int(token))
            if token == eos or len(out) >= max_new_tokens or (stop is not None and stop(out)):
                break
        return out

    def top_tokens(self, ids: list[int], tokens: list[int]) -> list[int]:
        """The arg-max after each position of ``ids + tokens`` from the last prompt token on (a
        context opened with ``logits_all``): what llama.cpp would pick, teacher-forced."""
        import numpy as np

        llm = self.llama
        llm.reset()
        llm.eval(list(ids) + list(tokens))
        rows = np.asarray(llm.scores[len(ids) - 1 : len(ids) - 1 + len(tokens)])
        llm.reset()
        return rows.argmax(-1).tolist()

    def close(self) -> None:
        self.llama.close() if hasattr(self.llama, "close") else None
        self._stack.close()


def smoke_test(spec: str) -> None:
    """Prefill 8 tokens and decode 2 in a child process: a llama.cpp built for instructions this CPU (or
    its virtual machine) does not execute dies of SIGILL, which must not take the caller along."""
    code = ("from babelspec.models.llamacpp import _open; "
            f"m = _open({spec!r}, 1, 64); m.generate([m.llama.token_bos()] * 8, 2); m.close()")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if proc.returncode < 0:
        name = signal.Signals(-proc.returncode).name
        raise LlamaCppUnavailable(
            f"llama.cpp died of {name} on an 8-token prompt; rebuild llama-cpp-python for this CPU, "
            "e.g. CMAKE_ARGS='-DGGML_NATIVE=OFF -DGGML_AVX512=ON' pip install --force-reinstall "
            "--no-binary llama-cpp-python llama-cpp-python")
    if proc.returncode:
        raise LlamaCppUnavailable(f"llama.cpp failed on {spec!r}: {proc.stderr.strip()[-300:]}")


def open_llama_cpp(spec: str, threads: int, n_ctx: int = 2048, lookup: int = 0, logits_all: bool = False) -> LlamaCppModel:
    """A ``LlamaCppModel`` for a packaged preset or a .gguf path, on ``threads`` CPU threads,
    after a smoke test in a child process. ``lookup`` > 0: llama-cpp-python's speculative
    decoding with its prompt-lookup draft model, ``lookup`` tokens drafted per step.
    ``logits_all``: keep every position's logits (``LlamaCppModel.top_tokens``)."""
    try:
        import llama_cpp  # noqa: F401
    except ImportError as err:
        raise LlamaCppUnavailable(
            "llama-cpp-python is not installed (pip install 'babelspec[llamacpp]'; it builds "
            f"from source with a C++ compiler): {err}") from None
    with tempfile.TemporaryDirectory(prefix="babelspec-gguf-") as tmp:
        gguf_for(spec, Path(tmp))  # a spec without a GGUF is refused before any child runs
    smoke_test(spec)
    return _open(spec, threads, n_ctx, lookup, logits_all)


def _open(spec: str, threads: int, n_ctx: int, lookup: int = 0, logits_all: bool = False) -> LlamaCppModel:
    from llama_cpp import Llama

    stack = ExitStack()
    workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="babelspec-gguf-")))
    try:
        gguf = gguf_for(spec, workdir)
        draft = {}
        if lookup:
            from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

            draft = {"draft_model": LlamaPromptLookupDecoding(num_pred_tokens=lookup)}
        llama = Llama(model_path=str(gguf), n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads,
                      n_batch=512, verbose=False, logits_all=logits_all, **draft)
    except BaseException:
        stack.close()
        raise
    return LlamaCppModel(llama, gguf, threads, stack, lookup)
