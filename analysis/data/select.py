"""Which stored run a report section or a figure reads: one rule over the registered runs.

Where runs are. A *committed* run is a registered ``dataset`` entry of ``profiles/registry.json.xz``
(``profiles/<arch>/<name>-<stamp>[-r<N>]``, ``analysis.data.registry``): the stamp starts with a
digit (so ``longseq-profile-20261121`` is the dataset ``longseq-profile``, never a run of
``longseq``) and ``-r<N>`` is the N-th independent repeat of the run ``<name>-<stamp>``. A
directory under ``profiles/`` that is not registered is invisible here: committing a run changes no
figure or number until it is registered. A *local* run is ``runs/<arch>/<study>/<run-id>``, written
by ``python -m experiments.run`` (directories starting with ``.`` are unfinished and never read).

What a run is. Its ``manifest.json`` (copied into the registry entry) says the study, the mode
(``measure`` or ``simulate``, hence the ``source`` measured/simulated of its rows) and the
parameters that change what was run: the simulated cache capacity (``capacity_bytes``), a
sequence-length override (``seq_override``) and a case filter (``filter``). A run has *default
parameters* when it has no override and no filter and simulated the arch's nominal L2 (or was
measured).

The rule (``select``): among the runs of the arch whose study, source (when asked) and parameters
match (default parameters unless others are asked for), take

1. a committed run before a local one (the committed datasets are what REPORT.md cites);
2. a measured run before a simulated one;
3. the latest stamp (local runs: the latest run id);
4. repeat 1 (the base run) before its repeats ``-r2``, ``-r3``, ... (``repeats_of`` gives them all).

So ``python -m experiments.run sawtooth --arch gb10 --capacity-mib 20`` writes a run that no
default selection picks (its capacity is not the nominal 24 MiB): a figure of it is drawn only
when that run is named (``python -m paper_figures --run runs/gb10/sawtooth/<id>``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import product
from pathlib import Path
from typing import Mapping

from analysis.data import registry
from analysis.data.tables import incomplete, read_manifest
from spec.records import data_path

ANY = object()
"""A parameter value in ``select(params=...)`` that matches whatever the run used."""

PARAMETERS = ("capacity_bytes", "seq_override", "filter")

_COMMITTED = re.compile(r"(?P<name>.+?)-(?P<stamp>\d[0-9A-Za-z]*)(?:-r(?P<rep>\d+))?")


@dataclass(frozen=True)
class Dataset:
    """One stored run directory and what its manifest says about it."""

    path: Path
    arch: str
    name: str                   # committed: the directory name before the stamp; local: the study
    study: str                  # the manifest's study
    stamp: str                  # committed: the stamp; local: the run id
    repeat: int                 # 1 for a base run, N for ``-r<N>``
    committed: bool
    source: str                 # measured | simulated
    capacity_bytes: int | None
    seq_override: tuple[int, ...] | None
    filter: str | None

    @property
    def label(self) -> str:
        """The run as titles and file names name it: ``sawtooth-20261121-r2`` (committed) or
        ``runs/gb10/sawtooth/20261123-101500-simulate`` (local)."""
        if self.committed:
            return self.path.name
        try:
            return str(self.path.resolve().relative_to(registry.root()))
        except ValueError:
            return str(self.path)

    def parameters(self) -> dict:
        return {k: getattr(self, k) for k in PARAMETERS}

    def is_default(self, l2_bytes: int | None) -> bool:
        """No override, no filter, and (simulated runs) the nominal L2 capacity."""
        return (self.seq_override is None and self.filter is None
                and self.capacity_bytes in (None, l2_bytes))


def manifest_fields(m: dict) -> dict:
    """The selection fields of a manifest: study, source and the parameters."""
    params = m.get("parameters") if isinstance(m.get("parameters"), dict) else {}
    src = params.get("source")
    if src not in ("measured", "simulated", "published"):
        src = "simulated" if m.get("mode") == "simulate" else "measured"
    seq = params.get("seq_override")
    return {"study": m.get("study"), "source": src,
            "capacity_bytes": None if params.get("capacity_bytes") is None
            else int(params["capacity_bytes"]),
            "seq_override": None if seq is None
            else tuple(int(x) for x in (seq if isinstance(seq, list) else [seq])),
            "filter": params.get("filter") or None}


def _from_entry(e: registry.Entry) -> Dataset:
    hit = _COMMITTED.fullmatch(e.name)
    p = e.parameters
    seq = p.get("seq_override")
    return Dataset(path=e.abspath, arch=e.arch, name=hit["name"], study=e.study or hit["name"],
                   stamp=hit["stamp"], repeat=int(hit["rep"] or 1), committed=True,
                   source=e.source or "measured", capacity_bytes=p.get("capacity_bytes"),
                   seq_override=None if seq is None else tuple(seq),
                   filter=p.get("filter") or None)


def dataset(run_dir: Path, arch: str | None = None) -> Dataset:
    """A ``Dataset`` for a run directory: its registry entry when it lies under ``profiles/`` (an
    unregistered one is refused), else a local run described by its manifest."""
    d = Path(run_dir)
    if d.name == "manifest.json":
        d = d.parent
    if registry.relative(d) is not None:
        e = registry.entry(d)
        if e.role == "dataset" and e.abspath.resolve() == d.resolve():
            return _from_entry(e)
        m = read_manifest(d)
        f = manifest_fields(m)
        return Dataset(path=d, arch=e.arch, name=d.name, study=str(f["study"] or d.name),
                       stamp=d.name, repeat=1, committed=True, source=f["source"],
                       capacity_bytes=f["capacity_bytes"], seq_override=f["seq_override"],
                       filter=f["filter"])
    m = read_manifest(d)
    f = manifest_fields(m)
    a = m.get("arch")
    a = a.get("name") if isinstance(a, dict) else a
    name = d.parent.name if d.parent.name else d.name
    return Dataset(path=d, arch=str(a or arch or d.parent.name), name=name,
                   study=str(f["study"] or name), stamp=d.name, repeat=1, committed=False,
                   source=f["source"], capacity_bytes=f["capacity_bytes"],
                   seq_override=f["seq_override"], filter=f["filter"])


def discover(arch: str) -> list[Dataset]:
    """Every finished run of ``arch``: the registered datasets, then the local runs
    (``runs/<arch>/<study>/``), each in name order."""
    found = [_from_entry(e) for e in registry.find(role="dataset", arch=arch)]
    local = registry.root() / "runs" / arch
    if local.is_dir():
        for study in sorted(s for s in local.iterdir() if s.is_dir()):
            for p in sorted(study.iterdir()):
                if (p.is_dir() and not p.name.startswith(".")
                        and data_path(p, "manifest.json") is not None
                        and not incomplete(read_manifest(p))):
                    found.append(dataset(p, arch))
    return found


class _Desc(str):
    """A string that sorts in reverse (latest stamp first)."""

    def __lt__(self, other):
        return str.__gt__(self, other)

    def __gt__(self, other):
        return str.__lt__(self, other)


def _rank(ds: Dataset) -> tuple:
    """Sort key of the selection rule: committed, measured, latest stamp, base run first."""
    return (not ds.committed, ds.source != "measured", _Desc(ds.stamp), ds.repeat)


def _l2_bytes(arch: str) -> int | None:
    from spec import UnknownArch, get_arch
    try:
        return get_arch(arch).l2_bytes
    except UnknownArch:
        return None


def candidates(arch: str, study: str, *, name: str | None = None, source: str | None = None,
               params: Mapping[str, object] | None = None) -> list[Dataset]:
    """The runs ``select`` chooses among, best first. ``params`` names the parameters to match
    (``ANY`` matches all values); those not named must be at their default."""
    want = dict(params or {})
    l2 = _l2_bytes(arch)
    out = []
    for ds in discover(arch):
        if ds.study != study or (name is not None and ds.name != name) \
                or (source is not None and ds.source != source):
            continue
        ok = True
        for k in PARAMETERS:
            v = getattr(ds, k)
            if k in want:
                ok &= want[k] is ANY or v == want[k]
            elif k == "capacity_bytes":
                ok &= v in (None, l2)
            else:
                ok &= v is None
        if ok:
            out.append(ds)
    return sorted(out, key=_rank)


def select(arch: str, study: str, **kw) -> Dataset | None:
    """The run a section or figure of ``study`` reads (the module docstring's rule); None when
    there is none. Keywords as ``candidates``."""
    c = candidates(arch, study, **kw)
    return c[0] if c else None


def repeats_of(ds: Dataset) -> list[Dataset]:
    """A committed run and its repeats ``-r2``, ``-r3``, ... in repeat order
    (a local run: itself)."""
    if not ds.committed:
        return [ds]
    same = [d for d in discover(ds.arch)
            if d.committed and d.name == ds.name and d.stamp == ds.stamp]
    return sorted(same, key=lambda d: d.repeat) or [ds]


def repeated_runs(arch: str, study: str, source: str | None = "measured") -> list[Dataset]:
    """The best run of ``study`` (the selection rule's order) that has repeats (``-r2``, ...),
    with them; [] when no run of the study has repeats."""
    for ds in candidates(arch, study, source=source):
        runs = repeats_of(ds)
        if len(runs) >= 2:
            return runs
    return []


def default_runs(arch: str, source: str | None = None) -> list[Dataset]:
    """What ``python -m paper_figures --arch <arch>`` draws: per study the selected run with
    default parameters (and its repeats) first, then, when it has none, the best run that has
    repeats (for the figures about repeats); studies in name order."""
    out: list[Dataset] = []
    for study in sorted({d.study for d in discover(arch)}):
        ds = select(arch, study, source=source)
        if ds is not None:
            out += [d for d in repeats_of(ds) if d not in out]
            out += [d for d in repeated_runs(arch, study, source) if d not in out]
    return out


def selectable(arch: str) -> list[Dataset]:
    """Every committed run of ``arch`` that a selection the code makes can return, in name order:
    per study, for each source (any, measured, simulated), each run name of the study or none,
    and each parameter either at its default or ``ANY`` (the only values the figures and findings
    ask for), the run ``select`` picks with its repeats, and the runs ``repeated_runs`` gives. A
    committed run outside this set is returned by none of those queries (under each, another run
    ranks before it), so no selection reads it (``analysis.data.history`` may retire it)."""
    runs = [d for d in discover(arch) if d.committed]
    out: set[Path] = set()
    grids = [{k: ANY for k, on in zip(PARAMETERS, mask) if on}
             for mask in product((False, True), repeat=len(PARAMETERS))]
    for study in sorted({d.study for d in runs}):
        names = [None, *sorted({d.name for d in runs if d.study == study})]
        for source in (None, "measured", "simulated"):
            out.update(d.path for d in repeated_runs(arch, study, source))
            for name in names:
                for params in grids:
                    best = select(arch, study, name=name, source=source, params=params)
                    if best is not None:
                        out.update(d.path for d in repeats_of(best))
    return [d for d in runs if d.path in out]
