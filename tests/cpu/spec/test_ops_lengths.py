"""``spec.ops.check_lengths``, the one check of ``kv_lengths`` both the eager path and the
operators' fake implementations run: metadata only (dtype, shape, device), one line naming what
was passed and what to pass. On stand-in tensors (no torch here): the check reads nothing but
``dtype``, ``shape`` and ``device``, as on fake tensors."""
from __future__ import annotations

from dataclasses import dataclass

import pytest

from spec.family import BadInput
from spec.ops import check_lengths


@dataclass
class _T:
    shape: tuple
    dtype: str = "torch.int32"
    device: str = "cuda:0"


Q = _T((3, 16, 4, 128), "torch.bfloat16")


def test_int32_lengths_of_the_batch_on_qs_device_pass():
    check_lengths(_T((3,)), Q)


@pytest.mark.parametrize("bad, needle", [
    (_T((3,), "torch.int64"), "torch.int64"),
    (_T((3,), device="cpu"), "on cpu"),
    (_T((1,)), "(1,)"),
    (_T((3, 1)), "(3, 1)"),
    ([5, 6, 7], "list"),
])
def test_bad_lengths_get_one_line(bad, needle):
    with pytest.raises(BadInput) as e:
        check_lengths(bad, Q)
    msg = str(e.value)
    assert needle in msg and "int32 tensor of shape (3,)" in msg and "\n" not in msg
