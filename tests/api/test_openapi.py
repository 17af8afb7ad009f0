"""The OpenAPI document and the router are built from one table: they must agree."""

from __future__ import annotations

from collections import Counter

from xce.api.app import ROUTE
from xce.api.openapi import openapi_path
from xce.api.routes import all_routes

from .conftest import Api

METHODS = {"get", "put", "post", "delete", "patch"}


def router_operations(api: Api) -> set[tuple[str, str]]:
    ops = set()
    for route in api.app.router.routes():
        if route.method == "HEAD":
            continue  # aiohttp adds HEAD next to GET on its own
        raw = getattr(route.resource, "_orig_path", None) or route.resource.canonical
        ops.add((openapi_path(raw), route.method.lower()))
    return ops


async def fetch_doc(api: Api) -> dict:
    return await api.call("GET", "/api/v1/openapi.json", 200)


def doc_operations(doc: dict) -> set[tuple[str, str]]:
    return {(path, m) for path, item in doc["paths"].items() for m in item if m in METHODS}


async def test_document_is_openapi_31(api: Api) -> None:
    doc = await fetch_doc(api)
    assert doc["openapi"].startswith("3.1")
    assert doc["info"]["title"] and doc["info"]["version"]
    assert doc["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"


async def test_every_routed_endpoint_is_documented(api: Api) -> None:
    missing = router_operations(api) - doc_operations(await fetch_doc(api))
    assert not missing, f"routes missing from OpenAPI: {sorted(missing)}"


async def test_every_documented_endpoint_is_routed(api: Api) -> None:
    extra = doc_operations(await fetch_doc(api)) - router_operations(api)
    assert not extra, f"OpenAPI documents routes the server lacks: {sorted(extra)}"


async def test_router_has_no_unguarded_route(api: Api) -> None:
    """Each routed handler comes from the route table, so auth knows its permission."""
    table = api.app[ROUTE]
    for route in api.app.router.routes():
        if route.method == "HEAD":
            continue
        assert route.name in table, f"{route.method} {route.resource.canonical} has no Route"
    assert len(table) == len(all_routes())


async def test_every_operation_is_complete(api: Api) -> None:
    doc = await fetch_doc(api)
    for path, item in doc["paths"].items():
        for method, op in item.items():
            where = f"{method.upper()} {path}"
            assert op.get("summary"), where
            assert op.get("x-permission"), where
            assert op.get("responses"), where
            assert op.get("operationId"), where
            assert any(code.startswith("2") for code in op["responses"]), where
            for code, resp in op["responses"].items():
                assert resp.get("description"), f"{where} {code}"
            if op["x-permission"] != "public":
                assert op.get("security") == [{"bearer": []}], where
            path_params = {p["name"] for p in op.get("parameters", []) if p["in"] == "path"}
            assert path_params == set(_names_in(path)), where


def _names_in(path: str) -> list[str]:
    return [part[1:-1] for part in path.split("/") if part.startswith("{")]


async def test_operation_ids_are_unique(api: Api) -> None:
    doc = await fetch_doc(api)
    ids = Counter(op["operationId"] for item in doc["paths"].values() for op in item.values())
    dup = [i for i, n in ids.items() if n > 1]
    assert not dup, f"duplicate operationIds: {dup}"


async def test_documented_ok_status_matches_route(api: Api) -> None:
    doc = await fetch_doc(api)
    for route in all_routes():
        op = doc["paths"][openapi_path(route.path)][route.method.lower()]
        assert str(route.ok_status) in op["responses"]
        assert op["x-permission"] == route.permission
        assert op["summary"] == route.summary


async def test_public_routes_are_only_health_and_openapi(api: Api) -> None:
    doc = await fetch_doc(api)
    public = {
        (p, m)
        for p, item in doc["paths"].items()
        for m, op in item.items()
        if op["x-permission"] == "public"
    }
    # Logging in cannot need a token: the login, OIDC device and MUNGE routes are public too; the
    # join routes carry their own credential (a one-time join token; the CA is public).
    assert public == {
        ("/healthz", "get"),
        ("/api/v1/openapi.json", "get"),
        ("/api/v1/auth/login", "post"),
        ("/api/v1/auth/device", "post"),
        ("/api/v1/auth/device/token", "post"),
        ("/api/v1/auth/authorize", "post"),
        ("/api/v1/auth/code", "post"),
        ("/api/v1/auth/munge", "get"),
        ("/api/v1/auth/munge", "post"),
        ("/api/v1/join/ca", "get"),
        ("/api/v1/join", "post"),
    }


def test_the_event_stream_is_documented_as_server_sent_events() -> None:
    from xce.api.openapi import document

    ok = document()["paths"]["/api/v1/events"]["get"]["responses"]["200"]
    assert list(ok["content"]) == ["text/event-stream"]
