"""The OpenAPI 3.0 document of the admin API, generated from the routes themselves.

Every route built with ``api_route`` carries an ``ApiInfo``; this walks the routes (and mounted
sub-apps), takes the path parameters from the route's converters, the query parameters and the
request body type from ``ApiInfo`` (JSON schema by ``msgspec.json.schema_components``), so the
served spec lists exactly the routes that exist (a test checks both ways).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import msgspec
from starlette.convertors import IntegerConvertor
from starlette.routing import BaseRoute, Mount, Route

from magnetar.admin.common import ApiInfo

_PARAM = re.compile(r"{(\w+)(:\w+)?}")
_REF = "#/components/schemas/{name}"


def api_routes(routes: list[BaseRoute], prefix: str = "") -> Iterator[tuple[str, Route, ApiInfo]]:
    """(full path, route, info) of every documented route, mounts included."""
    for route in routes:
        if isinstance(route, Mount):
            yield from api_routes(list(route.routes), prefix + route.path)
        elif isinstance(route, Route):
            info = getattr(route, "api", None)
            if isinstance(info, ApiInfo):
                yield prefix + route.path, route, info


def openapi_spec(routes: list[BaseRoute], *, title: str, version: str, server_path: str) -> dict[str, Any]:
    bodies = sorted({info.body for _, _, info in api_routes(routes) if info.body is not None}, key=repr)
    schemas, components = msgspec.json.schema_components(bodies, ref_template=_REF)
    body_schema = dict(zip(bodies, schemas, strict=True))
    paths: dict[str, dict[str, Any]] = {}
    for path, route, info in api_routes(routes):
        parameters: list[dict[str, Any]] = [
            {"name": name, "in": "path", "required": True,
             "schema": {"type": "integer", "minimum": 0} if isinstance(conv, IntegerConvertor) else {"type": "string"}}
            for name, conv in route.param_convertors.items()
        ]
        parameters += [{"name": name, "in": "query", "required": False, "schema": {"type": kind}}
                       for name, kind in info.query]
        operation: dict[str, Any] = {
            "summary": info.summary,
            "operationId": f"{route.name}_{len(paths)}_{'_'.join(sorted(route.methods or ()))}",
            "parameters": parameters,
            "responses": {
                "200": {"description": "OK (JSON)"},
                "204": {"description": "Done"},
                "400": {"description": "Bad request body", "content": _reason()},
                "401": {"description": "Authentication required", "content": _reason()},
                "403": {"description": "The role lacks the permission", "content": _reason()},
                "404": {"description": "Not found", "content": _reason()},
                "409": {"description": "Already exists / not empty", "content": _reason()},
                "412": {"description": "Invalid name or value", "content": _reason()},
            },
        }
        if info.body is not None:
            operation["requestBody"] = {"required": info.body_required,
                                        "content": {"application/json": {"schema": body_schema[info.body]}}}
        methods = sorted(m for m in (route.methods or ()) if m != "HEAD")
        entry = paths.setdefault(_PARAM.sub(r"{\1}", path), {})
        for method in methods:
            entry[method.lower()] = operation
    return {
        "openapi": "3.0.3",
        "info": {"title": title, "version": version},
        "servers": [{"url": server_path}],
        "paths": paths,
        "components": {"schemas": {**components, "Reason": {
            "type": "object", "properties": {"reason": {"type": "string"}}, "required": ["reason"]}}},
    }


def _reason() -> dict[str, Any]:
    return {"application/json": {"schema": {"$ref": "#/components/schemas/Reason"}}}
