"""Suite-wide hooks (loaded by pytest-xdist's controller too, unlike tests/ooc's)."""

import os
import pathlib
import random
import sys

import pytest

#: Per documentation page: its code blocks run, shown only and not run
#: (tests/docs/test_snippets.py hands each page's tally to its test report).
SNIPPET_TALLY = pytest.StashKey[dict]()
_session = {}


def pytest_configure(config) -> None:
    _session["config"] = config


def pytest_collection_modifyitems(config, items) -> None:
    """Run the tests in another order when ``GRADPIPE_TEST_ORDER`` asks, and a part of
    them when ``GRADPIPE_TEST_SHARD`` asks (`_shard`)."""
    _order(items)
    _shard(config, items)


def _shard(config, items) -> None:
    """``GRADPIPE_TEST_SHARD=k/n``: every n-th test from the k-th (1 <= k <= n), so that
    a suite longer than one sitting on a lent machine runs in n of them, each part a
    like mix of the suite's files (`make test-device DEVICE_SHARD=1/3`)."""
    shard = os.environ.get("GRADPIPE_TEST_SHARD", "")
    if not shard:
        return
    k, _, n = shard.partition("/")
    if not (k.isdigit() and n.isdigit() and 1 <= int(k) <= int(n)):
        raise pytest.UsageError(
            f"GRADPIPE_TEST_SHARD={shard!r} is not a part: use 'k/n' with 1 <= k <= n, "
            "e.g. GRADPIPE_TEST_SHARD=1/3."
        )
    keep = [i % int(n) == int(k) - 1 for i in range(len(items))]
    config.hook.pytest_deselected(items=[item for item, kept in zip(items, keep) if not kept])
    items[:] = [item for item, kept in zip(items, keep) if kept]


def _order(items) -> None:
    """Run the tests in another order when ``GRADPIPE_TEST_ORDER`` asks: ``reversed``,
    or ``shuffled:<seed>`` (an int). A test that passes only after another one left
    some state behind (a module-level cache, a default budget, the global RNG) fails
    in some other order. The order is a function of the seed alone, so every
    pytest-xdist worker collects the same list, as xdist requires."""
    order = os.environ.get("GRADPIPE_TEST_ORDER", "")
    if not order:
        return
    if order == "reversed":
        items.reverse()
        return
    kind, _, seed = order.partition(":")
    if kind != "shuffled" or not seed.lstrip("-").isdigit():
        raise pytest.UsageError(
            f"GRADPIPE_TEST_ORDER={order!r} is not an order: use 'reversed' or "
            "'shuffled:<int seed>', e.g. GRADPIPE_TEST_ORDER=shuffled:1."
        )
    random.Random(int(seed)).shuffle(items)


def pytest_runtest_logreport(report) -> None:
    """Collect the snippet tallies on the process that writes the summary (under
    pytest-xdist the tests run in workers; their reports come here). On an
    accelerator (``GRADPIPE_TEST_DEVICE``), a failure's traceback is written as it
    happens: a lent machine's call may be cut before pytest's summary."""
    if report.failed and os.environ.get("GRADPIPE_TEST_DEVICE"):
        sys.stderr.write(f"\n--- {report.nodeid} failed ({report.when}):\n")
        sys.stderr.write(f"{report.longreprtext}\n---\n")
    if report.when != "teardown":
        return
    for name, value in report.user_properties:
        if name == "snippet_tally":
            _session["config"].stash.setdefault(SNIPPET_TALLY, {}).update(value)


def pytest_terminal_summary(terminalreporter):
    _snippet_summary(terminalreporter)
    _gradient_table_summary(terminalreporter)


def _snippet_summary(terminalreporter) -> None:
    tally = terminalreporter.config.stash.get(SNIPPET_TALLY, {})
    if not tally:
        return
    ran = sum(t["ran"] for t in tally.values())
    skipped = sum(t["not_run"] for t in tally.values())
    output = sum(t["output"] for t in tally.values())
    terminalreporter.write_sep("-", "documentation snippets")
    for page, t in sorted(tally.items()):
        terminalreporter.write_line(
            f"{page}: {t['ran']} blocks run, {t['output']} output, {t['not_run']} not run"
        )
    terminalreporter.write_line(
        f"snippets: {ran} code blocks run on {len(tally)} pages "
        f"({output} output blocks shown only, {skipped} marked not run)"
    )


def _gradient_table_summary(terminalreporter) -> None:
    """After a run that included the out-of-core tests, say how much of the namespace
    the gradient table covers (tests/ooc/test_grad_coverage.py checks it is all)."""
    ooc_tests = pathlib.Path(__file__).parent / "ooc"
    ran = [pathlib.Path(a.split("::")[0]).resolve() for a in terminalreporter.config.args]
    if not any(r == ooc_tests or ooc_tests in r.parents or r in ooc_tests.parents for r in ran):
        return
    try:
        sys.path.insert(0, str(ooc_tests))
        from test_grad_coverage import NO_GRADIENT, gradient_table_size
    except ImportError:  # JAX (the ooc extra) is not installed
        return
    finally:
        sys.path.remove(str(ooc_tests))
    terminalreporter.write_line(
        f"gradient table: {gradient_table_size()} differentiable functions of gradpipe.ooc "
        f"covered, {len(NO_GRADIENT)} without a gradient (each with its reason)"
    )
