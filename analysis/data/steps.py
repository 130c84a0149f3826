"""Per-step cost of each compiled cuTile build, as read off its SASS (a ``builds-toolchains``
run of ``python -m kernels.paper_builds.toolchains``): the facts a timing model of the K/V
loop needs.

A CTA's speed per K/V step sets how far concurrent CTAs drift apart, and so how long a K/V tile
waits in L2 for its next visitor. What the compiled code does per step is the MMAs, the body's
length, and the local-memory traffic of spilled registers (LDL/STL, served by L1/L2 beside K/V).
The run holds that per build, toolchain and target; ``step_costs`` reads it through the data
door (registered and verified by hash).

    from analysis.data.steps import step_costs
    costs = step_costs()                      # the newest registered builds-toolchains run
    c = costs["authors.AttentionFMHAFullyStatic.causal", "1.0.1", "sm_121"]
    c.bulk_spill_per_step                     # LDL + STL per bulk K/V step: 50
    costs[authors_build("static", "linear", True), "1.0.1", "sm_121"]     # the same build
"""
from __future__ import annotations

from dataclasses import dataclass

from analysis.data.registry import DatasetError, find, open_path
from analysis.data.tables import csv_rows
from spec.paper import paper_build

STUDY = "builds-toolchains"


@dataclass(frozen=True)
class StepLoop:
    """One K/V step loop of a build: its counts per iteration."""

    length: int         # instructions in the body
    mma: int            # HMMA (sm_121) or HGMMA (sm_90)
    ldl: int
    stl: int
    loads: int          # LDG + LDGSTS + UTMALDG issued by the loop itself
    mask_code: bool     # holds the causal mask's selects
    bulk: bool          # runs the bulk of a work item's steps


@dataclass(frozen=True)
class BuildSteps:
    """One build compiled by one toolchain for one target."""

    build: str
    source: str         # study | authors
    causal: bool
    order: str          # linear | sawtooth
    schedule: str       # static | tile2
    cuda_tile: str      # e.g. "1.0.1"
    tileiras: str       # e.g. "13.1.80"
    target: str         # sm_121 | sm_90
    regs: int
    stack: int
    ctas_per_sm: int
    shared: int         # bytes of shared memory per CTA (its K/V buffers among them)
    loops: tuple[StepLoop, ...]   # the step-mma loops, in address order

    @property
    def bulk(self) -> tuple[StepLoop, ...]:
        return tuple(lp for lp in self.loops if lp.bulk)

    @property
    def bulk_spill_per_step(self) -> float:
        """LDL + STL per bulk step (the mean over the bulk loops: a sawtooth build without a
        split scan runs one per direction)."""
        b = self.bulk
        return sum(lp.ldl + lp.stl for lp in b) / len(b) if b else 0.0

    @property
    def bulk_length(self) -> float:
        b = self.bulk
        return sum(lp.length for lp in b) / len(b) if b else 0.0


def authors_build(schedule: str, order: str, causal: bool) -> str:
    """The id of the paper's published build with this schedule (static | tile2), scan order
    (linear | sawtooth) and mask (``spec.paper``): the build the authors ran for that GB10
    count."""
    try:
        return paper_build(schedule, order).id(causal)
    except ValueError as e:
        raise DatasetError(str(e)) from None


def latest_run() -> str:
    """The newest registered builds-toolchains run (``profiles/`` relative path)."""
    runs = sorted(e.path for e in find(study=STUDY))
    if not runs:
        raise DatasetError("no builds-toolchains run is registered; write one with "
                           "`python -m kernels.paper_builds.toolchains --out profiles/cpu/"
                           "builds-toolchains-<date>` and register it")
    return runs[-1]


def step_costs(run: str | None = None) -> dict[tuple[str, str, str], BuildSteps]:
    """{(build, cuda-tile version, target): BuildSteps} of a builds-toolchains run; builds that
    did not compile for a target (``status`` other than ok) are left out."""
    path = open_path(f"{run or latest_run()}/builds.csv")
    groups: dict[tuple[str, str, str], list[dict]] = {}
    for r in csv_rows(path, typed=False):
        if r["status"] != "ok":
            continue
        version, tileiras = (x.split()[-1] for x in r["toolchain"].split(" / "))
        groups.setdefault((r["build"], version, r["target"]), []).append(r | {"_ti": tileiras})
    out = {}
    for key, rs in groups.items():
        r0 = rs[0]
        loops = tuple(StepLoop(int(r["loop_len"]), int(r["mma"]), int(r["ldl"]), int(r["stl"]),
                               int(r["ldg"]) + int(r["ldgsts"]) + int(r["utmaldg"]),
                               r["mask_code"] == "1", r["bulk"] == "1")
                      for r in rs if r["role"] == "step-mma")
        out[key] = BuildSteps(r0["build"], r0["source"], r0["causal"] == "1", r0["order"],
                              r0["schedule"], key[1], r0["_ti"], key[2], int(r0["regs"]),
                              int(r0["stack"]), int(r0["ctas_per_sm"]), int(r0["shared"]),
                              loops)
    return out
