"""Why does the H100 driver hold 1 CTA/SM of the sawtooth study's cuTile occ2 builds?"""
import tempfile, os
from pathlib import Path
import cupy
from experiments.studies import sawtooth_plan
from spec import get_arch
from kernels.signatures import CompileCase
from kernels.resources import compile_cubin, read_resources
arch = get_arch("h100")
seen = set()
for c in sawtooth_plan(arch):
    v = c.variant
    if v.backend.value != "cutile" or v.order.label != "linear":
        continue
    cc = CompileCase.of(v, c.problem)
    cub = compile_cubin(cc, "sm_90", v.occupancy)
    r = read_resources(cub)
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "k.cubin"); Path(p).write_bytes(cub)
        fn = cupy.RawModule(path=p).get_function(cc.signature().symbol)
        occ = {t: cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(fn.kernel.ptr, t, 0)
               for t in (128, 256, 384)}
        attrs = {k: getattr(fn, k) for k in ("max_threads_per_block", "num_regs",
                 "shared_size_bytes", "max_dynamic_shared_size_bytes", "local_size_bytes",
                 "preferred_shared_memory_carveout", "required_cluster_width",
                 "cluster_size_must_be_set", "non_portable_cluster_size_allowed")
                 if hasattr(fn, k)}
    print(c.id, "cuobjdump REG", r.regs, "SHARED", r.shared, attrs, "occupancy by threads", occ,
          flush=True)
props = cupy.cuda.runtime.getDeviceProperties(0)
print({k: props[k] for k in ("regsPerMultiprocessor", "sharedMemPerMultiprocessor",
       "sharedMemPerBlockOptin", "maxThreadsPerMultiProcessor", "reservedSharedMemPerBlock",
       "regsPerBlock") if k in props})
