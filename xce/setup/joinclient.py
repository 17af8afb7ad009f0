"""`xce init DIR --join URL --token T --ca-hash H`: prepare a worker or standby node.

Steps, each failing with a message that names what went wrong:
1. fetch the cluster CA from `GET URL/api/v1/join/ca` without trusting anything yet, and
   accept it only when its SHA-256 equals `--ca-hash` (printed by `xce init` / `xce token
   join` on the controller): a man in the middle cannot substitute his own CA;
2. redeem the token at `POST URL/api/v1/join`, now verifying the controller against that CA;
3. write DIR (0700): `xce.toml` for the role, `tls/ca.pem`, the node's certificate and key
   (0600) when the controller issued one, `worker.token` (0600: the node's own service JWT,
   subject = its name), `client.toml`, and the role's systemd unit.
Plain http:// URLs (loopback development clusters) skip the CA steps.
"""

from __future__ import annotations

import hashlib
import json
import socket
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xce.core.errors import InvalidRequest
from xce.setup.files import private_dir, write_private
from xce.setup.initdir import CONFIG_FILE, check_new_dir, executable
from xce.setup.templates import render_unit

TIMEOUT_S = 30


@dataclass(frozen=True)
class JoinResult:
    cluster_dir: Path
    config: Path
    role: str
    name: str
    controllers: tuple[str, ...]
    unit: Path


def _request(
    url: str, context: ssl.SSLContext | None, body: dict[str, Any] | None = None
) -> dict[str, Any]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(
        url,
        data=data,
        method="POST" if body is not None else "GET",
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S, context=context) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        try:
            message = json.loads(exc.read())["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = f"HTTP {exc.code}"
        raise InvalidRequest(f"the controller refused the join: {message}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise InvalidRequest(f"cannot reach {url}: {reason}") from None


def _fetch_ca(base: str, ca_hash: str) -> str:
    """The CA PEM from the controller, accepted only if its hash matches `ca_hash`."""
    wanted = ca_hash.lower().removeprefix("sha256:")
    if len(wanted) != 64:
        raise InvalidRequest("--ca-hash must be sha256:<64 hex digits> (printed with the token)")
    unverified = ssl.create_default_context()
    unverified.check_hostname = False
    unverified.verify_mode = ssl.CERT_NONE  # nothing to verify against yet: the hash decides
    pem = str(_request(f"{base}/api/v1/join/ca", unverified).get("ca_pem", ""))
    try:
        got = hashlib.sha256(ssl.PEM_cert_to_DER_cert(pem)).hexdigest()
    except ValueError:
        raise InvalidRequest(f"{base} answered no CA certificate") from None
    if got != wanted:
        raise InvalidRequest(
            f"the CA served by {base} has hash sha256:{got}, not the expected "
            f"sha256:{wanted}: refusing to trust it"
        )
    return pem


def _config_text(answer: dict[str, Any], has_cert: bool) -> str:
    candidates = list(answer["controllers"])
    own_url = f"{'https' if has_cert else 'http'}://{answer['name']}:6820"
    if answer["role"] == "standby" and own_url not in candidates:
        candidates.append(own_url)  # a new candidate ranks last until the admin reorders
    controllers = ", ".join(json.dumps(u) for u in candidates)
    worker = answer.get("worker") or {}
    lines = [
        f"# XCE {answer['role']} {answer['name']}, prepared by `xce init --join`.",
        "# Relative paths are relative to this file's directory.",
        "[cluster]",
        "# Ordered controller candidates (from the controller at join time).",
        f"controllers = [{controllers}]",
        "",
        "[worker]",
        f"name = {json.dumps(answer['name'])}",
        'spool_dir = "worker"',
        'token_file = "worker.token"',
        f"heartbeat_interval_s = {float(worker.get('heartbeat_interval_s', 5.0))}",
        f"allow_root_jobs = {'true' if worker.get('allow_root_jobs') is True else 'false'}",
        "",
        "[tls]",
        "# The cluster CA: every controller must present a certificate it signed.",
        'ca_file = "tls/ca.pem"',
    ]
    if has_cert:
        lines += [
            "# This node's client certificate (mutual TLS for worker routes).",
            f'cert_file = "tls/{answer["name"]}.pem"',
            f'key_file = "tls/{answer["name"]}.key"',
        ]
    if answer["role"] == "standby":
        lines += [
            "",
            "# This standby controller candidate, last in cluster.controllers above. Put the",
            "# same list, in the same priority order, in every node's config (LSF's master",
            "# list: the live candidate with the newest log, then the best rank, takes over).",
            "[controller]",
            'listen = "0.0.0.0:6820"  # replication listens on the next port (6821)',
            f"url = {json.dumps(own_url)}",
            'state_dir = "state"',
            "# The standby's service token (cluster:replicate), presented to the primary.",
            'replication_token_file = "worker.token"',
        ]
        lines += _controller_rules(answer.get("controller") or {})
    return "\n".join(lines) + "\n"


def _controller_rules(template: dict[str, Any]) -> list[str]:
    """The primary's job-safety keys for a standby's `[controller]` (as TOML lines), so the
    rules do not change on failover. Values of the wrong type are skipped: the defaults
    apply, and the admin can copy the keys by hand."""
    kinds: dict[str, type | tuple[type, ...]] = {
        "fence_timeout_s": (int, float),
        "allow_root_jobs": bool,
        "min_job_uid": int,
        "job_users": list,
        "upload_quota_mb": int,
        "upload_ttl_s": (int, float),
    }
    lines = ["# The primary's rules at join time: the fence and who jobs may run as."]
    for key, kind in kinds.items():
        value = template.get(key)
        if (
            value is None
            or not isinstance(value, kind)
            or (kind is not bool and isinstance(value, bool))
        ):
            continue
        if isinstance(value, list) and not all(isinstance(u, str) for u in value):
            continue
        lines.append(f"{key} = {json.dumps(value)}")
    return lines if len(lines) > 1 else []


def join_cluster(
    cluster_dir: Path,
    url: str,
    token: str,
    ca_hash: str | None,
    name: str | None = None,
    hosts: list[str] | None = None,
) -> JoinResult:
    """Redeem `token` at the controller `url` and write the node's directory."""
    cluster_dir = cluster_dir.expanduser().resolve()
    check_new_dir(cluster_dir)
    base = url.rstrip("/")
    if not base.startswith(("http://", "https://")):
        raise InvalidRequest(f"--join must be an http(s):// controller URL, got {url!r}")
    name = name or socket.gethostname()
    ca_pem: str | None = None
    context: ssl.SSLContext | None = None
    if base.startswith("https://"):
        if not ca_hash:
            raise InvalidRequest("joining over https needs --ca-hash (printed with the token)")
        ca_pem = _fetch_ca(base, ca_hash)
        context = ssl.create_default_context(cadata=ca_pem)
    answer = _request(
        f"{base}/api/v1/join", context, {"token": token, "name": name, "hosts": hosts or []}
    )
    if ca_pem is not None and answer.get("ca_pem") != ca_pem:
        raise InvalidRequest("the controller answered a different CA than it served")

    private_dir(cluster_dir)
    tls_dir = private_dir(cluster_dir / "tls")
    (tls_dir / "ca.pem").write_text(answer["ca_pem"])
    has_cert = "cert_pem" in answer and "key_pem" in answer
    if has_cert:
        write_private(tls_dir / f"{name}.key", answer["key_pem"])
        (tls_dir / f"{name}.pem").write_text(answer["cert_pem"])
    write_private(cluster_dir / "worker.token", answer["service_token"] + "\n")
    config = cluster_dir / CONFIG_FILE
    write_private(config, _config_text(answer, has_cert))
    write_private(
        cluster_dir / "client.toml",
        (
            f"controllers = [{', '.join(json.dumps(u) for u in answer['controllers'])}]\n"
            f'ca_file = "{tls_dir / "ca.pem"}"\n'
        ),
    )
    from xce.config.loader import load_config

    load_config(config)  # the daemons' own validation, before anything says "done"
    unit_name = f"xce-{answer['role']}.service"
    unit = private_dir(cluster_dir / "systemd") / unit_name
    write_private(unit, render_unit(unit_name, executable(), config, cluster_dir))
    return JoinResult(cluster_dir, config, answer["role"], name, tuple(answer["controllers"]), unit)
