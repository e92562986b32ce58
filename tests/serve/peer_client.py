"""A long-lived client of tesseract-core, run by the peer's own Python (``.venv-peer``):
it reads one JSON request per line on stdin, makes the call with the peer's
``Tesseract.from_url`` (or tesseract-jax's ``apply_tesseract``) and writes one JSON
answer per line on stdout. Arrays cross as ``{"__array__": base64, "dtype", "shape"}``.
gradpipe never imports it."""

import base64
import json
import sys
import traceback

import numpy as np
from tesseract_core import Tesseract


def to_wire(value):
    if isinstance(value, dict):
        return {str(k): to_wire(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_wire(v) for v in value]
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        array = np.asarray(value)
        return {"__array__": base64.b64encode(array.tobytes()).decode(),
                "dtype": array.dtype.name, "shape": list(array.shape)}  # fmt: skip
    return value


def from_wire(value):
    if isinstance(value, dict):
        if "__array__" in value:
            raw = base64.b64decode(value["__array__"])
            return np.frombuffer(raw, value["dtype"]).reshape(value["shape"]).copy()
        return {k: from_wire(v) for k, v in value.items()}
    if isinstance(value, list):
        return [from_wire(v) for v in value]
    return value


def jax_call(tesseract, kind, inputs, cotangent=None):
    """tesseract-jax's apply_tesseract: the outputs, or value_and_grad of
    ``sum(y * cotangent)`` with respect to every array input."""
    import jax
    import jax.numpy as jnp
    from tesseract_jax import apply_tesseract

    arrays = jax.tree.map(jnp.asarray, inputs)
    if kind == "apply":
        return apply_tesseract(tesseract, arrays)

    static = {
        k: v for k, v in inputs.items() if not hasattr(v, "shape") and not isinstance(v, dict)
    }
    dynamic = {k: v for k, v in arrays.items() if k not in static}

    def loss(d):
        return jnp.vdot(apply_tesseract(tesseract, {**d, **static})["y"], jnp.asarray(cotangent))

    value, grads = jax.jit(jax.value_and_grad(loss))(dynamic)
    return {"value": value, "grads": grads}


def main():
    clients = {}
    for line in sys.stdin:
        request = json.loads(line)
        try:
            # one client per (url, output folder): the first call to a url must not
            # decide the folder of the calls after it (a json+binref answer needs one)
            key = (request["url"], request.get("files"))
            if key not in clients:
                clients[key] = Tesseract.from_url(key[0], server_output_path=key[1])
            tesseract = clients[key]
            op, args = request["op"], from_wire(request.get("args", {}))
            if request.get("accept"):
                tesseract = tesseract.with_encoding(output_format=request["accept"])
            if op == "openapi":
                result = tesseract.openapi_schema
            elif op == "endpoints":
                result = tesseract.available_endpoints
            elif op == "jax":
                result = jax_call(tesseract, **args)
            else:
                result = getattr(tesseract, op)(**args)
            answer = {"ok": to_wire(result)}
        except Exception as exc:  # the test reads the kind of error
            answer = {"error": type(exc).__name__, "message": str(exc),
                      "trace": traceback.format_exc()}  # fmt: skip
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
