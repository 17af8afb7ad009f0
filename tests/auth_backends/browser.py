"""A minimal scripted "user at a browser" for the OIDC tests: follows redirects and submits
the provider's own HTML forms (the device code confirm/abort form) with aiohttp."""

from __future__ import annotations

import html
import re
import ssl
import urllib.parse
from pathlib import Path

import aiohttp

_FORM = re.compile(r"<form\b[^>]*\baction=\"([^\"]+)\"[^>]*>(.*?)</form>", re.S | re.I)
_HIDDEN = re.compile(r"<input\b[^>]*\btype=\"hidden\"[^>]*>", re.I)
_ATTR = re.compile(r"\b(name|value)=\"([^\"]*)\"")


def _hidden_inputs(form_html: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    for tag in _HIDDEN.findall(form_html):
        attrs = {k: html.unescape(v) for k, v in _ATTR.findall(tag)}
        if "name" in attrs:
            fields[attrs["name"]] = attrs.get("value", "")
    return fields


class Browser:
    """Keeps cookies (the provider's session) and trusts the test CA."""

    def __init__(self, ca_file: Path) -> None:
        self.ssl = ssl.create_default_context(cafile=str(ca_file))
        self.session = aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))

    async def close(self) -> None:
        await self.session.close()

    async def _submit_first_form(
        self, base: str, page: str, extra: dict[str, str] | None = None, drop: tuple[str, ...] = ()
    ) -> tuple[str, str]:
        match = _FORM.search(page)
        assert match, f"no form on the page: {page[:500]}"
        fields = {k: v for k, v in _hidden_inputs(match.group(2)).items() if k not in drop}
        url = urllib.parse.urljoin(base, html.unescape(match.group(1)))
        async with self.session.post(
            url, data={**fields, **(extra or {})}, ssl=self.ssl
        ) as response:
            return str(response.url), await response.text()

    async def confirm_device(self, verification_uri_complete: str, approve: bool = True) -> str:
        """Open the verification link, then press Continue (or Abort); the final page text."""
        async with self.session.get(verification_uri_complete, ssl=self.ssl) as response:
            url, page = str(response.url), await response.text()
        url, page = await self._submit_first_form(url, page)  # the auto-submitting form
        assert "op.deviceConfirmForm" in page, page[:500]
        if approve:
            return (await self._submit_first_form(url, page))[1]
        return (await self._submit_first_form(url, page, {"abort": "yes"}, drop=("confirm",)))[1]

    async def authorize(self, url: str, redirect_uri: str) -> dict[str, str]:
        """Follow the authorization request's redirects until the client's redirect_uri;
        returns that redirect's query parameters (code, state, iss or error)."""
        for _ in range(20):
            if url.startswith(redirect_uri):
                return dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query))
            async with self.session.get(url, ssl=self.ssl, allow_redirects=False) as response:
                location = response.headers.get("Location")
                assert location, f"{response.status} without redirect: {await response.text()}"
                url = urllib.parse.urljoin(str(response.url), location)
        raise AssertionError("too many redirects")
