"""Fixtures for the gradpipe.jax tests.

Float64 is switched on per test with ``jax.enable_x64`` (a context on every
supported JAX version), so the other test directories keep JAX's default float32.
"""

import jax
import pytest


@pytest.fixture
def x64():
    with jax.enable_x64(True):
        yield
