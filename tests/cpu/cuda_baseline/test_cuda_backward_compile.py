"""CPU checks of the CUDA twin's backward: instantiation names and the host-side plan (work items,
heads per CTA, the refusals, the trace build's name), and (with nvcc, forced in CI) every backward
build, the trace builds the GPU trace test launches and the training forward (``flash_fwd_lse``)
compile for sm_90; the linear and sawtooth grid builds (the default is
linear grid) and the training forward spill nothing, the others at most 128 B, and the training
forward holds as many CTAs per SM as the inference build it extends (the log-sum-exp costs the
inference path nothing: it is another entry point)."""
from __future__ import annotations

import pytest

from cuda_baseline.build.bwd_source import (
    BWD_TILES,
    BwdInstance,
    BwdOption,
    bwd_names,
    bwd_smem_bytes,
    ci_bwd_instances,
    compile_bwd_nvcc,
    parse_bwd_options,
    parse_bwd_ptxas,
)
from cuda_baseline.build.source import (
    SM90_CTAS_PER_SM,
    TESTED_TILES,
    Instance,
    ci_instances,
    compile_nvcc,
    nvcc_path,
    parse_ptxas,
)
from spec import get_arch
from spec.family import UnsupportedVariant, published_limits
from spec.orders import OrderKind, ScanOrder
from spec.problem import DType, Problem, Tiles
from spec.schedules import CtaSchedule, ScheduleKind, WorkOrder
from tests.conftest import require_toolchain


def test_backward_instance_names_use_the_enum_names():
    i = BwdInstance(OrderKind.SAWTOOTH, ScheduleKind.PERSISTENT, Tiles(64, 128), 128, True,
                    DType.BF16)
    assert i.name == ("flash_bwd_dkdv<OrderKind::SAWTOOTH, ScheduleKind::PERSISTENT, 64, 128, "
                      "128, true, DType::BF16>")
    assert i.threads == 256
    assert bwd_names([i])[1:] == ["flash_bwd_delta<128, DType::BF16>",
                                  "flash_bwd_dq<128, DType::BF16>"]
    with pytest.raises(ValueError, match="grid launch and the persistent"):
        BwdInstance(OrderKind.LINEAR, ScheduleKind.SNAKE, BWD_TILES, 64, False, DType.FP16)
    with pytest.raises(ValueError, match="TILE_M a multiple of 64"):
        BwdInstance(OrderKind.LINEAR, ScheduleKind.GRID, Tiles(32, 128), 64, False, DType.FP16)
    # every build fits an H100's 227 KB per block
    assert bwd_smem_bytes(BWD_TILES, 128) <= 232448


def test_training_forward_name():
    i = Instance(OrderKind.LINEAR, ScheduleKind.GRID, WorkOrder.Q_MAJOR, Tiles(128, 64), 64,
                 True, DType.FP16, lse=True)
    assert i.name == ("flash_fwd_lse<OrderKind::LINEAR, ScheduleKind::GRID, WorkOrder::Q_MAJOR, "
                      "128, 64, 64, true, DType::FP16>")
    with pytest.raises(ValueError, match="default pipeline depth"):
        Instance(OrderKind.LINEAR, ScheduleKind.GRID, WorkOrder.Q_MAJOR, Tiles(128, 64), 64,
                 True, DType.FP16, stages=1, lse=True)


def test_plan_heads_per_cta_and_refusals():
    from cuda_baseline.host.training import heads_per_cta, plan
    # a long GQA problem keeps the whole group in one work item (no fp32 partials)
    big = Problem(B=1, H=32, H_kv=8, S_q=65536, D=128, dtype="bf16", causal=True)
    assert heads_per_cta(big, BWD_TILES, 132) == 4
    # multi-query at 4K: 33 K/V tiles, too few items: the group is split
    mqa = Problem(B=1, H=32, H_kv=1, S_q=4097, D=128, dtype="bf16", causal=True)
    hpc = heads_per_cta(mqa, BWD_TILES, 132)
    assert 32 % hpc == 0 and (32 // hpc) * 33 >= 264 and hpc > 1
    p = plan(mqa, ScanOrder.sawtooth(), CtaSchedule.persistent(132), 132)
    assert p.instance.schedule == ScheduleKind.PERSISTENT and p.ctas == 132
    assert p.n_work == p.n_chunks * 33 and p.n_chunks * p.heads_per_cta == 32
    g = plan(mqa, ScanOrder.linear(), None, 132)
    assert g.ctas == g.n_work and g.instance.schedule == ScheduleKind.GRID
    with pytest.raises(UnsupportedVariant, match="backward schedule"):
        plan(mqa, ScanOrder.linear(), CtaSchedule.longest_first(132), 132)


def test_causal_heads_per_cta_follows_the_makespan_model():
    from cuda_baseline.host.training import ITEM_OVERHEAD_STEPS, causal_makespan, heads_per_cta
    assert ITEM_OVERHEAD_STEPS == 2
    # 4 Q tiles, 2 K/V tiles (tile 1 sees Q tiles 2, 3), a group of 2 query heads
    pr = Problem(B=1, H=2, H_kv=1, S_q=256, D=128, dtype="bf16", causal=True)
    # whole group: items of 2*4+2 and 2*2+2 steps
    assert causal_makespan(pr, BWD_TILES, 2, 1) == 16
    assert causal_makespan(pr, BWD_TILES, 2, 4) == 10
    # one head per item: two of 4+2, then two of 2+2 steps
    assert causal_makespan(pr, BWD_TILES, 1, 2) == 10
    assert causal_makespan(pr, BWD_TILES, 1, 4) == 6
    assert causal_makespan(pr, BWD_TILES, 1, 1) == 20
    # one SM: the whole group (fewer overheads); four SMs: split, the tail is shorter
    assert heads_per_cta(pr, BWD_TILES, 1) == 2
    assert heads_per_cta(pr, BWD_TILES, 4) == 1
    # full attention keeps the items-per-SM rule
    full = Problem(B=1, H=2, H_kv=1, S_q=256, D=128, dtype="bf16")
    assert heads_per_cta(full, BWD_TILES, 1) == 2 and heads_per_cta(full, BWD_TILES, 4) == 1


def test_default_backward_tiles_rule():
    from cuda_baseline.build.bwd_source import BWD_TILES_D64
    from cuda_baseline.host.backend import default_variant
    from cuda_baseline.host.training import plan

    def tiles(p):
        return default_variant(p, None, training=True).backward
    # 128 keys per CTA always; 128 query rows per step at D = 64, 64 at D = 128
    for S, causal in ((64, False), (4097, True), (65536, True)):
        assert tiles(Problem(B=1, H=2, S_q=S, D=128, causal=causal)) == BWD_TILES
        assert tiles(Problem(B=1, H=2, S_q=S, D=64, causal=causal)) == BWD_TILES_D64
    assert default_variant(Problem(1, 2, 64, 64), None, training=True,
                           backward_tiles=(64, 64)).backward == Tiles(64, 64)
    assert BWD_TILES_D64 == Tiles(128, 128) and BWD_TILES == Tiles(64, 128)
    # the plan takes the rule's tiles when none are given, explicit tiles otherwise
    pr = Problem(B=32, H=12, S_q=256, D=64)
    assert plan(pr, ScanOrder.linear(), None, 132).instance.tiles == BWD_TILES_D64
    assert plan(pr, ScanOrder.linear(), None, 132, BWD_TILES).instance.tiles == BWD_TILES
    # a 128-row step needs one thread per LSE and Δ value of the Q tile: 8 warps at least
    with pytest.raises(UnsupportedVariant, match="TILE_N must be at least"):
        plan(pr, ScanOrder.linear(), None, 132, Tiles(128, 64))


def test_parse_backward_ptxas():
    log = ("ptxas info    : Compiling entry function '_Z14flash_bwd_dkdvIL9OrderKind1EL12Schedule"
           "Kind2ELi64ELi128ELi64ELb1EL5DType0ELi0EEvPKtS4_S4_S4_PKfS6_PfPvS8_xxxxxxxxxxxxiiiiii"
           "iiiii"
           "ff' for 'sm_90'\n"
           "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
           "ptxas info    : Used 209 registers, used 1 barriers\n"
           "ptxas info    : Compiling entry function '_Z12flash_bwd_dqILi128EL5DType1EEvPKfPtfx' "
           "for 'sm_90'\n"
           "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
           "ptxas info    : Used 17 registers, used 0 barriers\n")
    r = parse_bwd_ptxas(log)
    i = BwdInstance(OrderKind.SAWTOOTH, ScheduleKind.PERSISTENT, BWD_TILES, 64, True, DType.FP16)
    assert r[i.name].registers == 209 and not r[i.name].spills
    assert r["flash_bwd_dq<128, DType::BF16>"].registers == 17


def test_backward_build_options_name_parse_and_demangle():
    i = BwdInstance(OrderKind.LINEAR, ScheduleKind.GRID, BWD_TILES, 128, True, DType.BF16,
                    parse_bwd_options("onepart+dqv4"))
    assert i.options == BwdOption.ONE_PART | BwdOption.DQ_V4
    assert i.name.endswith("128, true, DType::BF16, 3>")
    # the default build's name carries no option argument (the template's default, 0)
    assert BwdInstance(OrderKind.LINEAR, ScheduleKind.GRID, BWD_TILES, 128, True,
                       DType.BF16).name.endswith("DType::BF16>")
    assert parse_bwd_options(None) == parse_bwd_options("") == BwdOption(0)
    assert parse_bwd_options("dqsq+onepart") == BwdOption.DQ_SQUARE | BwdOption.ONE_PART
    with pytest.raises(ValueError, match="backward option 'onepart2'"):
        parse_bwd_options("onepart2")
    log = ("ptxas info    : Compiling entry function '_Z14flash_bwd_dkdvIL9OrderKind0EL12Schedule"
           "Kind0ELi64ELi128ELi128ELb1EL5DType1ELi3EEvPKtS4_S4_S4_PKfS6_PfPvS8_xxxxxxxxxxxxiiiiii"
           "iiiiiff' for 'sm_90'\n"
           "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
           "ptxas info    : Used 255 registers, used 1 barriers\n")
    assert parse_bwd_ptxas(log)[i.name].registers == 255


def test_backward_trace_build_name_and_demangle():
    """The trace build is its own entry point, ``flash_bwd_dkdv_trace`` with the same template
    arguments, so every other build keeps its name; ptxas's report of it is read back to it."""
    plain = BwdInstance(OrderKind.SAWTOOTH, ScheduleKind.PERSISTENT, BWD_TILES, 64, True,
                        DType.FP16)
    tr = BwdInstance(OrderKind.SAWTOOTH, ScheduleKind.PERSISTENT, BWD_TILES, 64, True,
                     DType.FP16, trace=True)
    assert tr.name == "flash_bwd_dkdv_trace" + plain.name[len("flash_bwd_dkdv"):]
    assert plain.name.startswith("flash_bwd_dkdv<")
    log = ("ptxas info    : Compiling entry function '_Z20flash_bwd_dkdv_traceIL9OrderKind1EL12"
           "ScheduleKind2ELi64ELi128ELi64ELb1EL5DType0ELi0EEvPKtS4_S4_S4_PKfS6_PfPvS8_xxxxxxxxxxxx"
           "iiiiiiiiiiiffPii' for 'sm_90'\n"
           "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
           "ptxas info    : Used 231 registers, used 1 barriers\n")
    assert parse_bwd_ptxas(log)[tr.name].registers == 231


@pytest.mark.slow
@pytest.mark.compile
def test_backward_trace_builds_compile():
    """Every dK/dV trace build the GPU trace test launches (tests/gpu/test_backward_trace.py)
    compiles for sm_90, within the plain builds' spill bound (128 B)."""
    from cuda_baseline.host.training import training_builds
    from tests.gpu.test_backward_trace import HEAD_DIMS, ORDERS, cuda_problem
    require_toolchain(nvcc_path() is not None, "nvcc (CUDA 13.0)")
    probs = [cuda_problem(d, c) for d in HEAD_DIMS for c in (False, True)]
    names = training_builds(probs, ORDERS, (ScheduleKind.GRID, ScheduleKind.PERSISTENT),
                            arch=get_arch("h100"), trace=True)[1]
    dkdv = [n for n in names if n.startswith("flash_bwd_dkdv")]
    assert len(dkdv) == 24 and all(n.startswith("flash_bwd_dkdv_trace<") for n in dkdv)
    res = compile_bwd_nvcc(names)
    assert set(res) == set(names)
    for n, r in res.items():
        assert r.spill_store_bytes + r.spill_load_bytes <= 128, (n, r)


@pytest.mark.slow
@pytest.mark.compile
def test_opt_in_backward_builds_of_the_validation_half_do_not_spill():
    """Every build the bench's opt-in variants need on the validation half's model problems
    (default tiles, linear grid) compiles for sm_90 without spilling."""
    from cuda_baseline.host.training import training_builds
    from experiments.registry.suites import model_problems
    require_toolchain(nvcc_path() is not None, "nvcc (CUDA 13.0)")
    probs = [pr for _, h, pr in model_problems() if h == "validation"]
    names = set()
    for opts in ("onepart+dqsq", "onepart+dqsq+dqv4"):   # the bench's two variants
        names |= set(training_builds(probs, arch=get_arch("h100"),
                                     options=parse_bwd_options(opts))[1])
    assert any(", 5>" in n for n in names) and any(", 7>" in n for n in names)
    res = compile_bwd_nvcc(sorted(names))
    assert set(res) == names
    spilling = {n: r for n, r in res.items() if r.spills}
    assert not spilling, spilling


@pytest.mark.slow
@pytest.mark.compile
def test_backward_builds_compile_and_grid_builds_do_not_spill():
    require_toolchain(nvcc_path() is not None, "nvcc (CUDA 13.0)")
    insts = ci_bwd_instances()
    res = compile_bwd_nvcc(bwd_names(insts))
    assert set(res) == set(bwd_names(insts))
    # the grid builds of the linear and sawtooth scans (attention()'s default is linear grid)
    spilling = [i.name for i in insts if i.schedule == ScheduleKind.GRID
                and i.order in (OrderKind.LINEAR, OrderKind.SAWTOOTH) and res[i.name].spills]
    assert not spilling, spilling
    # at D = 128 the dK, dV accumulators take 128 of 255 registers: the reverse-scan ablation
    # and the persistent builds spill a little there (measured: at most 60 B per thread)
    for n, r in res.items():
        assert r.spill_store_bytes + r.spill_load_bytes <= 128, (n, r)


@pytest.mark.slow
@pytest.mark.compile
def test_training_forward_compiles_without_spills_at_the_inference_occupancy():
    require_toolchain(nvcc_path() is not None, "nvcc (CUDA 13.0)")
    lim = published_limits(get_arch("h100"))
    pairs = [(Instance(o, s, w, t, d, c, dt), Instance(o, s, w, t, d, c, dt, lse=True))
             for o in (OrderKind.LINEAR, OrderKind.SAWTOOTH)
             for s, w in ((ScheduleKind.GRID, WorkOrder.Q_MAJOR),
                          (ScheduleKind.LONGEST_FIRST, WorkOrder.Q_MAJOR))
             for t in TESTED_TILES for d in (64, 128) for c in (False, True)
             for dt in (DType.FP16, DType.BF16)]
    ci = {i.name for i in ci_instances()}          # compiled by test_cuda_compile
    res = compile_nvcc([i for p in pairs for i in p if i.name not in ci])
    for plain, lse in pairs:
        r = res[lse.name]
        assert not r.spills, lse.name
        per_sm = lim.ctas_per_sm(lse.threads, r.registers, lse.smem_bytes)
        assert per_sm == SM90_CTAS_PER_SM[(plain.tiles, plain.D)], (lse.name, r.registers)
    assert parse_ptxas("") == {}
