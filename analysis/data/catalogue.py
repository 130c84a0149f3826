"""What the registry says about each committed input, in words: the registry entry made from a
run's manifest (``entry_fields``), the catalogue ``profiles/README.md`` (``catalogue_text``) and the
README a run directory gets when it has none (``run_readme``): the study, the GPU, the command, and
the tree that ran (its commit, and whether it had uncommitted changes)."""
from __future__ import annotations

import json
import re

from analysis.data import registry
from analysis.data.select import manifest_fields
from spec.records import data_path, read_bytes

_ARCH_IN_NAME = re.compile(r"^(?:simcheck|prediction|scan)-(?P<arch>[a-z0-9]+)-")


def _manifest(rel: str) -> dict:
    p = registry.profiles_dir() / rel
    for name in ("manifest.json", "smmap-manifest.json"):
        f = data_path(p, name) if p.is_dir() else None
        if f is not None:
            try:
                m = json.loads(read_bytes(f))
                return m if isinstance(m, dict) else {}
            except (ValueError, EOFError, OSError):
                return {}
    return {}


def entry_fields(rel: str, role: str, default: bool = False) -> dict:
    """The registry entry of ``profiles/<rel>`` made from its manifest and current content."""
    top = rel.split("/", 1)[0]
    m = _manifest(rel)
    hit = _ARCH_IN_NAME.match(rel.split("/", 1)[1]) if top == "cpu" else None
    arch = hit["arch"] if hit else top
    f = manifest_fields(m) if m.get("study") else {}
    study = f.get("study") or re.sub(r"-\d.*$", "", rel.split("/", 1)[1])
    params = {k: (list(v) if isinstance(v, tuple) else v) for k, v in f.items()
              if k in ("capacity_bytes", "seq_override", "filter")}
    return {"path": rel, "role": role, "arch": arch,
            "sha256": registry.content_hash(registry.profiles_dir() / rel), "study": study,
            "source": f.get("source"), "parameters": params, "default": default,
            "command": m.get("command")}


def _tree(m: dict, short: bool = False) -> str:
    """The tree that ran a run, in words; ``short``: the catalogue's cell (the commit, ", dirty"
    where it had uncommitted changes, "-" where nothing was recorded)."""
    g = m.get("git") if isinstance(m.get("git"), dict) else {}
    if short and g.get("commit"):
        return g["commit"][:10] + (", dirty" if g.get("dirty") else "")
    if not g.get("commit"):
        if g.get("source_sha256"):          # an installed package or a copy without git
            return (f"no git commit ({g.get('source', 'no checkout')}): {g.get('package')} "
                    f"{g.get('version') or '(version unknown)'}, code sha256 "
                    f"{g['source_sha256'][:12]}")
        return "-" if short else "not recorded"
    return f"commit {g['commit'][:10]}" + (" with uncommitted changes (dirty)" if g.get("dirty")
                                           else " (clean)")


def _gpu(m: dict) -> str:
    dev = m.get("device") or (m.get("parameters") or {}).get("device") or {}
    if isinstance(dev, str):
        return dev
    name = dev.get("gpu") or dev.get("name")
    uuid = dev.get("uuid")
    return " ".join(x for x in (name, f"(uuid {uuid[:13]})" if uuid else None) if x) \
        or "not recorded"


def readme_text(title: str, m: dict, files: list[str], role: str | None = None,
                 why: str = "Generated from the run's manifest") -> str:
    """A run directory's README from its manifest: the study, the GPU, the tree that ran (its
    commit, and whether it had uncommitted changes), the command and the files."""
    lines = [f"# {title}", "", f"{why}.", "",
             (f"- role: {role}; " if role else "- ") + f"study: {m.get('study') or '-'}; "
             f"mode: {m.get('mode') or '-'}",
             f"- created: {m.get('created') or 'not recorded'}; GPU: {_gpu(m)}",
             f"- tree that ran: {_tree(m)}",
             f"- command as recorded: `{m.get('command') or 'not recorded'}`",
             "- the command names the code of its commit; with today's code re-run the study "
             "through `python -m experiments.run <study> --arch <arch>` (docs/cli.md)", "",
             "Files: " + ", ".join(f"`{f}`" for f in files)]
    return "\n".join(lines) + "\n"


def run_readme(rel: str) -> str:
    """A README for a registered run directory that has none, from its manifest."""
    e = registry.entries().get(rel)
    files = sorted(p.relative_to(registry.profiles_dir() / rel).as_posix()
                   for p in (registry.profiles_dir() / rel).rglob("*") if p.is_file())
    return readme_text(f"profiles/{rel}", _manifest(rel), files, e.role if e else "unregistered",
                       "Generated from the run's manifest by `python -m analysis.data` (no "
                       "hand-written README was committed with it)")


def runs_today(command: str) -> bool:
    """Whether a recorded command names code that still exists: the module of ``python -m
    MODULE`` importable, the script of ``python PATH.py`` present; other commands (a shell line)
    are taken as they are. A run's recorded command is its history and stays as it was run; the
    catalogue marks the ones whose code has moved since."""
    import importlib.util
    words = command.split()
    if words[:2] == ["python", "-m"] and len(words) > 2:
        try:
            return importlib.util.find_spec(words[2]) is not None
        except (ImportError, ValueError):
            return False
    if words[:1] == ["python"] and len(words) > 1 and words[1].endswith(".py"):
        return (registry.root() / words[1]).is_file()
    return True


def catalogue_text() -> str:
    """``profiles/README.md``: every registered input, grouped by arch and role."""
    out = ["# Committed data", "",
           "Generated by `python -m analysis.data catalogue` from `profiles/registry.json.xz`; "
           "do not edit. Code reads only what is registered here, each entry pinned by the "
           "SHA-256 of its content (`python -m analysis.data check`). Roles: dataset (a study "
           "run that figures and findings select among), measured (containers of measured runs "
           "for the simulator's validation), instrument (hardware facts the simulator reads; * = "
           "the default one), validation (committed simulator validations), reference (published "
           "values, never fitted), evidence (kept for the documents). The commit that ran a run "
           "is its manifest's (\"dirty\": with uncommitted changes; \"-\": not recorded).", "",
           "A run that no code reads may be *retired* (`python -m analysis.data retire "
           "profiles/<run>`): its files leave the working tree, which has a size bar, and stay in "
           "git history; its entry keeps its path and hash and names the commit that holds it, so "
           "the documents that cite it stay valid. `python -m analysis.data restore "
           "profiles/<run>` (or `--all`) writes it back, checked against the same hash; the "
           "retired runs are listed last.", ""]
    ents = list(registry.find(retired=False))
    for arch in sorted({e.arch for e in ents}):
        out += [f"## {arch}", "", "| run | role | study | source | commit that ran | made by |",
                "|---|---|---|---|---|---|"]
        for e in sorted((e for e in ents if e.arch == arch), key=lambda e: (e.role, e.path)):
            m = _manifest(e.path)
            cmd = (e.command or "").replace("|", "\\|")
            cmd = cmd if len(cmd) <= 48 else cmd[:45] + "..."       # whole in the registry
            how = f"`{cmd}`" if cmd else "see its README"
            if cmd and not runs_today(e.command):
                how = f"as recorded (history): {how}"
            out.append(f"| `{e.path}`{' *' if e.default else ''} | {e.role} | {e.study or '-'} | "
                       f"{e.source or '-'} | {_tree(m, short=True)} | {how} |")
        out.append("")
    gone = registry.find(retired=True)
    if gone:
        out += ["## Retired into git history", "",
                "Each comes back with `python -m analysis.data restore profiles/<run>`; `python -m "
                "analysis.data list` gives its role, study and the commit that holds it.", "",
                ", ".join(f"`{e.path}`" for e in sorted(gone, key=lambda e: e.path)), ""]
    return "\n".join(out)
