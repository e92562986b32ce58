"""The snippet test's tally, reported in pytest's terminal summary.

Each test hands its page's tally to its report (``user_properties``), so the
summary counts every page under pytest-xdist too, where the tests run in worker
processes and the summary is written by the controlling one.
"""

import pytest

TALLY = pytest.StashKey[dict]()
_session = {}


def pytest_configure(config) -> None:
    _session["config"] = config


@pytest.fixture
def snippet_tally(request: pytest.FixtureRequest):
    """Per page: blocks run and blocks not run (the test fills it in)."""
    tally: dict = {}
    yield tally
    request.node.user_properties.append(("snippet_tally", tally))


def pytest_runtest_logreport(report) -> None:
    if report.when != "teardown":
        return
    for name, value in report.user_properties:
        if name == "snippet_tally":
            _session["config"].stash.setdefault(TALLY, {}).update(value)


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    tally = config.stash.get(TALLY, {})
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
