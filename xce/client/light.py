"""`LightClient`: the blocking one-shot client the hot CLI commands use.

Why a second client beside `XceClient`: one `xce job submit` or `xce job list` sends one or
two requests and exits, and importing aiohttp and asyncio costs several times that
(0.6 s of start-up before the first byte, against 0.04 s for `squeue`). This client uses only
the standard library (`http.client`, `ssl`, `json`) and keeps the same rules as `XceClient`:
the ordered candidate list (a refused connection or 503 "not primary" moves to the next),
the primary's epoch sent back on every request, the one-line `ApiError`s, and the same
plain-HTTP rule (`check_controller_urls`). Long-lived users (the console, workers, streams)
keep `XceClient`.
"""

from __future__ import annotations

import http.client
import json
import ssl
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from xce.client.errors import ApiError, job_path
from xce.client.transport import UnixHTTPConnection, check_controller_urls, unix_path


class LightClient:
    def __init__(
        self,
        controllers: Sequence[str],
        token: str | None = None,
        timeout: float = 30.0,
        ssl_context: ssl.SSLContext | None = None,
        insecure: bool = False,
    ) -> None:
        if not controllers:
            raise ValueError("at least one controller URL is needed")
        check_controller_urls(controllers, insecure)
        self.controllers = [c.rstrip("/") for c in controllers]
        self.token = token
        self.timeout = timeout
        self.ssl_context = ssl_context
        self.epoch = 0
        self._current = 0
        self._conn: http.client.HTTPConnection | None = None
        self._conn_index = -1

    def __enter__(self) -> LightClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _connection(self, index: int) -> http.client.HTTPConnection:
        """One kept-alive connection, to the candidate that answered last."""
        if self._conn is not None and self._conn_index == index:
            return self._conn
        self.close()
        parts = urlsplit(self.controllers[index])
        host = parts.hostname or "127.0.0.1"
        conn: http.client.HTTPConnection
        if (path := unix_path(self.controllers[index])) is not None:
            conn = UnixHTTPConnection(path, self.timeout)
        elif parts.scheme == "https":
            ctx = self.ssl_context or ssl.create_default_context()
            conn = http.client.HTTPSConnection(
                host, parts.port or 443, timeout=self.timeout, context=ctx
            )
        else:
            conn = http.client.HTTPConnection(host, parts.port or 80, timeout=self.timeout)
        self._conn, self._conn_index = conn, index
        return conn

    def request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, str] | None = None,
        json_body: Any = None,
        body: Any = None,
        headers: dict[str, str] | None = None,
    ) -> Any:
        """Send to the current candidate, moving through the list when one cannot be
        reached or is not the primary. Returns parsed JSON, or bytes for other types."""
        all_headers = dict(headers or {})
        if self.token:
            all_headers["Authorization"] = f"Bearer {self.token}"
        if json_body is not None:
            body = json.dumps(json_body).encode()
            all_headers["Content-Type"] = "application/json"
        query = f"?{urlencode(params)}" if params else ""
        last: Exception | None = None
        # A kept-alive connection the server closed meanwhile gets one fresh try.
        order = [
            (self._current + step) % len(self.controllers) for step in range(len(self.controllers))
        ]
        if self._conn is not None and self._conn_index == order[0]:
            order.insert(1, order[0])
        for index in order:
            url = self.controllers[index]
            prefix = "" if unix_path(url) is not None else urlsplit(url).path
            if self.epoch:
                all_headers["X-XCE-Epoch"] = str(self.epoch)
            try:
                conn = self._connection(index)
                if hasattr(body, "seek"):
                    body.seek(0)
                conn.request(method, prefix + path + query, body=body, headers=all_headers)
                resp = conn.getresponse()
                data = resp.read()
            except ssl.SSLError as exc:
                self.close()
                raise ApiError(
                    0, "tls_error", f"TLS handshake failed with {self.controllers[index]}: {exc}"
                ) from None
            except (OSError, http.client.HTTPException) as exc:
                self.close()
                last = exc
                continue
            epoch = resp.getheader("X-XCE-Epoch", "")
            if epoch.isdigit() and int(epoch) > self.epoch:
                self.epoch = int(epoch)
            if resp.status == 503 and resp.getheader("X-XCE-Not-Primary"):
                self.close()
                continue
            self._current = index
            return _decode(resp, data)
        tried = ", ".join(self.controllers)
        raise ApiError(0, "unreachable", f"no controller answered (tried {tried}): {last}")

    # --- the routes the one-shot commands use (same names as XceClient's) -----------------

    def submit(self, body: dict[str, Any], key: str | None = None) -> dict[str, Any]:
        """One Idempotency-Key per call, sent again on every candidate (see XceClient)."""
        return self.request(
            "POST",
            "/api/v1/jobs",
            json_body=body,
            headers={"Idempotency-Key": key or uuid.uuid4().hex},
        )

    def jobs(self, **filters: Any) -> dict[str, Any]:
        params = {k: str(v) for k, v in filters.items() if v is not None}
        return self.request("GET", "/api/v1/jobs", params=params)

    def job(self, job_id: str) -> dict[str, Any]:
        return self.request("GET", f"/api/v1/jobs/{job_path(job_id)}")

    def control(self, job_id: str, action: str) -> dict[str, Any]:
        return self.request("POST", f"/api/v1/jobs/{job_path(job_id)}/{action}")

    def upload(self, path: Path) -> str:
        with path.open("rb") as f:
            size = path.stat().st_size
            result = self.request(
                "POST",
                "/api/v1/uploads",
                body=f,
                headers={"Content-Type": "application/octet-stream", "Content-Length": str(size)},
            )
        return str(result["upload_id"])

    def delete_upload(self, upload_id: str) -> dict[str, Any]:
        return self.request("DELETE", f"/api/v1/uploads/{upload_id}")

    def hosts(self) -> list[dict[str, Any]]:
        return self.request("GET", "/api/v1/hosts")["hosts"]

    def host(self, name: str) -> dict[str, Any]:
        return self.request("GET", f"/api/v1/hosts/{quote(name)}")

    def queues(self) -> list[dict[str, Any]]:
        return self.request("GET", "/api/v1/queues")["queues"]


def _decode(resp: http.client.HTTPResponse, data: bytes) -> Any:
    if resp.status >= 400:
        text = data.decode(errors="replace")
        try:
            err = json.loads(text)["error"]
            raise ApiError(resp.status, err.get("code", "error"), err.get("message", text))
        except (ValueError, KeyError, TypeError, AttributeError):
            raise ApiError(resp.status, "http_error", text[:200] or resp.reason or "") from None
    content_type = (resp.getheader("Content-Type") or "").split(";")[0].strip()
    if content_type == "application/json":
        return json.loads(data)
    return data
