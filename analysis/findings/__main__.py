"""``python -m analysis.findings``: the findings report of one arch (see the package docstring)."""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from analysis.data import DatasetError, check_run_dir, dataset, discover, output_problem
from analysis.data.registry import root
from spec import get_arch, known_archs
from spec.arch import UnknownArch


def default_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "sawtooth-findings"


def named_runs_problem(runs: list[Path], arch: str) -> str | None:
    """Why a ``--run`` cannot be read, in one line (None: every one can), before any work: a
    missing path or a file, a run without data, one of another arch, or of a study no section
    reads (which would otherwise be ignored and the committed findings printed instead)."""
    for r in runs:
        try:
            d, _ = check_run_dir(r)
            ds = dataset(d, arch)
        except DatasetError as e:
            return f"--run {e}"
        if ds.arch != arch:
            return f"--run {r} is a run of {ds.arch}, not {arch}: pass --arch {ds.arch}"
        from analysis.findings.report import NAMEABLE
        if ds.study not in NAMEABLE:
            return (f"--run {r} is a run of the study {ds.study!r}, which no findings section "
                    f"reads; pass a run of {', '.join(NAMEABLE)}")
    return None


def main(argv=None) -> int:
    from analysis.findings import __doc__ as doc
    ap = argparse.ArgumentParser(prog="python -m analysis.findings",
                                 description=doc.splitlines()[0])
    ap.add_argument("--arch", required=True,
                    help=f"one of {', '.join(known_archs())} (its committed profiles/<arch>/)")
    ap.add_argument("--run", type=Path, action="append", default=[],
                    help="run directory that replaces the selected run of its study (repeatable)")
    ap.add_argument("--out", type=Path,
                    help="write <section>.csv and findings-<arch>.md into the new directory "
                         "OUT/<arch>")
    ap.add_argument("--no-sim", action="store_true", help="skip section 7 (the simulator)")
    ap.add_argument("--cache", type=Path, default=None,
                    help="miss-curve cache (default $XDG_CACHE_HOME/sawtooth-findings)")
    ap.add_argument("--no-cache", action="store_true", help="do not read or write the cache")
    ap.add_argument("--max-accesses", type=int, default=180_000_000,
                    help="simulate larger cases from B=1,2 (default 180M trace accesses)")
    a = ap.parse_args(argv)
    err = lambda s: print(f"error: {s}", file=sys.stderr)  # noqa: E731
    try:
        get_arch(a.arch)
    except UnknownArch as e:
        err(str(e))
        return 2
    problem = named_runs_problem(a.run, a.arch)
    if problem:
        err(problem)
        return 2
    if not a.run and not discover(a.arch):
        err(f"no stored runs for {a.arch} (profiles/{a.arch}/ or runs/{a.arch}/); run a study "
            f"first (python -m experiments.run <study> --arch {a.arch}) or pass --run DIR")
        return 2
    cache = None if a.no_cache else (a.cache or default_cache())
    if cache is not None and root() in cache.resolve().parents:
        err("--cache must be outside the repository")
        return 2
    out = a.out / a.arch if a.out else None
    problem = output_problem(out) if out is not None else None
    if problem:
        err(problem)
        return 2
    from analysis.findings.report import compute, markdown, write_report
    t0 = time.perf_counter()
    log = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    try:
        sections = compute(a.arch, sim=not a.no_sim, cache_dir=cache,
                           max_accesses=a.max_accesses, runs=a.run, log=log)
    except DatasetError as e:
        err(str(e))
        return 2
    md = [f"# Findings for {a.arch} (python -m analysis.findings --arch {a.arch})\n"]
    empty = [title.split(" ", 1)[0].rstrip(".") for title, rows in sections.values() if not rows]
    sections = {k: v for k, v in sections.items() if v[1]}
    for name, (title, rows) in sections.items():
        md.append(f"## {title}\n\n{markdown(rows)}")
    if empty:
        md.append(f"No data for {len(empty)} section(s): {', '.join(empty)} (no registered run "
                  f"of their study for {a.arch}{'' if not a.no_sim else ', or --no-sim'}).\n")
    text = "\n".join(md)
    print(text)
    if out is not None:
        try:
            write_report(out, a.arch, sections, text)
        except (FileExistsError, OSError) as e:
            err(str(e))
            return 2
        log(f"wrote {out}")
    log(f"done in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
