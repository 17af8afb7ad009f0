"""Heartbeat relays with real processes: two workers send their heartbeats through a third
(`relay_listen` / `heartbeat_relay`), which forwards them in batches; jobs run on them; a
relay killed with SIGKILL costs its workers nothing (they go straight to the controller and
are never marked unavailable); a heartbeat made up at the relay is refused; and a relay that
answers for the controller is not believed: its workers' fence is never restarted by it."""

from __future__ import annotations

import http.server
import json
import signal
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from bench.load import marked_unavailable
from tests.integration.cluster import Cluster, free_port
from xce.auth.pki import client_ssl_context, create_ca, issue_certificate
from xce.config.settings import TlsSettings


def _requests(cluster: Cluster, route: str) -> float:
    """Answered requests of `route` (POST) so far, from the controller's /metrics."""
    total = 0.0
    for family in text_string_to_metric_families(cluster.get("/metrics").decode()):
        for sample in family.samples:
            labels = sample.labels
            if (
                sample.name == "xce_api_request_seconds_count"
                and labels.get("route") == route
                and labels.get("method") == "POST"
                and labels.get("status") == "200"
            ):
                total += sample.value
    return total


def _statuses(cluster: Cluster) -> dict[str, str]:
    return {h["name"]: h["status"] for h in cluster.get("/api/v1/hosts")["hosts"]}


def _post(url: str, body: dict[str, object]) -> tuple[int, dict[str, object]]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_workers_beat_through_a_relay_and_go_direct_when_it_dies(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path / "c")
    relay_port = free_port()
    relay_url = f"http://127.0.0.1:{relay_port}"
    cluster.start_controller()
    try:
        cluster.start_worker("relay1", slots=1, attrs=f'relay_listen = "127.0.0.1:{relay_port}"')
        for name in ("w2", "w3"):
            cluster.start_worker(name, slots=2, attrs=f'heartbeat_relay = "{relay_url}"')
        direct = _requests(cluster, "/api/v1/workers/{host}/heartbeat")
        relayed = _requests(cluster, "/api/v1/workers/heartbeats")
        time.sleep(10 * cluster.heartbeat)
        # w2 and w3 beat through the relay: batches arrive, and only relay1 beats alone
        assert _requests(cluster, "/api/v1/workers/heartbeats") - relayed >= 5
        alone = _requests(cluster, "/api/v1/workers/{host}/heartbeat") - direct
        assert alone <= 12  # relay1's own ~10, not three hosts' ~30
        # two slots: only w2 and w3 hold them
        jobs = [cluster.submit(command="sleep 0.2", slots=2) for _ in range(4)]
        for job in jobs:
            assert cluster.wait_state(job, "DONE")["state"] == "DONE"

        # A heartbeat the relay (or anyone who reaches it) makes up for w2 is refused by
        # the controller: it is not signed with w2's key. The relay passes that on.
        made_up = {"seq": 10**9, "heartbeat": "{}", "mac": "0" * 64}
        status, body = _post(f"{relay_url}/api/v1/workers/w2/relayed-heartbeat", made_up)
        assert (status, body["status"]) == (200, 401), body
        assert "proof" not in body
        status, body = _post(f"{relay_url}/api/v1/workers/w2/relayed-heartbeat", {"seq": 1})
        assert status == 400, body

        since = (cluster.root / "controller.log").stat().st_size
        cluster.kill_worker("relay1", signal.SIGKILL)
        before = _requests(cluster, "/api/v1/workers/{host}/heartbeat")
        # well past the deadline (3 missed heartbeats): relay1 goes, w2 and w3 stay
        cluster.wait_for(lambda: _statuses(cluster)["relay1"] == "unavailable", 20, "relay1 down")
        time.sleep(6 * cluster.heartbeat)
        assert _statuses(cluster) == {"relay1": "unavailable", "w2": "online", "w3": "online"}
        assert marked_unavailable((cluster.root / "controller.log"), since) == ["relay1"]
        assert _requests(cluster, "/api/v1/workers/{host}/heartbeat") - before >= 6
        job = cluster.submit(command="true", slots=2)
        assert cluster.wait_state(job, "DONE")["state"] == "DONE"
    finally:
        cluster.stop()


class LyingRelay:
    """A relay taken over by an attacker: it forwards nothing and answers every worker as
    if the controller had heard it, with a fence that never runs out."""

    def __init__(self) -> None:
        self.asked = 0
        self.port = free_port()
        handler = self._handler()
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def _handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        relay = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                relay.asked += 1
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                host = self.path.split("/")[4]
                answer = {"version": 0, "register_again": False, "fence_timeout_s": 1e12}
                body = json.dumps(
                    {"host": host, "status": 200, "answer": answer, "proof": "0" * 64}
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        return Handler


def test_a_relay_that_answers_for_the_controller_is_not_believed(tmp_path: Path) -> None:
    """Were its made-up answers taken as contact, the worker would beat only to the liar,
    the controller would hear nothing and mark it unavailable (and requeue its jobs past
    the fence), while its keepers, told of contact, ran them on: every job twice."""
    liar = LyingRelay()
    cluster = Cluster(tmp_path / "c")
    cluster.start_controller()
    try:
        cluster.start_worker("w1", attrs=f'heartbeat_relay = "http://127.0.0.1:{liar.port}"')
        since = (cluster.root / "controller.log").stat().st_size
        before = _requests(cluster, "/api/v1/workers/{host}/heartbeat")
        time.sleep(10 * cluster.heartbeat)  # past the deadline of 3 missed heartbeats
        assert liar.asked >= 1
        assert _statuses(cluster) == {"w1": "online"}
        assert marked_unavailable(cluster.root / "controller.log", since) == []
        assert _requests(cluster, "/api/v1/workers/{host}/heartbeat") - before >= 5
        assert "does not carry the controller's proof" in (cluster.root / "w1.log").read_text()
    finally:
        cluster.stop()
        liar.server.shutdown()


def test_a_relay_over_tls_in_a_cluster_that_demands_client_certificates(tmp_path: Path) -> None:
    """The relay serves TLS with its worker's certificate (one that names its address), its
    workers verify it against the cluster CA, and the controller's demand for a client
    certificate on worker routes is met by the relay's own; the relayed host is vouched for
    by its key, which its registration got over its own certificate."""
    pki = tmp_path / "pki"
    ca = create_ca(pki, "XCE test CA")
    for name, hosts in (("controller", ["127.0.0.1"]), ("r1", ["r1", "127.0.0.1"]), ("w2", ["w2"])):
        issue_certificate(ca, pki, name, hosts, client=True)

    def tls(name: str, extra: str = "") -> str:
        return (
            f'[tls]\nca_file = "{pki / "ca.pem"}"\ncert_file = "{pki / name}.pem"\n'
            f'key_file = "{pki / name}.key"\n{extra}\n'
        )

    cluster = Cluster(tmp_path / "c")
    cluster.url = f"https://127.0.0.1:{cluster.port}"
    cluster.role_sections["controller"] = tls("controller", 'require_client_cert = "workers"')
    cluster.role_sections["r1"] = tls("r1")
    cluster.role_sections["w2"] = tls("w2")
    cluster.ssl_context = client_ssl_context(TlsSettings(ca_file=pki / "ca.pem"))
    relay_port = free_port()
    cluster.start_controller()
    try:
        cluster.start_worker("r1", slots=1, attrs=f'relay_listen = "127.0.0.1:{relay_port}"')
        relayed = _requests(cluster, "/api/v1/workers/heartbeats")
        relay = f'heartbeat_relay = "https://127.0.0.1:{relay_port}"'
        cluster.start_worker("w2", slots=2, attrs=relay)
        time.sleep(8 * cluster.heartbeat)
        assert _requests(cluster, "/api/v1/workers/heartbeats") - relayed >= 4
        assert "heartbeat relay" not in (cluster.root / "w2.log").read_text()  # no fallback
        job = cluster.submit(command="true", slots=2)
        assert cluster.wait_state(job, "DONE")["state"] == "DONE"
        assert _statuses(cluster) == {"r1": "online", "w2": "online"}
    finally:
        cluster.stop()
