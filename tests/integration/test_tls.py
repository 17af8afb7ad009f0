"""TLS end to end: a real controller and worker on 127.0.0.1 with certificates from `xce tls
init`; clients that do not trust the cluster CA, workers without (or with expired) client
certificates, and expired server certificates are refused."""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster import ADMIN_TOKEN, WORKER_TOKEN, ApiFailure, Cluster
from xce.auth.pki import client_ssl_context, create_ca, issue_certificate, load_ca
from xce.client import ApiError, XceClient
from xce.config.settings import TlsSettings


def _tls_section(pki: Path, cert: str | None, extra: str = "") -> str:
    lines = ["[tls]", f'ca_file = "{pki / "ca.pem"}"']
    if cert:
        lines += [f'cert_file = "{pki / cert}.pem"', f'key_file = "{pki / cert}.key"']
    return "\n".join([*lines, extra]) + "\n"


def _xce(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "xce", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The cluster PKI made by the real CLI, plus certificates the tests need to misuse."""
    d = tmp_path_factory.mktemp("pki")
    made = _xce(
        "tls",
        "init",
        "--dir",
        str(d),
        "--host",
        "localhost",
        "--host",
        "127.0.0.1",
        "--worker",
        "w1",
    )
    assert made.returncode == 0, made.stderr
    ca = load_ca(d)
    issue_certificate(
        ca,
        d,
        "stale",
        ["127.0.0.1", "w9"],
        client=True,
        valid_days=1,
        not_before=dt.datetime.now(dt.UTC) - dt.timedelta(days=2),
    )
    create_ca(d / "other", "Some other CA")
    return d


@pytest.fixture(scope="module")
def tls_cluster(pki: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """HTTPS controller with mutual TLS on worker routes, and worker w1 with its client cert."""
    c = Cluster(tmp_path_factory.mktemp("tls") / "cluster")
    c.url = f"https://127.0.0.1:{c.port}"
    c.role_sections["controller"] = _tls_section(
        pki, "controller", 'require_client_cert = "workers"'
    )
    c.role_sections["w1"] = _tls_section(pki, "w1")
    c.ssl_context = client_ssl_context(TlsSettings(ca_file=pki / "ca.pem"))
    c.start_controller()
    try:
        c.start_worker("w1", slots=2)
        yield c
    finally:
        c.stop()


def test_job_runs_over_tls_and_cli_verifies_with_ca_file(
    tls_cluster: Cluster, pki: Path, tmp_path: Path
) -> None:
    job = tls_cluster.submit(command="echo over-tls", queue="normal")
    done = tls_cluster.wait_state(job, "DONE", "EXIT")
    assert (done["state"], done["exit_code"]) == ("DONE", 0), done
    assert tls_cluster.download(job, "stdout") == b"over-tls\n"
    client_toml = tmp_path / "client.toml"
    client_toml.write_text(f'controllers = ["{tls_cluster.url}"]\nca_file = "{pki / "ca.pem"}"\n')
    env = {"XCE_CLIENT_CONFIG": str(client_toml), "XCE_TOKEN": ADMIN_TOKEN}
    listed = _xce("job", "list", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    assert job in listed.stdout
    # The same CLI without the CA: the system trust store does not know the cluster CA.
    client_toml.write_text(f'controllers = ["{tls_cluster.url}"]\n')
    refused = _xce("job", "list", env=env)
    assert refused.returncode != 0
    assert "certificate verify failed" in refused.stderr
    assert "Traceback" not in refused.stderr
    # One line that says no CA was configured and where one goes (ca_file, XCE_CA_FILE).
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert f"no CA file was configured (ca_file in {client_toml}" in refused.stderr
    assert "XCE_CA_FILE" in refused.stderr
    # A CA that did not sign the controller: the line names that file and its setting.
    other = pki / "other" / "ca.pem"
    client_toml.write_text(f'controllers = ["{tls_cluster.url}"]\nca_file = "{other}"\n')
    wrong = _xce("job", "list", env=env)
    assert wrong.returncode != 0 and "certificate verify failed" in wrong.stderr
    assert f"CA file tried: {other} (ca_file in {client_toml}" in wrong.stderr, wrong.stderr


def test_job_files_cross_tls_whole_and_in_ranges(tls_cluster: Cluster) -> None:
    """Over TLS the controller cannot hand a file to `sendfile`: it reads and writes it a
    piece at a time. Files of several pieces and batches go in (the worker's output) and
    out (whole and as a range) byte for byte."""
    data = os.urandom(5 * 1024 * 1024 + 12345)
    digest = hashlib.sha256(data).hexdigest()
    upload = tls_cluster.request(
        "POST", "/api/v1/uploads", raw=data, extra_headers={"X-XCE-SHA256": digest}
    )
    assert (upload["size"], upload["sha256"]) == (len(data), digest)
    job = tls_cluster.submit(
        command="cp in.bin out.bin", inputs={"in.bin": upload["upload_id"]}, outputs=["out.bin"]
    )
    done = tls_cluster.wait_state(job, "DONE", "EXIT", timeout=60)
    assert done["state"] == "DONE", done
    assert tls_cluster.download(job, "out.bin") == data
    part = tls_cluster.request(
        "GET", f"/api/v1/jobs/{job}/files/out.bin", extra_headers={"Range": "bytes=1048570-"}
    )
    assert part == data[1048570:]


async def test_client_with_another_ca_is_refused(tls_cluster: Cluster, pki: Path) -> None:
    other = client_ssl_context(TlsSettings(ca_file=pki / "other" / "ca.pem"))
    async with XceClient([tls_cluster.url], ADMIN_TOKEN, ssl_context=other) as client:
        with pytest.raises(ApiError) as info:
            await client.cluster()
    assert info.value.code == "tls_error"
    assert "certificate verify failed" in info.value.message
    # A client told where its CA came from says so in the message.
    note = f"CA file tried: {pki / 'other' / 'ca.pem'} ([tls] ca_file in w.toml)"
    async with XceClient([tls_cluster.url], ADMIN_TOKEN, ssl_context=other, ca_note=note) as c:
        with pytest.raises(ApiError) as info:
            await c.cluster()
    assert info.value.message.endswith("; " + note) and "\n" not in info.value.message


async def test_worker_routes_need_a_client_certificate(tls_cluster: Cluster, pki: Path) -> None:
    body = {"host": "w5", "slots": 1, "memory_mb": 100, "attributes": {}}
    no_cert = client_ssl_context(TlsSettings(ca_file=pki / "ca.pem"))
    async with XceClient([tls_cluster.url], WORKER_TOKEN, ssl_context=no_cert) as client:
        with pytest.raises(ApiError) as info:
            await client.request("POST", "/api/v1/workers/register", json=body)
        assert (info.value.status, info.value.code) == (403, "client_certificate_required")
    # A user's request needs no certificate (tls_cluster.get presents none).
    assert "w5" not in {h["name"] for h in tls_cluster.get("/api/v1/hosts")["hosts"]}
    with_cert = client_ssl_context(TlsSettings(pki / "w1.pem", pki / "w1.key", pki / "ca.pem"))
    async with XceClient([tls_cluster.url], WORKER_TOKEN, ssl_context=with_cert) as c:
        answer = await c.request("POST", "/api/v1/workers/register", json=body)
    assert "version" in answer


def test_worker_process_without_client_certificate_stops(tls_cluster: Cluster, pki: Path) -> None:
    tls_cluster.role_sections["w2"] = _tls_section(pki, None)
    run = _xce("worker", "-c", str(tls_cluster._config("w2", 1)))
    assert run.returncode != 0
    assert "needs a client certificate" in run.stderr
    assert "Traceback" not in run.stderr
    assert "w2" not in {h["name"] for h in tls_cluster.get("/api/v1/hosts")["hosts"]}


async def test_expired_client_certificate_is_refused(tls_cluster: Cluster, pki: Path) -> None:
    stale = client_ssl_context(TlsSettings(pki / "stale.pem", pki / "stale.key", pki / "ca.pem"))
    async with XceClient([tls_cluster.url], WORKER_TOKEN, ssl_context=stale) as client:
        with pytest.raises(ApiError) as info:
            await client.request(
                "POST",
                "/api/v1/workers/register",
                json={"host": "w9", "slots": 1, "memory_mb": 1, "attributes": {}},
            )
    assert info.value.status == 0
    assert "w9" not in {h["name"] for h in tls_cluster.get("/api/v1/hosts")["hosts"]}


def test_plain_http_to_the_tls_listener_fails(tls_cluster: Cluster) -> None:
    plain = Cluster(tls_cluster.root / "plain")
    plain.url = tls_cluster.url.replace("https://", "http://")
    with pytest.raises((ApiFailure, OSError)):
        plain.get("/api/v1/cluster")


def test_expired_server_certificate_is_refused(pki: Path, tmp_path: Path) -> None:
    c = Cluster(tmp_path / "cluster")
    c.url = f"https://127.0.0.1:{c.port}"
    c.role_sections["controller"] = _tls_section(pki, "stale")
    c.ssl_context = client_ssl_context(TlsSettings(ca_file=pki / "ca.pem"))
    c.root.mkdir(parents=True)
    proc = subprocess.Popen(
        [sys.executable, "-m", "xce", "controller", "-c", str(c._config())],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    c.controller = proc
    try:
        assert proc.stdout is not None
        assert any("ready on https://" in line for line in proc.stdout)
        with pytest.raises(OSError, match="certificate has expired"):
            c.get("/healthz")
    finally:
        c.stop()


def test_plain_http_off_loopback_is_refused_without_insecure(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[controller]\nlisten = "0.0.0.0:1"\nstate_dir = "{tmp_path / "s"}"\n')
    run = _xce("controller", "-c", str(cfg))
    assert run.returncode != 0
    assert "refusing to serve plain HTTP on 0.0.0.0" in run.stderr
    assert "Traceback" not in run.stderr
    assert not (tmp_path / "s").exists()  # refused before any state was touched
    env = {"XCE_CONTROLLERS": "http://192.0.2.1:6820", "XCE_CLIENT_CONFIG": str(cfg) + ".none"}
    cli = _xce("job", "list", env=env)
    assert cli.returncode != 0 and "refusing plain http:// to http://192.0.2.1:6820" in cli.stderr
