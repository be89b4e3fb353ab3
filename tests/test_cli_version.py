"""``babelspec --version`` and ``python -m babelspec --version`` give the installed package's version."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version

from typer.testing import CliRunner

from babelspec.cli import app


def test_version_comes_from_the_package_metadata():
    res = CliRunner().invoke(app, ["--version"])
    assert res.exit_code == 0 and res.output.strip() == f"babelspec {version('babelspec')}"
    proc = subprocess.run([sys.executable, "-m", "babelspec", "--version"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == f"babelspec {version('babelspec')}"
