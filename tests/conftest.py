import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
# Tiny test models gain nothing from threads, and on a busy 2-core machine thread
# contention makes their small matmuls many times slower.
torch.set_num_threads(1)

# The modules that keep one process busy longest (a minute or more each with --durations on a
# 2-core Zen 4), handed out first: xdist's --dist loadfile gives whole modules to the two processes
# of `make test` in collection order, so long ones left to the end made one process finish minutes
# after the other. The rest keep their order.
FIRST = (
    "test_exact_serve.py", "test_exact_gguf.py", "test_exact_greedy_npi_to_zgh.py", "test_exact_greedy_amh_to_ibo.py",
    "test_models_equivalence.py", "test_cli_generate.py", "test_certified.py", "test_experiments_ray.py",
    "test_exact_bf16.py", "test_serve.py", "test_target_w8a8.py", "test_bench_forward.py",
    "test_languages.py", "test_serve_fuzz.py", "test_engine_tree.py", "test_batching.py",
)  # fmt: skip


def pytest_collection_modifyitems(session, config, items):
    rank = {name: i for i, name in enumerate(FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(FIRST)))


@pytest.fixture
def threads(request):
    """torch's thread count for one test, as ``@pytest.mark.parametrize("threads", [...],
    indirect=True)`` gives it (the user's thread counts: the suite itself runs at 1), restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield request.param
    torch.set_num_threads(before)
