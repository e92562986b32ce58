"""Before a named file is replaced, what still reads its other handles is computed.

A rewrite through one handle of a path (``update_``, a set-item, ``save`` over it)
makes every other handle of that path read the new file (`storage._named_handles`).
A fused result or a waiting sum made from one of those other handles, and not yet
computed, would then read the new values instead of those it was made from; so,
just before the rename, each is computed from the old file, as a write through the
handle itself does (`planning._chain_readers.settle_readers`).
"""

from __future__ import annotations

from typing import Any

from ..planning._budget import get_budget
from ..planning._chain_readers import settle_readers
from ..storage._named_handles import on_replace
from ._driver import Driver

__all__: list[str] = []


def _settle_other_handles(handles: list[Any]) -> None:
    driver = Driver(get_budget(), "a named file replaced")
    for handle in handles:
        settle_readers(handle, driver)


on_replace(_settle_other_handles)
