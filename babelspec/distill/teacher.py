"""The teacher's side of distillation: its trajectories (task mode), its top-k on them, and the
warped distributions the expected acceptance is measured against.

* task mode: the teacher decodes each training prompt greedily; the response is its own output
  (the student learns the trajectories it will be asked to draft);
* general mode: existing monolingual text, scored off-policy (every token after the first is a
  response token).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from babelspec.distill.soft_targets import Example
from babelspec.errors import UserError
from babelspec.sampling import SamplingConfig, logits_to_probs


def load_causal_lm(spec: str, device: str | None = None, dtype: torch.dtype | None = None):
    """``(model, tokenizer)`` for a preset name or a local path (the models package's loader)."""
    from babelspec.models import load_model

    return load_model(spec, device=device, dtype=dtype)


@dataclass(frozen=True)
class PromptItem:
    """One task-mode training item: the prompt's token ids and where the response must stop."""

    prompt_ids: tuple[int, ...]
    stop_strings: tuple[str, ...] = ()


def _device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


@torch.inference_mode()
def score_topk(model: nn.Module, ids: Sequence[int], response_start: int, k: int = 20,
               logp_dtype: np.dtype = np.float16) -> Example:
    """The teacher's top-k log-probs for every token at positions >= ``response_start``."""
    if not 1 <= response_start < len(ids):
        raise ValueError(f"response_start must be in [1, {len(ids)}) (got {response_start})")
    tensor = torch.as_tensor(list(ids), dtype=torch.long, device=_device(model)).view(1, -1)
    # Only the positions that predict response tokens need logits (the 262k-wide rows are big).
    keep = len(ids) - response_start + 1
    logits = model(input_ids=tensor, use_cache=False, logits_to_keep=keep).logits[0, :-1]
    logp = torch.log_softmax(logits.float(), dim=-1)
    values, indices = logp.topk(k, dim=-1)
    mask = np.zeros(len(ids), dtype=bool)
    mask[response_start:] = True
    return Example(ids=np.asarray(ids, dtype=np.int32), mask=mask,
                   topk_ids=indices.cpu().numpy().astype(np.int32),
                   topk_values=values.cpu().numpy().astype(logp_dtype))


def _cut_at_stop(tokenizer, ids: list[int], stop_strings: Sequence[str]) -> list[int]:
    """The shortest prefix of ``ids`` whose text reaches no stop string (token granularity)."""
    text = tokenizer.decode(ids)
    first = min((text.find(s) for s in stop_strings if s in text), default=-1)
    if first < 0:
        return ids
    # The smallest n whose decoded prefix already contains the stop: keep ids[:n-1].
    lo, hi = 0, len(ids)
    while lo < hi:
        mid = (lo + hi) // 2
        if any(s in tokenizer.decode(ids[: mid + 1]) for s in stop_strings):
            hi = mid
        else:
            lo = mid + 1
    return ids[:lo]


def task_examples(model: nn.Module, tokenizer, items: Sequence[PromptItem], k: int,
                  max_new_tokens: int, logp_dtype: np.dtype = np.float16,
                  eos_token_ids: Sequence[int] | None = None) -> list[Example]:
    """Task-mode examples: the teacher's greedy responses to the prompts, with its top-k at
    every response token taken from the decoding pass itself."""
    if eos_token_ids is None:
        eos = getattr(model.generation_config, "eos_token_id", None)
        eos_token_ids = [eos] if isinstance(eos, int) else list(eos or [])
    examples = []
    for item in items:
        dec = teacher_decode(model, item.prompt_ids, SamplingConfig(greedy=True), max_new_tokens,
                             eos_token_ids, stop_strings=item.stop_strings, tokenizer=tokenizer,
                             k=k)
        response = dec.tokens
        if item.stop_strings and tokenizer is not None and response:
            response = _cut_at_stop(tokenizer, response, item.stop_strings)
        if not response:
            continue  # the teacher stopped at once: nothing to learn from this prompt
        ids = list(item.prompt_ids) + response
        mask = np.zeros(len(ids), dtype=bool)
        mask[len(item.prompt_ids):] = True
        examples.append(Example(ids=np.asarray(ids, dtype=np.int32), mask=mask,
                                topk_ids=dec.topk_ids[: len(response)],
                                topk_values=dec.topk_logp[: len(response)].astype(logp_dtype)))
    return examples


def text_examples(model: nn.Module, token_lists: Sequence[Sequence[int]], k: int,
                  logp_dtype: np.dtype = np.float16) -> list[Example]:
    """General-mode examples: off-policy scoring of existing text (all tokens after the first)."""
    return [score_topk(model, ids, 1, k, logp_dtype) for ids in token_lists if len(ids) >= 2]


def chunk_token_ids(token_lists: Sequence[Sequence[int]], max_tokens: int,
                    bos: int | None = None) -> list[list[int]]:
    """Split long documents into windows of at most ``max_tokens`` (each starting with BOS when
    the tokenizer has one), so training batches stay bounded."""
    room = max_tokens - (1 if bos is not None else 0)
    if room < 2:
        raise UserError(f"max_tokens must leave room for >= 2 tokens (got {max_tokens})")
    out = []
    for ids in token_lists:
        ids = list(ids)
        if bos is not None and ids and ids[0] == bos:
            ids = ids[1:]
        for start in range(0, len(ids), room):
            piece = ids[start : start + room]
            if len(piece) >= 2:
                out.append(([bos] if bos is not None else []) + piece)
    return out


# --- evaluation: the target's warped distributions on held-out text -----------------------

@torch.inference_mode()
def warped_targets(model: nn.Module, ids: Sequence[int], response_start: int,
                   sampling: SamplingConfig, max_support: int = 128) -> Example:
    """The teacher's decoding-time distribution q (after repetition penalty, top-k, top-p) at
    every position >= ``response_start``, stored sparsely as (indices, probs).

    With top-k K <= ``max_support`` this is exact: q is zero outside its K kept tokens.
    """
    support = sampling.top_k if (sampling.top_k and not sampling.greedy) else 1
    if not sampling.greedy and (sampling.top_k == 0 or sampling.top_k > max_support):
        raise UserError(
            f"expected acceptance is stored with at most {max_support} tokens per position; "
            f"use decoding settings with 1 <= top_k <= {max_support} (got top_k={sampling.top_k})")
    tensor = torch.as_tensor(list(ids), dtype=torch.long, device=_device(model)).view(1, -1)
    keep = len(ids) - response_start + 1
    logits = model(input_ids=tensor, use_cache=False, logits_to_keep=keep).logits[0, :-1]
    probs = logits_to_probs(logits, sampling, sequence=tensor[0].cpu(),
                            first_position=response_start)
    values, indices = probs.topk(min(support, probs.shape[-1]), dim=-1)
    mask = np.zeros(len(ids), dtype=bool)
    mask[response_start:] = True
    return Example(ids=np.asarray(ids, dtype=np.int32), mask=mask,
                   topk_ids=indices.cpu().numpy().astype(np.int32),
                   topk_values=values.cpu().numpy().astype(np.float32))


@dataclass
class Decoded:
    """A teacher response and, for each of its tokens, what the teacher said at that step."""

    tokens: list[int]
    topk_ids: np.ndarray | None = None  # [R, k] int32: top-k of the raw log-softmax
    topk_logp: np.ndarray | None = None  # [R, k]
    warped_ids: np.ndarray | None = None  # [R, m] int32: support of the warped distribution
    warped_probs: np.ndarray | None = None  # [R, m] float32


@torch.inference_mode()
def teacher_decode(model: nn.Module, prompt_ids: Sequence[int], sampling: SamplingConfig,
                   max_new_tokens: int, eos_token_ids: Sequence[int] = (), seed: int = 0,
                   stop_strings: Sequence[str] = (), tokenizer=None, k: int = 0,
                   warp: SamplingConfig | None = None) -> Decoded:
    """Decode from the teacher under ``sampling`` with a KV cache (babelspec's own warping, so
    the text matches the engine's), stopping at EOS (not included) or once the response
    contains a stop string. With ``k`` it also keeps each step's top-k log-probs, and with
    ``warp`` each step's distribution under those decoding settings: one pass gives the
    response and its teacher targets, with no second forward over the sequence."""
    from transformers import DynamicCache

    device = _device(model)
    generator = torch.Generator().manual_seed(seed)
    cache = DynamicCache(config=model.config)
    seq = torch.tensor(list(prompt_ids), dtype=torch.long)
    logits = model(input_ids=seq.view(1, -1).to(device), cache=cache, use_cache=True,
                   logits_to_keep=1).logits[0, -1:].float().cpu()
    out: list[int] = []
    topk_i, topk_v, warp_i, warp_p = [], [], [], []
    support = 1 if warp is None or warp.greedy else (warp.top_k or logits.shape[-1])
    for _ in range(max_new_tokens):
        probs = logits_to_probs(logits, sampling, sequence=seq, first_position=len(seq))
        if sampling.greedy:
            tok = int(probs[0].argmax())
        else:
            tok = int(torch.multinomial(probs[0], 1, generator=generator))
        if tok in eos_token_ids:
            break
        if k:
            values, indices = torch.log_softmax(logits, dim=-1).topk(k, dim=-1)
            topk_i.append(indices)
            topk_v.append(values)
        if warp is not None:
            wp = probs if warp == sampling else logits_to_probs(
                logits, warp, sequence=seq, first_position=len(seq))
            values, indices = wp.topk(min(support, wp.shape[-1]), dim=-1)
            warp_i.append(indices)
            warp_p.append(values)
        out.append(tok)
        if stop_strings and tokenizer is not None:
            text = tokenizer.decode(out[-16:])
            if any(stop in text for stop in stop_strings):
                break
        seq = torch.cat([seq, torch.tensor([tok])])
        logits = model(input_ids=torch.tensor([[tok]], device=device), cache=cache,
                       use_cache=True).logits[0, -1:].float().cpu()
    result = Decoded(tokens=out)
    if k and out:
        result.topk_ids = torch.cat(topk_i).numpy().astype(np.int32)
        result.topk_logp = torch.cat(topk_v).numpy()
    if warp is not None and out:
        result.warped_ids = torch.cat(warp_i).numpy().astype(np.int32)
        result.warped_probs = torch.cat(warp_p).numpy().astype(np.float32)
    return result


def sampled_response(model: nn.Module, prompt_ids: Sequence[int], sampling: SamplingConfig,
                     max_new_tokens: int, eos_token_ids: Sequence[int] = (), seed: int = 0,
                     stop_strings: Sequence[str] = (), tokenizer=None) -> list[int]:
    """Just the tokens of :func:`teacher_decode`."""
    return teacher_decode(model, prompt_ids, sampling, max_new_tokens, eos_token_ids, seed,
                          stop_strings, tokenizer).tokens


ProgressFn = Callable[[int], None]
