"""The lint is part of the test command: ruff's checks (rule set in pyproject.toml) and its formatter, over the repo."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("args", [["check", "--output-format", "concise"], ["format", "--check", "--diff"]])
def test_ruff(args):
    r = subprocess.run([sys.executable, "-m", "ruff", *args, str(REPO)], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, f"ruff {' '.join(args)} found problems:\n{r.stdout}{r.stderr}"
