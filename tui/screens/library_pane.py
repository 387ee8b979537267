"""The engine manager's library: every model the host has on disk, loaded or not, with pull
(and its progress bar), load, unload and delete. Its keys act on the model under its cursor,
once Tab has moved the focus into it."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Vertical
from textual.widgets import Button, DataTable, Input, Label, ProgressBar, Static

from infertui.core.client import Client, explain
from infertui.core.protocol import EngineStatus, InferError, LibraryEntry

from ..base import infertui_app
from ..widgets.tables import cleared, said_size
from .forms import ConfirmModal, FormModal

ADMIN_ACTIONS = ("pull", "delete")  # load and unload: any client, as any request
Operate = Callable[[str, Callable[[Client], Awaitable[str | None]]], object]  # the screen's


class LibraryPane(Vertical):
    """The library's table, and a pull's progress under it."""

    BINDINGS = [
        Binding("p", "pull", "Pull", id="library.pull", tooltip="Fetch a model by name"),
        Binding("l", "load", "Load", id="library.load"),
        Binding("o", "unload", "Unload", id="library.unload"),
        Binding("delete", "delete", "Delete", id="library.delete"),
    ]

    def __init__(self, operate: Operate, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.operate = operate  # runs a call on the host and says how it went

    def compose(self) -> ComposeResult:
        yield Label("Library (Tab: p pull · l load · o unload · Del delete)", classes="title")
        yield DataTable(id="library", cursor_type="row", zebra_stripes=True)
        yield ProgressBar(id="pull-bar", show_eta=False)
        yield Static("", id="pull-status", markup=False)

    def on_mount(self) -> None:
        self.query_one("#library", DataTable).add_columns(
            "model", "size", "params", "quant", "ctx", "in memory"
        )
        self.query_one("#pull-bar", ProgressBar).display = False

    def show(self, entries: Sequence[LibraryEntry], engines: Sequence[EngineStatus]) -> None:
        table = self.query_one("#library", DataTable)
        row = table.cursor_row
        cleared(table)
        stays = {e.engine_id: e for e in engines}
        for entry in entries:
            table.add_row(
                entry.name, said_size(entry.size), entry.parameters or "?",
                entry.quantization or "?", entry.context_length or "?",
                _in_memory(stays.get(entry.name)), key=entry.name,
            )  # fmt: skip
        if table.row_count:
            table.move_cursor(row=min(row, table.row_count - 1))

    def selected(self) -> str | None:
        table = self.query_one("#library", DataTable)
        if not table.row_count:
            return None
        return str(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Greyed out for a client the host does not list as admin."""
        if action in ADMIN_ACTIONS:
            client = infertui_app(self).client
            return True if client is not None and client.info.admin else None
        return True

    def action_pull(self) -> None:
        def pull(name: str | None) -> None:
            if name:
                self.pull(name)

        self.app.push_screen(PullModal(), pull)

    def action_load(self) -> None:
        if (name := self.selected()) is not None:
            self.operate(f"Loading {name}…", lambda client: client.load_model(name))

    def action_unload(self) -> None:
        if (name := self.selected()) is not None:
            self.operate(f"Unloading {name}…", lambda client: client.unload_model(name))

    def action_delete(self) -> None:
        name = self.selected()
        if name is None:
            return

        def delete(yes: bool | None) -> None:
            if yes:
                self.operate(f"Deleting {name}…", lambda client: client.delete_model(name))

        question = f"Delete {name} from the host's disk? (y / Esc)"
        self.app.push_screen(ConfirmModal(question), delete)

    @work(exclusive=True, group="pull")
    async def pull(self, name: str) -> None:
        """Follow a pull on the host: a bar per file, bytes, speed and time left."""
        client = infertui_app(self).client
        status = self.query_one("#pull-status", Static)
        bar = self.query_one("#pull-bar", ProgressBar)
        if client is None:
            status.update("Not connected.")
            return
        bar.display, started, digest = True, time.monotonic(), None
        status.update(f"Pulling {name}…")
        try:
            async for event in client.pull_model(name):
                if event.get("digest") != digest:  # a new file: its own bar and rate
                    digest, started = event.get("digest"), time.monotonic()
                status.update(_said(name, event, time.monotonic() - started))
                if event.get("total"):
                    bar.update(total=event["total"], progress=event.get("completed", 0))
        except InferError as err:
            status.update(f"Pulling {name} failed: {explain(err)}")
            status.add_class("error")
            return
        except ValueError as err:  # a line the host sent that is not a pull's event
            status.update(f"Pulling {name} failed: the host's answer made no sense ({err})")
            status.add_class("error")
            return
        finally:
            bar.display = False
        status.remove_class("error")
        status.update(f"Pulled {name}: it is in the library; a request naming it loads it.")

    async def fetch(self, client: Client) -> list[LibraryEntry]:
        try:
            entries = await client.library()
        except InferError:  # an older host, without a library: the engines alone
            entries = []
        self.display = bool(entries) or client.info.admin
        return entries


def _in_memory(engine: EngineStatus | None) -> str:
    if engine is None:
        return "–"
    if not engine.on_demand:
        return "stays"
    if engine.expires_at is None:
        return "forever"
    left = max(0.0, engine.expires_at - time.time())
    return f"{int(left // 60)}:{int(left % 60):02d} left"


def _said(name: str, event: dict[str, object], seconds: float) -> str:
    """A pull's progress as a line: what it does, and while a file comes, how far and fast."""
    done, total = event.get("completed"), event.get("total")
    if not isinstance(done, int) or not isinstance(total, int) or not total:
        return f"{name}: {event.get('status', '')}"
    rate = done / seconds if seconds > 0 else 0.0
    left = f" · {(total - done) / rate:.0f} s left" if rate > 0 else ""
    return (
        f"{name}: {event.get('status', '')} · {done / 1e6:,.0f} of {total / 1e6:,.0f} MB"
        f" · {rate / 1e6:,.1f} MB/s{left}"
    )


class PullModal(FormModal[str | None]):
    """The name of a model to pull onto the host."""

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label("Pull a model onto the host", classes="title")
            with Grid(id="form"):
                yield Label("name")
                yield Input(placeholder="llama3.2:1b or hf.co/ORG/REPO:Q4_K_M", id="name",
                            compact=True)  # fmt: skip
            yield from self.footer("Pull", "pull")

    @on(Button.Pressed, "#pull")
    @on(Input.Submitted)
    def submit(self) -> None:
        name = self.query_one("#name", Input).value.strip()
        if not name:
            self.show_error("Fill in a name.")
            return
        self.dismiss(name)
