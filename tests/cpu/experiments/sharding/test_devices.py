"""Choosing the GPUs of a sharded run and the cluster executor (experiments.sharding.shard),
without a GPU or a cluster: the GPU count and device checks, and our Slurm parameters through
submitit's own Slurm executor."""
from __future__ import annotations

import pytest

from experiments.sharding import shard
from tests.conftest import ROOT

H200 = [shard.Gpu(0, "NVIDIA H200", "GPU-aaaa", "h200"),
        shard.Gpu(1, "NVIDIA H200", "GPU-bbbb", "h200"),
        shard.Gpu(2, "NVIDIA H200", "GPU-cccc", "h200")]


@pytest.mark.parametrize("request_, message", [
    ("0", "--gpus 0: pass a positive number of GPUs or all"),
    ("foo", "--gpus foo: pass a positive number of GPUs or all"),
    ("-1", "--gpus -1: pass a positive number of GPUs or all"),
    ("4", "--gpus 4: this host has 3 GPUs; pass --gpus 3 or all"),
])
def test_bad_gpu_counts(request_, message):
    with pytest.raises(shard.ShardError) as e:
        shard.pick_gpus(request_, H200, "h200")
    assert str(e.value) == message


def test_mixed_devices_are_refused_naming_the_fix():
    mixed = H200[:1] + [shard.Gpu(1, "NVIDIA H100 80GB HBM3", "GPU-x", "h100")]
    with pytest.raises(shard.ShardError, match=r"GPU 1 is NVIDIA H100 80GB HBM3 \(h100\), not "
                       r"h200; .*CUDA_VISIBLE_DEVICES=0$"):
        shard.pick_gpus("all", mixed, "h200")
    assert shard.pick_gpus("1", mixed, "h200") == H200[:1]
    assert shard.pick_gpus("all", H200, "h200") == H200


def test_slurm_parameters_make_a_one_gpu_sbatch_script(tmp_path, monkeypatch):
    """Our parameters through submitit's own Slurm executor (srun faked present)."""
    import submitit
    from submitit.slurm.slurm import SlurmExecutor
    monkeypatch.setattr(SlurmExecutor, "affinity", classmethod(lambda cls: 2))
    opts = shard.ExecutorOptions("slurm", 30, partition="gpu", account="lab", qos="high",
                                 constraint="h200")
    ex = shard.make_executor(opts, tmp_path)
    assert isinstance(ex, submitit.AutoExecutor)
    text = ex._executor._make_submission_file_text("python -m x", "uid")
    for line in ("--partition=gpu", "--gpus-per-node=1", "--time=30", "--account=lab",
                 "--qos=high", "--constraint=h200", "--ntasks-per-node=1", "--cpus-per-task=8"):
        assert f"#SBATCH {line}" in text, line
    assert f"cd {ROOT}" in text


def test_slurm_without_srun_is_one_line(tmp_path, monkeypatch):
    from submitit.slurm.slurm import SlurmExecutor
    monkeypatch.setattr(SlurmExecutor, "affinity", classmethod(lambda cls: -1))
    with pytest.raises(shard.ShardError, match="srun not found"):
        shard.make_executor(shard.ExecutorOptions("slurm"), tmp_path)
