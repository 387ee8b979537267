"""The engine manager: every engine with its state and memory; add, remove, reload, drain;
and under it the host's library (library_pane.py): pull, load, unload, delete.

Long operations run in workers; their outcome (or error, in plain words) shows in place."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from pydantic import ValidationError
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Vertical
from textual.widgets import Button, DataTable, Input, Label, Static

from infertui.core.client import Client, explain
from infertui.core.config import first_problem
from infertui.core.protocol import AddEngineRequest, InferError, MemoryUsage

from ..base import infertui_app
from ..widgets.footer import KeysFooter
from ..widgets.host_bar import HostBar
from ..widgets.tables import cleared
from .dashboard import DashboardScreen
from .forms import ConfirmModal, FormModal
from .library_pane import LibraryPane

DONE_FADES_S = 10.0  # an operation's "done" stays this long; a failure until the next one
REQUIRED = {"engine_id": "engine id", "model_path": "GGUF path or server URL"}  # form labels


class EnginesScreen(DashboardScreen):
    REFRESH_S = 1.0
    BINDINGS = [
        Binding("a", "add", "Add", id="engines.add", tooltip="Load a GGUF as a new engine"),
        Binding("d", "remove", "Remove", id="engines.remove"),
        Binding("r", "reload", "Reload", id="engines.reload"),
        Binding("x", "drain", "Drain", id="engines.drain", tooltip="Finish jobs, then refuse"),
        Binding("u", "resume", "Resume", id="engines.resume", tooltip="Take jobs again"),
    ]

    def compose(self) -> ComposeResult:
        yield HostBar()
        yield Static("", id="trouble", classes="trouble", markup=False)
        yield DataTable(id="engines", cursor_type="row", zebra_stripes=True)
        yield Static("", id="detail", markup=False)
        yield Static("", id="outcome", markup=False)
        yield LibraryPane(self.operate, id="library-pane")
        yield KeysFooter()

    def on_mount(self) -> None:
        # narrow enough for 80 columns: the selected engine's model file shows under the table
        self.query_one("#engines", DataTable).add_columns(
            "engine", "status", "ctx", "slots", "GPU", "memory", "tok/s", "reqs",
        )  # fmt: skip
        self.files: dict[str, str] = {}
        self.errors: dict[str, str] = {}
        self.draft: AddEngineRequest | None = None  # a form the host refused, to fix and retry
        super().on_mount()

    async def refresh_data(self, client: Client) -> None:
        engines = await client.engines()
        pane = self.query_one(LibraryPane)
        library = await pane.fetch(client)  # both read before either table changes: no await
        # between a table's clearing and its cursor's return, where a key press would land
        table = self.query_one("#engines", DataTable)
        row = table.cursor_row
        cleared(table)
        for e in engines:
            p, m, perf = e.parameters, e.memory_usage, e.performance
            memory = f"{m.model_size_mb + m.context_size_mb:,.0f} MB" if m else "–"
            # one word; why an engine failed goes on the line under the table
            state = e.pool_state.value
            status = state if state not in ("ready", "loading") else e.status.value
            table.add_row(
                e.engine_id, status, p.n_ctx or "?", p.n_parallel, _gpu(p.n_gpu_layers, m), memory,
                f"{perf.last_inference_tps:.1f}", perf.total_requests, key=e.engine_id,
            )  # fmt: skip
        pane.show(library, engines)
        self.files = {e.engine_id: _source(e.model_path) for e in engines}
        self.errors = {e.engine_id: e.error for e in engines if e.error}
        if table.row_count:
            table.move_cursor(row=min(row, table.row_count - 1))
        self.show_detail()
        self.refresh_bindings()
        if not client.info.admin:  # what makes one admin depends on the way in
            how = (
                "connect with its admin key (--api-key)" if client.info.transport == "http"
                else "give its owner the key from `infertui id --client` for --admin"
            )  # fmt: skip
            self.say(f"Read-only: the host does not take you as admin; {how}.")

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Engine actions show greyed out for a client the host does not list as admin."""
        if action in ("add", "remove", "reload", "drain", "resume"):
            client = infertui_app(self).client
            return True if client is not None and client.info.admin else None
        return True

    @on(DataTable.RowHighlighted, "#engines")
    def show_detail(self) -> None:
        engine = self.selected()
        text = f"{engine}: {self.files.get(engine, '')}" if engine else ""
        if engine in self.errors:
            text += f"\n{self.errors[engine]}"
        detail = self.query_one("#detail", Static)
        detail.update(text)
        detail.set_class(engine in self.errors, "error")

    def selected(self) -> str | None:
        table = self.query_one("#engines", DataTable)
        if not table.row_count:
            return None
        return str(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value)

    def say(self, text: str, *, error: bool = False) -> None:
        outcome = self.query_one("#outcome", Static)
        outcome.set_class(error, "error")
        outcome.update(text)

    def action_add(self) -> None:
        self.app.push_screen(AddEngineModal(self.draft), self.add_engine)

    def action_remove(self) -> None:
        # Not `remove`: that name is Widget.remove, which Textual calls to unmount a screen.
        engine = self.selected()
        if engine is None:
            return

        def remove(yes: bool | None) -> None:
            if yes:
                self.operate(f"Removing {engine}…", lambda c: c.remove_engine(engine))

        question = f"Remove engine {engine}? Its running jobs are cancelled. (y / Esc)"
        self.app.push_screen(ConfirmModal(question), remove)

    def action_reload(self) -> None:
        engine = self.selected()
        if engine is not None:
            self.operate(f"Reloading {engine}…", lambda c: c.reload_engine(engine))

    def action_drain(self) -> None:
        engine = self.selected()
        if engine is None:
            return

        def drain(seconds: float | None) -> None:
            if seconds is not None:
                doing = f"Draining {engine} ({seconds:g} s deadline)…"
                deadline_ms = int(seconds * 1000)
                self.operate(doing, lambda c: c.drain_engine(engine, deadline_ms=deadline_ms))

        self.app.push_screen(DrainModal(engine), drain)

    def action_resume(self) -> None:
        engine = self.selected()
        if engine is not None:
            self.operate(f"Resuming {engine}…", lambda c: c.resume_engine(engine))

    def add_engine(self, request: AddEngineRequest | None) -> None:
        if request is None:
            return
        self.draft = request  # until the host takes it: a failure reopens the form as typed

        async def add(client: Client) -> str | None:
            await client.add_engine(request)
            self.draft = None
            added = [e for e in await client.engines() if e.engine_id == request.engine_id]
            if added and (added[0].error or added[0].pool_state.value == "failed"):
                return f"added, but not ready: {added[0].error or 'it failed'}"
            return None

        self.operate(f"Loading {request.engine_id} from {request.model_path}…", add)

    @work(group="engine-ops")
    async def operate(self, doing: str, call: Callable[[Client], Awaitable[str | None]]) -> None:
        """Run one engine operation on the connected host and say how it went: done, failed,
        or what the call itself says came of it (a warning). "done" fades after a while."""
        client = infertui_app(self).client
        if client is None:
            self.say("Not connected.", error=True)
            return
        self.say(doing)
        try:
            warning = await call(client)
        except InferError as err:
            self.say(f"{doing.rstrip('…')} failed: {explain(err)}", error=True)
            return
        if warning:
            self.say(f"{doing.rstrip('…')}: {warning}", error=True)
        else:
            said = f"{doing.rstrip('…')}: done."
            self.say(said)
            self.set_timer(DONE_FADES_S, lambda: self._fade(said))
        await self._tick()

    def _fade(self, said: str) -> None:
        outcome = self.query_one("#outcome", Static)
        if str(outcome.render()) == said:  # nothing newer was said meanwhile
            self.say("")


def _source(model_path: str) -> str:
    """Where an engine's model is, short: a file's name, or an upstream server's URL."""
    return model_path if "://" in model_path else model_path.rsplit("/", 1)[-1]


def _gpu(layers: int, m: MemoryUsage | None) -> str:
    """Layers offloaded, and how full the card is (by everyone): "all 21/80 GB"."""
    if layers == 0:
        return "–"
    offloaded = "all" if layers < 0 else str(layers)
    if m is None or m.device_used_mb is None or not m.device_total_mb:
        return offloaded
    return f"{offloaded} {m.device_used_mb / 1024:,.0f}/{m.device_total_mb / 1024:,.0f} GB"


class AddEngineModal(FormModal[AddEngineRequest | None]):
    """A form for a new engine, checked here with the same model the host uses; `draft`
    fills it in again (the last form the host refused)."""

    def __init__(self, draft: AddEngineRequest | None = None) -> None:
        super().__init__()
        self.draft = draft

    def on_mount(self) -> None:
        if self.draft is not None:
            for name, value in self.draft.model_dump(exclude_unset=True).items():
                for field in self.query(f"#{name}").results(Input):
                    field.value = str(value)
            first = self.query(Input).first()
            first.focus()
            first.select_all()  # typing replaces the refused value, not appends to it

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label("Add an engine", classes="title")
            with Grid(id="form"):
                yield Label("engine id")
                yield Input(placeholder="e.g. qwen-7b", id="engine_id", compact=True)
                yield Label("GGUF path or server URL")
                yield Input(
                    placeholder="/models/m.gguf or http://gpu1:8000/v1",
                    id="model_path",
                    compact=True,
                )
                yield Label("context tokens")
                yield Input(placeholder="default 4096", id="n_ctx", type="integer", compact=True)
                yield Label("GPU layers")
                yield Input(
                    placeholder="default: all", id="n_gpu_layers", type="integer", compact=True
                )
                yield Label("main GPU")
                yield Input(
                    placeholder="default: all", id="main_gpu_id", type="integer", compact=True
                )
                yield Label("server's model")
                yield Input(
                    placeholder="URL only; default: first", id="upstream_model", compact=True
                )
                yield Label("server's API key")
                yield Input(placeholder="URL only", id="api_key", password=True, compact=True)
            yield from self.footer("Load", "load")

    @on(Button.Pressed, "#load")
    @on(Input.Submitted)
    def load(self) -> None:
        given = {i.id: i.value.strip() for i in self.query(Input) if i.id and i.value.strip()}
        try:
            self.dismiss(AddEngineRequest.model_validate(given))
        except ValidationError as err:
            missing = [REQUIRED[str(e["loc"][0])] for e in err.errors() if e["type"] == "missing"]
            worded = [e for e in err.errors() if e["type"] == "string_pattern_mismatch"]
            if missing:
                self.show_error(f"Fill in: {', '.join(missing)}.")
            elif worded and worded[0]["loc"] == ("engine_id",):  # (not the pattern's regex)
                self.show_error("The engine ID is one word: no spaces or slashes.")
            else:
                self.show_error(first_problem(err))


class DrainModal(FormModal[float | None]):
    """How long running jobs may take to finish before the rest are cancelled."""

    def __init__(self, engine: str) -> None:
        super().__init__()
        self.engine = engine

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label(f"Drain {self.engine}", classes="title")
            yield Label("It stops taking jobs; running ones may finish within the deadline.")
            with Grid(id="form"):
                yield Label("deadline, seconds")
                yield Input("5", id="deadline", type="number", compact=True)
            yield from self.footer("Drain", "drain", "warning")

    @on(Button.Pressed, "#drain")
    @on(Input.Submitted)
    def drain(self) -> None:
        text = self.query_one("#deadline", Input).value.strip()
        try:
            seconds = float(text)
        except ValueError:
            seconds = -1.0
        if not 0 <= seconds <= 3600:
            self.show_error("A deadline from 0 to 3600 seconds.")
            return
        self.dismiss(seconds)
