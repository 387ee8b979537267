"""The chat's word on the queue before a reply starts: the asked engine's, not the host's."""

from __future__ import annotations

from textual.widgets import Static

from infertui.core.config import Settings
from infertui.core.protocol.snapshots import QueueEntry, QueueSnapshot, SlotSnapshot
from infertui.tui.screens.chat import ChatScreen

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
