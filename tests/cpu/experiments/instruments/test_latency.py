"""The pointer-chase latency benchmark on the CPU: the chain (one cycle over every line, stride
kept, seeded), the plateau estimates on hand-made curves, the dry-run plan, every bad input
(exit 2, one line, nothing written) and, with nvcc, the kernel compiling for sm_90 unspilled."""
from __future__ import annotations

import numpy as np
import pytest

from experiments.instruments import latency
from experiments.instruments.latency import (
    CHASE_SOURCE,
    MiB,
    estimates,
    main,
    parse_size,
    plan,
    region,
    successor_offsets,
    visit_order,
)
from spec import get_arch
from tests.conftest import nvcc_sm90

H100 = get_arch("h100")
L2 = H100.l2_bytes


@pytest.mark.parametrize("lines,stride", [(2, 128), (7, 128), (1000, 256), (4096, 128)])
def test_chain_is_one_cycle_over_every_line(lines, stride):
    order = visit_order(lines, seed=3)
    nxt = successor_offsets(order, stride)
    assert order[0] == 0 and sorted(order.tolist()) == list(range(lines))
    assert np.all(nxt % stride == 0) and np.all((nxt >= 0) & (nxt < lines * stride))
    seen, off = [], 0
    for _ in range(lines):                      # walk the chain as the kernel does
        seen.append(off // stride)
        off = int(nxt[off // stride])
    assert off == 0                             # back at the start after exactly `lines` loads
    assert seen == order.tolist()               # in the host's order, every line once


def test_chain_is_seeded():
    a, b, c = visit_order(5000, 1), visit_order(5000, 1), visit_order(5000, 2)
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    assert np.mean(np.abs(np.diff(a)) == 1) < 0.01        # random, not sequential neighbours


def test_sizes_parse():
    assert parse_size("1M") == MiB and parse_size("48MiB") == 48 * MiB
    assert parse_size("2g") == 2 * 2**30 and parse_size("512K") == 512 * 1024
    assert parse_size("4096") == 4096 and parse_size("4096B") == 4096
    for bad in ("0", "-1M", "1MB", "abc", "", "1.5M"):
        with pytest.raises(ValueError, match="not a positive size"):
            parse_size(bad)


def test_regions_and_estimates_on_hand_made_curves():
    assert [region(f, L2) for f in (MiB, L2 // 4, L2, 4 * L2, 512 * MiB, 2**31)] == \
        ["l2", "l2", "transition", "dram", "dram", "dram+tlb"]
    curve = {MiB: 250.0, 4 * MiB: 260.0, 8 * MiB: 300.0,            # l2: median 260
             32 * MiB: 400.0, 64 * MiB: 550.0,                       # transition: ignored
             256 * MiB: 600.0, 512 * MiB: 640.0,                     # dram: median 620
             2**31: 900.0}                                           # dram+tlb: ignored
    assert estimates(curve, L2) == {"l2_hit_ns": 260.0, "dram_ns": 620.0}
    assert estimates({32 * MiB: 400.0}, L2) == {"l2_hit_ns": None, "dram_ns": None}


def test_plan_warms_whole_cycle_up_to_twice_the_l2():
    pts = plan([MiB, 64 * MiB, 2**31], 128, 1000, L2)
    assert [p.lines for p in pts] == [MiB // 128, 64 * MiB // 128, 2**31 // 128]
    assert [p.warm for p in pts] == [MiB // 128, 64 * MiB // 128, 2 * L2 // 128]
    assert all(p.loads == 1000 for p in pts)


def test_dry_run_prints_the_plan(capsys, tmp_path):
    assert main(["--arch", "h100", "--dry-run", "--sizes", "1M,256M,2G", "--loads", "1000",
                 "--repeats", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "L2 50 MiB" in out[0] and "2 timed passes of 1000 loads" in out[0]
    rows = [line.split() for line in out[2:5]]
    assert [r[-1] for r in rows] == ["l2", "dram", "dram+tlb"]
    assert "s of chasing" in out[-1]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args,words", [
    (["--arch", "nope", "--out", "NEW"], "unknown arch"),
    (["--arch", "h100", "--sizes", "1M,0", "--out", "NEW"], "not a positive size"),
    (["--arch", "h100", "--sizes", "1M,-4M", "--out", "NEW"], "not a positive size"),
    (["--arch", "h100", "--sizes", "1000", "--out", "NEW"], "multiple of --stride"),
    (["--arch", "h100", "--stride", "100", "--out", "NEW"], "--stride 100"),
    (["--arch", "h100", "--loads", "0", "--out", "NEW"], "--loads"),
    (["--arch", "h100", "--dry-run", "--out", "EXISTS"], "already exists"),
    (["--arch", "h100", "--out", "EXISTS"], "already exists"),
    (["--arch", "h100"], "--out DIR is required"),
    (["--arch", "h100", "--out", "NEW"], "no CUDA GPU"),
])
def test_bad_input_exits_2_with_one_line(args, words, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(latency, "detect", lambda: None)      # as on a machine without a GPU
    (tmp_path / "EXISTS").mkdir()
    (tmp_path / "EXISTS" / "keep").write_text("old")
    args = [str(tmp_path / a) if a in ("EXISTS", "NEW") else a for a in args]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and words in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["EXISTS"]          # nothing written
    assert (tmp_path / "EXISTS" / "keep").read_text() == "old"


def test_device_with_another_l2_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(latency, "detect", lambda: get_arch("h200"))
    assert main(["--arch", "h100", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--arch of this device" in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.compile
def test_chase_kernel_compiles_for_sm90():
    rc, log = nvcc_sm90(CHASE_SOURCE)
    _, ptx = nvcc_sm90(CHASE_SOURCE, ptx=True)
    assert rc == 0, log
    assert "0 bytes spill stores" in log
    assert "ld.global.cg.u64" in ptx and "%globaltimer" in ptx, ptx
