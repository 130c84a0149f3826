"""The shapes and models studies' summary: how fast each family's default ``attention()`` is
against SDPA's cuDNN and flash backends over the shape suite
(``experiments.registry.suites.shapes_problems``) and the model families
(``experiments.registry.suites.model_problems``, reported per half: ``half_lines``).

    python -m experiments.speed.shapes runs/h100/shapes/<run>   # re-print a stored run's summary

Two times per problem, each beside the peers measured the same way: the kernel time (CUDA events
that the host cannot stretch, l2 cold: ``experiments.measurement.timing``) and the eager call time
(events around one call on an idle GPU, host included, l2 warm: ``experiments.speed.eager``). Per
problem, a family's speed ratio to a peer is the peer's median time over the family's (``2.0``:
twice as fast; times, not TFLOPS, so the S_q != S_kv causal problem, whose FLOP count is a
convention, compares like every other). Per family: the geometric mean and the minimum over the
problems where both were timed, the same per shape class (``kernels.rules.config.shape_class``), and
every problem the family has no time for (failed the correctness gate or did not build): a missing
problem is listed, never silently dropped from the mean. A peer that does not run a shape (SDPA's
flash backend refuses ``is_causal`` with S_q != S_kv, and grouped K/V heads unless called with
``enable_gqa``) leaves that ratio out and is counted.

Peers are timed, not checked, by ``experiments.measurement.measure``. Where their reading of the
call may differ from ours (``is_causal`` with S_q != S_kv: PyTorch documents it as top-left aligned,
while FlashAttention 2 and later align bottom-right; grouped K/V heads, which cuDNN accepts without
``enable_gqa``), the study's measure hook runs each peer once on the same inputs through the
correctness gate and records a ``max_abs_err`` row for it; a peer that fails there computed a
different function, and its times are left out of the ratios (and the line says so).

The pure summary is here, in the study's module: its natural home, ``analysis/``, belongs to
another part of the project; it reads rows as dicts (``spec.records.read_csv``) or ``Row``s.
"""
from __future__ import annotations

import math
import statistics
import sys
from dataclasses import asdict, dataclass, is_dataclass

from kernels.rules.config import shape_class
from spec import Problem
from spec.records import Metric

from .eager import EAGER_CALL_MS, print_stored

FAMILIES = ("cutile", "cuda")
CUDNN, FLASH = "sdpa-cudnn", "sdpa-flash"
BARS = {"cutile": "bar: geomean >= 0.95x cuDNN, min >= 0.85x cuDNN, every shape >= 1.1x "
                  "flash",
        "cuda": "bar: geomean >= 1.0x flash"}


PEER_BACKENDS = (("sdpa-flash", "FLASH_ATTENTION"), ("sdpa-cudnn", "CUDNN_ATTENTION"))
"""The SDPA peers and their ``torch.nn.attention.SDPBackend`` names, as
experiments.measurement.timing's ``sdpa_peers`` times them."""


def _problem(r: dict) -> Problem:
    return Problem(B=int(r["B"]), H=int(r["H"]), H_kv=int(r["H_kv"]), S_q=int(r["S_q"]),
                   S_kv=int(r["S_kv"]), D=int(r["D"]), dtype=r["dtype"],
                   causal=r["causal"] in (True, "True", "true", "1"))


def _dicts(rows) -> list[dict]:
    return [asdict(r) if is_dataclass(r) else r for r in rows]


def failed_peers(rows) -> set[tuple[Problem, str]]:
    """(problem, peer) pairs whose output failed the correctness gate (their max_abs_err row)."""
    return {(_problem(r), r["backend"]) for r in _dicts(rows)
            if r["metric"] == Metric.MAX_ABS_ERR and r["backend"] in dict(PEER_BACKENDS)
            and not str(r.get("note", "")).startswith("ok")}


def median_times(rows, metric: str = Metric.KERNEL_TIME_MS) -> dict[Problem, dict[str, float]]:
    """{problem: {family or peer: median ms}} of ``metric`` (kernel time, or the eager call time
    ``experiments.speed.eager.EAGER_CALL_MS``) from rows (dicts or Rows), without the times of peers
    that failed the correctness gate on that problem."""
    rows = _dicts(rows)
    wrong = failed_peers(rows)
    samples: dict = {}
    for r in rows:
        if r["metric"] != metric or (_problem(r), r["backend"]) in wrong:
            continue
        samples.setdefault(_problem(r), {}).setdefault(r["backend"], []).append(float(r["value"]))
    return {p: {who: statistics.median(v) for who, v in d.items()} for p, d in samples.items()}


def geomean(xs) -> float:
    xs = list(xs)
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


@dataclass(frozen=True)
class Ratios:
    """One family against one peer over a set of problems."""

    n: int                        # problems with both times
    geomean: float | None
    minimum: float | None
    worst: str                    # label of the problem at the minimum ("" when n == 0)


def ratios(times: dict[Problem, dict[str, float]], family: str, peer: str,
           problems=None) -> Ratios:
    """Speed ratio peer_ms / family_ms over ``problems`` (default: all) where both were timed."""
    got = {p: t[peer] / t[family] for p, t in times.items()
           if (problems is None or p in problems) and family in t and peer in t}
    if not got:
        return Ratios(0, None, None, "")
    worst = min(got, key=got.get)
    return Ratios(len(got), geomean(got.values()), got[worst], worst.label)


@dataclass(frozen=True)
class FamilySummary:
    family: str
    vs_cudnn: Ratios
    vs_flash: Ratios
    by_class: dict               # class name -> Ratios against cuDNN
    missing: tuple[str, ...]     # problems timed for the peers but not for the family
    no_cudnn: int                # problems without a cuDNN time
    no_flash: int                # problems without a flash time


def summarize(rows, metric: str = Metric.KERNEL_TIME_MS) -> list[FamilySummary]:
    """The summary of every family that has at least one time of ``metric``."""
    times = median_times(rows, metric)
    peered = [p for p, t in times.items() if CUDNN in t or FLASH in t]
    classes: dict = {}
    for p in times:
        classes.setdefault(shape_class(p).value, set()).add(p)
    out = []
    for fam in FAMILIES:
        if not any(fam in t for t in times.values()):
            continue
        out.append(FamilySummary(
            fam, ratios(times, fam, CUDNN), ratios(times, fam, FLASH),
            {c: ratios(times, fam, CUDNN, ps) for c, ps in sorted(classes.items())},
            tuple(sorted(p.label for p in peered if fam not in times[p])),
            sum(CUDNN not in times[p] for p in times), sum(FLASH not in times[p] for p in times)))
    return out


def _fmt(r: Ratios) -> str:
    if r.n == 0:
        return "no common problem"
    return f"geomean {r.geomean:.3f}x, min {r.minimum:.3f}x ({r.worst}), n={r.n}"


def summary_lines(rows) -> list[str]:
    """What the study prints last: per family its ratios to cuDNN (overall and per class) and
    to flash, the missing problems, and the issue's bar beside them."""
    lines = []
    for metric, what in ((Metric.KERNEL_TIME_MS, "kernel time, l2 cold"),
                         (EAGER_CALL_MS, "eager call time, host included, l2 warm")):
        lines += _family_lines(rows, metric, what)
    host = host_launch_ms(rows)
    if host and lines:
        lines.append("host time per launch call of the kernel timing's prepared-variant path "
                     "(family.run, not attention(): the hostpath study times that), median over "
                     "problems: "
                     + ", ".join(f"{who} {ms * 1e3:.0f} us" for who, ms in host.items()))
    wrong = sorted(f"{peer} on {p.label}" for p, peer in failed_peers(rows))
    if wrong and lines:
        lines.append(f"left out, the peer's output failed the correctness gate: {', '.join(wrong)}")
    return lines or ["no family was timed: nothing to summarize"]


def _family_lines(rows, metric: str, what: str) -> list[str]:
    lines = []
    for s in summarize(rows, metric):
        lines.append(f"{s.family} vs cuDNN ({what}): {_fmt(s.vs_cudnn)}")
        lines += [f"  {c}: {_fmt(r)}" for c, r in s.by_class.items()]
        lines.append(f"{s.family} vs flash ({what}): {_fmt(s.vs_flash)}")
        if s.missing:
            lines.append(f"{s.family} has no time for {len(s.missing)} problems (failed or not "
                         f"built): {', '.join(s.missing)}")
        lines.append(f"  ({BARS[s.family]}; {s.no_cudnn} problems without a cuDNN time, "
                     f"{s.no_flash} without a flash time)")
    return lines


def host_launch_ms(rows) -> dict[str, float]:
    """{family or peer: median over problems of its median host ms per launch call} of the
    kernel timing's launches (not the eager callers' rows)."""
    per: dict = {}
    for r in _dicts(rows):
        if r["metric"] == Metric.HOST_LAUNCH_MS \
                and not str(r.get("variant", "")).endswith(".attention"):
            per.setdefault(r["backend"], []).append(float(r["value"]))
    return {who: statistics.median(v) for who, v in sorted(per.items())}


HALF_BAR = ("bar, validation half: cutile eager geomean >= 1.0x cuDNN and no problem "
            "below 0.85x, kernel geomean >= 1.0x cuDNN; cuda eager geomean >= 1.0x flash")


def half_lines(rows) -> list[str]:
    """The models study's summary per half (``experiments.registry.suites.model_problems``): each
    family's ratios to cuDNN and flash in kernel time and eager call time over the half's
    problems, and the host-time bar beside the validation half; nothing when no row's problem is
    in a half (rows of other studies are not read)."""
    from ..registry.suites import model_problems
    rows = [r for r in _dicts(rows) if r.get("study") == "models"]
    halves: dict = {}
    for _, half, p in model_problems():
        halves.setdefault(half, set()).add(p)
    kernel, eager = median_times(rows), median_times(rows, EAGER_CALL_MS)
    lines = []
    for half, probs in halves.items():
        if not probs & set(kernel):
            continue
        lines.append(f"{half} half ({len(probs & set(kernel))} of {len(probs)} problems timed):")
        for fam in FAMILIES:
            for what, times in (("kernel", kernel), ("eager", eager)):
                lines.append(f"  {fam} {what:6s} vs cuDNN {_fmt(ratios(times, fam, CUDNN, probs))}"
                             f"; vs flash {_fmt(ratios(times, fam, FLASH, probs))}")
        if half == "validation":
            lines.append(f"  ({HALF_BAR})")
    return lines


def needs_peer_check(p: Problem) -> bool:
    """Whether a peer may read this call differently from the reference (module docstring)."""
    return (p.causal and p.S_q != p.S_kv) or p.H_kv < p.H


def peer_check_rows(cases, arch, *, run: str, study: str, seed: int) -> list:
    """A ``max_abs_err`` row per SDPA peer that runs a problem of ``cases`` needing the check:
    its output on the inputs ``check_and_time`` used (same seed) against the fp32 reference."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from ..measurement.correctness import check, random_inputs, reference
    from ..measurement.measure import case_row
    rows = []
    for p in dict.fromkeys(c.problem for c in cases if needs_peer_check(c.problem)):
        q, k, v = random_inputs(p, seed)
        ref = reference(q, k, v, p.causal)
        for name, backend in PEER_BACKENDS:
            try:
                with sdpa_kernel(getattr(SDPBackend, backend)):
                    out = F.scaled_dot_product_attention(q, k, v, is_causal=p.causal)
            except RuntimeError:
                continue            # the peer does not run this shape: it has no times either
            verdict = check(out, q, k, v, p.causal, ref)
            rows.append(case_row(name, p, Metric.MAX_ABS_ERR, verdict.max_err, run=run, study=study,
                             arch=arch.name, note=str(verdict)))
        del q, k, v, ref
        torch.cuda.empty_cache()
    return rows


def measure(cases, arch, **kw):
    """The study's measure hook: ``experiments.measurement.measure.check_and_time``, the peers'
    correctness rows (``peer_check_rows``), then the summary lines appended to the outcome's summary
    (``experiments.run`` prints them after the run)."""
    from ..measurement.measure import check_and_time
    out = check_and_time(cases, arch, **kw)
    out.rows += peer_check_rows(cases, arch, run=kw["run"], study=kw["study"], seed=kw["seed"])
    out.rows += eager_call_rows(out.passed, arch, run=kw["run"], study=kw["study"],
                                seed=kw["seed"], reps=kw["reps"])
    out.summary += summary_lines(out.rows) + half_lines(out.rows)
    return out


def eager_call_rows(passed, arch, *, run: str, study: str, seed: int, reps: int) -> list:
    """The eager call time (``experiments.speed.eager.eager_rows``: host included, l2 warm) of each
    problem's passing families' ``attention()`` and the SDPA peers, on the inputs the kernel
    timing used (same seed)."""
    launched: dict = {}
    for c in passed:
        launched.setdefault(c.problem, {})[c.variant.backend.value] = c.variant
    if not launched:
        return []
    import torch

    from ..measurement.correctness import random_inputs
    from .eager import eager_rows
    rows = []
    for p, fams in launched.items():
        q, k, v = random_inputs(p, seed)
        rows += eager_rows(p, q, k, v, fams, run=run, study=study, arch=arch.name, reps=reps)
        del q, k, v
        torch.cuda.empty_cache()
    return rows


def main(argv: list[str] | None = None) -> int:
    return print_stored(argv, "experiments.speed.shapes", "run directory or timing.csv",
                        lambda rows: summary_lines(rows) + half_lines(rows),
                        "holds no timing.csv; pass a shapes run directory (it holds timing.csv) "
                        "or the CSV itself")


if __name__ == "__main__":
    sys.exit(main())
