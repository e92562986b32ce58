"""The OpenAPI document a server publishes at ``/openapi.json``.

Besides the usual request and response schemas it carries an ``x-gradpipe``
extension that gradpipe's client reads: the leaf specs of the inputs and outputs
(path, dtype, shape, differentiable), the differentiable paths, the encodings and
whether batched ``/apply`` requests are accepted.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ._encoding import BINARY, JSON

__all__ = ["leaf_specs", "openapi_schema"]

_ARRAY = {
    "type": "object",
    "description": "An array: raw little-endian bytes in msgpack, base64 (or nested lists) "
    "in JSON.",
    "required": ["object_type", "dtype", "shape", "data"],
    "properties": {
        "object_type": {"const": "array"},
        "dtype": {"type": "string"},
        "shape": {"type": "array", "items": {"type": "integer", "minimum": 0}},
        "data": {
            "type": "object",
            "properties": {
                "buffer": {},
                "encoding": {"enum": ["raw", "base64", "json"]},
            },
        },
    },
}


def _jsonable(value: Any) -> Any:
    if value is Ellipsis:
        return "..."
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if hasattr(value, "name") and hasattr(value, "itemsize"):  # a NumPy dtype
        return value.name
    return str(value)


def leaf_specs(specs: Any) -> list[dict[str, Any]]:
    """The component's leaf specs as JSON-ready dicts (``...`` becomes ``"..."``)."""
    out = []
    for spec in specs:
        if hasattr(spec, "to_dict"):
            fields = spec.to_dict()
        elif dataclasses.is_dataclass(spec):
            fields = {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)}
        elif hasattr(spec, "model_dump"):
            fields = spec.model_dump()
        elif isinstance(spec, dict):
            fields = dict(spec)
        else:
            fields = {k: v for k, v in vars(spec).items() if not k.startswith("_")}
        out.append(_jsonable(fields))
    return out


def _model_schemas(model: Any, name: str) -> dict[str, dict[str, Any]]:
    """``{name: schema}`` for ``model`` and ``{name.Nested: schema}`` for each model it
    nests. Pydantic puts nested models under the schema's own ``$defs`` and refers to
    them as ``#/$defs/Nested``, which points nowhere once the schema is placed in an
    OpenAPI document: here they become components of their own, prefixed with
    ``name`` so that an input and an output model of the same name stay apart."""
    try:
        schema = model.model_json_schema(ref_template=f"#/components/schemas/{name}.{{model}}")
    except Exception as exc:  # a custom field type without a JSON schema
        return {name: {"type": "object", "description": f"(schema unavailable: {exc})"}}
    nested = schema.pop("$defs", {})
    return {name: schema, **{f"{name}.{key}": value for key, value in nested.items()}}


def _operation(summary: str, request: dict[str, Any], response: dict[str, Any]) -> dict:
    def content(schema: dict[str, Any]) -> dict[str, Any]:
        return {BINARY: {"schema": schema}, JSON: {"schema": schema}}

    return {
        "post": {
            "summary": summary,
            "requestBody": {"required": True, "content": content(request)},
            "responses": {
                "200": {"description": "OK", "content": content(response)},
                "401": {"description": "missing or wrong bearer token"},
                "410": {"description": "unknown or expired residual handle"},
                "413": {
                    "description": "body larger than --max-body-size, or a Jacobian larger "
                    "than --max-jacobian-size"
                },
                "422": {"description": "invalid request; the body names the path"},
            },
        }
    }


def openapi_schema(component: Any, *, max_batch: int) -> dict[str, Any]:
    """The OpenAPI 3.1 document for ``component``'s endpoints."""
    inputs = leaf_specs(component.input_spec())
    outputs = leaf_specs(component.output_spec())
    paths_list = {"type": "array", "items": {"type": "string"}}
    ref_in = {"$ref": "#/components/schemas/Inputs"}
    ref_out = {"$ref": "#/components/schemas/Outputs"}
    tree = {"type": "object", "additionalProperties": {"$ref": "#/components/schemas/Array"}}

    def obj(**props: Any) -> dict[str, Any]:
        return {"type": "object", "properties": props}

    return {
        "openapi": "3.1.0",
        "info": {
            "title": type(component).__name__,
            "version": "1",
            "description": "A gradpipe component: apply, jacobian, jvp, vjp, abstract_eval.",
        },
        "paths": {
            "/apply": _operation(
                "Evaluate the component.",
                obj(
                    inputs=ref_in,
                    keep_residuals={"type": "boolean"},
                    batch_size={"type": "integer"},
                    batched_paths=paths_list,
                ),
                obj(outputs=ref_out, handle={"type": ["string", "null"]}),
            ),
            "/jacobian": _operation(
                "Jacobian blocks {output path: {input path: array}}.",
                obj(inputs=ref_in, jac_inputs=paths_list, jac_outputs=paths_list),
                obj(jacobian={"type": "object"}),
            ),
            "/jvp": _operation(
                "Jacobian-vector product.",
                obj(inputs=ref_in, jvp_inputs=paths_list, jvp_outputs=paths_list, tangents=tree),
                obj(jvp=tree),
            ),
            "/vjp": _operation(
                "Vector-Jacobian product, from the inputs or from a residual handle.",
                obj(
                    inputs=ref_in,
                    handle={"type": "string"},
                    vjp_inputs=paths_list,
                    vjp_outputs=paths_list,
                    cotangents=tree,
                ),
                obj(vjp=tree),
            ),
            "/abstract_eval": _operation(
                "Output shapes and dtypes from input shapes and dtypes.",
                obj(abstract_inputs={"type": "object"}),
                obj(outputs={"type": "object"}),
            ),
            "/health": {
                "get": {"summary": "Liveness.", "responses": {"200": {"description": "OK"}}}
            },
            "/stats": {
                "get": {"summary": "Request counters.", "responses": {"200": {"description": "OK"}}}
            },
        },
        "components": {
            "schemas": {
                "Array": _ARRAY,
                **_model_schemas(component.input_model, "Inputs"),
                **_model_schemas(component.output_model, "Outputs"),
            }
        },
        "x-gradpipe": {
            "inputs": inputs,
            "outputs": outputs,
            "differentiable_inputs": [s["path"] for s in inputs if s.get("differentiable")],
            "differentiable_outputs": [s["path"] for s in outputs if s.get("differentiable")],
            "encodings": [BINARY, JSON],
            "batching": {"apply": True, "max_batch": max_batch},
        },
    }
