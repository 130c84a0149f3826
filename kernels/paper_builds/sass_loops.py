"""Loops of a cubin's SASS, and what each does per iteration, read from ``nvdisasm -c``.

A loop is a backward branch: a branch at address b whose target label sits at t <= b; its body
is every instruction from t to b (the straight-line range the hardware replays each iteration).
For a FlashAttention kernel the loops that hold the MMA instructions are the K/V step loops: one
iteration is one K/V tile, so the counts of a loop are the per-step cost of the build: MMAs
(HMMA: ``mma.sync``; HGMMA: Hopper's ``wgmma``), local-memory traffic (LDL/STL: spilled
registers, which go through L1 and L2 beside K/V and slow every step), and the global / TMA
loads that fetch K and V (LDG, LDGSTS, UTMALDG). Code the compiler moves out of line (the retry
of a barrier wait placed after the function's exit, jumped to and back) is outside the range
and not counted: it runs only when a wait is not yet satisfied.

Nesting is kept: a loop that holds an MMA loop (the per-work-item loop around the K/V loop)
also holds its MMAs; ``innermost_mma`` marks the loops that hold MMAs and no other loop that
does, which are the per-step loops.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

MMA_OPS = frozenset({"HMMA", "HGMMA", "IMMA", "QMMA", "OMMA", "UTCHMMA", "UTCQMMA", "UTCOMMA"})
LOAD_OPS = ("LDG", "LDGSTS", "UTMALDG", "UBLKCP")
COUNTED = ("LDL", "STL", "LDS", "STS", "BAR", "MUFU", "SYNCS") + LOAD_OPS

_INSN = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*)(\.[^\s;]*)?"
                   r"(.*?);")
_LABEL = re.compile(r"^([.A-Za-z_$][\w.$]*):\s*$")
_TARGET = re.compile(r"`\((\.L_x_\d+)\)")
_BRX_TARGETS = re.compile(r"BRANCH_TARGETS\s+([^\"]+)\"")
_SECTION = re.compile(r"^\s*\.section\s+\.text\.([\w$.]+)")
BRANCH_OPS = frozenset({"BRA", "JMP", "BRX", "JMX"})


@dataclass(frozen=True)
class Instruction:
    address: int
    opcode: str          # the base mnemonic, e.g. "HMMA" for "HMMA.16816.F32"
    text: str            # the instruction as printed, without the address comment


@dataclass(frozen=True)
class Loop:
    """One backward branch: body ``start``..``end`` (byte addresses, both included)."""

    start: int
    end: int
    instructions: int                    # body length in instructions
    counts: dict = field(hash=False)     # opcode -> occurrences in the body
    depth: int = 0                       # how many other loops enclose this one
    innermost_mma: bool = False          # holds MMAs and no other MMA-holding loop

    @property
    def mma(self) -> int:
        return sum(n for op, n in self.counts.items() if op in MMA_OPS)

    def count(self, op: str) -> int:
        return self.counts.get(op, 0)

    def contains(self, other: Loop) -> bool:
        return (self.start <= other.start and other.end <= self.end
                and (self.start, self.end) != (other.start, other.end))


@dataclass(frozen=True)
class Function:
    name: str
    instructions: tuple[Instruction, ...]
    labels: dict = field(hash=False)     # label -> address of the next instruction

    def opcode_counts(self, start: int = 0, end: int | None = None) -> dict:
        out: dict[str, int] = {}
        for ins in self.instructions:
            if ins.address >= start and (end is None or ins.address <= end):
                out[ins.opcode] = out.get(ins.opcode, 0) + 1
        return out

    def blocks(self) -> tuple[list[tuple[int, int]], list[list[int]]]:
        """Basic blocks as (first, last) instruction indices, and each block's successors."""
        ins = self.instructions
        index = {i.address: n for n, i in enumerate(ins)}
        leaders = {0}
        for n, i in enumerate(ins):
            if i.opcode in BRANCH_OPS or i.opcode in _ENDS:
                leaders.add(n + 1)
                for label in _targets(i):
                    if label in self.labels and self.labels[label] in index:
                        leaders.add(index[self.labels[label]])
        starts = sorted(x for x in leaders if x < len(ins))
        spans = [(a, (starts[k + 1] if k + 1 < len(starts) else len(ins)) - 1)
                 for k, a in enumerate(starts)]
        block_of = {a: k for k, (a, _) in enumerate(spans)}
        succ: list[list[int]] = []
        for k, (_, last) in enumerate(spans):
            i, out = ins[last], []
            for label in (_targets(i) if i.opcode in BRANCH_OPS else []):
                if label in self.labels and self.labels[label] in index:
                    out.append(block_of[index[self.labels[label]]])
            falls = not ((i.opcode in BRANCH_OPS or i.opcode in _ENDS) and not _conditional(i))
            if falls and k + 1 < len(spans):
                out.append(k + 1)
            succ.append(sorted(set(out)))
        return spans, succ

    def loops(self) -> list[Loop]:
        """The natural loops of the control-flow graph, one per loop head, in address order.

        A backward branch is a loop only where its target dominates it (every path from the
        entry to the branch passes the target): the jump back from an out-of-line barrier retry
        into the code that called it is a backward branch in the listing but no loop, while the
        retry's own spin is one (a few instructions, never holding an MMA)."""
        spans, succ = self.blocks()
        dom = _dominators(succ)
        pred: list[list[int]] = [[] for _ in spans]
        for b, ss in enumerate(succ):
            for s in ss:
                pred[s].append(b)
        bodies: dict[int, set[int]] = {}
        for u, ss in enumerate(succ):
            for h in ss:
                if h in dom[u]:                       # a back edge u -> h
                    body, stack = bodies.setdefault(h, {h}), [u]
                    while stack:
                        b = stack.pop()
                        if b not in body:
                            body.add(b)
                            stack.extend(pred[b])
        ins = self.instructions
        raw = []
        for h, body in sorted(bodies.items()):
            counts: dict[str, int] = {}
            for b in body:
                for n in range(spans[b][0], spans[b][1] + 1):
                    counts[ins[n].opcode] = counts.get(ins[n].opcode, 0) + 1
            end = max(ins[spans[b][1]].address for b in body)
            raw.append((frozenset(body), Loop(ins[spans[h][0]].address, end,
                                              sum(counts.values()), counts)))
        out = []
        for body, lp in raw:
            inside = [(b2, o) for b2, o in raw if b2 < body]
            outside = sum(1 for b2, _ in raw if body < b2)
            inner = lp.mma > 0 and not any(o.mma > 0 for _, o in inside)
            out.append(Loop(lp.start, lp.end, lp.instructions, lp.counts, outside, inner))
        return out


_ENDS = frozenset({"EXIT", "RET", "BPT", "KILL"})
_PRED_OPERAND = re.compile(r"^\s*!?U?P(?:\d|T)")


def _targets(ins: Instruction) -> list[str]:
    out = _TARGET.findall(ins.text)
    brx = _BRX_TARGETS.search(ins.text)
    if brx:
        out += [t.strip() for t in brx.group(1).split(",")]
    return out


def _conditional(ins: Instruction) -> bool:
    """A predicated branch/exit (``@P0 BRA``, ``BRA.U !UP0, ...``) or an indirect one."""
    if ins.text.startswith("@"):
        return not ins.text.startswith("@PT ")
    if ins.opcode in ("BRX", "JMX"):
        return False
    operands = ins.text.split(None, 1)[1] if " " in ins.text else ""
    return bool(_PRED_OPERAND.match(operands)) and not operands.lstrip().startswith("PT")


def _dominators(succ: list[list[int]]) -> list[set[int]]:
    """Dominator sets of a graph whose entry is block 0 (iterative data-flow over reverse
    postorder); a block the entry cannot reach dominates only itself."""
    n = len(succ)
    order, seen, stack = [], {0}, [(0, iter(succ[0]))]
    while stack:
        b, it = stack[-1]
        nxt = next((s for s in it if s not in seen), None)
        if nxt is None:
            order.append(b)
            stack.pop()
        else:
            seen.add(nxt)
            stack.append((nxt, iter(succ[nxt])))
    rpo = order[::-1]
    pred: list[list[int]] = [[] for _ in range(n)]
    for b, ss in enumerate(succ):
        for s in ss:
            pred[s].append(b)
    everything = set(range(n))
    dom = [({b} if b == 0 or b not in seen else set(everything)) for b in range(n)]
    changed = True
    while changed:
        changed = False
        for b in rpo[1:]:
            ps = [dom[p] for p in pred[b] if p in seen]
            new = set.intersection(*ps) | {b} if ps else {b}
            if new != dom[b]:
                dom[b], changed = new, True
    return dom


def parse(text: str) -> list[Function]:
    """The functions of an ``nvdisasm -c`` listing (one per ``.text.<name>`` section)."""
    funcs: list[Function] = []
    name, insns, labels, pending = None, [], {}, []

    def close():
        if name is not None:
            funcs.append(Function(name, tuple(insns), dict(labels)))

    for line in text.splitlines():
        sec = _SECTION.match(line)
        if sec:
            close()
            name, insns, labels, pending = sec.group(1), [], {}, []
            continue
        if name is None:
            continue
        m = _INSN.match(line)
        if m:
            addr = int(m.group(1), 16)
            for lab in pending:
                labels[lab] = addr
            pending = []
            insns.append(Instruction(addr, m.group(2), line.split("*/", 1)[1].strip()))
            continue
        lab = _LABEL.match(line.strip())
        if lab:
            pending.append(lab.group(1))
    close()
    if not funcs:
        raise ValueError("no .text section with instructions in this nvdisasm listing "
                         "(expected the output of `nvdisasm -c <cubin>`)")
    return funcs


def kernel(text: str, name: str | None = None) -> Function:
    """The one kernel of a listing (or the one named ``name``)."""
    funcs = parse(text)
    if name is not None:
        for f in funcs:
            if f.name == name:
                return f
        raise KeyError(f"no function {name!r} in the listing (has {[f.name for f in funcs]})")
    if len(funcs) != 1:
        raise ValueError(f"the listing has {len(funcs)} functions; name one of "
                         f"{[f.name for f in funcs]}")
    return funcs[0]


def mma_loops(func: Function) -> list[Loop]:
    """The per-step loops: those holding MMAs and no other loop that does."""
    return [lp for lp in func.loops() if lp.innermost_mma]
