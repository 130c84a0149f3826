"""The forward kernel's CTA → work mapping, inlined by the cuTile front end: the constant codes
of the spec's orders and schedules, the scan direction of a CTA's next item (``reversed_for``), and
the persistent schedules' deal of work items to CTAs (``deal``, ``item``; ``spec.schedules`` is the
host-side definition the trace build checks them against)."""
from __future__ import annotations

import cuda.tile as ct

from spec.orders import OrderKind
from spec.schedules import ScheduleKind, WorkOrder

ConstInt = ct.Constant[int]
ConstBool = ct.Constant[bool]

# The constant codes: the spec's enums, spelled once.
ORDER_LINEAR, ORDER_SAWTOOTH, ORDER_REVERSE, ORDER_BLOCK_PARITY = (
    int(OrderKind.LINEAR), int(OrderKind.SAWTOOTH), int(OrderKind.REVERSE),
    int(OrderKind.BLOCK_PARITY))
SCHED_GRID, SCHED_TILE_X, SCHED_PERSISTENT = (
    int(ScheduleKind.GRID), int(ScheduleKind.TILE_X), int(ScheduleKind.PERSISTENT))
SCHED_LONGEST_FIRST, SCHED_SECTIONED, SCHED_SNAKE = (
    int(ScheduleKind.LONGEST_FIRST), int(ScheduleKind.SECTIONED_LONGEST_FIRST),
    int(ScheduleKind.SNAKE))
WORK_Q_MAJOR, WORK_HEAD_MAJOR = int(WorkOrder.Q_MAJOR), int(WorkOrder.HEAD_MAJOR)


def reversed_for(ORDER: ConstInt, GROUP: ConstInt, it, cta):
    """1 when the scan runs backward, else 0 (spec ``ScanOrder.reversed_for``).

    ``it`` is the CTA's local Q-tile counter, ``cta`` its index in the launched grid."""
    if ORDER == ORDER_LINEAR:
        r = 0
    elif ORDER == ORDER_REVERSE:
        r = 1
    elif ORDER == ORDER_SAWTOOTH:
        r = (it // GROUP) % 2
    else:
        r = cta % 2
    return r


def deal(it, cta, n_ctas, SCHED: ConstInt):
    """The work item CTA ``cta`` takes in round ``it``: grid-stride, or (LPT, SNAKE) the snake
    deal, odd rounds reversed."""
    w = it * n_ctas + cta
    if SCHED == SCHED_LONGEST_FIRST or SCHED == SCHED_SNAKE:
        if it % 2 == 1:
            w = it * n_ctas + n_ctas - 1 - cta
    return w


def item(w, n_q, n_bh, SCHED: ConstInt, WORK: ConstInt):
    """Work item ``w`` as (bh, q_tile): LPT sorted longest first, heads fastest; else q- or
    head-major."""
    if SCHED == SCHED_LONGEST_FIRST:
        bh = w % n_bh
        q_tile = n_q - 1 - w // n_bh
    elif WORK == WORK_HEAD_MAJOR:
        bh = w % n_bh
        q_tile = w // n_bh
    else:
        bh = w // n_q
        q_tile = w % n_q
    return bh, q_tile
