"""The OpenAPI 3.1 document, generated from the route table (never written by hand)."""

from __future__ import annotations

import re
from functools import cache
from typing import Any

import msgspec

from xce import __version__
from xce.api.routes import all_routes
from xce.protocol.schemas import ErrorBody

_PARAM = re.compile(r"\{(\w+)(?::[^}]+)?\}")
# Path parameters with a documented shape; the rest are plain strings.
_PATH_SCHEMAS: dict[str, dict[str, Any]] = {
    "job_id": {
        "type": "string",
        "pattern": r"^[0-9]+(\[[0-9]+\])?$",
        "description": "a job id (17), task id (17[5]) or array id",
    },
}


def openapi_path(path: str) -> str:
    """`/jobs/{job_id}/files/{path:.+}` -> `/jobs/{job_id}/files/{path}`."""
    return _PARAM.sub(lambda m: "{" + m.group(1) + "}", path)


_REF = "#/components/schemas/{name}"


def _struct_schemas(routes: list[Any]) -> dict[Any, dict[str, Any]]:
    """The JSON Schema of every body and answer declared as a Struct, derived by msgspec from the
    declaration, written out in place (no `$ref`): each operation reads on its own."""
    declared = [ErrorBody, *(r.body for r in routes), *(r.response for r in routes)]
    kinds = list(dict.fromkeys(k for k in declared if k is not None and not isinstance(k, dict)))
    refs, components = msgspec.json.schema_components(kinds, ref_template=_REF)
    return {kind: _inline(ref, components) for kind, ref in zip(kinds, refs, strict=True)}


def _inline(schema: Any, components: dict[str, Any]) -> Any:
    """`schema` with every `$ref` to a component replaced by that component (the bodies
    nest a few Structs, never themselves)."""
    if isinstance(schema, list):
        return [_inline(item, components) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _inline(v, components) for k, v in schema.items() if k != "$ref"}
    if "$ref" in schema:
        target = _inline(components[schema["$ref"].rsplit("/", 1)[1]], components)
        out = {**target, **out}
    return out


def _schema(declared: Any, refs: dict[Any, dict[str, Any]]) -> dict[str, Any]:
    return declared if isinstance(declared, dict) else refs[declared]


@cache
def document() -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    routes = all_routes()
    refs = _struct_schemas(routes)
    error = {"content": {"application/json": {"schema": refs[ErrorBody]}}}
    for route in routes:
        path = openapi_path(route.path)
        op: dict[str, Any] = {
            "operationId": f"{route.method.lower()}_{route.handler.__name__}_{route.tag}"
            + "_"
            + "_".join(_PARAM.findall(route.path)),
            "summary": route.summary,
            "tags": [route.tag],
            "x-permission": route.permission,
            "parameters": [
                {
                    "name": name,
                    "in": "path",
                    "required": True,
                    "schema": _PATH_SCHEMAS.get(name, {"type": "string"}),
                }
                for name in _PARAM.findall(route.path)
            ]
            + [
                {
                    "name": p.name,
                    "in": "query",
                    "required": False,
                    "description": p.description,
                    "schema": p.schema,
                }
                for p in route.query
            ],
        }
        if route.body is not None:
            op["requestBody"] = {
                "required": route.permission != "host:admin",
                "content": {"application/json": {"schema": _schema(route.body, refs)}},
            }
        elif route.raw_body:
            op["requestBody"] = {
                "required": False,  # an empty file is a file
                "content": {
                    "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}
                },
            }
        if route.binary_response:
            ok = {
                "description": "file contents",
                "content": {
                    "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}
                },
            }
        elif route.text_response:
            ok = {
                "description": "text",
                "content": {route.text_response: {"schema": {"type": "string"}}},
            }
        else:
            ok = {
                "description": "success",
                "content": {"application/json": {"schema": _schema(route.response, refs)}},
            }
        op["responses"] = {
            str(route.ok_status): ok,
            "400": {"description": "invalid request", **error},
            "401": {"description": "no valid token", **error},
            "403": {"description": "not permitted, or address denied by the guard", **error},
            "404": {"description": "not found", **error},
            "409": {"description": "conflicts with the current state", **error},
            "413": {"description": "body too large", **error},
            "429": {
                "description": "rate limited or login locked by the guard; see Retry-After",
                **error,
            },
            "503": {"description": "cannot take writes now", **error},
        }
        if route.permission != "public":
            op["security"] = [{"bearer": []}]
        paths.setdefault(path, {})[route.method.lower()] = op
    return {
        "openapi": "3.1.0",
        "info": {"title": "XCE cluster manager API", "version": __version__},
        "paths": paths,
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
    }
