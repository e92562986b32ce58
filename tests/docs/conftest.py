"""The snippet test's tally: each test fills in its page's counts and hands them to
its report (``user_properties``); tests/conftest.py sums them into the summary, on
the process that writes it (pytest-xdist's controller too)."""

import pytest


@pytest.fixture
def snippet_tally(request: pytest.FixtureRequest):
    """Per page: blocks run and blocks not run (the test fills it in)."""
    tally: dict = {}
    yield tally
    request.node.user_properties.append(("snippet_tally", tally))
