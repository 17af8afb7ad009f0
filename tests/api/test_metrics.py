"""`/metrics`: Prometheus text that a real parser reads, with figures that follow the state."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from tests.api.conftest import Api, auth


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


async def _scrape(api: Api, **kwargs: object) -> dict:
    resp = await api.client.get("/metrics", **kwargs)
    assert resp.status == 200
    assert resp.content_type == "text/plain"
    return _samples(await resp.text())


async def test_jobs_by_state_and_queue_follow_the_state(api: Api) -> None:
    before = await _scrape(api)
    pend = ("xce_jobs", (("queue", "short"), ("state", "PEND")))
    assert before[pend] == 0
    await api.submit(queue="short")
    await api.submit(queue="short", array="1-10")
    await api.submit(queue="normal", hold=True)
    after = await _scrape(api)
    assert after[pend] == 11  # one job and ten unmaterialised array tasks
    assert after[("xce_jobs", (("queue", "normal"), ("state", "PSUSP")))] == 1
    job_kind = ("xce_submissions_total", (("kind", "job"),))
    assert after[job_kind] - before.get(job_kind, 0) == 2


async def test_hosts_by_status_and_wal_and_latency_histograms(api: Api) -> None:
    await api.register("w1")
    await api.register("w2")
    await api.call("POST", "/api/v1/hosts/w2/close", 200, json={"reason": "disk"})
    await api.submit()
    samples = await _scrape(api)
    assert samples[("xce_hosts", (("status", "online"),))] == 1
    assert samples[("xce_hosts", (("status", "offline"),))] == 1
    assert samples[("xce_hosts", (("status", "unavailable"),))] == 0
    latency = [
        v
        for (name, labels), v in samples.items()
        if name == "xce_api_request_seconds_count"
        and ("route", "/api/v1/jobs") in labels
        and ("status", "201") in labels
    ]
    assert latency and latency[0] >= 1
    # Route templates, never raw ids, so the label set stays bounded.
    assert not any("/api/v1/hosts/w2" in dict(labels).get("route", "") for _, labels in samples)


async def test_metrics_need_an_identity_when_tokens_are_configured(secured: Api) -> None:
    resp = await secured.client.get("/metrics")
    assert resp.status == 401
    assert (await resp.json())["error"]["code"] == "unauthorized"
    await _scrape(secured, headers=auth("user"))
