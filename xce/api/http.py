"""Shared pieces of the HTTP adapter: app keys, JSON bodies, identities."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from aiohttp import web

from xce.api.routes import Route
from xce.auth.guard import GuardState
from xce.auth.pending_logins import PendingLogins
from xce.auth.runtime import AuthRuntime
from xce.config.settings import Config, ControllerSettings
from xce.controller.bus import EventBus
from xce.controller.cluster_history import ClusterHistory
from xce.controller.history import JobHistory
from xce.controller.service import ControllerService
from xce.controller.tails import OutputTails
from xce.controller.usage_series import UsageSeries
from xce.controller.workers import WorkerGateway
from xce.core.errors import InvalidRequest
from xce.protocol import decoding
from xce.sched.plugins import PluginRegistry


class _Epochs(Protocol):
    @property
    def epoch(self) -> int: ...


class _Lease(Protocol):
    def worker_contact(self) -> None: ...


class CandidateNode(Protocol):
    """What the API asks of this controller's HA node. The node (xce/ha/node.py) sits above
    the API, which names no class of it: it is handed in by the server and answers these."""

    @property
    def role(self) -> str: ...
    @property
    def solo(self) -> bool: ...
    @property
    def url(self) -> str: ...
    @property
    def candidates(self) -> Sequence[str]: ...
    @property
    def epochs(self) -> _Epochs: ...
    @property
    def lease(self) -> _Lease | None: ...
    def claimed_epoch(self, epoch: int) -> None: ...
    def health(self) -> dict[str, Any]: ...
    def view(self) -> dict[str, Any]: ...
    async def switchover(self, target: str | None) -> dict[str, Any]: ...
    def answer_vote(self, body: Any) -> dict[str, Any]: ...


# The controller's components, built and connected by xce/server/compose.py.
SERVICE = web.AppKey("service", ControllerService)
GATEWAY = web.AppKey("gateway", WorkerGateway)
SETTINGS = web.AppKey("settings", ControllerSettings)
CONFIG = web.AppKey("config", Config)
REQUEST_ID = web.RequestKey("request_id", str)
AUTH = web.AppKey("auth", AuthRuntime)
# The HA node (absent in the API tests).
HA: web.AppKey[CandidateNode] = web.AppKey("ha")
ROUTE: web.AppKey[dict[str, Route]] = web.AppKey("routes", dict)  # router name -> route
HISTORY = web.AppKey("history", JobHistory)
TAILS = web.AppKey("tails", OutputTails)
BUS = web.AppKey("bus", EventBus)
LOGINS = web.AppKey("pending_logins", PendingLogins)  # OIDC browser logins in progress
GUARD = web.AppKey("guard", GuardState)
PLUGINS = web.AppKey("plugins", PluginRegistry)  # the scheduler plugins queues may choose
CLUSTER_HISTORY = web.AppKey("cluster_history", ClusterHistory)  # the sampled ring
USAGE = web.AppKey("usage_series", UsageSeries)  # running jobs' CPU and memory over time


@dataclass(frozen=True)
class Identity:
    """Who is calling, from a verified token: user, groups, roles and the permissions the
    roles grant (`xce.core.rbac`). `kind` is "user" (a login) or "service" (worker, standby)."""

    user: str
    groups: tuple[str, ...] = ()
    roles: tuple[str, ...] = ()
    permissions: frozenset[str] = frozenset()
    kind: str = "user"
    host: str | None = None  # set for a worker token bound to one host (xce.auth.tokens)
    # The token's issue and expiry times (epoch seconds); None for an identity without a
    # token (a local socket's peer, anonymous). What the caller registers lives no longer.
    issued_at: float | None = None
    expires_at: float | None = None

    @property
    def name(self) -> str:
        return self.user

    @property
    def role(self) -> str:
        """The roles as one label, for messages."""
        return ",".join(self.roles) or "none"

    def to_json(self) -> dict[str, Any]:
        return {
            "user": self.user,
            "groups": list(self.groups),
            "roles": list(self.roles),
            "permissions": sorted(self.permissions),
            "kind": self.kind,
        }


IDENTITY = web.RequestKey("identity", Identity)


def _refuse_constant(name: str) -> Any:
    raise InvalidRequest(f"{name} is not a number JSON allows")


def _number(text: str) -> int | float:
    """JSON Schema counts 3.0 as an integer: read integral numbers as ints (within int64)."""
    value = float(text)
    return int(value) if value.is_integer() and abs(value) < 2**63 else value


# Digits an integer literal may have: no field takes more than int64 (19), and Python itself
# refuses to convert past 4300 with a message about sys.set_int_max_str_digits.
MAX_INT_DIGITS = 64


class _LongInteger:
    """What an integer literal of more than MAX_INT_DIGITS digits reads as: a marker, found
    after the parse so that the error can name the field it was given for."""

    def __init__(self, digits: int) -> None:
        self.digits = digits


def _integer(text: str) -> int | _LongInteger:
    digits = len(text) - text.startswith("-")
    return int(text) if digits <= MAX_INT_DIGITS else _LongInteger(digits)


def _long_integer_path(value: Any) -> tuple[str, int] | None:
    """(field path, digits) of the first over-long integer in `value`, or None. Iterative:
    the body is the attacker's."""
    stack: list[tuple[Any, str]] = [(value, "body")]
    while stack:
        item, path = stack.pop()
        if isinstance(item, _LongInteger):
            return path, item.digits
        if isinstance(item, dict):
            stack.extend((v, f"{path}.{k}") for k, v in reversed(item.items()))
        elif isinstance(item, list):
            stack.extend((v, f"{path}[{i}]") for i, v in reversed(list(enumerate(item))))
    return None


def _strict_loads(text: str) -> Any:
    longest = 0

    def integer(literal: str) -> int | _LongInteger:
        nonlocal longest
        read = _integer(literal)
        if isinstance(read, _LongInteger):
            longest = max(longest, read.digits)
        return read

    body = json.loads(text, parse_constant=_refuse_constant, parse_float=_number, parse_int=integer)
    if longest and (found := _long_integer_path(body)) is not None:
        path, digits = found
        raise InvalidRequest(
            f"{path} is an integer of {digits} digits: no field takes more than {MAX_INT_DIGITS}"
        )
    return body


def bearer_token(header: str) -> str:
    """The token of an `Authorization: Bearer TOKEN` header ("" when there is none). The
    one parser of that header: authentication and the guard's per-token rate limit must
    agree on what the token is, or a respelled header ("bearer", extra spaces) would be a
    fresh rate-limit bucket for the same token."""
    scheme, _, token = header.strip().partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def route_of(request: web.Request) -> Any:
    """The `Route` (table entry) the request matched, or None (404s)."""
    info = request.match_info.route
    return request.app[ROUTE].get(getattr(info, "name", None) or "")


def identity(request: web.Request) -> Identity:
    return request[IDENTITY]


# Built once: `json.dumps` with options builds a new encoder on every call (same output).
_ENCODER = json.JSONEncoder(default=str, allow_nan=False)


def json_response(data: Any, status: int = 200) -> web.Response:
    return web.json_response(data, status=status, dumps=_ENCODER.encode)


MAX_JSON_DEPTH = 64  # arrays and objects inside each other; real bodies nest 3 or 4 deep
_BODY = web.RequestKey("json_body", object)  # the parsed body, or the InvalidRequest it gave
_UNREAD = object()


def _check_depth(value: Any) -> None:
    """Refuse bodies nested deeper than MAX_JSON_DEPTH, without recursion (the body is the
    attacker's, so the walk must not be able to exhaust the stack itself)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = (
            item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        )
        for child in children:
            if isinstance(child, (dict, list)):
                if depth + 1 > MAX_JSON_DEPTH:
                    raise InvalidRequest(
                        f"the body is nested more than {MAX_JSON_DEPTH} levels deep"
                    )
                stack.append((child, depth + 1))


def parse_json_text(text: str | bytes) -> Any:
    """The one JSON decoder for request bodies (every route, the guard, the HA door): strict
    numbers, a depth limit and valid Unicode; every problem is an `InvalidRequest` (400).
    The size limit is the application's `client_max_size`, applied while reading."""
    try:
        body = _strict_loads(text if isinstance(text, str) else text.decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidRequest(f"the body is not valid JSON: {exc}") from None
    except RecursionError:
        raise InvalidRequest(f"the body is nested more than {MAX_JSON_DEPTH} levels deep") from None
    except ValueError as exc:  # e.g. an integer literal longer than Python converts
        raise InvalidRequest(f"the body is not valid JSON: {exc}") from None
    _check_depth(body)
    try:
        json.dumps(body, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidRequest(
            "the body holds text that is not valid Unicode "
            "(a lone surrogate escape such as \\ud800)"
        ) from None
    return body


async def json_body(request: web.Request) -> Any:
    """The request's body parsed by `parse_json_text`, read once: the guard looks at the
    login body before the handler does, and both must see the same answer."""
    cached = request.get(_BODY, _UNREAD)
    if cached is _UNREAD:
        try:
            cached = parse_json_text(await request.read())
        except InvalidRequest as exc:
            cached = exc
        request[_BODY] = cached
    if isinstance(cached, InvalidRequest):
        raise cached
    return cached


B = TypeVar("B")


async def read_body(request: web.Request, kind: type[B]) -> B:
    """The JSON body decoded straight from its bytes into the Struct `kind`
    (`xce.protocol.decoding`); every problem is a 400 naming the field. A body something read
    before (the guard reads the login body) is converted from that reading instead."""
    if request.content_type != "application/json":
        raise InvalidRequest("the body must be JSON (Content-Type: application/json)")
    cached = request.get(_BODY, _UNREAD)
    if cached is _UNREAD:
        return decoding.decode(await request.read(), kind, _parse_cached(request))
    if isinstance(cached, InvalidRequest):
        raise cached
    return decoding.convert(cached, kind)


def _parse_cached(request: web.Request) -> Any:
    """`parse_json_text` that leaves its answer where `json_body` looks for it."""

    def parse(raw: bytes) -> Any:
        try:
            body = parse_json_text(raw)
        except InvalidRequest as exc:
            request[_BODY] = exc
            raise
        request[_BODY] = body
        return body

    return parse


def query_int(request: web.Request, name: str, default: int, lo: int, hi: int) -> int:
    raw = request.query.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InvalidRequest(f"query parameter {name} must be an integer, got {raw!r}") from None
    if not lo <= value <= hi:
        raise InvalidRequest(f"query parameter {name} must be between {lo} and {hi}")
    return value
