"""The forward kernel's tactic bits (``kernels.device.fmha``'s ``TACTIC`` constant; 0 is every
study's build, whose code no bit changes), decoded in the kernels through ``has_tactic`` and
``tactic_latency`` only.

* bit 0 (``TACTIC_MASKED_FIRST``): the masked tiles first in a forward scan too (FlashAttention's
  order: the diagonal's K/V load is issued beside the Q load and the item ends on the mask-free
  bulk);
* bit 1 (``TACTIC_NO_BOUNDS``): the bulk's K/V loads (whole tiles) unchecked;
* bits 4-7 / 8-11: K / V load-latency hints replacing the ladder's (the pipeline depth the
  compiler gives each load);
* bit 12 (``TACTIC_PREFETCH_Q``): persistent schedules only. A CTA issues the load of its *next*
  work item's Q tile after the current item's K/V scan and before its epilogue (the final
  ``acc / l`` division, the O and LSE stores) and carries the tile into the next item, so the
  load's latency overlaps the epilogue instead of opening the next item. It matters where a CTA
  runs many short items (short sequences: the epilogue and the Q load are a large share of an
  item) and not at long S, where they are a few percent of one.

H100 (profiles/h100/sweep-20261127a): none of bits 0-11 is a clear win, masked-first costs 4-9%
at D=128.
"""
from __future__ import annotations

TACTIC_MASKED_FIRST, TACTIC_NO_BOUNDS = 1, 2
TACTIC_PREFETCH_Q = 4096
LATENCY_K, LATENCY_V = 2, 4    # the ladder's level-4 hints; TACTIC bits 4-7 / 8-11 replace them
LATENCY_K_SHIFT, LATENCY_V_SHIFT = 16, 256     # the fields' lowest bit, as a multiplier


def has_tactic(TACTIC, BIT):
    """Whether the TACTIC constant sets the one-bit tactic ``BIT`` (a ``TACTIC_*`` value); the
    kernels branch on it at compile time."""
    return (TACTIC // BIT) % 2 == 1


def tactic_latency(TACTIC, SHIFT, DEFAULT):
    """The 4-bit latency field at ``SHIFT`` (``LATENCY_K_SHIFT`` / ``LATENCY_V_SHIFT``), or the
    ladder's ``DEFAULT`` where the field is 0."""
    return DEFAULT if (TACTIC // SHIFT) % 16 == 0 else (TACTIC // SHIFT) % 16


def tactic_code(*, masked_first=False, no_bounds=False, latency_k=0, latency_v=0,
                prefetch_q=False) -> int:
    """The TACTIC constant of these choices (a latency of 0 keeps the ladder's hint)."""
    if not (0 <= latency_k <= 10 and 0 <= latency_v <= 10):
        raise ValueError(f"latency_k={latency_k}, latency_v={latency_v}: a load latency hint "
                         "is 1..10 (0: the default)")
    return (TACTIC_MASKED_FIRST * bool(masked_first) + TACTIC_NO_BOUNDS * bool(no_bounds)
            + latency_k * LATENCY_K_SHIFT + latency_v * LATENCY_V_SHIFT
            + TACTIC_PREFETCH_Q * bool(prefetch_q))
