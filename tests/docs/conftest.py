"""The snippet test's tally, reported in pytest's terminal summary."""

import pytest

TALLY = pytest.StashKey[dict]()


@pytest.fixture
def snippet_tally(request: pytest.FixtureRequest) -> dict:
    """Per page: blocks run and blocks not run (the test fills it in)."""
    return request.config.stash.setdefault(TALLY, {})


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
