#!/usr/bin/env bash
# Run on the accelerator machine (a TPU host whose JAX came installed): install the
# wheels carried in .whl-tpu/ (tools/device_wheels.txt says which and how to fetch
# them), then the device benchmark and `make test-device`,
# their logs and results under $OUT. Arguments: the sizes of X in GiB to benchmark.
# BENCH=0 or TESTS=0 leaves either out; PYTEST_ADDOPTS reaches the tests' pytest (by
# default each test's outcome on its own line: a run stopped at its time limit still
# names the tests that failed before; a test over two minutes dumps its threads).
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --no-index --no-deps --no-compile \
  --no-cache-dir --upgrade --target /tmp/site .whl-tpu/*.whl || exit 1
export PYTHONPATH=$PWD/src:${PYTHONPATH:-}:/tmp/site PYTHONUNBUFFERED=1
export PYTEST_ADDOPTS=${PYTEST_ADDOPTS:--vv --tb=short -rfE -o faulthandler_timeout=120}
# gradpipe runs from src/; its entry points (xarray's chunk manager) from metadata
python3 - <<'PY' || exit 1
import pathlib, tomllib
project = tomllib.loads(pathlib.Path("pyproject.toml").read_text())["project"]
info = pathlib.Path(f"/tmp/site/gradpipe-{project['version']}.dist-info")
info.mkdir(parents=True, exist_ok=True)
(info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: gradpipe\nVersion: {project['version']}\n")
(info / "entry_points.txt").write_text("".join(
    f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in points.items())
    for group, points in project.get("entry-points", {}).items()))
PY
python3 -c 'import jax, platform; print(jax.__version__, jax.devices(), platform.libc_ver())'
df -h /tmp . | tee "$OUT/df.txt"
free -g | tee -a "$OUT/df.txt"
if [ "${BENCH:-1}" = 1 ]; then
  timeout "${BENCH_TIMEOUT:-300}" python3 benchmarks/ooc_device.py --sizes-gib "$@" ${BENCH_ARGS:-} \
    --json "$OUT/ooc_device.json" 2>&1 | tee "$OUT/ooc_device.log"
fi
if [ "${TESTS:-1}" = 1 ]; then
  # (MAKE_ARGS: e.g. DEVICE_TESTS="tests/ooc/test_x.py ..." to run part of the suite)
  # At the time limit pytest gets SIGINT: it stops as on Ctrl-C and still prints its
  # summary (SIGTERM would fail the running test with gradpipe's SystemExit and go
  # on); the tests it did not reach are then written to $OUT/not-run.txt, for
  # MAKE_ARGS='DEVICE_TESTS=@not-run.txt DEVICE_PAGES=' in a later call.
  eval timeout -s INT -k 30 "${TEST_TIMEOUT:-540}" make --no-print-directory test-device \
    DEVICE_PY=python3 "${MAKE_ARGS:-}" 2>&1 | tee "$OUT/test-device.log" \
    | grep -E "FAILED|ERROR|passed|failed" | tail -60
  rc=${PIPESTATUS[0]}  # 124: stopped by SIGINT; 137: killed 30 s later (a test deaf to it)
  if [ "$rc" = 124 ] || [ "$rc" = 137 ] || grep -qE "^!+ KeyboardInterrupt !+$" "$OUT/test-device.log"; then
    (export PYTEST_ADDOPTS=--collect-only
     eval make --no-print-directory test-device DEVICE_PY=python3 "${MAKE_ARGS:-}" DEVICE_PAGES=) \
      2>/dev/null | grep "^tests/.*::" > "$OUT/shard.txt"
    sed -nE 's/^(tests\/.+::.+) (PASSED|FAILED|SKIPPED|XFAIL|XPASS|ERROR)( +\[ *[0-9]+%\])?$/\1/p' \
      "$OUT/test-device.log" | sort > "$OUT/done.txt"
    sort "$OUT/shard.txt" | comm -23 - "$OUT/done.txt" > "$OUT/not-run.txt"
    echo "stopped at the time limit: $(wc -l < "$OUT/not-run.txt") tests not run (not-run.txt)"
  fi
fi
