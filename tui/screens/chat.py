"""The chat: a transcript of streamed Markdown replies, a prompt, and a real abort."""

from __future__ import annotations

import time

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Input, Static

from infertui.core.client import ChatReply, explain
from infertui.core.protocol import ChatMessage, InferError

from ..base import infertui_app
from ..widgets.host_bar import HostBar
from ..widgets.message import AssistantMessage, UserMessage

WELCOME = "\n".join(
    [
        "[b]Type a message and press Enter.[/b]",
        "",
        "[b]Esc[/b] stops a reply on the host    [b]Ctrl+N[/b] new chat",
        "[b]Ctrl+O[/b] system prompt and sampling    [b]Ctrl+P[/b] every action",
        "[b]F3 F4 F5[/b] the host's queue, metrics and engines",
    ]
)
STATUS_EVERY_S = 0.1  # the status line's refresh while streaming (not per token)
QUEUE_POLL_S = 0.5


class ChatScreen(Screen[None]):
    BINDINGS = [
        Binding("escape", "abort", "Stop reply", id="chat.abort", tooltip="Abort on the host"),
        Binding("ctrl+c", "abort", "Stop", show=False, priority=True, id="chat.abort_ctrl_c"),
        Binding("ctrl+n", "new_chat", "New chat", id="chat.new"),
        Binding("ctrl+o", "app.options", "Options", id="chat.options"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.history: list[ChatMessage] = []
        self.reply: ChatReply | None = None

    def compose(self) -> ComposeResult:
        yield HostBar()
        yield VerticalScroll(id="transcript")
        yield Static("", id="reply-status", markup=False)
        yield Input(placeholder="Ask something · Enter sends · Esc stops a reply", id="prompt")
        yield Footer()

    def on_mount(self) -> None:
        transcript = self.query_one("#transcript", VerticalScroll)
        transcript.anchor()
        transcript.mount(Static(WELCOME, id="welcome"))
        self.query_one("#prompt", Input).focus()

    @property
    def generating(self) -> bool:
        return self.reply is not None

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "abort":
            return self.generating  # otherwise Escape and Ctrl+C keep their usual meaning
        return True

    @on(Input.Submitted, "#prompt")
    def send(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        if not text:
            return
        client = infertui_app(self).client
        if client is None:
            self.notify("Not connected to a host yet.", severity="warning")
            return
        if self.generating:
            self.notify("A reply is still coming: Esc stops it.", severity="warning")
            return
        event.input.clear()
        self.query("#welcome").remove()
        transcript = self.query_one("#transcript", VerticalScroll)
        view = AssistantMessage(client.info.model)
        transcript.mount(UserMessage(text), view)
        self.history.append(ChatMessage(role="user", content=text))
        self.stream_reply(view)

    @work(exclusive=True, group="reply")
    async def stream_reply(self, view: AssistantMessage) -> None:
        app = infertui_app(self)
        client, options = app.client, app.options
        if client is None:
            return
        system = [ChatMessage(role="system", content=options.system_prompt)]
        messages = [*system, *self.history] if options.system_prompt else list(self.history)
        reply = client.chat(messages, **options.sampling())
        self.reply = reply
        self.refresh_bindings()
        stream = view.stream()
        status = self.query_one("#reply-status", Static)
        parts: list[str] = []
        queue_timer = self.set_interval(QUEUE_POLL_S, self.show_queue_position)
        await self.show_queue_position()
        started = shown = time.monotonic()
        try:
            async for piece in reply:
                if not parts:
                    queue_timer.stop()
                    view.note("")
                parts.append(piece)
                stream.write(piece)
                now = time.monotonic()
                if now - shown >= STATUS_EVERY_S:
                    rate = len(parts) / (now - started)
                    text = f"Generating · {len(parts)} tokens · {rate:.0f} tok/s · Esc stops"
                    status.update(text, layout=False)  # one fixed line: no layout pass
                    shown = now
            await stream.close()  # the whole text first, then the stats under it
            view.finished(reply.stats)
        except InferError as err:
            await stream.close()
            view.failed(explain(err))
        finally:
            queue_timer.stop()
            await stream.close()
            self.reply = None
            self.refresh_bindings()
            status.update("")
        if parts:
            self.history.append(ChatMessage(role="assistant", content="".join(parts)))
        elif self.history and self.history[-1].role == "user":
            self.history.pop()  # nothing came back: the question can be asked again

    async def show_queue_position(self) -> None:
        """Before the first token: how busy the host is, and when to expect a start."""
        client = infertui_app(self).client
        if client is None or self.reply is None:
            return
        try:
            queues = await client.queue()
        except InferError:
            return
        status = self.query_one("#reply-status", Static)
        entries = [e for q in queues for e in q.waiting]
        mine = [
            e for e in entries if client.queue_client_id and e.client_id == client.queue_client_id
        ]
        if mine:  # this client's own place in the queue
            e = mine[0]
            status.update(
                f"Queued: position {e.position + 1} of {len(entries)} · "
                f"starts in ≈ {e.predicted_start_ms / 1000:.1f} s · Esc cancels"
            )
        elif entries:
            eta = max(e.predicted_start_ms for e in entries)
            status.update(
                f"Queued on the host · {len(entries)} waiting · start in ≤ {eta / 1000:.1f} s"
            )
        else:
            busy = sum(1 for q in queues for s in q.slots if s.phase != "idle")
            status.update(f"Starting · {busy} slot(s) busy on the host")

    def action_abort(self) -> None:
        if self.reply is not None:
            self.reply.abort()
            self.query_one("#reply-status", Static).update("Stopping…")

    def action_new_chat(self) -> None:
        if self.generating:
            self.action_abort()
        self.history.clear()
        transcript = self.query_one("#transcript", VerticalScroll)
        transcript.remove_children()
        transcript.mount(Static(WELCOME, id="welcome"))
