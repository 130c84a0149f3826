"""What the tests of the command lines share: the real command line in a subprocess, the same
command in this process, and the check that a refused command left nothing on disk."""
from __future__ import annotations

import contextlib
import io
import subprocess
import sys
import warnings

from tests.conftest import ROOT

_STARTUP_IGNORED = (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning)
"""The warnings a fresh interpreter does not print (Python's default filters)."""


def cli(*args, cwd=ROOT, env=None):
    return subprocess.run([sys.executable, "-m", "experiments.run", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


def main_cli(*args, cwd=ROOT) -> subprocess.CompletedProcess:
    """``cli`` without the process: ``experiments.run.main(args)`` here, its exit code (also
    argparse's ``SystemExit``), stdout and stderr, with the warnings a fresh interpreter would
    print written to stderr. For checks of what a command prints and returns (bad input, dry
    runs): a subprocess costs a Python start and the imports, about 0.4 s each; the tests that
    are about the process (signals, the exit status of ``python -m``) keep ``cli``."""
    from experiments.run import main
    return _here(lambda: main(list(args)), ["experiments.run", *args], cwd)


def module_cli(module: str, *args, cwd=ROOT, ignore=()) -> subprocess.CompletedProcess:
    """``python -W ignore::<each of ignore> -m module args`` in this process (``runpy``, as
    ``-m`` runs it), like ``main_cli``: its exit code, stdout and stderr."""
    import runpy

    def run():
        argv = sys.argv
        sys.argv = [module, *args]
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        finally:
            sys.argv = argv
        return 0
    return _here(run, [module, *args], cwd, ignore)


def _here(call, args, cwd, ignore=()) -> subprocess.CompletedProcess:
    out, err = io.StringIO(), io.StringIO()
    with (contextlib.chdir(cwd), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err),
          warnings.catch_warnings(record=True) as caught):
        warnings.simplefilter("default")
        for category in (*_STARTUP_IGNORED, *ignore):
            warnings.simplefilter("ignore", category)
        try:
            code = call()
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else int(e.code is not None)
    for w in caught:
        err.write(warnings.formatwarning(w.message, w.category, w.filename, w.lineno, w.line))
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def _nothing_left(tmp_path, keep=()):
    left = sorted(p.name for p in tmp_path.iterdir() if p.name not in keep)
    assert left == [], left
