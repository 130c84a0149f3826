"""CPU checks of the raw CUDA family: the C++ enums equal the Python ones, the host-side geometry
mirrors the kernel's, bad variants are refused with a reason, and (with nvcc, forced in CI) every
instantiation compiles for sm_90 with its registers and spills read off ``-Xptxas -v``; the K/V
pipeline-depth builds (``flash_fwd_staged``) compile without spills and every linear / sawtooth
pair of one depth has identical resources."""
from __future__ import annotations

import os
import re
import subprocess
import tempfile
from pathlib import Path

import pytest

from cuda_baseline.build.source import (
    HEADER,
    SM90_CTAS_PER_SM,
    TESTED_TILES,
    TILE_EDGES,
    CompileError,
    Instance,
    ci_instances,
    compile_nvcc,
    compile_options,
    mrep,
    nvcc_path,
    parse_ptxas,
    smem_bytes,
    stage_instances,
)
from cuda_baseline.host.backend import check_variant, instance_for
from spec import get_arch
from spec.family import UnsupportedVariant, published_limits
from spec.orders import OrderKind, ScanOrder
from spec.problem import DType, Problem, Tiles
from spec.schedules import CtaSchedule, ScheduleKind, WorkOrder
from spec.variant import DEFAULT_STAGES, STAGE_RANGE, Backend, Variant, parse_stages
from tests.conftest import require_toolchain


def _header_enums() -> dict[str, list[tuple[str, int]]]:
    text = HEADER.read_text()
    out = {}
    for name, body in re.findall(r"enum class (\w+)\s*:\s*int\s*\{([^}]*)\}", text):
        out[name] = [(m[0], int(m[1])) for m in re.findall(r"(\w+)\s*=\s*(\d+)", body)]
    return out


def test_cpp_enums_equal_python_enums():
    enums = _header_enums()
    for py in (OrderKind, ScheduleKind, WorkOrder):
        assert enums[py.__name__] == [(m.name, int(m.value)) for m in py], py.__name__
    # spec.DType is a string enum; the kernel numbers its members in declaration order
    assert enums["DType"] == [(m.name, i) for i, m in enumerate(DType)]


def test_instance_name_uses_the_enum_names():
    v = Variant(Backend.CUDA, ScanOrder.sawtooth(), CtaSchedule.persistent(132), Tiles(128, 64))
    inst = instance_for(v, Problem(B=1, H=2, S_q=100, D=64, causal=True))
    assert inst.name == ("flash_fwd<OrderKind::SAWTOOTH, ScheduleKind::PERSISTENT, "
                         "WorkOrder::Q_MAJOR, 128, 64, 64, true, DType::FP16, false>")
    # work order only distinguishes persistent schedules; grid is always built q-major
    g = Variant(Backend.CUDA, ScanOrder.linear(), CtaSchedule.grid(), Tiles(64, 64))
    assert "WorkOrder::Q_MAJOR" in instance_for(g, Problem(B=1, H=1, S_q=64, D=128)).name


def test_stage_count_in_the_variant_id_and_the_instance_name():
    pr = Problem(B=1, H=1, S_q=1024, D=64)
    base = Variant(Backend.CUDA, ScanOrder.linear(), CtaSchedule.persistent(96), Tiles(80, 80))
    one = Variant(Backend.CUDA, ScanOrder.linear(), CtaSchedule.persistent(96), Tiles(80, 80),
                  stages=1)
    assert base.id(pr) == "cuda.linear.static96.m80n80d64"          # committed ids unchanged
    assert one.id(pr) == "cuda.linear.static96.m80n80d64.st1"
    # the default spelled out is the default: equal variants, equal ids, equal instances
    two = Variant(Backend.CUDA, ScanOrder.linear(), CtaSchedule.persistent(96), Tiles(80, 80),
                  stages=DEFAULT_STAGES)
    assert two == base and two.id(pr) == base.id(pr) and two.stages is None
    assert instance_for(base, pr).name.startswith("flash_fwd<")
    assert instance_for(one, pr).name == (
        "flash_fwd_staged<OrderKind::LINEAR, ScheduleKind::PERSISTENT, WorkOrder::Q_MAJOR, 80, "
        "80, 64, false, DType::FP16, false, 1>")
    assert instance_for(one, pr, trace=True).stages == 1
    assert [parse_stages(x) for x in ("st1", "3", "", "st2", None)] == [1, 3, None, None, None]
    for bad in ("st0", "st5", "x1", "1.5"):
        with pytest.raises(ValueError, match="stage"):
            parse_stages(bad)
    for bad in (0, STAGE_RANGE[1] + 1, 1.0, True):
        with pytest.raises(ValueError, match="stages="):
            Variant(Backend.CUDA, ScanOrder.linear(), CtaSchedule.grid(), Tiles(64, 64),
                    stages=bad)
    with pytest.raises(ValueError, match="CUDA family only"):
        Variant(Backend.CUTILE, ScanOrder.linear(), CtaSchedule.grid(), Tiles(64, 64), stages=1)


def test_shared_memory_follows_the_stage_count():
    t = Tiles(80, 80)
    assert smem_bytes(t, 64) == (80 + 4 * 80) * 64 * 2                 # the double buffer
    assert [smem_bytes(t, 64, s) for s in (1, 2, 3)] == [30720, 51200, 71680]
    pr = Problem(B=1, H=1, S_q=1024, D=128)
    check_variant(Variant(Backend.CUDA, ScanOrder.linear(), CtaSchedule.grid(), Tiles(256, 128)),
                  pr, smem_limit=232448)                              # 2 stages fit, 3 do not
    deep = Variant(Backend.CUDA, ScanOrder.linear(), CtaSchedule.grid(), Tiles(256, 128),
                   stages=3)
    with pytest.raises(UnsupportedVariant, match=r"3 K \+ 3 V buffers.*fewer stages"):
        check_variant(deep, pr, smem_limit=232448)


def test_bad_variants_are_refused_with_a_reason():
    pr = Problem(B=1, H=1, S_q=1024, D=128)
    big = Variant(Backend.CUDA, ScanOrder.linear(), CtaSchedule.grid(), Tiles(256, 256))
    with pytest.raises(UnsupportedVariant, match=r"327680 B of shared memory.*232448 B"):
        check_variant(big, pr, smem_limit=232448)
    huge = Variant(Backend.CUDA, ScanOrder.linear(), CtaSchedule.grid(), Tiles(512, 64))
    with pytest.raises(UnsupportedVariant, match="TILE_M=512"):
        check_variant(huge, pr)
    cutile = Variant(Backend.CUTILE, ScanOrder.linear(), CtaSchedule.grid(), Tiles(64, 64))
    with pytest.raises(UnsupportedVariant, match="Backend.CUDA"):
        check_variant(cutile, pr)
    for t in TESTED_TILES:   # every tested tile fits an H100 (227 KB per block)
        check_variant(Variant(Backend.CUDA, ScanOrder.linear(), CtaSchedule.grid(), t), pr,
                      smem_limit=232448)


def test_parse_ptxas_reads_registers_and_spills():
    inst = Instance(OrderKind.REVERSE, ScheduleKind.TILE_X, WorkOrder.Q_MAJOR, Tiles(80, 80), 64,
                    True, DType.BF16, True)
    log = ("ptxas info    : Compiling entry function '_Z9flash_fwdIL9OrderKind2EL12ScheduleKind1E"
           "L9WorkOrder0ELi80ELi80ELi64ELb1EL5DType1ELb1EEvPKtS1_S1_Ptxxxxxxxxxxxxiiiiiiiiifv' "
           "for 'sm_90'\n"
           "ptxas info    : Function properties for _Z9flash_fwd...\n"
           "    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads\n"
           "ptxas info    : Used 201 registers, used 1 barriers, 8 bytes cumulative stack size\n")
    r = parse_ptxas(log)[inst.name]
    assert (r.registers, r.spill_store_bytes, r.spill_load_bytes, r.stack_bytes) == (201, 4, 12, 8)
    assert r.spills
    staged = Instance(OrderKind.SAWTOOTH, ScheduleKind.PERSISTENT, WorkOrder.Q_MAJOR,
                      Tiles(80, 80), 64, True, DType.FP16, False, 1)
    log = ("ptxas info    : Compiling entry function '_Z16flash_fwd_stagedIL9OrderKind1EL12Schedule"
           "Kind2EL9WorkOrder0ELi80ELi80ELi64ELb1EL5DType0ELb0ELi1EEvPKtS5_S5_Ptxxxxxxxxxxxxxiiiii"
           "iiiifPiPyi' for 'sm_90'\n"
           "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
           "ptxas info    : Used 162 registers, used 1 barriers\n")
    assert parse_ptxas(log)[staged.name].registers == 162


def _nvcc_or_skip() -> str:
    path = nvcc_path()
    require_toolchain(path is not None, "nvcc (CUDA 13.0)")
    return path


@pytest.mark.compile
def test_host_geometry_mirrors_the_kernel():
    """threads and shared memory the backend launches with == FwdShape in the header (static
    asserts evaluated by nvcc, no kernel compiled)."""
    nvcc = _nvcc_or_skip()
    checks = []
    for m in TILE_EDGES:
        for n in TILE_EDGES:
            for d in (64, 128):
                t = Tiles(m, n)
                checks.append(f"static_assert(FwdShape<{m}, {n}, {d}>::THREADS == "
                              f"{32 * (m // (16 * mrep(t, d)))}, \"threads {m}x{n}d{d}\");")
                checks.append(f"static_assert(FwdShape<{m}, {n}, {d}>::SMEM_BYTES == "
                              f"{smem_bytes(t, d)}, \"smem {m}x{n}d{d}\");")
                for st in range(STAGE_RANGE[0], STAGE_RANGE[1] + 1):
                    checks.append(f"static_assert(fwd_smem_bytes<{m}, {n}, {d}, {st}>() == "
                                  f"{smem_bytes(t, d, st)}, \"smem {m}x{n}d{d} st{st}\");")
    checks.append(f"static_assert(DEFAULT_STAGES == {DEFAULT_STAGES} && MAX_STAGES == "
                  f"{STAGE_RANGE[1]}, \"stage range\");")
    with tempfile.TemporaryDirectory() as tmp:
        cu = Path(tmp) / "geom.cu"
        cu.write_text('#include "flash_fwd.cuh"\n' + "\n".join(checks) + "\n")
        r = subprocess.run([nvcc, "-arch=sm_90", "-cubin", *compile_options(), "-o",
                            str(Path(tmp) / "geom.cubin"), str(cu)], capture_output=True,
                           text=True)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.compile
def test_compile_error_names_the_instantiation():
    _nvcc_or_skip()
    bad = Instance(OrderKind.LINEAR, ScheduleKind.GRID, WorkOrder.Q_MAJOR, Tiles(64, 64), 96,
                   False, DType.FP16)
    with pytest.raises(CompileError, match="head dim 64 or 128") as e:
        compile_nvcc([bad], jobs=1)
    assert bad.name in str(e.value)          # the instantiation that failed, by its full name


@pytest.mark.compile
@pytest.mark.slow
def test_every_instantiation_compiles_for_sm90():
    """Every order x schedule x causal x D x tested tile (fp16, plain and trace builds) and every
    kernel body (all tile edges x D x causal x dtype) compiles, none spills, and all builds of one
    shape have the same occupancy on an H100. Prints the resource table (pytest -s)."""
    _nvcc_or_skip()
    insts = ci_instances()
    res = compile_nvcc(insts, jobs=os.cpu_count() or 2)
    missing = [i.name for i in insts if i.name not in res]
    assert not missing, f"no ptxas report for {missing[:3]}"
    for i in insts:
        r = res[i.name]
        print(f"{r.registers:>3} reg {r.spill_store_bytes:>3}/{r.spill_load_bytes:<3} spill "
              f"{i.smem_bytes:>6} smem  {i.name}")
    spilling = [f"{i.name}: {res[i.name]}" for i in insts if res[i.name].spills]
    assert not spilling, "spilling builds:\n" + "\n".join(spilling)
    # Every order x schedule x causal build of one shape gets the same CTAs per SM on an H100,
    # so comparisons between orders and schedules never hide an occupancy change.
    h100 = published_limits(get_arch("h100"))
    groups: dict = {}
    for i in insts:
        occ = h100.ctas_per_sm(i.threads, res[i.name].registers, i.smem_bytes)
        groups.setdefault((i.tiles, i.D, i.dtype, i.trace), {}).setdefault(occ, []).append(i.name)
    mixed = {k: {o: len(n) for o, n in v.items()} for k, v in groups.items() if len(v) > 1}
    assert not mixed, f"shapes whose builds differ in occupancy (CTAs/SM: count): {mixed}"
    table = {(t, d): next(iter(v)) for (t, d, dt, tr), v in groups.items()
             if t in TESTED_TILES and dt == DType.FP16 and not tr}
    assert table == SM90_CTAS_PER_SM, f"SM90_CTAS_PER_SM is stale; ptxas says {table}"


@pytest.mark.slow
@pytest.mark.compile
def test_stage_builds_compile_with_identical_pair_resources():
    """Every pipeline depth other than the default (``stage_instances``: the miss-cost study's
    80 x 80 persistent builds, plain and trace, and grid / tile-X kernels) compiles for sm_90
    without spilling; each linear build and its sawtooth twin (same depth, D, mask, trace) has
    the same shared memory and the same CTAs per SM on an H100: the resources a locality
    comparison depends on (spec.family.Prepared). Registers may differ by the few the sawtooth's
    direction flip costs (the default builds differ the same way); the table prints them."""
    _nvcc_or_skip()
    insts = stage_instances()
    res = compile_nvcc(insts, jobs=os.cpu_count() or 2)
    missing = [i.name for i in insts if i.name not in res]
    assert not missing, f"no ptxas report for {missing[:3]}"
    spilling = [f"{i.name}: {res[i.name]}" for i in insts if res[i.name].spills]
    assert not spilling, "spilling builds:\n" + "\n".join(spilling)
    h100 = published_limits(get_arch("h100"))
    by_twin: dict = {}
    for i in insts:
        if i.order in (OrderKind.LINEAR, OrderKind.SAWTOOTH) \
                and i.schedule == ScheduleKind.PERSISTENT:
            r = res[i.name]
            print(f"{r.registers:>3} reg {i.smem_bytes:>6} smem  {i.name}")
            key = (i.stages, i.tiles, i.D, i.causal, i.trace)
            by_twin.setdefault(key, {})[i.order] = (
                i.smem_bytes, h100.ctas_per_sm(i.threads, r.registers, i.smem_bytes),
                r.stack_bytes)
    depths = STAGE_RANGE[1] - STAGE_RANGE[0]            # every depth but the default
    assert len(by_twin) == depths * 2 * 2 * 2 and all(len(v) == 2 for v in by_twin.values())
    unequal = {k: v for k, v in by_twin.items() if len(set(v.values())) != 1}
    assert not unequal, ("linear / sawtooth pairs with different (smem, CTAs per SM, stack): "
                         f"{unequal}")
