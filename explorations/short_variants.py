"""``python -m explorations.short_variants DIR``: edited copies of the kernel for the short shapes.

The short batched shapes (B 16/32, H=16, S=512, D=128) are bound by DRAM as much as by the tensor
cores: Q, K, V and O are each read or written once (268 MB at b32 causal, 80 us at 3.35 TB/s) and
every CTA lives for only 1-4 K/V steps, so what a CTA spends outside its K/V loop (the bounds
checks of its address math, the wait for its output's TMA store before it may retire, the cluster
it launches in) weighs as much as the loop. Each variant changes one of those and nothing else;
``explorations.kernel_ab --kernel NAME=DIR/NAME.py`` checks and times them beside the production
kernel and both SDPA peers:

- ``nocheck``: K/V loads with ``check_bounds=False`` when S_kv is a multiple of TILE_N (every
  K/V tile is then in bounds; ``EVEN_K`` is already a compile-time constant).
- ``stdstore``: the output written with ``allow_tma=False`` (plain global stores from registers:
  no shared-memory staging and no wait on a TMA store before the CTA retires).
- ``lptsec16``, ``lptsec64``: the persistent longest-first schedule (FA3's LPT order, snake deal)
  with the items sorted longest first *within sections of G heads* instead of across all heads
  (FA3's L2 swizzle; what the sectioned grid ``glpt<G>`` does for the grid launch); G is fixed
  in the source of each variant, launched as ``lpt<P>``.
- ``ncta2``: the kernel compiled with ``num_ctas=2`` (a two-CTA cluster, FA3's choice for D=128
  non-causal; cutile-notes.md says ``ct.bid`` then counts cluster-wide blocks).

Measured on the H100 (the short-variant run of docs/history.md): none helps (``nocheck``
0.997-1.004x the production kernel, ``stdstore`` 0.983-0.992x, ``ncta2`` correct but 37-59x
slower, ``lptsec`` 0.56-0.95x); what did was the persistent launch and, causal, its snake deal
(``spec.schedules``), with the time lost between short CTAs shown by ncu (README there).

Every edit is a literal replacement that must match once, so a change of ``kernels/device/fmha.py``
that moves the edited lines fails here loudly instead of producing a silently identical variant.
"""
from __future__ import annotations

import argparse
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[1] / "kernels" / "fmha.py"

_KV_CALL_TAILS = ("TILE_D, TILE_M, TILE_N, True, CAUSAL, LEVEL)",
                  "TILE_D, TILE_M, TILE_N, False, CAUSAL, LEVEL)")

EDITS: dict[str, list[tuple[str, str, int]]] = {
    "nocheck": [
        ("             CAUSAL: ConstBool, LEVEL: ConstInt):\n    \"\"\"One K/V tile",
         "             CAUSAL: ConstBool, LEVEL: ConstInt, EVEN_K: ConstBool):\n"
         "    \"\"\"One K/V tile", 1),
        (_KV_CALL_TAILS[0], _KV_CALL_TAILS[0][:-1] + ", EVEN_K)", 2),
        (_KV_CALL_TAILS[1], _KV_CALL_TAILS[1][:-1] + ", EVEN_K)", 2),
        ("""        if LEVEL >= 4:
            kt = ct.load(K, index=(b, kvh, 0, j), shape=(1, 1, TILE_D, TILE_N),
                         order=(0, 1, 3, 2), padding_mode=ZERO, latency=2)
""", """        if LEVEL >= 4 and EVEN_K:
            kt = ct.load(K, index=(b, kvh, 0, j), shape=(1, 1, TILE_D, TILE_N),
                         order=(0, 1, 3, 2), latency=2, check_bounds=False)
        elif LEVEL >= 4:
            kt = ct.load(K, index=(b, kvh, 0, j), shape=(1, 1, TILE_D, TILE_N),
                         order=(0, 1, 3, 2), padding_mode=ZERO, latency=2)
""", 1),
        ("""    if LEVEL >= 4:
        v = ct.load(V, index=(b, kvh, j, 0), shape=(1, 1, TILE_N, TILE_D),
                    padding_mode=ZERO, latency=4)
""", """    if LEVEL >= 4 and EVEN_K:
        v = ct.load(V, index=(b, kvh, j, 0), shape=(1, 1, TILE_N, TILE_D), latency=4,
                    check_bounds=False)
    elif LEVEL >= 4:
        v = ct.load(V, index=(b, kvh, j, 0), shape=(1, 1, TILE_N, TILE_D),
                    padding_mode=ZERO, latency=4)
""", 1),
    ],
    "stdstore": [
        ("    ct.store(Out, index=(b, h, q_tile, 0), tile=out)\n",
         "    ct.store(Out, index=(b, h, q_tile, 0), tile=out, allow_tma=False)\n", 1),
    ],
    "ncta2": [
        ("    hints = {}\n", "    hints = {\"num_ctas\": 2}\n", 1),
    ],
}
_LPT = """                bh = w % n_bh
                q_tile = n_q - 1 - w // n_bh
"""
for _g in (16, 64):
    EDITS[f"lptsec{_g}"] = [(_LPT, f"""                sec = w // ({_g} * n_q)
                within = w % ({_g} * n_q)
                heads = ct.minimum({_g}, n_bh - sec * {_g})
                bh = sec * {_g} + within % heads
                q_tile = n_q - 1 - within // heads
""", 1)]


def variant(name: str, text: str) -> str:
    """``text`` with the variant's edits applied; each must match exactly its stated count."""
    for old, new, count in EDITS[name]:
        found = text.count(old)
        if found != count:
            raise SystemExit(f"variant {name}: expected {count} match(es) of {old[:60]!r}, "
                             f"found {found}; kernels/device/fmha.py changed: update "
                             "explorations/short_variants.py")
        text = text.replace(old, new)
    return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="directory for NAME.py (created)")
    ap.add_argument("--only", default=",".join(EDITS), help="comma-separated variant names")
    args = ap.parse_args(argv)
    text = SOURCE.read_text()
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.only.split(","):
        if name not in EDITS:
            raise SystemExit(f"unknown variant {name!r}; one of {', '.join(EDITS)}")
        (args.out / f"{name}.py").write_text(variant(name, text))
        print(args.out / f"{name}.py")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
