"""``python -m analysis.data``: the registry of committed inputs.

    python -m analysis.data list [--arch h100] [--role dataset]   # what the code may read
    python -m analysis.data check                                  # every entry still hashes right
    python -m analysis.data register profiles/h100/<run> --role dataset [--default]
    python -m analysis.data catalogue [--check]     # profiles/README.md from the registry
    python -m analysis.data readmes                 # a README for each run without one
    python -m analysis.data compact [PATH ...] [--dry-run] [--pinned]  # run files as .xz, re-pinned
    python -m analysis.data retire profiles/h100/<run> [...]       # into git history
    python -m analysis.data restore profiles/h100/<run> | --all    # back from git history

Bad input (an unknown role, a path outside ``profiles/``, a missing path) is one line and exit 2.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from analysis.data import history, registry
from analysis.data.catalogue import catalogue_text, entry_fields, run_readme
from analysis.data.compact import compact
from analysis.data.registry import ROLES, DatasetError


def _register(paths: list[Path], role: str, default: bool) -> int:
    docs = {e.path: {k: v for k, v in vars(e).items()} for e in registry.entries().values()}
    for p in paths:
        rel = registry.relative(p)
        if rel is None or "/" not in rel:
            raise DatasetError(f"{p}: not a run under profiles/<arch>/; pass profiles/<arch>/<run>")
        if "/" in rel.split("/", 1)[1]:
            raise DatasetError(f"{p}: nested inside a run; register its top-level directory")
        old = registry.entries().get(rel)
        if old is not None and old.retired:
            raise DatasetError(f"{p}: retired; bring it back with `{old.restore_command()}`")
        if not (registry.profiles_dir() / rel).exists():
            raise DatasetError(f"{p}: no such file or directory")
        docs[rel] = entry_fields(rel, role, default)
        print(f"registered profiles/{rel} as {role} (sha256 {docs[rel]['sha256'][:12]})")
    registry.write(list(docs.values()))
    return 0


def _compact(paths: list[str], dry_run: bool, pinned: bool) -> int:
    renames, skipped = compact(paths, dry_run, pinned)
    for line in skipped:
        print(line)
    runs = {"/".join(r.old.split("/")[:2]) for r in renames}
    saved = sum(r.before - r.after for r in renames)
    print(f"{'would store' if dry_run else 'stored'} {len(renames)} file(s) of {len(runs)} run(s) "
          f"as .xz: {saved / 1e3:.1f} kB saved")
    return 0


def _check() -> int:
    """Verify every entry: a present one by its files, a retired one from git's objects (or say
    that there is no history here to verify it against)."""
    ents = list(registry.entries().values())
    bad, skipped, retired, reason = [], [], 0, ""
    for e in ents:
        try:
            if e.retired:
                retired += 1
                problem = history.check(e)
                if problem:
                    bad.append(problem)
            else:
                registry.verify(e)
        except history.Unverifiable as why:
            skipped.append(f"profiles/{e.path}")
            reason = str(why)
        except DatasetError as err:
            bad.append(str(err))
    for b in bad:
        print(f"error: {b}", file=sys.stderr)
    done = len(ents) - len(bad) - len(skipped)
    note = f" ({retired - len(skipped)} retired, from git history)" if retired > len(skipped) \
        else ""
    print(f"{done} of {len(ents)} entries verified{note}")
    if skipped:
        print(f"{len(skipped)} retired entries not verified, skipped: no git history to verify "
              f"them against ({reason})")
    return 2 if bad else 0


def _retire(paths: list[Path]) -> int:
    for e in history.retire(paths):
        print(f"retired profiles/{e.path}: in commit {e.retired[:12]} (sha256 {e.sha256[:12]})")
    print("next: python -m analysis.data catalogue, then commit the deletion and the registry "
          "(git add -A profiles)")
    return 0


def _restore(paths: list[Path], every: bool) -> int:
    if bool(paths) == every:
        print("error: restore takes registered runs or --all (one of the two)", file=sys.stderr)
        return 2
    back = history.restore(None if every else paths)
    for e in back:
        print(f"restored profiles/{e.path} from commit {e.retired[:12]} (sha256 "
              f"{e.sha256[:12]} verified)")
    print(f"{len(back)} run(s) restored" + ("; next: python -m analysis.data catalogue"
                                             if back else ""))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m analysis.data",
                                 description="the registry of committed inputs under profiles/")
    sub = ap.add_subparsers(dest="cmd", required=True)
    ls = sub.add_parser("list", help="the registered entries")
    ls.add_argument("--arch")
    ls.add_argument("--role", choices=ROLES)
    sub.add_parser("check", help="verify the content hash of every entry")
    rg = sub.add_parser("register", help="add or re-pin entries")
    rg.add_argument("paths", nargs="+", type=Path)
    rg.add_argument("--role", required=True, choices=ROLES)
    rg.add_argument("--default", action="store_true",
                    help="instrument: the one of its kind and arch that the params files pin")
    cat = sub.add_parser("catalogue", help="write profiles/README.md from the registry")
    cat.add_argument("--check", action="store_true",
                     help="exit 1 if profiles/README.md is not what the registry generates")
    sub.add_parser("readmes", help="write a README (from its manifest) into every registered run "
                                   "directory that has none, and re-pin those entries")
    cp = sub.add_parser("compact", help="store the machine files of registered runs as .xz "
                                        "(analysis.data.compact), re-pin them and rewrite the "
                                        "documents that cite the old names")
    cp.add_argument("paths", nargs="*", help="registered runs (default: all)")
    cp.add_argument("--dry-run", action="store_true", help="say what would change; change nothing")
    cp.add_argument("--pinned", action="store_true",
                    help="also compact runs that derived files pin by hash, rewriting those pins")
    rt = sub.add_parser("retire", help="delete registered runs that no code reads from the "
                                       "working tree, keeping them registered and restorable "
                                       "from git history (analysis.data.history)")
    rt.add_argument("paths", nargs="+", type=Path)
    rs = sub.add_parser("restore", help="write retired runs back from git history")
    rs.add_argument("paths", nargs="*", type=Path)
    rs.add_argument("--all", action="store_true", help="every retired run")
    a = ap.parse_args(argv)
    try:
        if a.cmd == "list":
            held = sorted({e.arch for e in registry.entries().values()})
            if a.arch is not None and a.arch not in held:
                print(f"error: --arch {a.arch}: no registered run; the registry holds "
                      f"{', '.join(held)}", file=sys.stderr)
                return 2
            for e in registry.find(arch=a.arch, role=a.role, retired=None):
                print(f"{e.role:<10} {e.arch:<5} {e.study or '-':<12} profiles/{e.path}"
                      + ("  (default)" if e.default else "")
                      + (f"  (retired in {e.retired[:12]}: {e.restore_command()})"
                         if e.retired else ""))
            return 0
        if a.cmd == "check":
            return _check()
        if a.cmd == "retire":
            return _retire(a.paths)
        if a.cmd == "restore":
            return _restore(a.paths, a.all)
        if a.cmd == "readmes":
            docs = {e.path: dict(vars(e)) for e in registry.entries().values()}
            n = 0
            for e in registry.entries().values():
                d = e.abspath
                if d.is_dir() and not (d / "README.md").exists():
                    registry.verify(e)
                    (d / "README.md").write_text(run_readme(e.path))
                    docs[e.path] = entry_fields(e.path, e.role, e.default)
                    n += 1
            registry.write(list(docs.values()))
            print(f"wrote {n} README(s)")
            return 0
        if a.cmd == "compact":
            return _compact(a.paths, a.dry_run, a.pinned)
        if a.cmd == "register":
            return _register(a.paths, a.role, a.default)
        text = catalogue_text()
        path = registry.profiles_dir() / "README.md"
        if a.check:
            same = path.exists() and path.read_text() == text
            state = 'current' if same else 'stale: run python -m analysis.data catalogue'
            print(f"{path}: {state}")
            return 0 if same else 1
        path.write_text(text)
        print(f"wrote {path} ({len(registry.entries())} entries)")
        return 0
    except DatasetError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
