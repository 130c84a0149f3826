#!/usr/bin/env bash
# One measuring occasion of issue 51's validation on the lent GPU (run from the repository root
# on the GPU machine, after `source .cutile/activate.sh`): the convoy grid's cases matching
# CONVOY_FILTER, the dQ pair (unless DQPAIR=0), the pointer-chase latency (unless LATENCY=0),
# each as a run directory under $OUT/work, packed into $OUT/<TAG>.tar.xz with the GPU's facts.
#   SAWTOOTH_GIT_COMMIT=<commit> CONVOY_FILTER='static96.*s(122880|368640)' TAG=occ1 \
#     bash explorations/convoy_occasion.sh
set -uo pipefail
: "${OUT:?set OUT}" "${TAG:?set TAG}" "${SAWTOOTH_GIT_COMMIT:?name the commit that runs}"
export PYTHONUNBUFFERED=1 SAWTOOTH_GIT_COMMIT
W="$OUT/work/$TAG"
mkdir -p "$W"
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv; } > "$W/gpu.txt"
if [ "${LATENCY:-1}" = 1 ]; then
  python -m experiments.instruments.latency --arch h200 --out "$W/latency" 2>&1 | tail -15
fi
if [ -n "${CONVOY_FILTER:-}" ]; then
  python -m experiments.run convoy --arch h200 --filter "$CONVOY_FILTER" --reps 3 --repeats 2 \
    --no-figures --out "$W/convoy" 2>&1 | tee "$W/convoy.log" | tail -80
fi
if [ "${CONVOY48:-0}" = 1 ]; then
  python -m experiments.run convoy --arch h200 --filter static48 --reps 3 --repeats 2 \
    --no-figures --out "$W/convoy48" 2>&1 | tee "$W/convoy48.log" | tail -40
fi
if [ "${DQPAIR:-1}" = 1 ]; then
  python -m experiments.run dqpair --arch h200 --reps 3 --repeats 2 --no-figures \
    --out "$W/dqpair" 2>&1 | tee "$W/dqpair.log" | tail -40
fi
find "$W" -name '*.ncu-rep' -delete
tar -C "$OUT/work" -cJf "$OUT/$TAG.tar.xz" "$TAG"
ls -la "$OUT"
