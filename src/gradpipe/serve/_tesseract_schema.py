"""The OpenAPI document of the tesseract API, both ways.

Serving: `tesseract_openapi` writes what tesseract-core's clients read from
``/openapi.json``: the endpoint paths (which endpoints exist), the input and output
models under ``Apply_InputSchema`` / ``Apply_OutputSchema``, the differentiable
leaves under ``ApplyInputSchema`` / ``ApplyOutputSchema`` (``differentiable_arrays``,
patterns such as ``"layers.[].w"``) and the encodings a request may ask for
(``x-supported-output-formats``, ``-gpu-transports``, ``-compressions``).

Calling: `read_tesseract_openapi` reads the same document from a real server into
what gradpipe's remote component needs.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping, Sequence
from typing import Any

import pydantic

from ._schema import _model_schemas, leaf_specs
from ._tesseract_wire import dict_patterns, tesseract_pattern

__all__ = ["TESSERACT_ENDPOINTS", "read_tesseract_openapi", "tesseract_openapi"]

TESSERACT_ENDPOINTS = (
    "apply",
    "jacobian",
    "jacobian_vector_product",
    "vector_jacobian_product",
    "abstract_eval",
)


def _unwrap(annotation: Any) -> Any:
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin is typing.Union or str(origin) == "<class 'types.UnionType'>":
            options = [a for a in typing.get_args(annotation) if a is not type(None)]
            annotation = options[0] if options else annotation
            if not options:
                return annotation
        else:
            return annotation


def _containers(annotation: Any, pattern: str, out: dict[str, str]) -> None:
    """Record, for each list or dict under ``annotation``, its gradpipe pattern."""
    annotation = _unwrap(annotation)
    origin = typing.get_origin(annotation)
    if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
        for name, field in annotation.model_fields.items():
            _containers(field.annotation, f"{pattern}.{name}" if pattern else name, out)
    elif origin is not None and isinstance(origin, type) and issubclass(origin, Mapping):
        out[pattern] = "dict"
        args = typing.get_args(annotation)
        if len(args) == 2:
            _containers(args[1], f"{pattern}[*]", out)
    elif (
        origin is not None
        and isinstance(origin, type)
        and issubclass(origin, Sequence)
        and origin is not str
    ):
        out[pattern] = "list"
        args = typing.get_args(annotation)
        if args:
            _containers(args[0], f"{pattern}[*]", out)


def _to_peer_pattern(pattern: str, kinds: dict[str, str]) -> str:
    out, prefix, i = "", "", 0
    while i < len(pattern):
        if pattern.startswith("[*]", i):
            out += ".{}" if kinds.get(prefix) == "dict" else ".[]"
            prefix += "[*]"
            i += 3
            continue
        j = i + 1
        while j < len(pattern) and pattern[j] not in ".[":
            j += 1
        name = pattern[i:j].lstrip(".")
        out += f".{name}" if out else name
        prefix += f".{name}" if prefix else name
        i = j
    return out


def _differentiable(specs: list[dict[str, Any]], model: type) -> dict[str, dict[str, Any]]:
    kinds: dict[str, str] = {}
    _containers(model, "", kinds)
    out = {}
    for spec in specs:
        if spec.get("kind") == "array" and spec.get("differentiable"):
            shape = spec["shape"]
            shape = None if shape is None or "..." in shape else list(shape)
            out[_to_peer_pattern(spec["path"], kinds)] = {"shape": shape, "dtype": spec["dtype"]}
    return out


def _post(summary: str, request: str, response: str) -> dict[str, Any]:
    def content(name: str) -> dict[str, Any]:
        return {"application/json": {"schema": {"$ref": f"#/components/schemas/{name}"}}}

    return {
        "post": {
            "summary": summary,
            "requestBody": {"required": True, "content": content(request)},
            "responses": {
                "200": {"description": "Successful Response", "content": content(response)},
                "422": {"description": "Validation Error",
                        "content": content("HTTPValidationError")},
            },
        }
    }  # fmt: skip


def tesseract_openapi(component: Any, formats: Sequence[str]) -> dict[str, Any]:
    """The ``/openapi.json`` of ``component`` served through the tesseract API."""
    inputs = leaf_specs(component.input_spec())
    outputs = leaf_specs(component.output_spec())
    obj = {"type": "object"}
    schemas: dict[str, Any] = {
        **_model_schemas(component.input_model, "Apply_InputSchema"),
        **_model_schemas(component.output_model, "Apply_OutputSchema"),
        "ApplyInputSchema": {
            "type": "object",
            "properties": {"inputs": {"$ref": "#/components/schemas/Apply_InputSchema"}},
            "required": ["inputs"],
            "differentiable_arrays": _differentiable(inputs, component.input_model),
        },
        "ApplyOutputSchema": {
            "$ref": "#/components/schemas/Apply_OutputSchema",
            "differentiable_arrays": _differentiable(outputs, component.output_model),
        },
        "HTTPValidationError": {
            "type": "object",
            "properties": {"detail": {"type": "array", "items": obj}},
        },
    }
    for name in ("Jacobian", "JVP", "VJP", "AbstractEval"):
        schemas[f"{name}InputSchema"] = schemas[f"{name}OutputSchema"] = obj
    return {
        "openapi": "3.1.0",
        "info": {"title": type(component).__name__, "version": "1",
                 "description": "A gradpipe component, served through the tesseract API."},
        "paths": {
            "/apply": _post("Apply the component to the inputs.", "ApplyInputSchema",
                            "ApplyOutputSchema"),
            "/jacobian": _post("The Jacobian of jac_outputs with respect to jac_inputs.",
                               "JacobianInputSchema", "JacobianOutputSchema"),
            "/jacobian_vector_product": _post("Jacobian-vector product.", "JVPInputSchema",
                                              "JVPOutputSchema"),
            "/vector_jacobian_product": _post("Vector-Jacobian product.", "VJPInputSchema",
                                              "VJPOutputSchema"),
            "/health": {"get": {"summary": "Health status.",
                                "responses": {"200": {"description": "Successful Response"}}}},
            "/abstract_eval": _post("Output shapes and dtypes from input shapes and dtypes.",
                                    "AbstractEvalInputSchema", "AbstractEvalOutputSchema"),
        },
        "components": {"schemas": schemas},
        "x-supported-output-formats": list(formats),
        "x-supported-gpu-transports": ["none"],
        "x-supported-compressions": ["none"],
    }  # fmt: skip


def read_tesseract_openapi(document: dict[str, Any]) -> dict[str, Any]:
    """What a remote component needs from a tesseract server's ``/openapi.json``:
    ``{"endpoints", "differentiable_inputs", "differentiable_outputs", "dicts",
    "formats"}``, paths in gradpipe's patterns (``layers[*].w``).

    Raises `ValueError` for a document that is not a tesseract API's.
    """
    try:
        endpoints = [path.lstrip("/") for path in document["paths"]]
        schemas = document["components"]["schemas"]
        diff_in = schemas["ApplyInputSchema"]["differentiable_arrays"]
        diff_out = schemas["ApplyOutputSchema"]["differentiable_arrays"]
    except (KeyError, TypeError):
        raise ValueError(
            "this /openapi.json is not a tesseract API's (it lacks paths or the "
            "differentiable_arrays of ApplyInputSchema and ApplyOutputSchema)"
        ) from None
    if "apply" not in endpoints:
        raise ValueError("this tesseract API has no /apply endpoint")
    return {
        "endpoints": endpoints,
        "differentiable_inputs": [tesseract_pattern(p) for p in diff_in],
        "differentiable_outputs": [tesseract_pattern(p) for p in diff_out],
        "dicts": dict_patterns([*diff_in, *diff_out]),
        "formats": list(document.get("x-supported-output-formats") or ["json"]),
    }
