"""``tests.gcs_emulator``: through its ``PreconditionProxy`` the emulator answers generation
preconditions as GCS does on every kind of object write (DELETE, media, multipart and resumable
uploads), and refuses with 501 the conditions it does not emulate rather than ignoring them."""
from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from tests.gcs_emulator import gcs, gcs_emulator  # noqa: F401 - fixtures


def _request(url: str, method: str, *, data: bytes | None = None, headers: dict[str, str] | None = None):
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.headers, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


class _Objects:
    """Raw JSON API requests for objects of one bucket, sent to ``base`` (the proxy, or the binary)."""

    def __init__(self, base: str, bucket: str):
        self.base, self.bucket = base, bucket

    def generation(self, name: str) -> int | None:
        status, _, body = _request(f"{self.base}/storage/v1/b/{self.bucket}/o/{name}", "GET")
        return int(json.loads(body)["generation"]) if status == 200 else None

    def delete(self, name: str, query: str = ""):
        return _request(f"{self.base}/storage/v1/b/{self.bucket}/o/{name}?{query}", "DELETE")[:3:2]

    def media(self, name: str, data: bytes, query: str = ""):
        return _request(f"{self.base}/upload/storage/v1/b/{self.bucket}/o?uploadType=media&name={name}&{query}", "POST",
                        data=data, headers={"Content-Type": "application/octet-stream"})[:3:2]

    def multipart(self, name: str, data: bytes, query: str = ""):
        body = (b'--b\r\nContent-Type: application/json\r\n\r\n' + json.dumps({"name": name}).encode()
                + b'\r\n--b\r\nContent-Type: application/octet-stream\r\n\r\n' + data + b'\r\n--b--')
        return _request(f"{self.base}/upload/storage/v1/b/{self.bucket}/o?uploadType=multipart&{query}", "POST",
                        data=body, headers={"Content-Type": 'multipart/related; boundary="b"'})[:3:2]

    def resumable(self, name: str, data: bytes, query: str = ""):
        """Opens a resumable upload, sends all but the last byte, then the last: the last answer."""
        status, headers, body = _request(f"{self.base}/upload/storage/v1/b/{self.bucket}/o?uploadType=resumable&{query}",
                                         "POST", data=json.dumps({"name": name}).encode(),
                                         headers={"Content-Type": "application/json"})
        assert status == 200, body  # conditions are checked when the upload completes, as on GCS
        session, n = headers["Location"], len(data)
        assert _request(session, "PUT", data=data[:-1], headers={"Content-Range": f"bytes 0-{n - 2}/*"})[0] == 308
        self.last = lambda: _request(session, "PUT", data=data[-1:], headers={"Content-Range": f"bytes {n - 1}-{n - 1}/{n}"})
        return self.last()[:3:2]


WRITES = ["media", "multipart", "resumable"]


@pytest.fixture
def objects(gcs) -> _Objects:  # noqa: F811
    return _Objects(gcs.emulator.url, gcs.bucket)


@pytest.mark.parametrize("kind", WRITES)
def test_an_upload_of_a_stale_or_absent_generation_is_refused_with_gcs_412(objects, gcs, kind) -> None:  # noqa: F811
    upload = getattr(objects, kind)
    assert upload("a", b"one", "ifGenerationMatch=0")[0] == 200
    first = objects.generation("a")
    status, body = upload("a", b"two", "ifGenerationMatch=0")  # exists
    assert status == 412 and objects.generation("a") == first
    assert upload("a", b"two", f"ifGenerationMatch={first + 1}")[0] == 412
    assert upload("absent", b"two", f"ifGenerationMatch={first}")[0] == 412 and objects.generation("absent") is None
    assert upload("a", b"two", f"ifGenerationNotMatch={first}")[0] == 304 and objects.generation("a") == first
    assert upload("a", b"two", f"ifGenerationMatch={first}")[0] == 200 and objects.generation("a") > first
    refusals = 4 if kind != "multipart" else 1  # the binary itself honours ifGenerationMatch on multipart
    assert gcs.refusals()[kind] == refusals


def test_a_delete_of_a_stale_generation_is_refused_and_of_an_absent_object_is_404(objects, gcs) -> None:  # noqa: F811
    objects.media("a", b"one")
    first = objects.generation("a")
    status, body = objects.delete("a", f"ifGenerationMatch={first + 1}")
    assert status == 412 and json.loads(body)["error"]["errors"][0]["reason"] == "conditionNotMet"
    assert objects.delete("a", f"ifGenerationNotMatch={first}")[0] == 304 and objects.generation("a") == first
    assert objects.delete("a", f"ifGenerationMatch={first}")[0] in (200, 204) and objects.generation("a") is None
    assert objects.delete("a", f"ifGenerationMatch={first}")[0] == 404
    assert gcs.refusals()["delete"] == 2


def test_the_binary_alone_ignores_what_the_proxy_answers(gcs) -> None:  # noqa: F811
    """Why the proxy exists: fake-gcs-server's own answers to the same stale writes are 200."""
    direct = _Objects(gcs.emulator.server_url, gcs.bucket)
    direct.media("a", b"one")
    assert direct.media("a", b"two", "ifGenerationMatch=1")[0] == 200
    assert direct.delete("a", "ifGenerationMatch=1")[0] in (200, 204) and direct.generation("a") is None


def test_a_retry_of_a_completed_resumable_upload_is_not_refused(objects, gcs) -> None:  # noqa: F811
    assert objects.resumable("a", b"one", "ifGenerationMatch=0")[0] == 200
    objects.last()  # its answer was lost: GCS answers the finished upload again (the binary: 404)
    assert gcs.refusals()["resumable"] == 0


@pytest.mark.parametrize("method, path, query", [
    ("DELETE", "o/a", "ifMetagenerationMatch=1"),
    ("GET", "o/a", "ifGenerationMatch=1"),
    ("PATCH", "o/a", "ifGenerationMatch=1"),
    ("POST", "o/a/rewriteTo/b/{bucket}/o/c", "ifGenerationMatch=0"),
])
def test_a_condition_not_emulated_is_refused_with_501_not_ignored(objects, method, path, query) -> None:
    objects.media("a", b"one")
    url = f"{objects.base}/storage/v1/b/{objects.bucket}/{path.format(bucket=objects.bucket)}?{query}"
    status, _, body = _request(url, method, data=b"{}" if method in ("PATCH", "POST") else None,
                               headers={"Content-Type": "application/json"})
    assert status == 501 and "is not emulated" in json.loads(body)["error"]["message"]


def test_gcsfs_exclusive_writes_in_blocks_a_resumable_upload_are_exclusive(gcs) -> None:  # noqa: F811
    fs, path, data = gcs.filesystem(), f"{gcs.bucket}/big", bytes(range(256)) * 4096  # 1 MiB: 4 blocks

    def create(content: bytes) -> None:
        with fs.open(path, "xb", block_size=1 << 18) as f:
            f.write(content)

    create(data)
    with pytest.raises(FileExistsError):
        create(data[::-1])
    assert fs.cat_file(path) == data
    assert gcs.refusals()["resumable"] == 1
