"""What the client app says of an engine's state: the chat's word on the queue before a reply
starts (the asked engine's, not the host's), and the engine manager's on a failed engine."""

from __future__ import annotations

from textual.widgets import DataTable, Input, Static

from infertui.core.client import ConnectionState
from infertui.core.config import Settings
from infertui.core.protocol import AddEngineRequest
from infertui.core.protocol.snapshots import (
    EngineStatus,
    PoolState,
    QueueEntry,
    QueueSnapshot,
    SlotSnapshot,
)
from infertui.tui.screens.chat import ChatScreen
from infertui.tui.screens.engines import AddEngineModal, EnginesScreen

from ..conftest import until
from .scripted import ScriptedClient, ScriptedClientApp, ScriptedReply


class TwoEngines(ScriptedClient):
    """qwen-7b is full with two jobs waiting; gemma-3-270m has one slot of two busy."""

    async def queue(self) -> list[QueueSnapshot]:
        waiting = tuple(
            QueueEntry(job_id=f"q{i}", client_id="http:10.0.0.9", position=i,
                       predicted_start_ms=3000 * (i + 1), tokens_in=20, waited_ms=10.0)
            for i in range(2)
        )  # fmt: skip
        full = (SlotSnapshot(slot=0, job_id="q", phase="decode"),)
        half = (SlotSnapshot(slot=0, job_id="g", phase="decode"), SlotSnapshot(slot=1))
        return [
            QueueSnapshot(pool_id="qwen-7b", capacity=8, depth=2, waiting=waiting, slots=full),
            QueueSnapshot(pool_id="gemma-3-270m", capacity=8, depth=0, slots=half),
        ]


async def status_for(model: str | None) -> str:
    app = ScriptedClientApp(Settings())
    async with app.run_test(size=(100, 30)) as pilot:
        app.client = TwoEngines()
        app.options = app.options.model_copy(update={"model": model})
        screen = app.screen
        assert isinstance(screen, ChatScreen)
        screen.reply = ScriptedReply()
        await screen.show_queue_position()
        await pilot.pause()
        return str(screen.query_one("#reply-status", Static).render())


async def test_a_chat_on_an_idle_engine_is_not_told_of_another_engines_queue() -> None:
    assert await status_for("gemma-3-270m") == "Starting · 1 slot(s) busy on gemma-3-270m"


async def test_a_chat_on_a_full_engine_sees_that_engines_queue() -> None:
    status = await status_for("qwen-7b")
    assert status.startswith("Queued on qwen-7b · 2 waiting · start in ≤ 6.0 s")


async def test_the_hosts_default_engine_counts_every_queue() -> None:
    # the host resolves the default itself: the chat cannot tell which queue is its own
    assert (await status_for(None)).startswith("Queued on the host · 2 waiting")


class FailedUpstream(ScriptedClient):
    """An upstream engine whose server does not answer, added through the manager."""

    def __init__(self) -> None:
        super().__init__()
        self.added = False

    async def engines(self) -> list[EngineStatus]:
        engines = await super().engines()
        if self.added:
            down = engines[0].model_copy(
                update={"engine_id": "up", "model_path": "http://127.0.0.1:9/v1",
                        "pool_state": PoolState.FAILED,
                        "error": "the upstream http://127.0.0.1:9/v1 cannot be reached"}
            )  # fmt: skip
            engines.append(down)
        return engines

    async def add_engine(self, request: AddEngineRequest) -> None:
        self.added = True


async def test_the_engine_manager_says_an_added_engine_is_not_ready_and_why() -> None:
    app = ScriptedClientApp(Settings())
    async with app.run_test(size=(100, 30)) as pilot:
        app.scripted = FailedUpstream()
        app.set_connection(ConnectionState("connected", "Connected", app.scripted))
        await pilot.press("f5")
        screen = app.screen
        assert isinstance(screen, EnginesScreen)
        screen.add_engine(AddEngineRequest(engine_id="up", model_path="http://127.0.0.1:9/v1"))
        outcome = screen.query_one("#outcome", Static)
        await until(pilot, lambda: "not ready" in str(outcome.render()))
        assert "done" not in str(outcome.render()) and outcome.has_class("error")
        table = screen.query_one("#engines", DataTable)
        await until(pilot, lambda: table.row_count == 3)
        assert table.get_row("up")[1] == "failed"  # one word: the columns after stay in view
        table.move_cursor(row=table.get_row_index("up"))
        detail = screen.query_one("#detail", Static)
        await until(pilot, lambda: "cannot be reached" in str(detail.render()))
        assert detail.has_class("error")


async def test_an_empty_add_form_names_the_fields_to_fill_in() -> None:
    app = ScriptedClientApp(Settings())
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("f5")
        await pilot.press("a")
        await until(pilot, lambda: isinstance(app.screen, AddEngineModal))
        await pilot.click("#load")
        error = str(app.screen.query_one("#form-error", Static).render())
        assert error == "Fill in: engine id, GGUF path or server URL."
        # a path typed into the ID's box: said in words, not as the ID's pattern (an audit)
        app.screen.query_one("#engine_id", Input).value = "bogus/tmp/a"
        app.screen.query_one("#model_path", Input).value = "/tmp/a.gguf"
        app.screen.query_one("#model_path", Input).focus()
        await pilot.press("enter")
        await pilot.pause()
        error = str(app.screen.query_one("#form-error", Static).render())
        assert error == "The engine ID is one word: no spaces or slashes."


class LoadingForAChat(ScriptedClient):
    """llama3.2:1b, a library model, loads for two requests, this chat's among them."""

    async def queue(self) -> list[QueueSnapshot]:
        return [QueueSnapshot(pool_id="llama3.2:1b", capacity=8, depth=0, loading_for=2,
                              loaded_in_ms=2300)]  # fmt: skip


async def test_a_chat_that_names_a_model_not_loaded_says_it_loads() -> None:
    app = ScriptedClientApp(Settings())
    async with app.run_test(size=(100, 30)) as pilot:
        app.client = LoadingForAChat()
        app.options = app.options.model_copy(update={"model": "llama3.2:1b"})
        screen = app.screen
        assert isinstance(screen, ChatScreen)
        screen.reply = ScriptedReply()
        await screen.show_queue_position()
        await pilot.pause()
        status = str(screen.query_one("#reply-status", Static).render())
        assert status == "Loading llama3.2:1b · ready in ≈ 2.3 s · Esc cancels"


async def test_a_dashboard_repeats_the_bars_words_in_a_banner_only_when_the_bar_cuts_them() -> None:
    """While the host is away the bar says why; the banner under it said the same words again
    (a helper saw "Stopping: finishing running jobs…" twice). It now shows only words the bar
    had to cut short, whole."""
    from infertui.tui.screens.dashboard import DashboardScreen

    app = ScriptedClientApp(Settings())
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("f3")
        await until(pilot, lambda: isinstance(app.screen, DashboardScreen))
        screen = app.screen
        assert isinstance(screen, DashboardScreen)
        banner = screen.query_one("#trouble", Static)
        for message, shown in (("Stopping.", False), ("The host is away: " + "why " * 30, True)):
            app.set_connection(ConnectionState("closed", message))
            await pilot.pause()
            await screen._tick()
            assert banner.display is shown, message
