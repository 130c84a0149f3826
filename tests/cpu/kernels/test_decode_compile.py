"""Compile-only checks of the split-K/V decode kernels (``kernels.device.decode``): the split
kernel exports for sm_90 at D 64/128 × fp16/bf16 × groups 1/4/8 (S_q, causal alignment and the
split flag varied across them) with JIT-like signatures, loads K/V through TMA and spills
nothing; the combine kernel exports at both head dims. Skips without cuda-tile + tileiras +
cuobjdump (fails in CI, REQUIRE_COMPILE=1)."""
from __future__ import annotations

import itertools
import math

import pytest

from tests.conftest import require_toolchain
from tests.cpu.kernels.test_cutile_compile import _available

pytestmark = [pytest.mark.compile, pytest.mark.slow]


@pytest.fixture(scope="module")
def toolchain():
    require_toolchain(_available(), "cuda-tile + tileiras + cuobjdump (pip install "
                      "'cuda-tile[tileiras]' nvidia-cuda-cuobjdump)")


SQ = (1, 4, 16, 3)
MATRIX = [(D, dt, G, SQ[i % 4], i % 3) for i, (D, dt, G) in
          enumerate(itertools.product((64, 128), ("fp16", "bf16"), (1, 4, 8)))]


@pytest.mark.parametrize("D, dtype, G, S_q, mode", MATRIX,
                         ids=[f"d{D}-{dt}-g{G}-q{s}-m{m}" for D, dt, G, s, m in MATRIX])
def test_split_kernel_compiles(toolchain, D, dtype, G, S_q, mode):
    from kernels.build.resources import compile_decode_cubin, read_resources
    from kernels.build.signatures import DecodeCase
    from spec.decode import packing, tile_n_for
    # mode 0: non-causal, split; 1: top-left causal, one split; 2: bottom-right causal, split
    case = DecodeCase(B=2, H=8 * G, H_kv=8, S_q=S_q, S_kv=8192, D=D, dtype=dtype,
                      tile_n=tile_n_for(D, math.prod(packing(G, S_q))), causal=mode > 0,
                      bottom_right=mode == 2, splits=1 if mode == 1 else 8)
    cubin = compile_decode_cubin(case, "sm_90")
    assert cubin[:4] == b"\x7fELF"
    r = read_resources(cubin)
    assert not r.spills, str(r)
    assert r.ptx.get("TMA_LOAD", 0) >= 2, str(r)      # K and V tiles through TMA


@pytest.mark.parametrize("D, S_q, splits", [(64, 4, 8), (128, 1, 128), (128, 16, 33), (64, 3, 1),
                                            (64, 1, 512)])
def test_combine_kernel_compiles(toolchain, D, S_q, splits):
    """Chunks of 8, 32, 64 and 1 splits a step (``spec.decode.merge_chunk``), one CTA a row."""
    from kernels.build.resources import compile_decode_cubin, read_resources
    from kernels.build.signatures import DecodeCase
    case = DecodeCase(B=2, H=32, H_kv=8, S_q=S_q, D=D, splits=splits, kernel="combine")
    r = read_resources(compile_decode_cubin(case, "sm_90"))
    assert not r.spills, str(r)
