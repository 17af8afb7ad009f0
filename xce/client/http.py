"""`XceClient`: talks to whichever controller in the candidate list answers.

Clients are given the ordered candidate list, not one address. A request that cannot connect
(or gets 503 "not primary") moves on to the next candidate and remembers the one that
worked, so the CLI, TUI and workers follow a failover without being restarted.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp

from xce.client.errors import ApiError, job_path
from xce.client.sse import StreamEvent, read_events
from xce.client.transport import check_controller_urls, unix_path


class XceClient:
    def __init__(
        self,
        controllers: Sequence[str],
        token: str | None = None,
        timeout: float = 30.0,
        retry_for: float = 0.0,
        ssl_context: ssl.SSLContext | None = None,
        insecure: bool = False,
    ) -> None:
        """`ssl_context` (from `xce.auth.pki.client_ssl_context`) verifies https://
        controllers against the cluster CA and may carry a client certificate; without it
        https:// uses the system trust store. Plain http:// off loopback raises
        InsecureTransport unless `insecure`."""
        if not controllers:
            raise ValueError("at least one controller URL is needed")
        check_controller_urls(controllers, insecure)
        self.ssl_context = ssl_context
        self.controllers = [c.rstrip("/") for c in controllers]
        # A local socket (`unix:PATH`, the only candidate when chosen): requests go through
        # it to http://localhost.
        self.socket_path = unix_path(self.controllers[0])
        if self.socket_path is not None:
            self.controllers = ["http://localhost"]
        self.token = token
        self.timeout = timeout
        self.retry_for = retry_for
        self._current = 0
        # The newest primary term seen in any answer; sent with every request so that an
        # old primary that comes back learns it was replaced (xce/ha/node.py).
        self.epoch = 0
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> XceClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _headers(self) -> dict[str, str]:
        headers = {}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        return headers

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector: aiohttp.BaseConnector
            if self.socket_path is not None:
                connector = aiohttp.UnixConnector(path=self.socket_path)
            else:
                connector = aiohttp.TCPConnector(ssl=self.ssl_context or True)
            self._session = aiohttp.ClientSession(headers=self._headers(), connector=connector)
        return self._session

    @property
    def base_url(self) -> str:
        return self.controllers[self._current]

    async def _send(
        self,
        method: str,
        path: str,
        *,
        timeout: float | aiohttp.ClientTimeout | None = None,
        **kwargs: Any,
    ) -> aiohttp.ClientResponse:
        """Send to the current candidate, rotating through the list on connection failure."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.retry_for
        last: Exception | None = None
        client_timeout = (
            timeout
            if isinstance(timeout, aiohttp.ClientTimeout)
            else aiohttp.ClientTimeout(total=timeout or self.timeout)
        )
        extra_headers = dict(kwargs.pop("headers", None) or {})
        while True:
            for step in range(len(self.controllers)):
                index = (self._current + step) % len(self.controllers)
                url = self.controllers[index] + path
                headers = dict(extra_headers)
                if self.epoch:
                    headers["X-XCE-Epoch"] = str(self.epoch)
                try:
                    resp = await self._get_session().request(
                        method, url, timeout=client_timeout, headers=headers, **kwargs
                    )
                except (aiohttp.ClientConnectionError, TimeoutError) as exc:
                    last = exc
                    continue
                epoch = resp.headers.get("X-XCE-Epoch", "")
                if epoch.isdigit() and int(epoch) > self.epoch:
                    self.epoch = int(epoch)
                if resp.status == 503 and resp.headers.get("X-XCE-Not-Primary"):
                    resp.release()
                    continue
                self._current = index
                return resp
            if loop.time() >= deadline:
                break
            await asyncio.sleep(0.5)
        tried = ", ".join(self.controllers)
        if isinstance(last, aiohttp.ClientSSLError):  # a TLS refusal, not a dead controller
            raise ApiError(0, "tls_error", f"TLS handshake failed (tried {tried}): {last}")
        raise ApiError(0, "unreachable", f"no controller answered (tried {tried}): {last}")

    @staticmethod
    async def _check(resp: aiohttp.ClientResponse) -> None:
        if resp.status < 400:
            return
        text = await resp.text()
        try:
            err = json.loads(text)["error"]
            raise ApiError(resp.status, err.get("code", "error"), err.get("message", text))
        except (ValueError, KeyError, TypeError):
            raise ApiError(resp.status, "http_error", text[:200] or resp.reason or "") from None

    async def request(
        self, method: str, path: str, *, timeout: float | None = None, **kwargs: Any
    ) -> Any:
        resp = await self._send(method, path, timeout=timeout, **kwargs)
        async with resp:
            await self._check(resp)
            if resp.content_type == "application/json":
                return await resp.json()
            return await resp.read()

    # --- jobs -------------------------------------------------------------------------

    async def submit(self, body: dict[str, Any], key: str | None = None) -> dict[str, Any]:
        """Returns {"job_id": ..., "queue": ...}. One Idempotency-Key per call, sent again
        with every retry on another candidate: a submission that reached a primary which
        then failed before answering is found, not made twice."""
        headers = {"Idempotency-Key": key or uuid.uuid4().hex}
        return await self.request("POST", "/api/v1/jobs", json=body, headers=headers)

    async def jobs(self, **filters: Any) -> dict[str, Any]:
        params = {k: str(v) for k, v in filters.items() if v is not None}
        return await self.request("GET", "/api/v1/jobs", params=params)

    async def job(self, job_id: str) -> dict[str, Any]:
        return await self.request("GET", f"/api/v1/jobs/{job_path(job_id)}")

    async def control(self, job_id: str, action: str) -> dict[str, Any]:
        return await self.request("POST", f"/api/v1/jobs/{job_path(job_id)}/{action}")

    async def files(self, job_id: str) -> list[dict[str, Any]]:
        return (await self.request("GET", f"/api/v1/jobs/{job_path(job_id)}/files"))["files"]

    async def download(self, job_id: str, name: str) -> bytes:
        path = f"/api/v1/jobs/{job_path(job_id)}/files/{quote(name)}"
        return await self.request("GET", path)

    async def tail(
        self,
        job_id: str,
        stream: str = "stdout",
        offset: int | None = None,
        limit: int | None = None,
    ) -> dict[str, Any]:
        """`GET /api/v1/jobs/{id}/tail`: {"offset", "next_offset", "end", "data",
        "truncated", "running", "state", "attempt", ...}. Without `offset`, the latest
        bytes; with it, the bytes from there (ask again from `next_offset`)."""
        params = {"stream": stream}
        if offset is not None:
            params["offset"] = str(offset)
        if limit is not None:
            params["limit"] = str(limit)
        return await self.request("GET", f"/api/v1/jobs/{job_path(job_id)}/tail", params=params)

    async def upload(self, path: Path) -> str:
        async def chunks() -> AsyncIterator[bytes]:
            with path.open("rb") as f:
                while chunk := f.read(1 << 16):
                    yield chunk

        result = await self.request(
            "POST",
            "/api/v1/uploads",
            data=chunks(),
            headers={"Content-Type": "application/octet-stream"},
        )
        return result["upload_id"]

    async def delete_upload(self, upload_id: str) -> dict[str, Any]:
        return await self.request("DELETE", f"/api/v1/uploads/{upload_id}")

    # --- queues, hosts, cluster -------------------------------------------------------

    async def queues(self) -> list[dict[str, Any]]:
        return (await self.request("GET", "/api/v1/queues"))["queues"]

    async def create_queue(self, body: dict[str, Any]) -> dict[str, Any]:
        return await self.request("POST", "/api/v1/queues", json=body)

    async def queue_action(self, name: str, action: str) -> dict[str, Any]:
        return await self.request("POST", f"/api/v1/queues/{quote(name)}/{action}")

    async def hosts(self) -> list[dict[str, Any]]:
        return (await self.request("GET", "/api/v1/hosts"))["hosts"]

    async def host(self, name: str) -> dict[str, Any]:
        return await self.request("GET", f"/api/v1/hosts/{quote(name)}")

    async def host_action(self, name: str, action: str, reason: str = "") -> dict[str, Any]:
        body = {"reason": reason} if reason else {}
        return await self.request("POST", f"/api/v1/hosts/{quote(name)}/{action}", json=body)

    async def cluster(self) -> dict[str, Any]:
        return await self.request("GET", "/api/v1/cluster")

    async def switchover(self, to: str | None = None) -> dict[str, Any]:
        """`POST /api/v1/cluster/switchover`: the primary hands its role to a caught-up
        standby (`to`, or whichever is ready). Returns {"primary", "previous", "epoch"};
        409 when no standby is connected and caught up."""
        body = {"to": to.rstrip("/")} if to else {}
        return await self.request("POST", "/api/v1/cluster/switchover", json=body)

    async def health(self, url: str, timeout: float = 2.0) -> dict[str, Any]:
        """`GET /healthz` of one candidate, not rotating: its role, epoch, log end and the
        primary it knows. For views of a cluster that has no primary at the moment.
        Raises ApiError(0, "unreachable") when that candidate does not answer."""
        try:
            async with self._get_session().get(
                url.rstrip("/") + "/healthz", timeout=aiohttp.ClientTimeout(total=timeout)
            ) as resp:
                await self._check(resp)
                return dict(await resp.json(content_type=None))
        except (aiohttp.ClientError, TimeoutError, ValueError, TypeError) as exc:
            raise ApiError(0, "unreachable", f"{url}: {exc or type(exc).__name__}") from None

    # --- identity (xce.api.auth, xce.api.users, xce.api.audit) ---------------------------

    async def users(self) -> list[dict[str, Any]]:
        return (await self.request("GET", "/api/v1/users"))["users"]

    async def add_user(self, body: dict[str, Any]) -> dict[str, Any]:
        return await self.request("POST", "/api/v1/users", json=body)

    async def set_password(
        self, user: str, password: str, old_password: str | None = None
    ) -> dict[str, Any]:
        body = {"password": password}
        if old_password is not None:
            body["old_password"] = old_password
        return await self.request(
            "POST", f"/api/v1/users/{quote(user, safe='')}/password", json=body
        )

    async def delete_user(self, user: str) -> dict[str, Any]:
        return await self.request("DELETE", f"/api/v1/users/{quote(user, safe='')}")

    async def service_token(self, name: str, role: str, ttl_s: int | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"name": name, "role": role}
        if ttl_s:
            body["ttl_s"] = ttl_s
        return await self.request("POST", "/api/v1/auth/tokens", json=body)

    async def revoke(self, user: str) -> dict[str, Any]:
        return await self.request("POST", "/api/v1/auth/revoke", json={"user": user})

    async def rotate_key(self) -> dict[str, Any]:
        return await self.request("POST", "/api/v1/auth/keys/rotate")

    async def audit(self, **filters: Any) -> dict[str, Any]:
        params = {k: str(v) for k, v in filters.items() if v is not None}
        return await self.request("GET", "/api/v1/audit", params=params)

    async def whoami(self) -> dict[str, Any] | None:
        """`GET /api/v1/auth/whoami`, or None where the controller has no such endpoint."""
        try:
            return await self.request("GET", "/api/v1/auth/whoami")
        except ApiError as exc:
            if exc.status in (404, 405):
                return None
            raise

    async def login(self, username: str, password: str) -> dict[str, Any]:
        """`POST /api/v1/auth/login`; on success later requests carry the returned token."""
        result = await self.request(
            "POST", "/api/v1/auth/login", json={"username": username, "password": password}
        )
        self.set_token(result["token"])
        return result

    async def device_start(self) -> dict[str, Any]:
        """`POST /api/v1/auth/device`: the OIDC device code and the URL to show the user."""
        return await self.request("POST", "/api/v1/auth/device")

    async def device_token(self, device_code: str) -> dict[str, Any]:
        """`POST /api/v1/auth/device/token`; raises ApiError(400, authorization_pending...)."""
        result = await self.request(
            "POST", "/api/v1/auth/device/token", json={"device_code": device_code}
        )
        self.set_token(result["token"])
        return result

    def set_token(self, token: str | None) -> None:
        """Use `token` from now on (the session is rebuilt with the new header)."""
        self.token = token
        if self._session is not None and not self._session.closed:
            old = self._session
            self._session = None
            asyncio.get_running_loop().create_task(old.close())

    async def events(
        self, last_id: str | None = None, keepalive: int = 15
    ) -> AsyncIterator[StreamEvent]:
        """The live change stream (`GET /api/v1/events`), resuming after `last_id`.

        Yields `StreamEvent`s until the connection ends; then raises ApiError(0, "stream_lost")
        so the caller reconnects with the last id it saw (possibly to another candidate). The
        read times out after three missed keepalives, so a dead controller is noticed.
        """
        headers = {"Last-Event-ID": last_id} if last_id else {}
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=self.timeout, sock_read=keepalive * 3
        )
        resp = await self._send(
            "GET",
            "/api/v1/events",
            timeout=timeout,
            headers=headers,
            params={"keepalive": str(keepalive)},
        )
        async with resp:
            await self._check(resp)
            try:
                async for event in read_events(resp.content):
                    yield event
            except (aiohttp.ClientError, TimeoutError) as exc:
                raise ApiError(0, "stream_lost", f"event stream lost: {exc}") from None
        raise ApiError(0, "stream_lost", "the controller closed the event stream")
