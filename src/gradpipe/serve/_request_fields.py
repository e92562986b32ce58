"""The fields each endpoint's request document takes, and the check of their types
before the component sees them."""

from __future__ import annotations

from typing import Any

from ._errors import HTTPError

__all__ = ["FIELDS", "check_fields", "input_error"]

FIELDS = {
    "apply": ({"inputs"}, {"keep_residuals", "batch_size", "batched_paths"}),
    "jacobian": ({"inputs", "jac_inputs", "jac_outputs"}, set()),
    "jvp": ({"inputs", "jvp_inputs", "jvp_outputs", "tangents"}, set()),
    "vjp": ({"vjp_inputs", "vjp_outputs", "cotangents"}, {"inputs", "handle"}),
    "abstract_eval": ({"abstract_inputs"}, set()),
}


def check_fields(endpoint: str, document: Any) -> dict[str, Any]:
    """``document`` if it is a map with exactly the fields of ``endpoint``, each of the
    right kind; else a 422 `HTTPError` naming the first wrong field."""
    if not isinstance(document, dict):
        raise HTTPError(422, "invalid_request", "the body must be a JSON object / msgpack map.")
    required, optional = FIELDS[endpoint]
    unknown = set(document) - required - optional
    if unknown:
        name = sorted(unknown)[0]
        raise HTTPError(422, "unknown_field", f"unknown field {name!r} for /{endpoint}.", name)
    missing = required - set(document)
    if missing:
        name = sorted(missing)[0]
        raise HTTPError(422, "missing_field", f"field {name!r} is required by /{endpoint}.", name)
    for key in (
        "jac_inputs",
        "jac_outputs",
        "jvp_inputs",
        "jvp_outputs",
        "vjp_inputs",
        "vjp_outputs",
        "batched_paths",
    ):
        value = document.get(key)
        if value is not None and not (
            isinstance(value, list) and all(isinstance(v, str) for v in value)
        ):
            raise HTTPError(422, "invalid_field", f"{key} must be a list of path strings.", key)
    for key in ("inputs", "abstract_inputs", "tangents", "cotangents"):
        if key in document and not isinstance(document[key], dict):
            raise HTTPError(422, "invalid_field", f"{key} must be an object.", key)
    return document


def input_error(exc: Exception, field: str | None = None) -> HTTPError:
    """The 422 for an error the component raised, its path under ``field``."""
    path = getattr(exc, "path", None)
    if isinstance(path, list | tuple):
        path = ".".join(map(str, path))
    if field and path and not str(path).startswith(field):
        path = f"{field}.{path}"
    return HTTPError(422, "invalid_input", str(exc), path or field)
