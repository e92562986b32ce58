"""Settings and helpers the gradpipe.serve tests share with their conftest."""

from pathlib import Path

HERE = Path(__file__).parent
TOKEN = "test-token-0123"
MAX_BODY = 1 << 20
# float32 y(512) by x(512) is exactly this many bytes: the largest Jacobian served.
MAX_JACOBIAN = 1 << 20


def json_array(values, dtype="float32"):
    """A hand-written JSON array frame, with the numbers as a nested list."""
    import numpy as np

    shape = list(np.shape(values))
    return {"object_type": "array", "dtype": dtype, "shape": shape,
            "data": {"buffer": values, "encoding": "json"}}  # fmt: skip


def logged_errors(log_path):
    """The lines of a server log that tell of an exception."""
    with open(log_path) as log:
        return [line for line in log if "Traceback" in line or "Exception" in line]
