"""CPU checks of the CUDA split-K/V decode: its plan is the cuTile family's (the same packing, the
same splits on the same tile), the routing mirrors cuTile's ``decode_choice``, the host's
geometry is the kernel's (static asserts evaluated by nvcc), and (with nvcc, forced in CI) every
decode build the GPU tests launch compiles for sm_90 without spilling, with one CTA's shared
memory under the H100's 227 KB."""
from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import pytest

from cuda_baseline.build.decode_source import (
    COMBINE_THREADS,
    DecodeInstance,
    compile_decode_nvcc,
    decode_compile_options,
    decode_smem_bytes,
    parse_decode_ptxas,
)
from cuda_baseline.build.source import nvcc_path
from cuda_baseline.host import decode as cdecode
from cuda_baseline.host.backend import default_variant
from spec import decode as sd
from spec import get_arch
from spec.family import BadInput, UnsupportedVariant
from spec.problem import DType, Problem
from spec.variant import Training, Variant
from tests.conftest import require_toolchain

PROBLEMS = [Problem(B=B, H=H, H_kv=H_kv, S_q=S_q, S_kv=S_kv, D=D, causal=c)
            for B in (1, 4, 64) for H, H_kv in ((32, 8), (32, 32), (16, 1), (12, 2), (40, 5))
            for S_q in (1, 3, 16) for S_kv in (100, 1000, 33000, 131072) for D in (64, 128)
            for c in (False, True)][::3]
GPU_SMS = (132, 114)        # H100 / H200 SXM, H100 PCIe: the GPUs the tests run on


def test_packing_is_the_shared_definition():
    assert [sd.packing(*a) for a in ((8, 1), (1, 1), (32, 16), (6, 4), (4, 1))] == [
        (8, 2), (1, 16), (4, 16), (2, 8), (4, 4)]
    with pytest.raises(ValueError):
        sd.packing(4, 65)


@pytest.mark.parametrize("sms", (132, 78))
def test_plan_agrees_with_cutile(monkeypatch, sms):
    """The same K/V tile, packing and splits as cuTile's plan (one tile rule, one work model)."""
    from kernels.host import decode as kdecode
    for p in PROBLEMS:
        ours, theirs = cdecode.plan(p, sms), kdecode.plan(p, sms)
        assert (ours.tile_n, ours.hg, ours.sqp, ours.splits, ours.slots) == (
            theirs.tile_n, theirs.hg, theirs.sqp, theirs.splits, theirs.slots), p.label
        assert ours.n_ctas == theirs.grid[0] * theirs.grid[1]
        assert cdecode.plan(p, sms, 5).splits == kdecode.plan(p, sms, 5).splits == 5


def test_plan_geometry():
    p = Problem(B=2, H=32, H_kv=8, S_q=1, S_kv=33000, D=128, causal=True)
    pl = cdecode.plan(p, 132)
    assert (pl.tile_n, pl.hg, pl.sqp) == (128, 4, 4)
    assert pl.chunk == sd.chunk_of(sd.n_tiles(33000, 128), pl.splits)
    assert pl.chunk * pl.splits >= sd.n_tiles(33000, 128) > (pl.chunk - 1) * pl.splits
    inst = pl.instance(bottom_right=True)
    assert inst.name == (f"decode_split<128, 128, 4, 4, DType::FP16, true, true, "
                         f"{'true' if pl.splits > 1 else 'false'}>")
    assert not pl.instance().bottom_right                 # no lengths: top-left causal
    assert not cdecode.plan(Problem(B=1, H=8, S_q=1, S_kv=64, D=64), 132).instance(
        True).bottom_right                                 # lengths without causal: no mask
    with pytest.raises(UnsupportedVariant, match="at most 16"):
        cdecode.plan(Problem(B=1, H=8, S_q=17, S_kv=64, D=64), 132)


def test_routing_mirrors_cutile():
    h100 = get_arch("h100")
    p = Problem(B=1, H=32, H_kv=8, S_q=4, S_kv=8192, D=128, causal=True)
    assert default_variant(p, h100) == cdecode.plan(p, h100.num_sms)
    assert default_variant(p, None) == cdecode.plan(p, h100.num_sms)
    assert default_variant(p, h100, schedule="decode3").splits == 3
    assert isinstance(default_variant(p, h100, training=True), Training)
    for kw in (dict(schedule="grid"), dict(tiles=(64, 64)), dict(order="sawtooth"),
               dict(stages=3)):
        assert isinstance(default_variant(p, h100, **kw), Variant), kw
    assert isinstance(default_variant(p, h100, stages=2), cdecode.DecodePlan)
    long = Problem(B=1, H=32, H_kv=8, S_q=17, S_kv=8192, D=128)
    assert isinstance(default_variant(long, h100), Variant)
    for bad in (dict(schedule="decode", training=True), dict(schedule="decode2", tiles=(64, 64))):
        with pytest.raises(UnsupportedVariant):
            default_variant(p, h100, **bad)
    for prob, kw in ((long, {}), (p, dict(schedule="grid")), (p, dict(training=True)),
                     (long, dict(schedule="decode"))):
        with pytest.raises(BadInput) as e:
            default_variant(prob, h100, kv_lengths=True, **kw)
        assert "\n" not in str(e.value)


def test_parse_ptxas_names_the_decode_kernels():
    inst = DecodeInstance(128, 128, 4, 4, DType.BF16, True, True, True)
    log = ("ptxas info    : Compiling entry function '_Z12decode_splitILi128ELi128ELi4ELi4EL5DType1"
           "ELb1ELb1ELb1EEvPKtS2_S2_PtPKiPfS6_xxxxxxxxxxxxiiiiiiiif' for 'sm_90'\n"
           "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
           "ptxas info    : Used 185 registers, used 1 barriers\n"
           "ptxas info    : Compiling entry function '_Z14decode_combineILi64EL5DType0EEvPKfS2_Ptx"
           "xxiiii' for 'sm_90'\n"
           "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
           "ptxas info    : Used 32 registers, used 0 barriers\n")
    res = parse_decode_ptxas(log)
    assert res[inst.name].registers == 185
    assert res["decode_combine<64, DType::FP16>"].registers == 32


def _nvcc_or_skip() -> str:
    path = nvcc_path()
    require_toolchain(path is not None, "nvcc (CUDA 13.0)")
    return path


@pytest.mark.compile
def test_host_geometry_mirrors_the_kernel():
    """Threads and shared memory the host launches with == DecodeShape in decode.cuh."""
    nvcc = _nvcc_or_skip()
    checks = []
    for D in (64, 128):
        for m in (16, 32, 64):
            for hg, sqp in ((1, m), (m // 16 * 4, 4)):
                i = DecodeInstance(D, sd.tile_n_for(D, m), hg, sqp, DType.FP16, False, False, False)
                checks.append(f"static_assert(DecodeShape<{D}, {i.tile_n}, {hg}, {sqp}>::"
                              f"SMEM_BYTES == {i.smem_bytes} && {i.smem_bytes} == "
                              f"{decode_smem_bytes(D, i.tile_n, m)} && DecodeShape<{D}, "
                              f"{i.tile_n}, {hg}, {sqp}>::THREADS == {i.threads}, \"{i.name}\");")
    with tempfile.TemporaryDirectory() as tmp:
        cu = Path(tmp) / "geom.cu"
        cu.write_text('#include "decode.cuh"\n' + "\n".join(checks) + "\n")
        r = subprocess.run([nvcc, "-arch=sm_90", "-cubin", *decode_compile_options(), "-o",
                            str(Path(tmp) / "geom.cubin"), str(cu)], capture_output=True,
                           text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert COMBINE_THREADS == 128


@pytest.mark.compile
def test_every_decode_build_the_gpu_tests_launch_compiles_without_spills():
    """Every split kernel the GPU tests launch (tests/gpu/test_decode.py ``cuda_instances`` on
    the GPUs they run on) and the combine kernels compile for sm_90, spill nothing and fit one
    CTA per SM. Prints the resource table (pytest -s)."""
    _nvcc_or_skip()
    from tests.gpu.test_decode import cuda_instances
    insts = list(dict.fromkeys(i for sms in GPU_SMS for i in cuda_instances(sms)))
    names = list(dict.fromkeys(n for i in insts for n in i.names))
    res = compile_decode_nvcc(names)
    missing = [n for n in names if n not in res]
    assert not missing, f"no ptxas report for {missing[:3]}"
    smem = {i.name: i.smem_bytes for i in insts}
    for n in names:
        r = res[n]
        print(f"{r.registers:>3} reg {r.spill_store_bytes:>3}/{r.spill_load_bytes:<3} spill "
              f"{smem.get(n, 0):>6} smem  {n}")
    spilling = [f"{n}: {res[n]}" for n in names if res[n].spills or res[n].stack_bytes]
    assert not spilling, "spilling builds:\n" + "\n".join(spilling)
    assert max(smem.values()) <= 232448                  # the H100's opt-in limit per block
