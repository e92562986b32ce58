#!/usr/bin/env bash
# Run on the accelerator machine (a TPU host whose JAX came installed): install the
# wheels carried in .whl-tpu/, then the device benchmark and `make test-device`,
# their logs and results under $OUT. Arguments: the sizes of X in GiB to benchmark.
# BENCH=0 or TESTS=0 leaves either out; PYTEST_ADDOPTS reaches the tests' pytest.
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
  # (MAKE_ARGS: e.g. DEVICE_TESTS="tests/ooc/test_x.py ..." to run part of the suite)
  eval timeout "${TEST_TIMEOUT:-540}" make --no-print-directory test-device DEVICE_PY=python3 \
    "${MAKE_ARGS:-}" 2>&1 | tee "$OUT/test-device.log" | grep -E "FAILED|ERROR|passed|failed" | tail -60
fi
