"""REPORT.md's tables that ``python -m analysis.findings`` prints hold its numbers.

``analysis.findings --arch h100 --no-sim`` and ``--arch h200 --no-sim`` run once with ``--out``
into a temporary directory (one CSV per section). For each findings table of the report
(``TABLES``: the first words of its header, the arch, and what each row's cells show), every
number of a cell must equal, to half a unit of its last written digit, the value the CSV gives
for it, in the order written (units such as M, G, x, % are the table's; the expected values are
in them), and no number may be left over; a text (a verdict) must appear in its cell. A row of
the report that ``TABLES`` does not know, or the reverse, fails: a changed table changes here.

The report's other tables are not findings output and are not checked here: the claims table
(prose over the sections), section 11's rule regret (``experiments.tuning.rulefit``) and model
shapes (``experiments.speed.shapes``), section 12's GB10 scan and pairs
(``explorations.gb10_pipeline``), and section 13's speed table (the backward speed runs).
"""
from __future__ import annotations

import math
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from spec.records import read_dicts
from tests.conftest import ROOT

REPORT = ROOT / "REPORT.md"


@dataclass(frozen=True)
class Within:
    """A number written once for several values: it must lie in [lo, hi] (to its digits)."""
    lo: float
    hi: float


class Findings:
    """The CSVs of one arch's ``--out`` directory, row by row."""

    def __init__(self, where: Path):
        self.where = where
        self._files: dict[str, list[dict]] = {}

    def rows(self, name: str, **match) -> list[dict]:
        if name not in self._files:
            self._files[name] = read_dicts(self.where / f"{name}.csv")
        return [r for r in self._files[name] if all(r[k] == str(v) for k, v in match.items())]

    def row(self, name: str, **match) -> dict:
        got = self.rows(name, **match)
        assert len(got) == 1, f"{len(got)} rows of {name}.csv match {match}"
        return got[0]

    def __call__(self, name: str, column: str, scale: float = 1.0, **match) -> float:
        return float(self.row(name, **match)[column]) / scale


def _num(text: str) -> float | str:
    try:
        return float(text)
    except ValueError:
        return text


Cells = list    # one entry per cell after the key cells: its numbers and texts, or None (unchecked)


@dataclass(frozen=True)
class Table:
    header: str                    # the header line starts with "| " + this
    arch: str
    expected: Callable[[Findings], dict[str, Cells]]
    key: int = 1                   # how many leading cells name the row (joined by " | ")


# --- what each findings table shows ---------------------------------------------------------------

def _paper(f: Findings) -> dict[str, Cells]:
    out = {}
    for r in f.rows("sP_paper_pairs"):
        case = r["case"]
        err = lambda order: f("sP_paper_cases", "sim_error_pct", case=case, order=order)  # noqa: E731
        out[case] = [
            [float(r["paper_misses_change_pct"]), float(r["paper_tflops_change_pct"])],
            [float(r["gb10_sim_change_pct"]), err("linear"), err("sawtooth")],
            [float(r["h100_misses_change_pct"]), r["h100_verdict_on_misses"],
             float(r["h100_time_change_pct"]),
             "ranges overlap" if r["h100_time_ranges_overlap"] == "True" else "ranges apart"]]
    return out


def _model_error(f: Findings) -> dict[str, Cells]:
    def one(mode):
        l1 = f.row("s2_model_error", mode=mode, counter="L1 sectors (loads)")
        l2 = f.row("s2_model_error", mode=mode, counter="L2 sectors (lts__t_sectors)")
        return [[float(l1["mape_pct"]), float(l1["max_abs_err_pct"])], [float(l2["mape_pct"])],
                [float(l2["measured_over_model_min"]), float(l2["measured_over_model_max"])]]
    return {"non-causal": one("non-causal"), "causal": one("causal")}


def _divergence(f: Findings) -> dict[str, Cells]:
    return {order: [[f("s3_divergence", "misses_over_cold", order=order, kv_over_l2=k)]
                    for k in ("0.5", "1.0", "2.0")] for order in ("linear", "sawtooth")}


_ACTIVE = (1, 2, 4, 8, 16, 32, 64, 132)


def _active(f: Findings) -> dict[str, Cells]:
    hit = lambda order, n, col="hit_rate_pct": f("s4_hit_vs_active", col, order=order, ctas=n)  # noqa: E731
    out = {"1 − 1/N": [[hit("linear", n, "one_minus_1_over_n_pct")] for n in _ACTIVE]}
    out |= {o: [[hit(o, n)] for n in _ACTIVE] for o in ("linear", "sawtooth")}
    return out


_S5 = {"cuTile Static (132 CTAs), non-causal, B=8": "cutile static132 64x64 B=8 non-causal",
       "cuTile Tile-based (X=2), non-causal, B=8": "cutile tile2 64x64 B=8 non-causal",
       "cuTile Static, causal, B=8": "cutile static132 64x64 B=8 causal",
       "cuTile Tile-based, causal, B=8": "cutile tile2 64x64 B=8 causal",
       "CUDA 80x80 (132), B=1": "cuda static132 80x80 B=1 non-causal",
       "CUDA B=2": "cuda static132 80x80 B=2 non-causal",
       "CUDA B=4": "cuda static132 80x80 B=4 non-causal",
       "CUDA B=8": "cuda static132 80x80 B=8 non-causal"}


def _sawtooth(f: Findings) -> dict[str, Cells]:
    out = {}
    for label, config in _S5.items():
        r = {k: _num(v) for k, v in f.row("s5_sawtooth_vs_linear", config=config).items()}
        out[label] = [[r["misses_linear"] / 1e6, r["misses_linear_lo"] / 1e6,
                       r["misses_linear_hi"] / 1e6],
                      [r["misses_sawtooth"] / 1e6, r["misses_sawtooth_lo"] / 1e6,
                       r["misses_sawtooth_hi"] / 1e6],
                      [r["misses_change_pct"]], [r["misses_verdict"]],
                      [r["time_change_pct"]], [r["time_verdict"]]]
    return out


def _drift(f: Findings) -> dict[str, Cells]:
    def pair(rows):
        rows = [f.row("s6_drift", order=o, B=b, causal=c, ctas=n) for o, b, c, n in rows]
        col = lambda name, k=1.0: [float(r[name]) * k for r in rows]  # noqa: E731
        return [col("spread_after_one_item"), col("spread_max"), col("max_spread_kv_mib"),
                col("max_spread_over_l2", 100)]
    orders = lambda b, c: pair([("linear", b, c, 132), ("sawtooth", b, c, 132)])  # noqa: E731
    return {"132 CTAs, B=1, linear / sawtooth": orders(1, False),
            "132 CTAs, B=4, linear / sawtooth": orders(4, False),
            "132 CTAs, B=1 causal, linear / sawtooth": orders(1, True),
            "2 / 4 CTAs, linear": pair([("linear", 1, False, 2), ("linear", 1, False, 4)]),
            "8 / 16 CTAs, linear": pair([("linear", 1, False, 8), ("linear", 1, False, 16)])}


def _longseq(f: Findings) -> dict[str, Cells]:
    out = {}
    for r in f.rows("s8_longseq_best"):
        n = {k: float(r[k]) for k in ("best_tflops", "best_over_cudnn", "best_over_flash",
                                      "saw_tflops", "lin_tflops", "saw_vs_lin_time_pct")}
        out[f"{r['D']} | {'yes' if r['causal'] == 'True' else 'no'}"] = [
            None, [n["best_tflops"]], [n["best_over_cudnn"]], [n["best_over_flash"]],
            [n["saw_tflops"]], [n["lin_tflops"]], [r["saw_vs_lin"], n["saw_vs_lin_time_pct"]]]
    return out


def _dram(f: Findings) -> dict[str, Cells]:
    def one(name, config):
        lin = f.row(name, config=config, order="linear")
        saw = f.row(name, config=config, order="sawtooth")
        return [[float(lin["dram_GB"])], [float(lin["dram_peak_pct"])], [float(saw["dram_GB"])],
                [float(saw["saving_bound_pct"])], [float(saw["time_change_pct"])]]
    s9 = "s9_dram_bound_sawtooth"
    cuda = [c for c in {r["config"] for r in f.rows(s9)} if c.startswith("cuda ")]
    spans = lambda col, order: [f(s9, col, config=c, order=order) for c in cuda]  # noqa: E731
    rng = lambda vals: [min(vals), max(vals)]  # noqa: E731
    long_s = "s9_dram_bound"
    return {
        "cuTile Static 64x64, non-causal (sawtooth study)":
            one(s9, "cutile static132 64x64 B=8 non-causal"),
        "cuTile Static 64x64, causal": one(s9, "cutile static132 64x64 B=8 causal"),
        "cuTile Tile-based 64x64, causal": one(s9, "cutile tile2 64x64 B=8 causal"),
        "CUDA 80x80, B = 1 .. 8": [rng(spans("dram_GB", "linear")),
                                   rng(spans("dram_peak_pct", "linear")),
                                   rng(spans("dram_GB", "sawtooth")),
                                   [max(spans("saving_bound_pct", "sawtooth"))],
                                   rng(spans("time_change_pct", "sawtooth"))],
        "cuTile D=128 S=128K grid (long S)": one(long_s, "cutile grid 128x128 B=1 non-causal"),
        "cuTile D=128 S=128K static132": one(long_s, "cutile static132 128x128 B=1 non-causal")}


def _misscost(f: Findings) -> dict[str, Cells]:
    out = {}
    for causal, mask in ((False, "non-causal"), (True, "causal")):
        for S, s in ((102400, "100K"), (262144, "256K")):
            off = f.row("s10_misscost", causal=causal, S=S, stages=1, level="off")
            verdicts = [r["verdict"] for r in f.rows("s10_misscost", causal=causal, S=S,
                                                     stages=1)]
            most = max(set(verdicts), key=verdicts.count)
            n = verdicts.count(most)
            levels = [f"{most.removeprefix('sawtooth ')} x{n}", float(n)]
            if n < len(verdicts):       # the one level left out is the highest, with no verdict
                assert f.row("s10_misscost", causal=causal, S=S, stages=1,
                             level="high")["verdict"] == "no difference"
                levels.append("none at the highest")
            out[f"1 | {s} {mask}"] = [[float(off["misses_change_pct"])],
                                      [float(off[f"r{k}_pct"]) for k in (1, 2, 3)],
                                      levels, [float(off["predicted_pct"])]]
    deep = [r for r in f.rows("s10_misscost") if r["stages"] in ("2", "3")]
    runs = [float(r[f"r{k}_pct"]) for r in deep if r["level"] == "off" for k in (1, 2, 3)]
    verdicts = [r["verdict"] for r in deep]
    change = [float(r["misses_change_pct"]) for r in deep]
    assert {float(r["predicted_pct"]) for r in deep} == {0.0}
    out["2, 3 | all eight"] = [[min(change), max(change)], [min(runs), max(runs)],
                               [verdicts.count("sawtooth slower"), len(deep),
                                verdicts.count("no difference")], [0.0]]
    return out


def _backward(f: Findings) -> dict[str, Cells]:
    def one(pass_, causal, tiles, scale):
        r = {k: float(v) for k, v in f.row("sB_backward", pass_=pass_, causal=causal,
                                           tiles=tiles).items()
             if k not in ("pass_", "causal", "tiles", "ranges_apart", "time_apart")}
        return [[r["meas_linear"] / scale, r["meas_sawtooth"] / scale, r["meas_ratio"],
                 r["pred_ratio"]],
                [r["dram_linear_gb"], r["dram_sawtooth_gb"]],
                [r["ms_linear"], r["ms_sawtooth"], (r["time_ratio"] - 1) * 100]]
    return {"dK/dV non-causal, 64x64": one("dkdv", False, "m64n64", 1e9),
            "dQ non-causal, 64x128": one("dq", False, "m64n128", 1e6),
            "dQ causal, 64x128 (32 B of shared memory apart)": one("dq", True, "m64n128", 1e6)}


def _convoy(f: Findings) -> dict[str, Cells]:
    out = {}
    for version, half in (("pipeline-v1", "fit"), ("pipeline-v1", "judged"),
                          ("pipeline-v2", "judged")):
        r = f.row("sV_convoy_summary", version=version, half=half)
        out[f"{version}, {half} half"] = [[float(r["cases"])], [float(r["rel_rms_pct"])],
                                          [float(r["within_25pct"])], [float(r["min_occasions"])],
                                          [float(r["max_spread_pct"])]]
    return out


def _depth(f: Findings) -> dict[str, Cells]:
    out = {}
    for order in ("linear", "sawtooth"):
        for ctas in (96, 48):
            r = f.row("sV_convoy_depth", variant=f"cuda.{order}.static{ctas}.m80n80d64",
                      causal=True, S_q=245760)
            v2 = [float(r["pipeline-v2_ratio"])]
            v2 += ([float(r["pipeline-v2_size_err_pct"])] if r["pipeline-v2_direction_ok"] == "True"
                   else ["wrong direction"])
            kv = "K+V " if (order, ctas) == ("linear", 96) else ""
            label = f"{order}, {ctas} CTAs, {kv}1.0x (judged)"
            out[label] = [[float(r["measured_ratio"])], [float(r["pipeline-v1_ratio"])], v2]
    return out


def _dqpair(f: Findings) -> dict[str, Cells]:
    def cell(causal, S, order):
        r = f.row("sB_dqpair", causal=causal, S_q=S, order=order)
        c = [float(r["time_ratio_lo"]), float(r["time_ratio_hi"])]
        if not causal:
            occ = [float(r[f"occ{k}_miss_ratio"]) for k in (1, 2, 3)]
            c.append(Within(min(occ), max(occ)))
            if order == "sawtooth":
                c.append(float(r["pred_miss_ratio"]))
        return c
    return {f"{order}, {mask}": [cell(causal, 327680, order), cell(causal, 122880, order)]
            for causal, mask in ((False, "non-causal"), (True, "causal"))
            for order in ("sawtooth", "reverse")}


_REVERSE = {"sawtooth, non-causal": "sawtooth, non-causal",
            "reverse, non-causal": "reverse control, non-causal"}


TABLES = [
    Table("case | paper (GB10)", "h100", _paper),
    Table("H100 | MAPE vs L1 sectors", "h100", _model_error),
    Table("K+V / L2 |", "h100", _divergence),
    Table("N (CTAs) |", "h100", _active),
    Table("configuration (H100) |", "h100", _sawtooth),
    Table("launch | spread after one work item", "h100", _drift),
    Table("D | causal | best build", "h100", _longseq, key=2),
    Table("kernel (H100) | linear DRAM reads", "h100", _dram),
    Table("depth | S, mask", "h100", _misscost, key=2),
    Table("pass (twins with equal resources)", "h100", _backward),
    Table("`python -m analysis.findings --arch h200 --no-sim`, Vb", "h200", _convoy),
    Table("depth 2 -> 3, causal (findings Vc)", "h200", _depth),
    Table("time against linear, three H200s", "h200",
          lambda f: {_REVERSE.get(k, k): v for k, v in _dqpair(f).items()}),
]


# --- reading the report ---------------------------------------------------------------------------

NUMBER = re.compile(r"(?<![A-Za-wyz_\d])(?P<sign>[-−+]?)(?P<digits>\d+(?:\.\d+)?)")


def numbers(cell: str) -> list[tuple[float, float]]:
    """(value, half a unit of the last digit) of each number of a cell, units left aside: a
    number glued to a word ('static132', 'm64n128') is not one, 'x4' is; '0.935-0.937' is a
    range (a hyphen after a digit is no sign)."""
    out = []
    for m in NUMBER.finditer(cell):
        digits = m["digits"]
        decimals = len(digits.split(".")[1]) if "." in digits else 0
        value = float(digits) * (-1.0 if m["sign"] in ("-", "−") and m["sign"] else 1.0)
        out.append((value, 0.5 * 10 ** -decimals))
    return out


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def report_table(header: str) -> list[list[str]]:
    """The body rows (cells) of the REPORT table whose header line starts with ``header``."""
    lines = REPORT.read_text().splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("| " + header)]
    assert len(starts) == 1, f"{len(starts)} REPORT tables have a header starting {header!r}"
    rows = []
    for line in lines[starts[0] + 2:]:
        if not line.startswith("|"):
            break
        rows.append(_cells(line))
    return rows


def check_cell(where: str, cell: str, want: list) -> None:
    shown = numbers(cell)
    for w in want:
        if isinstance(w, str):
            assert w in cell, f"{where}: {w!r} is not in {cell!r}"
            continue
        assert shown, f"{where}: {w} has no number left in {cell!r}"
        value, tol = shown.pop(0)
        tol *= 1 + 1e-9
        if isinstance(w, Within):
            assert w.lo - tol <= value <= w.hi + tol, (
                f"{where}: {value} is outside findings' {w.lo:.6g}..{w.hi:.6g} ({cell!r})")
        else:
            assert math.isclose(value, w, abs_tol=tol), (
                f"{where}: findings print {w:.6g}, the REPORT says {value} ({cell!r})")
    assert not shown, f"{where}: numbers no findings column accounts for: {shown} in {cell!r}"


# --- the tests ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def findings(tmp_path_factory) -> dict[str, Findings]:
    out = tmp_path_factory.mktemp("findings")
    got = {}
    for arch in sorted({t.arch for t in TABLES}):
        r = subprocess.run([sys.executable, "-m", "analysis.findings", "--arch", arch, "--no-sim",
                            "--no-cache", "--out", str(out)], cwd=ROOT, capture_output=True,
                           text=True, timeout=900)
        assert r.returncode == 0, r.stderr[-3000:]
        got[arch] = Findings(out / arch)
    return got


@pytest.mark.parametrize("table", TABLES, ids=[t.header.split(" |")[0].strip("`") for t in TABLES])
def test_report_table_holds_the_findings_numbers(table, findings):
    expected = table.expected(findings[table.arch])
    rows = report_table(table.header)
    labels = [" | ".join(c.strip("*") for c in row[:table.key]) for row in rows]
    assert sorted(labels) == sorted(expected), (
        f"the REPORT table {table.header!r} has rows {labels}; this test knows {list(expected)}")
    for label, row in zip(labels, rows):
        want = expected[label]
        assert len(row) - table.key == len(want), f"{label}: {len(row)} cells"
        for k, (cell, w) in enumerate(zip(row[table.key:], want)):
            if w is not None:
                check_cell(f"{table.header!r}, row {label!r}, cell {k + table.key + 1}", cell, w)


def test_cell_numbers_read_signs_ranges_and_words():
    assert numbers("−75.91% (static132, x4)") == [(-75.91, 0.005), (4.0, 0.5)]
    assert numbers("0.935-0.937x (size -63%)") == [(0.935, 0.0005), (0.937, 0.0005), (-63, 0.5)]
    assert numbers("24598 M (23596..27183), m64n128") == [(24598, 0.5), (23596, 0.5), (27183, 0.5)]
    check_cell("t", "−2.65 .. +1.13%", [-2.6475, 1.1319])
    with pytest.raises(AssertionError, match="no findings column"):
        check_cell("t", "1.0 and 2.0", [1.0])
    with pytest.raises(AssertionError, match="findings print"):
        check_cell("t", "1.1", [1.0])
    check_cell("t", "misses 0.69x", [Within(0.6863, 0.6872)])
