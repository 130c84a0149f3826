"""``python -m experiments.tune --arch h100``: measure the cuTile configurations per (D, causal) and
write the arch's defaults, ``kernels/configs/<arch>.json``.

    python -m experiments.tune --arch h100 [--seq 16384] [--only d64.full,d128.causal]
                               [--out kernels/configs/h100.json] [--force]

For each (D, causal) at B=1, H=16, fp16 and one sequence length, every candidate configuration
(tiles × occupancy hint × worker warps × default schedule) goes through the project's one path:
prepared by ``kernels.CutileFamily`` with the candidate as its defaults, run once on a NaN-poisoned
output and checked against the fp32 reference (``experiments.correctness``); only the candidates
that pass are timed, interleaved and with a cold L2 (``experiments.timing``), and ranked by median
time. A wrong-but-fast candidate never wins: it is never timed. The candidates of sm_90 are those
whose builds are spill-free there (a spilling build reads local memory through L2).

Runs never autotune: they read the JSON (``kernels.config``). The JSON is written atomically and
never silently replaced: an existing file needs ``--force`` (or pass another ``--out``).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from spec import Arch, Backend, Problem, ScanOrder, Variant, get_arch, known_archs
from spec.arch import UnknownArch

from kernels.config import CONFIG_DIR, SCHEMA, KernelConfig, config_key


@dataclass(frozen=True)
class Candidate:
    tile_m: int
    tile_n: int
    occupancy: int
    worker_warps: int | None
    schedule: str          # "persistent" (P = SMs × occupancy) or "grid"

    def config(self) -> KernelConfig:
        return KernelConfig(self.tile_m, self.tile_n, self.occupancy, self.worker_warps,
                            self.schedule)

    @property
    def label(self) -> str:
        return (f"{self.tile_m}x{self.tile_n} occ{self.occupancy} ww{self.worker_warps} "
                f"{self.schedule}")


# Spill-free on sm_90 (cuobjdump -res-usage of JIT-like exports, linear and sawtooth): (tile_m,
# tile_n, occupancy, worker_warps[, schedules]); 128x128 with 8 worker warps at D=128 non-causal
# spills in the persistent linear build (176 B), so it is a grid-only candidate.
_BOTH = ("persistent", "grid")
_BASE = {
    (64, False): [(64, 64, 2, None), (128, 64, 2, None), (128, 64, 1, None), (128, 128, 1, None),
                  (128, 128, 1, 8), (64, 64, 1, 8)],
    (64, True): [(64, 64, 2, None), (128, 64, 2, None), (128, 64, 1, None), (128, 128, 1, 8)],
    (128, False): [(64, 64, 2, None), (128, 64, 2, None), (128, 64, 1, None), (64, 64, 1, 8),
                   (128, 64, 1, 8), (128, 128, 1, 8, ("grid",))],
    (128, True): [(64, 64, 1, 8), (128, 64, 1, None), (128, 128, 1, 8)],
}
SM90_CANDIDATES = {k: [Candidate(*c[:4], s) for c in v for s in (c[4] if len(c) > 4 else _BOTH)]
                   for k, v in _BASE.items()}
KEYS = tuple((D, causal) for D in (64, 128) for causal in (False, True))


def candidates(arch: Arch, D: int, causal: bool) -> list[Candidate]:
    if arch.sm == "sm_90":
        return SM90_CANDIDATES[(D, causal)]
    t = arch.cutile_tiles
    return [Candidate(t.m, t.n, occ, None, s) for occ in (1, 2) for s in _BOTH]


@dataclass(frozen=True)
class Trial:
    """One candidate's outcome: the correctness verdict, and its median time when it passed."""

    candidate: Candidate
    passed: bool
    verdict: str
    us: float | None = None
    spread: float | None = None


def rank(cands: list[Candidate], check: Callable[[Candidate], tuple[bool, str]],
         time: Callable[[list[Candidate]], dict[Candidate, tuple[float, float]]]) -> list[Trial]:
    """Check every candidate, time only those that pass, and rank: passing candidates by median
    time (fastest first), then the failed ones (never timed, never ranked above a passing one).
    ``check(c)`` -> (passed, verdict); ``time(passing)`` -> {candidate: (median us, spread)}."""
    verdicts = {c: check(c) for c in cands}
    passing = [c for c in cands if verdicts[c][0]]
    times = time(passing) if passing else {}
    ok = sorted((Trial(c, True, verdicts[c][1], *times[c]) for c in passing),
                key=lambda t: t.us)
    return ok + [Trial(c, False, verdicts[c][1]) for c in cands if not verdicts[c][0]]


def best(trials: list[Trial]) -> Candidate:
    if not trials or not trials[0].passed:
        raise TuneError("no candidate passed the correctness check: "
                        + "; ".join(f"{t.candidate.label}: {t.verdict}" for t in trials))
    return trials[0].candidate


class TuneError(RuntimeError):
    pass


def measure_key(arch: Arch, D: int, causal: bool, S: int, *, reps: int = 10,
                seed: int = 0) -> list[Trial]:
    """The GPU side: correctness of every candidate, then interleaved cold-L2 timing."""
    import torch

    from kernels.backend import CutileFamily, default_schedule

    from .correctness import check, poisoned_like, random_inputs, reference
    from .timing import time_interleaved
    problem = Problem(B=1, H=16, S_q=S, D=D, causal=causal)
    q, k, v = random_inputs(problem, seed)
    ref = reference(q, k, v, causal)
    launchers = {}

    def check_one(c: Candidate) -> tuple[bool, str]:
        cfg = c.config()
        fam = CutileFamily(arch.name, defaults=cfg)
        var = Variant(Backend.CUTILE, ScanOrder.linear(),
                      default_schedule(problem, cfg, cfg.tiles, arch.num_sms), cfg.tiles,
                      c.occupancy)
        try:
            p = fam.prepare(var, problem)
            out = poisoned_like(q)
            fam.run(p, q, k, v, out)
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001 - a candidate that does not build is reported
            return False, f"{type(e).__name__}: {str(e)[:300]}"
        verdict = check(out, q, k, v, causal, ref)
        note = f"{verdict}; {p.registers} registers, {p.local_bytes} B local"
        if verdict.passed and p.local_bytes:
            return False, f"spills ({note})"
        launchers[c] = (lambda fam=fam, p=p, o=out: fam.run(p, q, k, v, o))
        return verdict.passed, note

    def time_all(passing: list[Candidate]) -> dict[Candidate, tuple[float, float]]:
        s = time_interleaved({c: launchers[c] for c in passing}, reps=reps, l2="cold")
        return {c: (x.median * 1e3, x.spread) for c, x in s.items()}

    return rank(candidates(arch, D, causal), check_one, time_all)


def document(arch: Arch, device: str, seq: int, results: dict[str, list[Trial]],
             existing: dict | None) -> dict:
    """The JSON ``kernels.config`` reads: the best passing candidate per key, and every trial."""
    configs = dict((existing or {}).get("configs", {}))
    measured = dict((existing or {}).get("measured", {}))
    for key, trials in results.items():
        configs[key] = best(trials).config().to_json()
        measured[key] = [dict(t.candidate.config().to_json(), passed=t.passed, check=t.verdict,
                              us=None if t.us is None else round(t.us, 2))
                         for t in trials]
    return {"schema": SCHEMA, "arch": arch.name, "device": device,
            "source": f"python -m experiments.tune --arch {arch.name} --seq {seq} (correctness "
                      "gate, then experiments.timing: interleaved, cold L2; B=1 H=16 fp16)",
            "configs": configs, "measured": measured}


def write_atomic(path: Path, doc: dict, force: bool) -> None:
    """Write ``doc`` to ``path`` via a temporary sibling and a rename; refuse to replace an
    existing file unless ``force``."""
    if path.exists() and not force:
        raise UsageError(f"{path} exists; pass --force to replace it or --out to write another "
                         "file")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.partial-{os.getpid()}")
    try:
        tmp.write_text(json.dumps(doc, indent=1) + "\n")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


class UsageError(ValueError):
    pass


def _keys(only: str | None) -> list[tuple[int, bool]]:
    if not only:
        return list(KEYS)
    known = {config_key(*k): k for k in KEYS}
    want = only.split(",")
    bad = [w for w in want if w not in known]
    if bad:
        raise UsageError(f"--only {','.join(bad)}: unknown key; known: {', '.join(known)}")
    return [known[w] for w in want]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.tune",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--arch", required=True, help=f"one of {', '.join(known_archs())}")
    ap.add_argument("--seq", type=int, default=16384, help="sequence length tuned at")
    ap.add_argument("--out", type=Path, help="JSON path (default kernels/configs/<arch>.json)")
    ap.add_argument("--force", action="store_true", help="replace an existing JSON")
    ap.add_argument("--only", help="comma list of keys, e.g. d64.full,d128.causal")
    ap.add_argument("--reps", type=int, default=10, help="timed repetitions per candidate")
    args = ap.parse_args(argv)
    try:
        arch = get_arch(args.arch)
        keys = _keys(args.only)
        if args.seq <= 0 or args.reps < 1:
            raise UsageError("--seq must be positive and --reps at least 1")
        out = args.out or CONFIG_DIR / f"{arch.name}.json"
        if out.exists() and not args.force:
            raise UsageError(f"{out} exists; pass --force to replace it or --out to write "
                             "another file")
        from spec import detect
        present = detect()
        if present is None or present.name != arch.name:
            raise UsageError(f"tuning measures on the {arch.name} GPU, and the GPU present is "
                             f"{present.name if present else 'none'}; run it on that machine")
    except (UsageError, UnknownArch) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    import torch
    existing = json.loads(out.read_text()) if out.exists() else None
    results = {}
    for D, causal in keys:
        key = config_key(D, causal)
        trials = measure_key(present, D, causal, args.seq, reps=args.reps)
        results[key] = trials
        for t in trials:
            time = f"{t.us:9.1f} us" if t.us is not None else "  not timed"
            print(f"{key} {t.candidate.label:28s} {time}  {t.verdict}", flush=True)
    try:
        doc = document(present, torch.cuda.get_device_name(), args.seq, results, existing)
        write_atomic(out, doc, args.force)
    except (TuneError, UsageError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
