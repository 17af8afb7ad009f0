"""User admin routes over the `configfile` backend: list, add, change password, delete.

Users of LDAP, PAM or OIDC are managed in those systems; these routes edit the first
configured users file (404 `not_found` when there is none). Passwords are hashed in a thread;
responses and the audit log never hold a hash or a password.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from xce.api.auth import runtime
from xce.api.http import SERVICE, identity, json_response, read_body
from xce.api.routes import Route
from xce.auth.backends.configfile import ConfigFileBackend, UsersFile
from xce.auth.passwords import verify_or_burn
from xce.auth.runtime import Session
from xce.core.errors import Forbidden, InvalidRequest, NotFound
from xce.core.rbac import allows
from xce.protocol.admin import Passwd, UserAdd


def _users(request: web.Request) -> UsersFile:
    for backend in runtime(request).backends:
        if isinstance(backend, ConfigFileBackend):
            return backend.users
    raise NotFound("no users file is configured ([[auth.backend]] type configfile)")


async def _replicate(request: web.Request) -> None:
    """The users file to the standbys (xce/ha/files.py); in sync mode before the answer."""
    service = request.app.get(SERVICE)
    if service is not None:
        await service.files_replicated(service.ship_files([("users", "put")]))


async def _audit(request: web.Request, action: str, user: str, outcome: str = "ok") -> None:
    await runtime(request).audit.record(
        identity(request).user, action, f"user:{user}", outcome, remote=request.remote or ""
    )


async def list_(request: web.Request) -> web.Response:
    """`roles` are the entry's own; `effective_roles` what a login gets (its own and its
    groups' roles through `[auth.groups]`, else the default roles): an entry with none of
    its own is still a `user`, and the listing should say so rather than show nothing."""
    users = _users(request).load()
    role_map = runtime(request).roles
    return json_response(
        {
            "users": [
                {
                    **users[n].public(),
                    "effective_roles": list(role_map.roles_for(users[n].groups, users[n].roles)),
                }
                for n in sorted(users)
            ]
        }
    )


async def add(request: web.Request) -> web.Response:
    body = await read_body(request, UserAdd)
    roles = body.roles
    unknown = [r for r in roles if r not in runtime(request).roles.roles]
    if unknown:
        raise NotFound(
            f"no role {unknown[0]} (roles: {', '.join(sorted(runtime(request).roles.roles))})"
        )
    entry = await asyncio.to_thread(
        _users(request).add, body.user, body.password, body.groups, roles
    )
    await _replicate(request)
    await _audit(request, "user.add", entry.name)
    return json_response(entry.public(), status=201)


async def passwd(request: web.Request) -> web.Response:
    body = await read_body(request, Passwd)
    who, name = identity(request), request.match_info["name"]
    admin = allows(who.permissions, "user:admin")
    if name != who.user and not admin:
        raise Forbidden(f"{who.user} may only change their own password")
    users = _users(request)
    if not admin:
        # A stolen session (a token left in a shell) must not be enough to take the account
        # over: changing one's own password needs the current one, like passwd(1).
        if body.old_password is None:
            raise InvalidRequest("old_password is required to change your own password")
        entry = users.load().get(name)
        ok = await asyncio.to_thread(
            verify_or_burn, body.old_password, entry.password if entry else None
        )
        if not ok:
            await _audit(request, "user.passwd", name, "denied")
            raise Forbidden("the current password (old_password) is wrong")
    await asyncio.to_thread(users.set_password, name, body.password)
    # Whoever held the old password may hold a token from it: every token of the user
    # issued until now stops working, as after `xce token revoke`.
    auth = runtime(request)
    revoked = auth.tokens.revocations.revoke(name)
    await _replicate(request)
    await _audit(request, "user.passwd", name)
    answer = {"user": name, "changed": True, "tokens_revoked_before": revoked}
    if name == who.user and who.kind == "user":
        # The caller's own session ended with the rest: hand back a fresh one (issued after
        # the revocation), so changing one's password does not log one out here.
        token, expires = auth.tokens.issue(who.user, who.groups, who.roles)
        answer["session"] = Session(
            token, expires, who.user, who.groups, who.roles, who.permissions
        ).to_json()
    return json_response(answer)


async def delete(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    await asyncio.to_thread(_users(request).delete, name)
    runtime(request).tokens.revocations.revoke(name)
    await _replicate(request)
    await _audit(request, "user.delete", name)
    return json_response({"user": name, "deleted": True})


ROUTES = [
    Route(
        "GET",
        "/api/v1/users",
        list_,
        "List the users of the users file (no hashes)",
        "user:admin",
        "users",
    ),
    Route(
        "POST",
        "/api/v1/users",
        add,
        "Add a user to the users file",
        "user:admin",
        "users",
        body=UserAdd,
        ok_status=201,
    ),
    Route(
        "POST",
        "/api/v1/users/{name}/password",
        passwd,
        "Set a user's password (your own, or anyone's with user:admin)",
        "authenticated",
        "users",
        body=Passwd,
    ),
    Route(
        "DELETE",
        "/api/v1/users/{name}",
        delete,
        "Delete a user from the users file and revoke their tokens",
        "user:admin",
        "users",
    ),
]
