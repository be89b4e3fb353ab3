import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
# Tiny test models gain nothing from threads, and on a busy 2-core machine thread
# contention makes their small matmuls many times slower.
torch.set_num_threads(1)
