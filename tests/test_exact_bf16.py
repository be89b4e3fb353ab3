"""Exact in bf16, on the real default model and real prompts: every row of a verification chain,
a token tree or a prefill chunk is ``torch.equal`` to the same row computed by a one-token step
after the same cache (with the C glue and in torch operations), at 1, 2 and 3 torch threads
(3 oversubscribe a 2-core machine, which is fine for bits). The tiny float32 models of the
other tests cannot show this: float32 products there hide the rounding that bf16 exposes.
Speculative greedy output against plain greedy output: ``test_exact_greedy_*.py``, and through
the server ``test_exact_serve.py``."""

from __future__ import annotations

import pytest
from exact_real import MARKS, load_bf16, prompt_ids

from babelspec.bench.exact import chain_grid, prefill_chunks, tree_grid
from babelspec.forward import ForwardOptions
from babelspec.machine import EXACT_BF16, execution_plan
from babelspec.target import Target

pytestmark = MARKS


@pytest.fixture(scope="module")
def bf16():
    return load_bf16()


@pytest.fixture(scope="module")
def long_prompt(bf16):
    """Three 4-shot translation prompts end to end (one BOS): past the 512-token sliding window."""
    amh, yor, npi = (prompt_ids(bf16[1], lang) for lang in ("amh", "yor", "npi"))
    ids = amh + yor[1:] + npi[1:]
    assert len(ids) > 560
    return ids


def test_the_target_records_that_its_bf16_rows_are_invariant(bf16):
    target = bf16[2]
    assert target.lean is not None and target.lean.exact
    assert execution_plan(target)["exact"] == EXACT_BF16


CONTEXTS = {1: (3, 24, 130, 297, 505, 530), 2: (3, 297, 530), 3: (3, 297, 530)}


@pytest.mark.parametrize("threads", [1, 2, 3], indirect=True)
def test_every_row_of_every_chain_equals_its_one_token_step(bf16, long_prompt, threads):
    """Contexts from 3 tokens to past the sliding window, times blocks of 1-16 tokens."""
    grid = chain_grid(bf16[2].lean, long_prompt, CONTEXTS[threads])
    assert grid["cells"] == len(CONTEXTS[threads]) * 16
    assert grid["differ"] == 0, grid["differing"]


@pytest.mark.parametrize("threads", [1, 3], indirect=True)
def test_every_node_of_a_token_tree_equals_the_steps_along_its_path(bf16, long_prompt, threads):
    grid = tree_grid(bf16[2].lean, long_prompt, (7, 297, 530))
    assert grid["cells"] == 3 * 16 and grid["differ"] == 0, grid["differing"]


@pytest.mark.parametrize("threads", [1, 3], indirect=True)
def test_a_prompt_prefilled_in_chunks_caches_and_continues_as_prefilled_whole(bf16, long_prompt, threads):
    """Whole against 2 and 3 chunks: the cached keys and values and the next rows' logits."""
    result = prefill_chunks(bf16[2].lean, long_prompt, (297, 540))
    assert result["cells"] == 6 and result["differ"] == 0, result["differing"]


def test_a_bf16_block_is_exact_in_torch_operations_too(bf16, long_prompt):
    """Without the C glue (``native=False``) the exact path keeps the property: attention row by
    row in torch operations with a decode step's shapes."""
    lean = Target(bf16[0], bf16[1], options=ForwardOptions(native=False)).lean
    assert lean.exact and lean.glue is None
    grid = chain_grid(lean, long_prompt, (297,), max_block=8)
    assert grid["differ"] == 0, grid["differing"]
