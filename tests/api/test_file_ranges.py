"""Downloads resume and carry the file's SHA-256; bodies sent with a digest are checked.

Every file route (job outputs, a worker's input fetch) answers Range with 206 and
Content-Range, sends Content-Length, Accept-Ranges and X-XCE-SHA256 of the whole file, and
416 with a JSON body for a range the file cannot satisfy. An upload or an output whose body
differs from the X-XCE-SHA256 its sender declared is refused and nothing of it is kept.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest

from xce.api.transfers import TRANSFERS
from xce.store import digests

from .conftest import Api, as_user, hold_the_transfer_slot, make_settings, start_api

JOBS = "/api/v1/jobs"
ADMIN = as_user("root", "admin")
DATA = bytes(range(256)) * 1200 + b"tail"  # 307,204 bytes: several pieces of a read


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def _job_with_output(api: Api, data: bytes = DATA, name: str = "result.bin") -> str:
    job_id = await api.submit(outputs=[name])
    await api.register("w1")
    await api.service.schedule_once()
    base = f"/api/v1/workers/w1/jobs/{job_id}/outputs"
    stored = await api.call("PUT", f"{base}/{name}?attempt=0&first=1", 201, data=data)
    assert stored == {"path": name, "size": len(data), "sha256": sha(data)}
    body = {"attempt": 0, "exit_code": 0, "outputs": [name]}
    await api.call("POST", f"/api/v1/workers/w1/jobs/{job_id}/finished", 200, json=body)
    return job_id


async def test_a_download_answers_ranges_with_the_whole_files_digest(api: Api) -> None:
    job_id = await _job_with_output(api)
    url = f"{JOBS}/{job_id}/files/result.bin"
    whole = await api.client.get(url)
    assert whole.status == 200 and await whole.read() == DATA
    assert whole.headers["Accept-Ranges"] == "bytes"
    assert whole.headers["Content-Length"] == str(len(DATA))
    assert whole.headers["X-XCE-SHA256"] == sha(DATA)
    etag = whole.headers["ETag"]
    assert etag == f'"{sha(DATA)}"'

    size = len(DATA)
    cases = {
        "bytes=1000-": (1000, size),
        "bytes=10-19": (10, 20),
        "bytes=-5": (size - 5, size),
        "bytes=0-": (0, size),
        f"bytes=100-{size + 500}": (100, size),  # a last byte past the end: to the end
        "bytes=-999999999": (0, size),
    }
    for header, (start, end) in cases.items():
        part = await api.client.get(url, headers={"Range": header})
        assert part.status == 206, header
        assert await part.read() == DATA[start:end], header
        assert part.headers["Content-Range"] == f"bytes {start}-{end - 1}/{size}", header
        assert part.headers["Content-Length"] == str(end - start), header
        assert part.headers["X-XCE-SHA256"] == sha(DATA), header  # the whole file's

    # An interrupted download resumes where it stopped: the same bytes, the same digest.
    first = DATA[:123_457]
    rest = await api.client.get(url, headers={"Range": f"bytes={len(first)}-", "If-Range": etag})
    assert rest.status == 206
    resumed = first + await rest.read()
    assert resumed == DATA and sha(resumed) == rest.headers["X-XCE-SHA256"]

    # If-Range naming another version (or a date): the whole file, not a range of it.
    for validator in ('"0000"', "Wed, 21 Oct 2015 07:28:00 GMT"):
        other = await api.client.get(url, headers={"Range": "bytes=5-", "If-Range": validator})
        assert other.status == 200 and await other.read() == DATA
    # A unit other than bytes is ignored (RFC 9110): the whole file.
    items = await api.client.get(url, headers={"Range": "items=0-1"})
    assert items.status == 200 and await items.read() == DATA


@pytest.mark.parametrize(
    "header",
    [
        f"bytes={len(DATA)}-",  # at the end: a resume of a finished download
        f"bytes={len(DATA) + 10}-{len(DATA) + 20}",
        "bytes=-0",
        "bytes=20-10",
        "bytes=0-1,5-6",
        "bytes=abc",
        "bytes=-",
        "bytes=" + "9" * 40 + "-",
        "bytes=1e3-",
    ],
)
async def test_a_range_the_file_cannot_satisfy_is_416_with_json(api: Api, header: str) -> None:
    job_id = await _job_with_output(api)
    resp = await api.client.get(f"{JOBS}/{job_id}/files/result.bin", headers={"Range": header})
    assert resp.status == 416, header
    assert resp.headers["Content-Range"] == f"bytes */{len(DATA)}"
    body = await resp.json()
    assert body["error"]["code"] == "range_not_satisfiable"
    assert str(len(DATA)) in body["error"]["message"]


async def test_an_empty_file_downloads_and_refuses_any_range(api: Api) -> None:
    job_id = await _job_with_output(api, b"", "empty")
    resp = await api.client.get(f"{JOBS}/{job_id}/files/empty")
    assert resp.status == 200 and await resp.read() == b""
    assert resp.headers["X-XCE-SHA256"] == sha(b"")
    resp = await api.client.get(f"{JOBS}/{job_id}/files/empty", headers={"Range": "bytes=0-"})
    assert resp.status == 416


async def test_a_gz_beside_a_file_is_never_served_for_it(api: Api) -> None:
    """A job's `data` and `data.gz` are two outputs: asking for `data` while accepting
    gzip gets `data` (aiohttp's FileResponse would send `data.gz` as its encoding)."""
    job_id = await api.submit(outputs=["data", "data.gz"])
    await api.register("w1")
    await api.service.schedule_once()
    base = f"/api/v1/workers/w1/jobs/{job_id}/outputs"
    await api.call("PUT", f"{base}/data?attempt=0&first=1", 201, data=b"plain")
    await api.call("PUT", f"{base}/data.gz?attempt=0", 201, data=b"other content")
    resp = await api.client.get(
        f"{JOBS}/{job_id}/files/data", headers={"Accept-Encoding": "gzip, br"}
    )
    assert resp.status == 200 and "Content-Encoding" not in resp.headers
    assert await resp.read() == b"plain"


async def test_listing_and_upload_answer_carry_the_digest(api: Api) -> None:
    job_id = await _job_with_output(api)
    listed = await api.call("GET", f"{JOBS}/{job_id}/files", 200)
    [entry] = [f for f in listed["files"] if f["path"] == "result.bin"]
    assert entry == {
        "path": "result.bin",
        "name": "result.bin",
        "size": len(DATA),
        "sha256": sha(DATA),
    }
    answer = await api.call("POST", "/api/v1/uploads", 201, data=b"input data")
    assert answer["sha256"] == sha(b"input data") and answer["size"] == 10
    # ...and with the digest sent, the same answer.
    sent = await api.call(
        "POST",
        "/api/v1/uploads",
        201,
        data=b"input data",
        headers={"X-XCE-SHA256": sha(b"input data").upper()},
    )
    assert sent["sha256"] == sha(b"input data")


async def test_a_worker_fetches_inputs_by_range_with_their_digest(api: Api) -> None:
    upload = await api.call("POST", "/api/v1/uploads", 201, data=DATA)
    job_id = await api.submit(inputs={"in/data.bin": upload["upload_id"]})
    await api.register("w1")
    await api.service.schedule_once()
    url = f"/api/v1/workers/w1/jobs/{job_id}/inputs/in/data.bin?attempt=0"
    whole = await api.client.get(url)
    assert whole.status == 200 and await whole.read() == DATA
    # The upload's digest moved with it: the same, without reading the file again.
    assert whole.headers["X-XCE-SHA256"] == upload["sha256"] == sha(DATA)
    part = await api.client.get(url, headers={"Range": "bytes=300000-"})
    assert part.status == 206 and await part.read() == DATA[300000:]
    assert part.headers["Content-Range"] == f"bytes 300000-{len(DATA) - 1}/{len(DATA)}"
    over = await api.client.get(url, headers={"Range": f"bytes={len(DATA)}-"})
    assert over.status == 416 and (await over.json())["error"]["code"] == "range_not_satisfiable"


async def test_a_flipped_byte_is_refused_and_nothing_is_kept(api: Api) -> None:
    files = api.service.files
    good = b"x" * 200_000 + b"important"
    bad = bytearray(good)
    bad[1234] ^= 0x01
    error = await api.call(
        "POST",
        "/api/v1/uploads",
        400,
        data=bytes(bad),
        headers={"X-XCE-SHA256": sha(good)},
    )
    assert error["error"]["code"] == "digest_mismatch"
    assert "upload" in error["error"]["message"] and sha(good) in error["error"]["message"]
    assert sorted(os.listdir(files.root / "uploads")) == []
    assert files.usage("root") == 0

    job_id = await api.submit(outputs=["out.txt"])
    await api.register("w1")
    await api.service.schedule_once()
    base = f"/api/v1/workers/w1/jobs/{job_id}/outputs"
    error = await api.call(
        "PUT",
        f"{base}/out.txt?attempt=0&first=1",
        400,
        data=bytes(bad),
        headers={"X-XCE-SHA256": sha(good)},
    )
    assert error["error"]["code"] == "digest_mismatch"
    assert error["error"]["message"].startswith("out.txt: ")
    assert (await api.call("GET", f"{JOBS}/{job_id}/files", 200))["files"] == []
    # A header that is no digest at all is a 400 of its own, before the body.
    error = await api.call(
        "PUT", f"{base}/out.txt?attempt=0", 400, data=good, headers={"X-XCE-SHA256": "abc"}
    )
    assert "X-XCE-SHA256" in error["error"]["message"]
    # The right digest is taken.
    await api.call(
        "PUT", f"{base}/out.txt?attempt=0", 201, data=good, headers={"X-XCE-SHA256": sha(good)}
    )


async def test_a_digest_after_the_body_is_checked_before_the_file_is_kept(api: Api) -> None:
    """`X-XCE-SHA256: trailing`: the body is the file, then its SHA-256 in 64 hex digits.
    The file is kept without those digits when they match; a flipped byte, a body cut
    short of its digits, or digits that are no digest leave nothing behind."""
    files = api.service.files
    good = b"y" * 3_000_000 + b"end"  # several of the pieces a socket delivers
    trailing = {"X-XCE-SHA256": "trailing"}
    stored = await api.call(
        "POST", "/api/v1/uploads", 201, data=good + sha(good).encode(), headers=trailing
    )
    assert stored["size"] == len(good) and stored["sha256"] == sha(good)
    assert (files.root / "uploads" / stored["upload_id"]).read_bytes() == good
    await api.call("DELETE", f"/api/v1/uploads/{stored['upload_id']}", 200)

    bad = bytearray(good)
    bad[2_500_000] ^= 0x01
    for body, code in (
        (bytes(bad) + sha(good).encode(), "digest_mismatch"),  # damaged on the way
        (good + sha(good).encode()[:-1] + b"z", "invalid_request"),  # no digest at its end
        (good[:40], "invalid_request"),  # shorter than the digest itself
    ):
        error = await api.call("POST", "/api/v1/uploads", 400, data=body, headers=trailing)
        assert error["error"]["code"] == code, error
        assert error["error"]["message"].startswith("upload: "), error
        assert sorted(os.listdir(files.root / "uploads")) == []
        assert files.usage("root") == 0

    job_id = await api.submit(outputs=["out.bin"])
    await api.register("w1")
    await api.service.schedule_once()
    url = f"/api/v1/workers/w1/jobs/{job_id}/outputs/out.bin?attempt=0&first=1"
    error = await api.call("PUT", url, 400, data=bytes(bad) + sha(good).encode(), headers=trailing)
    assert error["error"]["code"] == "digest_mismatch"
    assert error["error"]["message"].startswith("out.bin: ") and "nothing was kept" in str(error)
    assert (await api.call("GET", f"{JOBS}/{job_id}/files", 200))["files"] == []
    stored = await api.call("PUT", url, 201, data=good + sha(good).encode(), headers=trailing)
    assert stored == {"path": "out.bin", "size": len(good), "sha256": sha(good)}
    got = await api.client.get(f"{JOBS}/{job_id}/files/out.bin")
    assert await got.read() == good


async def test_a_file_without_a_record_gets_its_digest_once(api: Api) -> None:
    """Files stored before digests were recorded: computed when first asked, then kept."""
    job_id = await _job_with_output(api)
    files = api.service.files
    shutil.rmtree(files.root / digests.DIR)
    listed = await api.call("GET", f"{JOBS}/{job_id}/files", 200)
    assert [f["sha256"] for f in listed["files"]] == [sha(DATA)]
    path = files.output_path(int(job_id), job_id, "result.bin")
    assert digests.recorded(files.root, path, path.stat()) == sha(DATA)
    # A record that no longer fits its file (replaced behind the store's back) is not trusted.
    path.write_bytes(b"changed")
    resp = await api.client.get(f"{JOBS}/{job_id}/files/result.bin")
    assert await resp.read() == b"changed"
    assert resp.headers["X-XCE-SHA256"] == sha(b"changed")


async def test_a_worker_holding_the_input_gets_304_without_a_transfer_slot(
    tmp_path: Path,
) -> None:
    """`If-None-Match` naming the input's SHA-256: 304, no body, even while every transfer
    slot is taken (a worker asking whether its cached copy of an array's input is still
    the file must not wait behind gigabytes); any other validator: the file, in a slot."""
    api, client = await start_api(
        make_settings(tmp_path, max_concurrent_transfers=1, transfer_wait_s=0.2),
        tmp_path,
        ADMIN,
    )
    try:
        upload = await api.call("POST", "/api/v1/uploads", 201, data=DATA)
        job_id = await api.submit(inputs={"data.bin": upload["upload_id"]})
        await api.register("w1")
        await api.service.schedule_once()
        url = f"/api/v1/workers/w1/jobs/{job_id}/inputs/data.bin?attempt=0"
        etag = f'"{sha(DATA)}"'
        for other in ('"0000"', f"W/{etag}", "*"):
            resp = await client.get(url, headers={"If-None-Match": other})
            assert resp.status == 200 and await resp.read() == DATA, other

        holder, release = await hold_the_transfer_slot(api, client)
        same = await client.get(url, headers={"If-None-Match": f'"0000", {etag}'})
        assert same.status == 304 and await same.read() == b""
        assert same.headers["ETag"] == etag and same.headers["X-XCE-SHA256"] == sha(DATA)
        busy = await client.get(url, headers={"If-None-Match": '"0000"'})
        assert busy.status == 503 and (await busy.json())["error"]["code"] == "busy"
        release.set()
        assert (await holder).status == 201
        assert api.app[TRANSFERS].in_use == 0
    finally:
        await client.close()
