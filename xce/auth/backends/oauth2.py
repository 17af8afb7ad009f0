"""Login with an OpenID Connect provider (Keycloak, Dex, Entra ID, Okta, oidc-provider ...).

Two flows, both ending in a verified ID token (see `oidc_provider` for what "verified" means):
- the device authorization grant (RFC 8628) for the CLI and the TUI over SSH: `start`
  returns a user code and a URL to open on any device; `poll` answers None while the user has
  not finished, and obeys the provider's `interval` and `slow_down` itself (an early poll
  returns None without asking the provider);
- authorization code with PKCE (RFC 7636, S256 only) where a browser exists.

The principal's name is the `user_claim` (default `preferred_username`) and its groups the
`groups_claim` (a list or a string; `""` for none). When the ID token lacks them, the
provider's userinfo endpoint is asked with the access token (its `sub` must match).
HTTP goes through aiohttp (the controller is async); TLS is validated against `ca_file` or
the system CAs, and only https:// issuers are accepted.
"""

from __future__ import annotations

import base64
import hashlib
import re
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from xce.auth.backends.base import AuthDenied, BackendUnavailable, DeviceAuthorization, Principal
from xce.auth.backends.oidc_provider import ASYMMETRIC_ALGORITHMS, OidcProvider, OidcSettings
from xce.auth.backends.options import Strings, Text, ZeroOrMore, ca_file, secret
from xce.config.check import PosFloat, Table, convert
from xce.core.errors import InvalidRequest
from xce.core.validation import Invalid

DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
_VERIFIER = re.compile(r"[A-Za-z0-9\-._~]{43,128}")


@dataclass
class _DevicePoll:
    """What RFC 8628 asks a client to remember between polls of one device code."""

    interval: float
    next_poll_at: float
    expires_at: float


def pkce_challenge(code_verifier: str) -> str:
    """The S256 code challenge: base64url(SHA-256(verifier)) without padding."""
    digest = hashlib.sha256(code_verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


class OAuth2Backend:
    """One OpenID Connect provider and client registration; implements `OidcBackend`."""

    def __init__(self, settings: OidcSettings) -> None:
        self.settings = settings
        self.name = settings.name
        self.provider = OidcProvider(settings)
        self._polls: dict[str, _DevicePoll] = {}

    # --- client authentication -----------------------------------------------------------

    def _client_form(self, form: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
        """Public clients send client_id; confidential ones use client_secret_basic (an
        Authorization header from `aiohttp.encode_basic_auth`: `aiohttp.BasicAuth` and the
        `auth=` argument are deprecated and go away in aiohttp 4)."""
        if not self.settings.client_secret:
            return {**form, "client_id": self.settings.client_id}, {}
        quote = urllib.parse.quote_plus  # RFC 6749 2.3.1: form-encode, then Basic
        return form, {
            "Authorization": aiohttp.encode_basic_auth(
                quote(self.settings.client_id), quote(self.settings.client_secret)
            )
        }

    async def _token_request(self, form: dict[str, str]) -> tuple[int, dict[str, Any]]:
        data, headers = self._client_form(form)
        return await self.provider.request(
            "POST", await self.provider.endpoint("token_endpoint"), data=data, headers=headers
        )

    # --- device authorization grant (RFC 8628) -------------------------------------------

    async def start_device_flow(self) -> DeviceAuthorization:
        """Ask the provider for a device code and the user code to show."""
        now = time.monotonic()
        self._polls = {k: p for k, p in self._polls.items() if p.expires_at > now}
        url = await self.provider.endpoint("device_authorization_endpoint")
        data, headers = self._client_form({"scope": " ".join(self.settings.scopes)})
        status, body = await self.provider.request("POST", url, data=data, headers=headers)
        if status != 200:
            raise BackendUnavailable(
                f"device authorization refused ({status}): "
                f"{body.get('error')} {body.get('error_description', '')}"
            )
        try:
            auth_info = DeviceAuthorization(
                device_code=str(body["device_code"]),
                user_code=str(body["user_code"]),
                verification_uri=str(body["verification_uri"]),
                verification_uri_complete=str(
                    body.get("verification_uri_complete") or body["verification_uri"]
                ),
                expires_in=int(body["expires_in"]),
                interval=int(body.get("interval", 5)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise BackendUnavailable(f"device authorization answer lacks {exc}") from exc
        self._polls[auth_info.device_code] = _DevicePoll(
            auth_info.interval, now, now + auth_info.expires_in
        )
        return auth_info

    def device_poll_interval(self, device_code: str) -> float | None:
        """Seconds the caller should wait between polls (grows on slow_down), if known."""
        poll = self._polls.get(device_code)
        return poll.interval if poll else None

    async def poll_device_flow(self, device_code: str) -> Principal | None:
        """The principal once the user approved; None while pending (or polled too early);
        AuthDenied when the user refused or the code expired or is unknown."""
        now = time.monotonic()
        poll = self._polls.get(device_code)
        if poll is not None and now < poll.next_poll_at:
            return None
        status, body = await self._token_request(
            {"grant_type": DEVICE_GRANT, "device_code": device_code}
        )
        if status == 200:
            self._polls.pop(device_code, None)
            return await self._principal_from_tokens(body)
        error = body.get("error")
        if error in ("authorization_pending", "slow_down"):
            if poll is None:
                poll = self._polls[device_code] = _DevicePoll(5.0, now, now + 600)
            if error == "slow_down":
                poll.interval += 5  # RFC 8628 3.5
            poll.next_poll_at = now + poll.interval
            return None
        self._polls.pop(device_code, None)
        if error == "access_denied":
            raise AuthDenied("the device login was denied by the user")
        if error == "expired_token":
            raise AuthDenied("the device code expired; start the login again")
        raise AuthDenied(
            f"the provider refused the device code: {error} "
            f"{body.get('error_description', '')}".rstrip()
        )

    # --- authorization code + PKCE (RFC 7636) --------------------------------------------

    async def authorization_url(self, redirect_uri: str, state: str, code_verifier: str) -> str:
        """Where to send the browser; the challenge is S256 of `code_verifier`."""
        if not _VERIFIER.fullmatch(code_verifier):
            raise InvalidRequest("code_verifier must be 43-128 characters of A-Z a-z 0-9 -._~")
        if not state:
            raise InvalidRequest("state may not be empty")
        endpoint = await self.provider.endpoint("authorization_endpoint")
        query = urllib.parse.urlencode(
            {
                "response_type": "code",
                "client_id": self.settings.client_id,
                "redirect_uri": redirect_uri,
                "scope": " ".join(self.settings.scopes),
                "state": state,
                "code_challenge": pkce_challenge(code_verifier),
                "code_challenge_method": "S256",
            }
        )
        return endpoint + ("&" if "?" in endpoint else "?") + query

    async def exchange_code(self, code: str, redirect_uri: str, code_verifier: str) -> Principal:
        """Trade the code from the redirect for tokens; AuthDenied when the provider refuses
        (wrong verifier, reused or foreign code)."""
        status, body = await self._token_request(
            {
                "grant_type": "authorization_code",
                "code": code,
                "redirect_uri": redirect_uri,
                "code_verifier": code_verifier,
            }
        )
        if status != 200:
            raise AuthDenied(
                f"the provider refused the authorization code: "
                f"{body.get('error')} {body.get('error_description', '')}".rstrip()
            )
        return await self._principal_from_tokens(body)

    # --- tokens -> principal ---------------------------------------------------------------

    async def principal_from_token(self, token: str) -> Principal:
        """Verify an ID token and map its claims; raises AuthDenied."""
        return self._principal(await self.provider.verify_id_token(token))

    async def _principal_from_tokens(self, tokens: dict[str, Any]) -> Principal:
        id_token = tokens.get("id_token")
        if not isinstance(id_token, str):
            raise AuthDenied("the provider returned no ID token (is 'openid' in scopes?)")
        claims = await self.provider.verify_id_token(id_token)
        wanted = [
            c
            for c in (self.settings.user_claim, self.settings.groups_claim)
            if c and c not in claims
        ]
        access = tokens.get("access_token")
        if (
            wanted
            and isinstance(access, str)
            and "userinfo_endpoint" in await self.provider.metadata()
        ):
            claims = {**await self._userinfo(access, claims["sub"]), **claims}
        return self._principal(claims)

    async def _userinfo(self, access_token: str, sub: str) -> dict[str, Any]:
        status, info = await self.provider.request(
            "GET",
            await self.provider.endpoint("userinfo_endpoint"),
            headers={"Authorization": f"Bearer {access_token}"},
        )
        if status != 200 or info.get("sub") != sub:
            raise AuthDenied("the provider's userinfo does not match the ID token")
        return info

    def _principal(self, claims: dict[str, Any]) -> Principal:
        user = claims.get(self.settings.user_claim)
        if not isinstance(user, str) or not user:
            raise AuthDenied(f"the ID token has no {self.settings.user_claim!r} claim")
        raw = claims.get(self.settings.groups_claim) if self.settings.groups_claim else None
        values = [raw] if isinstance(raw, str) else raw if isinstance(raw, list) else []
        groups = tuple(sorted({g for g in values if isinstance(g, str) and g}))
        return Principal(user=user, groups=groups, backend=self.name)


class OAuth2Options(Table, frozen=True):
    """The keys of a `type = "oauth2"` `[[auth.backend]]` table (README documents each)."""

    issuer: Text
    client_id: Text
    client_secret_file: str | None = None
    ca_file: str | None = None
    scopes: Strings = ("openid", "profile")
    user_claim: str = "preferred_username"
    groups_claim: str = "groups"
    algorithms: Strings = ()
    leeway_s: ZeroOrMore = 30.0
    timeout_s: PosFloat = 10.0
    jwks_refetch_interval_s: ZeroOrMore = 60.0
    name: str = "oauth2"

    def __post_init__(self) -> None:
        parts = urllib.parse.urlsplit(self.issuer)
        if parts.scheme != "https" or not parts.hostname or parts.query or parts.fragment:
            raise Invalid(f"issuer must be an https:// URL without query, got {self.issuer!r}")
        if "openid" not in self.scopes:
            raise Invalid("scopes must include 'openid' (an ID token is needed)")
        bad = sorted(set(self.algorithms) - ASYMMETRIC_ALGORITHMS)
        if bad:
            raise Invalid(
                f"algorithms may only hold {', '.join(sorted(ASYMMETRIC_ALGORITHMS))}; "
                f"not {', '.join(bad)}"
            )


def from_config(section: dict[str, Any], base: Path, where: str) -> OAuth2Backend:
    """Validate an `[[auth.backend]]` table of `type = "oauth2"` and build its backend."""
    o = convert(section, OAuth2Options, where)
    return OAuth2Backend(
        OidcSettings(
            issuer=o.issuer,
            client_id=o.client_id,
            client_secret=secret(where, "client_secret_file", base, o.client_secret_file),
            ca_file=ca_file(where, base, o.ca_file),
            scopes=o.scopes,
            user_claim=o.user_claim or "preferred_username",
            groups_claim=o.groups_claim,
            algorithms=o.algorithms,
            leeway_s=o.leeway_s,
            timeout_s=o.timeout_s,
            jwks_refetch_interval_s=o.jwks_refetch_interval_s,
            name=o.name,
        )
    )
