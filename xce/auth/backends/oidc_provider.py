"""Talking to one OpenID Connect provider: discovery, JWKS and ID token verification.

What `OidcProvider.verify_id_token` promises, whatever the token says about itself:
- the signature is checked with a key from the provider's JWKS (fetched over TLS validated
  against `ca_file` or the system CAs, cached, fetched again at most every
  `jwks_refetch_interval_s` when a token names an unknown `kid`, so rotation works and a flood
  of made-up kids cannot make us hammer the provider);
- the algorithm is one the provider advertises for ID tokens *and* an asymmetric one
  (RS*, PS*, ES*, EdDSA): `none` and HS* (the "HMAC keyed with the public key" confusion) are
  never accepted, and the JWK must be of the algorithm's key type;
- `iss` is the configured issuer, `aud` holds the client id (and `azp` names it when there
  are several audiences), `exp`, `iat` and `sub` are present, `exp`/`nbf` hold within
  `leeway_s`.
Network and provider failures raise `BackendUnavailable`; a bad token raises `AuthDenied`.
"""

from __future__ import annotations

import json
import logging
import ssl
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import jwt

from xce.auth.backends.base import AuthDenied, BackendUnavailable

log = logging.getLogger(__name__)

ASYMMETRIC_ALGORITHMS = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)
MAX_RESPONSE_BYTES = 1 << 20  # discovery, JWKS and token answers are a few KiB
_KEY_TYPES = {"RS": "RSA", "PS": "RSA", "ES": "EC", "Ed": "OKP"}
_REQUIRED_ENDPOINTS = ("authorization_endpoint", "token_endpoint", "jwks_uri")


@dataclass(frozen=True)
class OidcSettings:
    """The validated `[[auth.backend]]` keys of an oauth2 backend (see the README)."""

    issuer: str
    client_id: str
    client_secret: str = field(default="", repr=False)
    ca_file: Path | None = None
    scopes: tuple[str, ...] = ("openid", "profile")
    user_claim: str = "preferred_username"
    groups_claim: str = "groups"
    algorithms: tuple[str, ...] = ()
    leeway_s: float = 30.0
    timeout_s: float = 10.0
    jwks_refetch_interval_s: float = 60.0
    name: str = "oauth2"


class OidcProvider:
    """Discovery document, JWKS cache and HTTP for one provider (one per backend)."""

    def __init__(self, settings: OidcSettings) -> None:
        self.settings = settings
        self._ssl = ssl.create_default_context(
            cafile=str(settings.ca_file) if settings.ca_file else None
        )
        self._metadata: dict[str, Any] | None = None
        self._keys: dict[str, dict[str, Any]] = {}
        self._unnamed_keys: list[dict[str, Any]] = []
        self._jwks_fetched_at = float("-inf")

    # --- HTTP ---------------------------------------------------------------------------

    async def request(
        self,
        method: str,
        url: str,
        *,
        data: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, Any]]:
        """(status, JSON body) of one request; BackendUnavailable when there is no usable
        answer (connection, TLS, timeout, 5xx, not JSON)."""
        timeout = aiohttp.ClientTimeout(total=self.settings.timeout_s)
        try:
            async with (
                aiohttp.ClientSession(timeout=timeout) as session,
                session.request(
                    method,
                    url,
                    data=data,
                    headers={"Accept": "application/json", **(headers or {})},
                    ssl=self._ssl,
                    allow_redirects=False,
                ) as response,
            ):
                raw = await response.content.read(MAX_RESPONSE_BYTES + 1)
                status = response.status
        except (TimeoutError, aiohttp.ClientError, ssl.SSLError) as exc:
            raise BackendUnavailable(
                f"OIDC provider {self.settings.issuer} unreachable: {exc or type(exc).__name__}"
            ) from exc
        if len(raw) > MAX_RESPONSE_BYTES:
            raise BackendUnavailable(
                f"OIDC provider answer for {url} is over {MAX_RESPONSE_BYTES} bytes"
            )
        if status >= 500:
            raise BackendUnavailable(f"OIDC provider answered {status} for {url}")
        try:
            body = json.loads(raw)
        except ValueError:
            raise BackendUnavailable(
                f"OIDC provider sent no JSON for {url} (HTTP {status})"
            ) from None
        if not isinstance(body, dict):
            raise BackendUnavailable(f"OIDC provider sent a JSON {type(body).__name__} for {url}")
        return status, body

    # --- discovery -----------------------------------------------------------------------

    async def metadata(self) -> dict[str, Any]:
        """The provider's discovery document, fetched once and checked (issuer, endpoints)."""
        if self._metadata is None:
            url = self.settings.issuer.rstrip("/") + "/.well-known/openid-configuration"
            status, doc = await self.request("GET", url)
            if status != 200:
                raise BackendUnavailable(f"OIDC discovery {url} answered {status}")
            if doc.get("issuer") != self.settings.issuer:
                raise BackendUnavailable(
                    f"OIDC discovery names issuer {doc.get('issuer')!r}, "
                    f"not the configured {self.settings.issuer!r}"
                )
            for key in _REQUIRED_ENDPOINTS:
                if not isinstance(doc.get(key), str) or not doc[key].startswith("https://"):
                    raise BackendUnavailable(f"OIDC discovery: {key} missing or not https")
            self._metadata = doc
        return self._metadata

    async def endpoint(self, key: str) -> str:
        url = (await self.metadata()).get(key)
        if not isinstance(url, str) or not url.startswith("https://"):
            raise BackendUnavailable(f"the OIDC provider offers no {key}")
        return url

    async def allowed_algorithms(self) -> frozenset[str]:
        """Configured algorithms, else the provider's advertised ones; asymmetric only."""
        advertised = (await self.metadata()).get("id_token_signing_alg_values_supported", ["RS256"])
        wanted = self.settings.algorithms or tuple(a for a in advertised if isinstance(a, str))
        allowed = frozenset(wanted) & ASYMMETRIC_ALGORITHMS
        if not allowed:
            raise BackendUnavailable(
                f"the OIDC provider advertises no asymmetric ID token algorithm ({advertised!r})"
            )
        return allowed

    # --- JWKS ----------------------------------------------------------------------------

    async def _fetch_jwks(self) -> None:
        status, doc = await self.request("GET", await self.endpoint("jwks_uri"))
        if status != 200 or not isinstance(doc.get("keys"), list):
            raise BackendUnavailable(f"OIDC JWKS answered {status} without keys")
        signing = [k for k in doc["keys"] if isinstance(k, dict) and k.get("use", "sig") == "sig"]
        self._keys = {k["kid"]: k for k in signing if isinstance(k.get("kid"), str)}
        self._unnamed_keys = [k for k in signing if "kid" not in k]
        self._jwks_fetched_at = time.monotonic()

    async def signing_key(self, kid: str | None, alg: str) -> jwt.PyJWK:
        """The JWKS key for a token header; one refetch for an unknown kid (rate-limited)."""
        if self._jwks_fetched_at == float("-inf"):
            await self._fetch_jwks()
        jwk = self._find_key(kid, alg)
        since = time.monotonic() - self._jwks_fetched_at
        if jwk is None and since >= self.settings.jwks_refetch_interval_s:
            await self._fetch_jwks()
            jwk = self._find_key(kid, alg)
        if jwk is None:
            raise AuthDenied(f"ID token signed with an unknown key {kid!r}")
        try:
            return jwt.PyJWK(jwk, algorithm=alg)
        except jwt.PyJWTError as exc:
            raise AuthDenied(f"ID token key {kid!r} does not fit {alg}: {exc}") from exc

    def _find_key(self, kid: str | None, alg: str) -> dict[str, Any] | None:
        kty = _KEY_TYPES[alg[:2]]

        def fits(k: dict[str, Any]) -> bool:
            return k.get("kty") == kty and k.get("alg", alg) == alg

        if kid is not None:
            jwk = self._keys.get(kid)
            if jwk is not None and not fits(jwk):
                raise AuthDenied(f"ID token key {kid!r} is not a {alg} key")
            return jwk
        fitting = [k for k in (*self._keys.values(), *self._unnamed_keys) if fits(k)]
        if len(fitting) > 1:
            raise AuthDenied("ID token names no kid and the provider has several such keys")
        return fitting[0] if fitting else None

    # --- ID tokens -----------------------------------------------------------------------

    async def verify_id_token(self, token: str) -> dict[str, Any]:
        """The verified claims of an ID token (see the module docstring); raises AuthDenied."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise AuthDenied(f"not a JWT: {exc}") from exc
        alg = header.get("alg")
        allowed = await self.allowed_algorithms()
        if alg not in allowed:
            raise AuthDenied(
                f"ID token algorithm {alg!r} is not allowed (allowed: {', '.join(sorted(allowed))})"
            )
        kid = header.get("kid")
        key = await self.signing_key(kid if isinstance(kid, str) else None, alg)
        try:
            claims = jwt.decode(
                token,
                key=key,
                algorithms=[alg],
                audience=self.settings.client_id,
                issuer=self.settings.issuer,
                leeway=self.settings.leeway_s,
                options={"require": ["exp", "iat", "iss", "aud", "sub"]},
            )
        except jwt.PyJWTError as exc:
            raise AuthDenied(f"ID token rejected: {exc}") from exc
        audiences = claims["aud"] if isinstance(claims["aud"], list) else [claims["aud"]]
        azp = claims.get("azp")
        if (len(audiences) > 1 or azp is not None) and azp != self.settings.client_id:
            raise AuthDenied(f"ID token authorized party {azp!r} is not this client")
        return claims
