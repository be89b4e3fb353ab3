"""Hand-made experiment records with known statistics (shared by the experiments and report tests)."""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path

from babelspec.experiments.store import ExampleRecord, Store


def record(lang: str, task: str, drafter: str, gamma: int, prompt: int, *, wall: float,
           tokens: int = 20, chars: int = 60, alpha: float = 0.5, c: float = 0.1,
           accepted_per_step=(), proposed_per_step=(), looped: bool = False, seed: int = 0,
           trained_on: str = "", text: str = "") -> ExampleRecord:
    """One generation. The counts behind alpha come from the per-step lists where given
    (a step whose accepted < proposed ends in a rejection), else 10 judged tokens at ``alpha``
    over ``tokens`` steps of ``gamma`` drafted tokens each, one timed draft forward per drafted
    token; plain decoding judges nothing, so its alpha is NaN."""
    if drafter == "none":
        accepted = rejections = 0
    elif proposed_per_step:
        accepted = sum(accepted_per_step)
        rejections = sum(a < p for a, p in zip(accepted_per_step, proposed_per_step))
    else:
        accepted = round(alpha * 10)
        rejections = 10 - accepted
    judged = accepted + rejections
    proposed = sum(proposed_per_step) if proposed_per_step else (0 if drafter == "none" else gamma * tokens)
    return ExampleRecord(
        language=lang, task=task, drafter=drafter, gamma=gamma, prompt_index=prompt, seed=seed,
        drafter_spec="none" if drafter == "none" else f"{drafter}:x", trained_on=trained_on,
        alpha=accepted / judged if judged else math.nan, alpha_token=alpha,
        proposed=proposed,
        accepted=accepted, rejections=rejections,
        steps=len(proposed_per_step) or tokens,
        accepted_per_step=list(accepted_per_step), proposed_per_step=list(proposed_per_step),
        wall_seconds=wall, target_seconds=wall * 0.8, draft_seconds=wall * 0.1,
        draft_forward_seconds=[0.001 * c / 0.1] * (proposed or 3), target_forward_seconds=[0.01] * 3,
        c=c, n_tokens=tokens, n_chars=chars, text=text or f"{lang} {drafter} {prompt}",
        in_language=True, language_score=1.0, looped=looped, loop_ratio=0.9 if looped else 0.0,
    )  # fmt: skip


def small_store(path) -> Store:
    """Two languages x two tasks: plain decoding, a fast setting and a slow setting.

    amh: "fast" at gamma 3 is 2x faster than plain, at gamma 2 1.5x; "slow" is 0.5x.
    yor: everything is slower than plain (0.8x / 0.5x), so the router must fall back.
    """
    store = Store(path)
    for task in ("translation", "story"):
        for p in range(4):
            store.add(record("amh", task, "none", 0, p, wall=2.0))
            store.add(record("amh", task, "fast", 2, p, wall=2.0 / 1.5, alpha=0.6,
                             accepted_per_step=[2, 1, 0], proposed_per_step=[2, 2, 2],
                             trained_on="translation"))  # fmt: skip
            store.add(record("amh", task, "fast", 3, p, wall=1.0, alpha=0.7,
                             accepted_per_step=[3, 3, 1, 0, 0], proposed_per_step=[3] * 5,
                             trained_on="translation"))  # fmt: skip
            store.add(record("amh", task, "slow", 2, p, wall=4.0, alpha=0.2, c=0.9,
                             accepted_per_step=[1, 0, 0, 0], proposed_per_step=[2] * 4))  # fmt: skip
            store.add(record("yor", task, "none", 0, p, wall=2.0))
            store.add(record("yor", task, "fast", 2, p, wall=2.5, alpha=0.3,
                             accepted_per_step=[1, 1, 1, 0, 0, 0, 0], proposed_per_step=[2] * 7,
                             trained_on="translation"))  # fmt: skip
            store.add(record("yor", task, "slow", 2, p, wall=4.0, alpha=0.1, c=0.9,
                             accepted_per_step=[1] + [0] * 9, proposed_per_step=[1] + [2] * 9))  # fmt: skip
    return store


def tiny_model_dir(path) -> str:
    """A randomly initialised 2-layer Gemma-3 and a byte-level BPE tokenizer, saved as a local
    model directory (fast stand-in for the real target in tests of the run mechanics)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig, PreTrainedTokenizerFast

    from babelspec.data import corpus

    path.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=320, special_tokens=["<pad>", "<bos>", "<eos>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())  # fmt: skip
    texts = corpus.monolingual("yor", "train")[:200] + corpus.monolingual("amh", "train")[:200]
    tok.train_from_iterator(texts + ["English: Yoruba: Amharic: Translate"], trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>",
                                   pad_token="<pad>")  # fmt: skip
    fast.add_bos_token = True
    fast.save_pretrained(path)
    torch.manual_seed(0)
    config = Gemma3TextConfig(
        vocab_size=len(fast), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=8192,
        sliding_window=64, pad_token_id=0, bos_token_id=1, eos_token_id=2,
    )  # fmt: skip
    Gemma3ForCausalLM(config).save_pretrained(path)
    return str(path)


def stored_count(db_path: Path) -> int:
    """Records in a run's store, read-only, while another process may be writing it (0 before
    the store or its table exists)."""
    if not db_path.exists():
        return 0
    try:
        db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=1)
        try:
            return int(db.execute("SELECT COUNT(*) FROM examples").fetchone()[0])
        finally:
            db.close()
    except sqlite3.OperationalError:  # table not created yet
        return 0


def sigkill_after(proc, db_path: Path, records: int, timeout: float) -> int:
    """SIGKILL the run ``proc`` once its store holds ``records`` records (it must still be
    running then); the number of records stored when it died."""
    import os
    import signal
    import time

    deadline = time.time() + timeout
    while stored_count(db_path) < records and proc.poll() is None and time.time() < deadline:
        time.sleep(0.005)
    assert proc.poll() is None, "the run ended before it could be killed:\n" + proc.stdout.read().decode()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    return stored_count(db_path)
