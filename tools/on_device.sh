#!/usr/bin/env bash
# Run on the accelerator machine (a TPU host whose JAX came installed): install the
# wheels carried in .whl-tpu/, then the device benchmark and `make test-device`,
# their logs and results under $OUT. Arguments: the sizes of X in GiB to benchmark.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --no-index --no-deps --no-compile \
  --no-cache-dir --upgrade --target /tmp/site .whl-tpu/*.whl || exit 1
export PYTHONPATH=$PWD/src:${PYTHONPATH:-}:/tmp/site PYTHONUNBUFFERED=1
python3 -c 'import jax, platform; print(jax.__version__, jax.devices(), platform.libc_ver())'
df -h /tmp . | tee "$OUT/df.txt"
free -g | tee -a "$OUT/df.txt"
if [ "${BENCH:-1}" = 1 ]; then
  timeout "${BENCH_TIMEOUT:-300}" python3 benchmarks/ooc_device.py --sizes-gib "$@" ${BENCH_ARGS:-} \
    --json "$OUT/ooc_device.json" 2>&1 | tee "$OUT/ooc_device.log"
fi
if [ "${TESTS:-1}" = 1 ]; then
  timeout "${TEST_TIMEOUT:-240}" make --no-print-directory test-device DEVICE_PY=python3 \
    2>&1 | tee "$OUT/test-device.log" | tail -40
fi
