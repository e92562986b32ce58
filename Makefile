# gradpipe: `make demo` and `make test` are all a fresh clone needs; `make docs` builds the site.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.gradpipe-installed
DEMO_STAMP := $(VENV)/.gradpipe-demo-installed
DOCS_STAMP := $(VENV)/.gradpipe-docs-installed
PEER_VENV ?= .venv-peer

.PHONY: demo test test-fresh test-device fuzz docs bench lint format clean conformance conformance-raw

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# The demo installs what it runs; the tests add their own tools (pytest, hypothesis,
# moto, s3fs, ...), which a first `make demo` need not wait for.
$(DEMO_STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e ".[all]"
	touch $(DEMO_STAMP)

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e ".[all,dev]"
	touch $(STAMP) $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(PY) examples/demo.py

# Two workers (pytest-xdist): the suite keeps both cores of the 2-core machines busy.
TEST_WORKERS ?= 2

# PYTEST_ARGS adds to the run, e.g. PYTEST_ARGS="--durations=30".
PYTEST_ARGS ?=
test: $(STAMP) $(PEER_VENV)/.installed
	PEER_PYTHON=$(abspath $(PEER_VENV))/bin/python $(PY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) $(PYTEST_ARGS)

# The out-of-core suite and the journeys of its guides on an accelerator (JAX's
# default device, here a TPU: DEVICE=gpu for another), in one process at a time: one
# program at a time may hold the chip. gradpipe's passes compute there; the tests'
# jax.numpy answers are computed on the host's CPU (tests/ooc/conftest.py), except
# in the tests of the device itself, which compare on the device. Matrix products at
# 'highest' precision, for jax.numpy's answers and gradpipe's alike. Left out there:
# what needs a socket (an S3 server on loopback, a dask cluster: that machine opens
# none). CI has no accelerator and does not run it. On a machine whose JAX came
# installed, with gradpipe's other needs beside it: make test-device DEVICE_PY=python3.
DEVICE ?= tpu
DEVICE_PY ?= $(PY)
DEVICE_TESTS ?= tests/ooc
DEVICE_NO_SOCKETS ?= --ignore=tests/ooc/test_object_store.py --ignore=tests/ooc/test_cluster.py \
  --deselect=tests/ooc/xarray/test_xr_open.py::test_zarr_on_s3_is_read_in_place
DEVICE_PAGES ?= docs/guides/out-of-core.md docs/guides/xarray.md
# DEVICE_SHARD=k/n runs every n-th test from the k-th (a lent machine's call may be
# shorter than the suite: about 29 minutes on a TPU v5e host; `tools/on_device.sh`
# names the tests a call did not reach in not-run.txt, for DEVICE_TESTS=@not-run.txt
# in the next); DEVICE_PAGES= (empty) leaves the guides' journeys out
DEVICE_SHARD ?=
comma := ,
test-device: $(if $(filter $(PY),$(DEVICE_PY)),$(STAMP))
	GRADPIPE_TEST_SHARD=$(DEVICE_SHARD) GRADPIPE_TEST_DEVICE=$(DEVICE) JAX_DEFAULT_MATMUL_PRECISION=highest $(DEVICE_PY) -m pytest -q -p no:cacheprovider -p no:xdist $(DEVICE_NO_SOCKETS) $(DEVICE_TESTS)
	$(if $(strip $(DEVICE_PAGES)),GRADPIPE_TEST_DEVICE=$(DEVICE) JAX_PLATFORMS=$(DEVICE)$(comma)cpu $(DEVICE_PY) -m pytest -q -p no:cacheprovider -p no:xdist \
	  $(foreach page,$(DEVICE_PAGES),"tests/docs/test_snippets.py::test_page_blocks_run[$(page)]"))

# The suite as another machine would run it: a clean clone of the last commit (no
# file this checkout has and git does not), one BLAS thread (dask's workers and
# some CPUs differ from here), the tests in reverse order (no test may lean on one
# that ran before it). Run it before every stop.
FRESH_ORDER ?= reversed
test-fresh:
	@d=$$(mktemp -d) && git clone -q . "$$d" && echo "== a clean clone in $$d, OPENBLAS_NUM_THREADS=1, order $(FRESH_ORDER) ==" \
	  && (cd "$$d" && OPENBLAS_NUM_THREADS=1 GRADPIPE_TEST_ORDER=$(FRESH_ORDER) $(MAKE) --no-print-directory test PYTHON=$(PYTHON)); \
	  rc=$$?; rm -rf "$$d"; exit $$rc

# Random programs over gradpipe.ooc's namespace against jax.numpy, at nightly size
# (programs, x64-off programs, programs that write between asking and reading,
# interrupts at every line of a write or a pass, losses whose gradient shares their
# pass, xarray workflows against NumPy-backed xarray; `make test` runs a fixed few
# hundred). A fresh seed
# each run unless GRADPIPE_FUZZ_SEED is given; the seed is printed to repeat a run.
FUZZ_PROGRAMS ?= 4000
fuzz: $(STAMP)
	@seed=$${GRADPIPE_FUZZ_SEED:-$$(date +%s)}; echo "== $(FUZZ_PROGRAMS) random programs, GRADPIPE_FUZZ_SEED=$$seed =="; \
	  GRADPIPE_FUZZ_SEED=$$seed GRADPIPE_PROGRAMS_PER_SHARD=$$(( $(FUZZ_PROGRAMS) / 8 )) \
	  $(PY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --timeout 0 tests/ooc/test_programs.py \
	    tests/ooc/test_x64_off_programs.py tests/ooc/test_write_programs.py tests/ooc/test_interrupts.py \
	    tests/ooc/test_one_pass.py tests/ooc/xarray/test_xarray_programs.py

# The site (mkdocs-material + mkdocstrings) into site/. --strict turns every warning
# into a failure: a broken link, a missing anchor, an unresolved cross-reference.
$(DOCS_STAMP): pyproject.toml | $(STAMP)
	$(PY) -m pip install --quiet -e ".[all,dev,docs]"
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir site

# The array API standard's own test suite (third-party; it lives beside the project,
# never in it) against gradpipe.ooc. x64 is on because the standard's 64-bit dtypes
# include 0-d results, which gradpipe.ooc returns as JAX arrays. `conformance` applies
# the skip list (one reason per entry); `conformance-raw` runs everything.
ARRAY_API_TESTS ?= $(firstword $(wildcard ../shared/peer-suites/array-api-tests))
SKIPS := $(abspath tests/array_api_skips.txt)

conformance: $(STAMP)
	@test -n "$(ARRAY_API_TESTS)" || { echo "array-api-tests not found beside the project: pass ARRAY_API_TESTS=path/to/array-api-tests"; exit 2; }
	JAX_ENABLE_X64=1 $(ARRAY_API_TESTS)/run $(abspath $(PY)) gradpipe.ooc --skips-file $(SKIPS)

conformance-raw: $(STAMP)
	@test -n "$(ARRAY_API_TESTS)" || { echo "array-api-tests not found beside the project: pass ARRAY_API_TESTS=path/to/array-api-tests"; exit 2; }
	JAX_ENABLE_X64=1 $(ARRAY_API_TESTS)/run $(abspath $(PY)) gradpipe.ooc

# The import contracts in pyproject.toml ([tool.importlinter]): the layers, gradpipe.ooc
# beside them, the layers inside gradpipe.ooc, no import cycle anywhere. Then mypy on
# all of src/ ([tool.mypy]), and no module over 400 lines (tools/module_sizes.py).
lint: $(STAMP)
	$(PY) -m ruff check src tests benchmarks examples tools
	$(PY) -m ruff format --check src tests benchmarks examples tools
	$(VENV)/bin/lint-imports
	$(PY) -m mypy
	$(PY) tools/module_sizes.py

format: $(STAMP)
	$(PY) -m ruff check --fix src tests benchmarks examples tools
	$(PY) -m ruff format src tests benchmarks examples tools

# The peers (tesseract-core's runtime and client, tesseract-jax) pin versions that
# fight ours, so they get a virtual environment of their own; gradpipe never depends
# on them. The benchmarks and the tesseract tests (tests/serve/test_tesseract_*) run
# them from it as subprocesses.
$(PEER_VENV)/.installed:
	$(PYTHON) -m venv $(PEER_VENV)
	$(PEER_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(PEER_VENV)/bin/python -m pip install --quiet "tesseract-core[runtime]" tesseract-jax "jax>=0.10.2,<0.13" equinox
	touch $@

bench: $(STAMP) $(PEER_VENV)/.installed
	$(PY) -m pip install --quiet -e ".[bench]"
	PEER_PYTHON=$(abspath $(PEER_VENV))/bin/python $(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) $(PEER_VENV) build dist site src/*.egg-info
