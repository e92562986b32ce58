"""Fixtures for the gradpipe.component tests.

`make_component` wraps `nested_models.nested_fn` (a nonlinear function of several
inputs with several outputs, reaching nested models, list items and dict entries)
as a `Component`.
"""

import pytest
from nested_models import F32, NestedIn, NestedOut, nested_fn, nested_inputs  # noqa: F401

from gradpipe.component import Component


@pytest.fixture
def make_component():
    def make(cache=True, fn=nested_fn):
        return Component(fn, inputs=NestedIn, outputs=NestedOut, residual_cache=cache)

    return make
