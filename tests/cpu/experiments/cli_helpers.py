"""What the tests of the experiments CLI share: the real command line in a subprocess, and the check
that a refused command left nothing on disk."""
from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT


def cli(*args, cwd=ROOT, env=None):
    return subprocess.run([sys.executable, "-m", "experiments.run", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


def _nothing_left(tmp_path, keep=()):
    left = sorted(p.name for p in tmp_path.iterdir() if p.name not in keep)
    assert left == [], left
