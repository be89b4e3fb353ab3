"""Row-wise steps of the lean forward at the user's thread counts: each row of a block gets the
bits of the row alone, whatever the block and however many threads torch runs. GELU on a bf16
block of more than 16,384 elements was split among threads mid-row by ATen, and a part's tail took
a scalar path with another tanh (on a 2-core Zen 4: 2, 3, 8 and 13 rows of 4,620 differed at 3, 5,
6 and 12 threads, none at 1 or 2); the forward computes it in pieces of whole rows instead."""

from __future__ import annotations

import pytest
import torch

from babelspec.forward.gemma3 import _gelu_rows


@pytest.mark.parametrize("threads", [3, 6])
def test_gelu_of_every_row_of_a_block_is_the_row_alone(threads: int) -> None:
    """The model's shapes: gate and up as the halves of a [1, n, 4096] bf16 block (the chunk views
    the forward takes), blocks of 9-300 rows."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        g = torch.Generator().manual_seed(0)
        for n in range(9, 301, 10):
            gate, up = (torch.randn(1, n, 4096, generator=g) * 2).bfloat16().chunk(2, dim=-1)
            block = _gelu_rows(gate, "tanh") * up
            for i in range(n):
                assert torch.equal(block[:, i], (_gelu_rows(gate[:, i : i + 1], "tanh") * up[:, i : i + 1])[:, 0]), (n, i)
    finally:
        torch.set_num_threads(before)
