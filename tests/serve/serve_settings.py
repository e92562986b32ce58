"""Settings and helpers the gradpipe.serve tests share with their conftest."""

from pathlib import Path

HERE = Path(__file__).parent
TOKEN = "test-token-0123"
MAX_BODY = 1 << 20


def json_array(values, dtype="float32"):
    """A hand-written JSON array frame, with the numbers as a nested list."""
    import numpy as np

    shape = list(np.shape(values))
    return {"object_type": "array", "dtype": dtype, "shape": shape,
            "data": {"buffer": values, "encoding": "json"}}  # fmt: skip
