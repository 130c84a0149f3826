"""Progress of a run, phase by phase, with an ETA from the cost model
(``experiments.runner.costs``).

A phase is a list of units (variants to compile, cases to check and time, ncu sessions, cases to
simulate) with the estimated seconds of each. Its bar advances in estimated seconds, not units,
so a 3-minute ncu session weighs what it costs; while a unit runs, the bar moves on with the
clock up to 95% of that unit's estimate. The ETA is what the estimate says is left, scaled by how
the finished units compared with their estimate (a machine twice as slow as the one the costs
were fitted on shows an ETA twice as long after its first unit).

On a terminal the phases are live bars that keep to 80 columns: label, bar, units, elapsed time
and ETA have fixed widths and the name of the running unit takes what is left (cut with an
ellipsis first). Elsewhere (a log file, CI) each finished unit prints one line.
"""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager

LABEL_W = 14
BAR_W = 16


def clock(s: float | None) -> str:
    if s is None:
        return "-:--:--"
    s = max(0, int(round(s)))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


class Phase:
    """Units with estimated seconds; ``workers`` run at once (then a unit's wall estimate is its
    share of the workers). Thread-safe: workers may call ``done``."""

    def __init__(self, label: str, unit: str, costs: list[float], workers: int = 1,
                 echo=None):
        self.label, self.unit = label, unit
        self.costs = [max(float(c), 1e-3) for c in costs] or [1e-3]
        self.n = len(costs)
        self.workers = max(1, min(workers, self.n or 1))
        self.total = sum(self.costs) / self.workers
        self.t0 = time.perf_counter()
        self.done_n = 0
        self.done_est = 0.0           # wall-estimate seconds of the finished units
        self.done_wall = 0.0          # real seconds when the last unit finished
        self.current: tuple[float, float] | None = None   # (start, wall estimate) of a unit
        self.note = ""
        self.ended: float | None = None
        self._echo = echo
        self._lock = threading.Lock()

    # -- what the work calls ----------------------------------------------------------------
    def start(self, i: int, note: str = "") -> None:
        """Unit ``i`` (sequential phases) begins."""
        with self._lock:
            self.current = (time.perf_counter(), self.costs[i] / self.workers)
            self.note = note

    def done(self, i: int | None = None, note: str = "", n: int = 1) -> None:
        """``n`` units finished (unit ``i``'s cost when given, else the next ``n`` in order)."""
        with self._lock:
            idx = [i] if i is not None else list(range(self.done_n, min(self.done_n + n, self.n)))
            self.done_est += sum(self.costs[k] for k in idx) / self.workers
            self.done_n += len(idx)
            self.done_wall = time.perf_counter() - self.t0
            self.current = None
            if note:
                self.note = note
        if self._echo is not None:
            self._echo(self.line())

    def finish(self) -> None:
        self.ended = time.perf_counter() - self.t0

    # -- what the display reads -------------------------------------------------------------
    def elapsed(self) -> float:
        return self.ended if self.ended is not None else time.perf_counter() - self.t0

    def ratio(self) -> float:
        """Real seconds per estimated second, from the finished units (1 before the first)."""
        return self.done_wall / self.done_est if self.done_n and self.done_est > 0 else 1.0

    def completed(self) -> float:
        """Estimated seconds done, the running unit's share included."""
        with self._lock:
            c = self.done_est
            if self.current is not None:
                start, est = self.current
                c += min((time.perf_counter() - start) / self.ratio(), 0.95 * est)
        return min(c, self.total)

    def eta(self) -> float | None:
        if self.ended is not None:
            return 0.0
        return max(0.0, (self.total - self.completed()) * self.ratio())

    def line(self) -> str:
        eta = "done" if self.done_n >= self.n else f"ETA {clock(self.eta())}"
        return (f"{self.label}: {self.done_n}/{self.n} {self.unit}, {clock(self.elapsed())} "
                f"elapsed, {eta}" + (f"  {self.note}" if self.note else ""))


class Reporter:
    """Live bars on a terminal console, one line per finished unit on any other."""

    def __init__(self, console):
        self.console = console
        self.live = console.is_terminal
        self._progress = None

    @contextmanager
    def phase(self, label: str, unit: str, costs: list[float], workers: int = 1):
        if not self.live:
            ph = Phase(label, unit, costs, workers, echo=lambda s: self.console.print(
                s, highlight=False, markup=False, soft_wrap=True))
            try:
                yield ph
            finally:
                ph.finish()
            return
        ph = Phase(label, unit, costs, workers)
        progress = _make_progress(self.console)
        with progress:
            task = progress.add_task(label, total=ph.total, phase=ph)
            try:
                yield ph
            finally:
                ph.finish()
                progress.update(task, completed=ph.total)
                progress.refresh()


def _make_progress(console):
    from rich.progress import Progress, ProgressBar, ProgressColumn
    from rich.table import Column
    from rich.text import Text

    class Label(ProgressColumn):
        def render(self, task):
            return Text(task.fields["phase"].label[:LABEL_W], style="bold")

    class Bar(ProgressColumn):
        def render(self, task):
            ph = task.fields["phase"]
            return ProgressBar(total=ph.total, completed=ph.completed(), width=BAR_W)

    class Units(ProgressColumn):
        def render(self, task):
            ph = task.fields["phase"]
            return Text(f"{ph.done_n}/{ph.n} {ph.unit}")

    class Times(ProgressColumn):
        def render(self, task):
            ph = task.fields["phase"]
            eta = "done" if ph.ended is not None else f"ETA {clock(ph.eta())}"
            return Text(f"{clock(ph.elapsed())} {eta}")

    class Note(ProgressColumn):
        def render(self, task):
            return Text(task.fields["phase"].note, style="dim", no_wrap=True,
                        overflow="ellipsis")

    fixed = lambda w: Column(no_wrap=True, min_width=w)   # noqa: E731
    return Progress(Label(table_column=fixed(LABEL_W)), Bar(table_column=fixed(BAR_W)),
                    Units(table_column=fixed(10)), Times(table_column=fixed(16)),
                    Note(table_column=Column(no_wrap=True, overflow="ellipsis", ratio=1)),
                    console=console, transient=False, refresh_per_second=4, expand=True)
