"""Rows of ``experiments.speed.cutile_backward_bench``: the CSV writer, the manifest, the summary of
a run and of stored runs (``--summarize``, no GPU)."""
from __future__ import annotations

import csv
import math
import sys
from pathlib import Path

from spec.records import data_path, open_text


def geo(xs):
    xs = [x for x in xs if x == x and x > 0]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else math.nan


def summary(speed_rows, order_rows) -> list[str]:
    by: dict = {}
    for r in speed_rows:
        by.setdefault((r[1], r[2]), {})[r[3]] = r
    lines = []
    for half in ("tuning", "validation"):
        for measure, col in (("fwd+bwd", 4), ("bwd", 5)):
            for peer in ("flash", "cudnn"):
                ratios = [d[peer][col] / d["cutile"][col] for (h, _), d in by.items()
                          if h == half and peer in d and "cutile" in d
                          and d[peer][col] == d[peer][col] and d["cutile"][col] > 0]
                if ratios:
                    lines.append(f"{half:10s} {measure:7s} {peer}/cutile geo-mean "
                                 f"{geo(ratios):.3f}  min {min(ratios):.3f}  "
                                 f"({len(ratios)} problems)")
    for half in ("tuning", "validation"):
        ratios = [d["cutile"][9] / min(d[p][9] for p in ("flash", "cudnn")
                                       if p in d and d[p][9] == d[p][9])
                  for (h, _), d in by.items() if h == half and "cutile" in d
                  and len(d["cutile"]) > 9 and any(p in d and d[p][9] == d[p][9]
                                                   for p in ("flash", "cudnn"))]
        ratios = [r for r in ratios if r == r]          # NaN: cuTile's own row failed
        if ratios:
            lines.append(f"{half:10s} host per call, cutile/best SDPA geo-mean {geo(ratios):.3f}"
                         f"  max {max(ratios):.3f}  ({len(ratios)} problems; < 1: less host time)")
    ob: dict = {}
    for r in order_rows:
        ob.setdefault((r[1], r[2]), {})[r[3].split(".")[0]] = r[4]
    for half in ("tuning", "validation"):
        rs = [d["linear"] / d["sawtooth"] for (h, _), d in ob.items() if h == half and len(d) == 2]
        if rs:
            lines.append(f"{half:10s} dK/dV kernel linear/sawtooth geo-mean {geo(rs):.3f} "
                         f"(min {min(rs):.3f}, max {max(rs):.3f})")
    return lines


def summarize(specs: list[str]) -> int:
    """The summary of stored runs (``--summarize``); one line names each problem's source."""
    by: dict = {}
    dirs = []
    for spec in specs:
        d, _, only = spec.partition("::")
        d = Path(d)
        dirs.append(d)
        f = data_path(d, "speed.csv")
        if f is None:
            f = d / "speed.csv"
            print(f"{f}: no such file (pass run directories of this benchmark)", file=sys.stderr)
            return 2
        rows: dict = {}
        for r in csv.DictReader(open_text(f)):
            if only and not any(o in r["problem"] for o in only.split(",")):
                continue
            rows.setdefault((r["half"], r["problem"]), []).append(
                [r["family"], r["half"], r["problem"], r["launcher"], float(r["fwd_bwd_ms"]),
                 float(r["bwd_ms"]), int(r["n_calls"]), float(r["grad_rel_diff"]), r["device"],
                 float(r.get("host_ms") or math.nan)])
        for key, rs in rows.items():
            by[key] = (d, rs)
        devices = ", ".join(sorted({r[8] for v in rows.values() for r in v}))
        print(f"{d}: {len(rows)} problems ({devices})")
    sources: dict = {}
    for (_, label), (d, _) in by.items():
        sources.setdefault(d, []).append(label)
    if len(dirs) > 1:
        for d in dirs[1:]:
            print(f"from {d}: {' '.join(sorted(sources.get(d, [])))}")
    for line in summary([r for _, rs in by.values() for r in rs], []):
        print(line)
    return 0


def write(path: Path, fields, rows) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(fields)
        w.writerows(rows)


def manifest(args, dev) -> dict:
    import torch

    from spec.install import git_state
    try:
        import cuda.tile as ct
        ctv = getattr(ct, "__version__", None)
    except ImportError:
        ctv = None
    props = torch.cuda.get_device_properties(0)
    return {"schema": 1, "study": "cutile-backward-bench", "device": dev,
            "sm_count": props.multi_processor_count, "l2_bytes": props.L2_cache_size,
            "torch": torch.__version__, "cuda_runtime": torch.version.cuda, "cuda_tile": ctv,
            **git_state(), "repeats": args.repeats, "seed": 0,
            "halves": args.halves, "command": " ".join(sys.argv)}
