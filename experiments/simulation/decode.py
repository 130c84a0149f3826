"""The decode study's prediction (CPU): DRAM reads of a decode step that follows another.

A decode step reads the whole K/V cache once. Two steps of the same layer in a row (a decoding
loop timed alone, or a layer whose cache stays hot across a short model) meet the cache again
after exactly one cache's worth of other reads: an LRU L2 keeps the *last* bytes the first step
read. With every split scanning its chunk of K/V tiles in the same direction at every step
(``linear``), the second step starts on the tiles the first read earliest, which are gone, and
each miss evicts a tile it would reach later: above the L2 nothing hits. If the second step
scans each chunk backwards (``alternate``: the sawtooth across steps instead of across CTA
waves), it starts on the tiles the first step read last and hits about the L2's worth of them.
Packing a GQA group's query heads into one CTA (``group``) reads each K/V tile once per step;
one CTA per query head (``none``) reads it G times, from L2 when the G CTAs run together.

What is simulated (``timed_step2_bytes``): the launch as ``spec.trace.WorkTable`` items (one per
CTA: split ``s`` of unit ``u`` reads its chunk of K/V tiles, forward or backward, after its Q
tile, and stores its partial output; ``spec.decode``'s splits and tiles), both steps' CTAs
dispatched in launch order onto the arch's resident slots, through the timed simulator
``analysis.cache.timesim`` at the arch's frozen parameters (``model_params(arch).time_params``:
on Hopper two L2 partitions, each tile homed half on each side, a remote half read through the
fabric and copied into the reader's partition, so data read from both sides takes more than its
size). Step 2's DRAM bytes are the fills of both steps less those of step 1 alone. Left out:
the merge kernel's reads of the partials (a few MiB at most, written just before, in L2) and
the launch boundary (a step's CTAs may start while the previous step's last ones finish).
Nothing here was fitted to decode data; why this model and not the lock-step LRU of the first
decode prediction: docs/model-changelog.md.
"""
from __future__ import annotations

import numpy as np

from spec.decode import FP32

ORDERS = ("linear", "alternate")
PACKINGS = ("group", "none")
STUDY_SHAPES = {           # the decode study's grid (the first decode measurement's B1 H32/8
                           # D128 is none of them)
    "gqa-b4": dict(B=4, H=32, H_kv=8, S_q=1, D=128),
    "mha": dict(B=1, H=16, H_kv=16, S_q=1, D=128),
    "gqa8-d64": dict(B=2, H=32, H_kv=4, S_q=1, D=64),
    "spec4": dict(B=1, H=32, H_kv=8, S_q=4, D=128),
}
STUDY_SIZES = (0.5, 1.0, 2.0)


def plan(S_kv: int, packing: str, slots: int, shape: dict) -> tuple[int, int, int, int]:
    """(hg, sqp, tile_n, splits) of the decode kernels for ``shape``."""
    from spec.decode import choose_splits, tile_n_for
    from spec.decode import packing as pack
    s = shape
    G = s["H"] // s["H_kv"]
    hg, sqp = pack(G, s["S_q"]) if packing == "group" else pack(1, s["S_q"])
    tile_n = tile_n_for(s["D"], hg * sqp)
    splits = choose_splits(B=s["B"], H=s["H"], H_kv=s["H_kv"], S_q=s["S_q"], S_kv=S_kv,
                           D=s["D"], elt=2, tile_n=tile_n, head_chunks=G // hg, slots=slots)
    return hg, sqp, tile_n, splits


def work_table(S_kv: int, order: str, packing: str, slots: int, steps: int, shape: dict,
               sector_bytes: int = 32):
    """(``WorkTable``, splits) of ``steps`` decode launches of ``shape`` in a row: one item per
    CTA (launch order, split fastest; a split past the last tile launches no work and is left
    out). K of K/V head ``h``, tile ``j`` is key ``h·n + j``, V the same after ``v_base``; item
    (u, s) starts at row ``h(u)·n + s·chunk`` and scans ``len(split_tiles(s))`` tiles, backwards
    at the odd steps of ``alternate``; its Q tile is its unit's, its O store its partial output
    (``hg·sqp`` rows of D + 1 fp32)."""
    from spec.decode import n_tiles, split_tiles
    from spec.trace import WorkTable
    s = shape
    hg, sqp, tile_n, splits = plan(S_kv, packing, slots, shape)
    n = n_tiles(S_kv, tile_n)
    n_hc = s["H"] // s["H_kv"] // hg
    units = s["B"] * s["H_kv"] * n_hc
    heads = s["B"] * s["H_kv"]
    q_base = 2 * heads * n
    o_base = q_base + units
    sectors = np.empty(o_base + units * splits, dtype=np.int32)
    sectors[:q_base] = tile_n * s["D"] * 2 // sector_bytes
    sectors[q_base:o_base] = max(1, hg * sqp * s["D"] * 2 // sector_bytes)
    sectors[o_base:] = max(1, hg * sqp * (s["D"] + 1) * FP32 // sector_bytes)
    one = [(u, sp, split_tiles(sp, n, splits)) for u in range(units) for sp in range(splits)]
    one = [x for x in one if len(x[2])]
    items = [(step, u, sp, r) for step in range(steps) for u, sp, r in one]
    m = len(items)
    return WorkTable(
        cta_first=np.arange(m + 1, dtype=np.int64),
        length=np.array([len(r) for *_, r in items], dtype=np.int32),
        reverse=np.array([order == "alternate" and st % 2 == 1 for st, *_ in items], dtype=bool),
        q_key=np.array([q_base + u for _, u, _, _ in items], dtype=np.int32),
        o_key=np.array([o_base + u * splits + sp for _, u, sp, _ in items], dtype=np.int32),
        kv_row=np.array([(u // n_hc) * n + r.start for _, u, _, r in items], dtype=np.int32),
        k_base=0, v_base=heads * n, key_sectors=sectors, n_ctas=m, n_kv=n), splits


def timed_step2_bytes(S_kv: int, order: str, packing: str, arch_name: str,
                      shape: dict) -> tuple[int, int, str]:
    """(DRAM bytes of the second of two steps in a row, splits, the simulator's note) by the
    timed simulator at ``arch_name``'s frozen parameters, one CTA per SM."""
    from analysis.cache import timesim
    from experiments.simulation.simulate import model_params
    from spec import get_arch
    arch = get_arch(arch_name)
    tp = model_params(arch).time_params(arch)
    slots = _slots(arch_name)
    fills = []
    for steps in (1, 2):
        table, splits = work_table(S_kv, order, packing, slots, steps, shape, arch.sector_bytes)
        fills.append(timesim.simulate(table, slots, tp, arch.sector_bytes).dram_fills)
    return (fills[1] - fills[0]) * arch.sector_bytes, splits, tp.note()


def kv_bytes_per_token(shape: dict) -> int:
    from spec.decode import cache_bytes
    return cache_bytes(shape["B"], shape["H_kv"], 1, shape["D"])


def study_cases(arch_name: str) -> list[dict]:
    """The decode study's grid on ``arch_name``: each ``STUDY_SHAPES`` shape with a K+V cache of
    ``STUDY_SIZES`` times the simulated L2 (``capacity``; S_kv a multiple of 256), both orders,
    the group packed and, where a CTA packs more than one query head, one head per CTA."""
    cap = capacity(arch_name)
    out = []
    for name, shape in STUDY_SHAPES.items():
        packings = PACKINGS if shape["H"] > shape["H_kv"] else ("group",)
        for size in STUDY_SIZES:
            S_kv = int(size * cap / kv_bytes_per_token(shape)) // 256 * 256
            out += [dict(shape=name, **shape, size=size, S_kv=S_kv, order=o, packing=p)
                    for p in packings for o in ORDERS]
    return out


STEP2 = "step 2 of 2 in a row (split kernel + merge)"
SIMULATED_STEP2 = "step 2 of 2 in a row (split kernel; the merge's reads of the partials left out)"


def study_row(x: dict, arch_name: str, run: str, backend: str, metric: str, value: float,
         sample: int, note: str, source: str = "measured"):
    """One tidy row of the decode study (``spec.records.Row``): the variant is
    ``decode.<order>.<packing>`` of cuTile's plan (tile_m = the packed rows), or an SDPA peer."""
    from spec.records import UNITS, Row
    ours = backend == "cutile"
    return Row(run=run, study="decode", arch=arch_name,
               variant=f"decode.{x['order']}.{x['packing']}" if ours else backend,
               backend=backend, order=x["order"] if ours else "-",
               schedule=f"decode{x['splits']}" if ours else "-",
               tile_m=x["hg"] * x["sqp"] if ours else 0, tile_n=x["tile_n"] if ours else 0,
               occupancy=1, B=x["B"], H=x["H"], H_kv=x["H_kv"], S_q=x["S_q"], S_kv=x["S_kv"],
               D=x["D"], dtype="bf16", causal=False, metric=metric, value=float(value),
               unit=UNITS[metric], source=source, sample=sample, note=note, x=x["size"])



def simulated_rows(arch_name: str, run: str) -> list:
    """The decode study simulated (``python -m experiments.run decode --mode simulate``): per
    case of ``study_cases``, the second step's DRAM read bytes by ``timed_step2_bytes``
    (``source=simulated``; the note names the simulator and its parameters)."""
    from spec.records import Metric
    rows = []
    for c in study_cases(arch_name):
        shape = STUDY_SHAPES[c["shape"]]
        got, splits, note = timed_step2_bytes(c["S_kv"], c["order"], c["packing"], arch_name,
                                              shape)
        hg, sqp, tile_n, _ = plan(c["S_kv"], c["packing"], _slots(arch_name), shape)
        x = dict(c, splits=splits, hg=hg, sqp=sqp, tile_n=tile_n)
        rows.append(study_row(x, arch_name, run, "cutile", Metric.DRAM_READ_BYTES, got, 0,
                              f"{SIMULATED_STEP2}; {note}", source="simulated"))
    return rows


def _slots(arch_name: str) -> int:
    from spec import get_arch
    return get_arch(arch_name).num_sms


def capacity(arch_name: str) -> int:
    """The simulated L2 in bytes: the arch's L2 times the frozen capacity fraction of the
    simulator's parameters for it (``experiments.simulation.simulate.model_params``)."""
    from experiments.simulation.simulate import model_params
    from spec import get_arch
    arch = get_arch(arch_name)
    return int(arch.l2_bytes * model_params(arch).capacity_fraction)

