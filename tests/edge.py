"""The suite's edge: what it reads from the environment, once, as values passed in.

``BABELSPEC_NATIVE=0`` (``make test-glue-off``) runs the exactness and losslessness tests once
more on the torch operations: the tests that build a bf16 lean forward pass ``OPTIONS``, and the
commands they start read the same variable at the command line's edge (``babelspec --native``).
"""

from __future__ import annotations

import os

from babelspec.forward import ForwardOptions

NATIVE = os.environ.get("BABELSPEC_NATIVE", "1").strip().lower() not in ("0", "false", "no", "off")
OPTIONS = ForwardOptions(native=NATIVE)
