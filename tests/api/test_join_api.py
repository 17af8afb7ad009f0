"""The join routes in-process: a token is good once, expires, is tied to a role, and bad
requests get 4xx errors that name the problem."""

from __future__ import annotations

import json
import shutil
import ssl
import time
import tomllib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer
from cryptography import x509

from tests.api.conftest import KEYS, Api, as_user, make_settings
from xce.api.http import AUTH
from xce.auth.keys import key_dir
from xce.auth.pki import create_ca
from xce.config.loader import parse_config
from xce.config.settings import Config, TlsSettings, WorkerSettings
from xce.server.compose import compose
from xce.setup.joinclient import _config_text
from xce.setup.jointokens import JoinTokenStore
from xce.store.files import FileStore


@pytest.fixture
async def joinable(tmp_path: Path) -> AsyncIterator[Api]:
    """A controller whose [tls] names a CA it holds the key of; the client is an admin."""
    ca = create_ca(tmp_path / "tls")
    settings = make_settings(tmp_path)
    shutil.copytree(KEYS, key_dir(settings.state_dir))
    config = Config(
        controllers=("https://ctl.example:6820",),
        controller=settings,
        worker=WorkerSettings(token="shared-worker-secret"),
        tls=TlsSettings(ca_file=ca.cert_path),
    )
    controller = compose(config, FileStore(tmp_path / "files", 1 << 20))
    client = TestClient(TestServer(controller.app), headers=as_user("root", "admin"))
    await client.start_server()
    try:
        yield Api(client, controller.service, controller.gateway, controller.app)
    finally:
        await client.close()


async def test_a_token_buys_ca_controllers_and_a_certificate_once(joinable: Api) -> None:
    ca = await joinable.call("GET", "/api/v1/join/ca", 200)
    made = await joinable.call("POST", "/api/v1/join/tokens", 201, json={"role": "worker"})
    assert made["ca_sha256"] == ca["ca_sha256"] and made["token"].startswith("xcej_")
    answer = await joinable.call(
        "POST", "/api/v1/join", 200, json={"token": made["token"], "name": "node7"}
    )
    assert answer["role"] == "worker" and answer["ca_pem"] == ca["ca_pem"]
    assert answer["controllers"] == ["https://ctl.example:6820"]
    # A service token of the node's own (revocable alone), not the shared worker secret.
    claims = joinable.app[AUTH].tokens.verify(answer["service_token"])
    assert (claims.user, claims.roles, claims.kind) == ("node7", ("worker",), "service")
    assert "shared-worker-secret" not in json.dumps(answer)
    cert = x509.load_pem_x509_certificate(answer["cert_pem"].encode())
    issuer = x509.load_pem_x509_certificate(ca["ca_pem"].encode())
    cert.verify_directly_issued_by(issuer)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "node7" in sans.get_values_for_type(x509.DNSName)
    assert ssl.PEM_cert_to_DER_cert(ca["ca_pem"])  # a real certificate

    again = await joinable.call(
        "POST", "/api/v1/join", 401, json={"token": made["token"], "name": "node8"}
    )
    assert again["error"]["code"] == "join_token_refused"
    assert "already used" in again["error"]["message"]
    audit = joinable.app[AUTH].audit.path.read_text()
    assert '"node.join"' in audit and '"service:node7"' in audit and '"denied"' in audit
    assert made["token"].partition(".")[2] not in audit  # the secret never lands there


async def test_expired_unknown_and_forged_tokens_are_refused(joinable: Api, tmp_path: Path) -> None:
    store = JoinTokenStore(tmp_path / "state")
    old = store.create("worker", ttl_s=60, now=time.time() - 120)
    body = await joinable.call("POST", "/api/v1/join", 401, json={"token": old.token, "name": "n"})
    assert "expired" in body["error"]["message"]
    good = store.create("standby")
    forged = good.token[:-4] + "AAAA"
    body = await joinable.call("POST", "/api/v1/join", 401, json={"token": forged, "name": "n"})
    assert body["error"]["message"] == "unknown join token"
    body = await joinable.call("POST", "/api/v1/join", 401, json={"token": "hello", "name": "n"})
    assert "not a join token" in body["error"]["message"]
    # The forged attempt did not spend the real one.
    answer = await joinable.call(
        "POST", "/api/v1/join", 200, json={"token": good.token, "name": "standby1"}
    )
    assert answer["role"] == "standby"
    claims = joinable.app[AUTH].tokens.verify(answer["service_token"])
    assert (claims.user, claims.roles) == ("standby1", ("standby",))
    # The standby copies the primary's job-safety rules, so a failover changes none of them.
    assert answer["controller"] == {
        "fence_timeout_s": 30.0,
        "allow_root_jobs": True,
        "min_job_uid": 1000,
        "job_users": [],
        "upload_quota_mb": 10240,
        "upload_ttl_s": 86400.0,
    }
    text = _config_text(
        {
            **answer,
            "controller": {**answer["controller"], "job_users": ["svc"], "min_job_uid": "x"},
        },
        has_cert=False,
    )
    data = tomllib.loads(text)
    del data["controller"]["replication_token_file"]  # files the joined node holds
    del data["worker"]["token_file"]
    ctl = parse_config(data).controller
    assert (ctl.allow_root_jobs, ctl.fence_timeout_s, ctl.job_users) == (True, 30.0, ("svc",))
    assert ctl.min_job_uid == 1000  # a value of the wrong type is left to the default


async def test_bad_requests_name_the_field(joinable: Api) -> None:
    body = await joinable.call("POST", "/api/v1/join", 400, json={"token": "xcej_a.b"})
    assert "name" in body["error"]["message"]
    body = await joinable.call(
        "POST", "/api/v1/join", 400, json={"token": "xcej_a.b", "name": "../etc"}
    )
    assert "name" in body["error"]["message"]
    body = await joinable.call("POST", "/api/v1/join/tokens", 400, json={"role": "root"})
    assert "role" in body["error"]["message"]
    body = await joinable.call(
        "POST", "/api/v1/join/tokens", 400, json={"role": "worker", "ttl_s": 10**9}
    )
    assert "ttl_s" in body["error"]["message"]


async def test_no_ca_configured_is_a_404(api: Api) -> None:
    body = await api.call("GET", "/api/v1/join/ca", 404)
    assert "tls.ca_file" in body["error"]["message"]


def test_the_store_keeps_only_digests(tmp_path: Path) -> None:
    store = JoinTokenStore(tmp_path)
    issued = store.create("worker")
    secret = issued.token.partition(".")[2]
    text = store.path.read_text()
    assert secret not in text and json.loads(text)
    assert (store.path.stat().st_mode & 0o777) == 0o600
    assert (store.dir.stat().st_mode & 0o777) == 0o700
    assert store.redeem(issued.token) == "worker"
