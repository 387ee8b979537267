"""The chat: a transcript of streamed Markdown replies, a prompt, and a real abort."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

from pydantic import ValidationError
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.keys import format_key
from textual.screen import Screen
from textual.widgets import Static

from infertui.core.client import ChatReply, explain
from infertui.core.client.chats import ChatStore, SavedChat, title_of
from infertui.core.protocol import ChatMessage, ErrorKind, InferError, without_oldest_turn

from ..base import infertui_app
from ..widgets.footer import KeysFooter
from ..widgets.host_bar import HostBar
from ..widgets.message import AssistantMessage, UserMessage
from ..widgets.prompt import PromptArea
from .chats import ChatsModal
from .forms import ConfirmModal
from .model_picker import ModelChoice, ModelPicker

log = logging.getLogger(__name__)

WELCOME = "\n".join(
    [
        "[b]Type a message and press Enter.[/b]",
        "",
        "[b]{chat_abort}[/b] stops a reply on the host    [b]{chat_new}[/b] new chat",
        "[b]{chat_model}[/b] which model    [b]{chat_options}[/b] system prompt and sampling",
        "[b]↑[/b] edits your last message    [b]{chat_again}[/b] asks again    "
        "[b]{chat_copy}[/b] copies",
        "[b]{chat_saved}[/b] saved chats    [b]Ctrl+P[/b] every action",
        "[b]{app_queue} {app_metrics} {app_engines}[/b] the host's queue, metrics and engines",
    ]
)


class _Keys(dict[str, str]):
    def __missing__(self, name: str) -> str:
        return "?"  # (a binding this app lacks)


def welcome_text(keys: Mapping[str, str]) -> str:
    """The welcome, with each key as bound now: `keys` maps binding ids to their keys."""
    return WELCOME.format_map(_Keys({i.replace(".", "_"): readable(k) for i, k in keys.items()}))


def readable(keys: str) -> str:
    """A binding's first key as the welcome writes it: "ctrl+b,f9" as "Ctrl+B"."""
    *modifiers, key = keys.split(",")[0].strip().split("+")
    shown = format_key(key)  # Textual's: "esc", "↑", "f3"
    shown = shown.upper() if len(shown) == 1 else shown.capitalize()
    return "+".join([*(modifier.capitalize() for modifier in modifiers), shown])


STATUS_EVERY_S = 0.1  # the status line's refresh while streaming (not per token)
QUEUE_POLL_S = 0.5


class ChatScreen(Screen[None]):
    BINDINGS = [
        # priority: a key remapped onto abort (say Ctrl+K) is abort while a reply streams,
        # before the prompt's own use of it (check_action passes it on otherwise)
        Binding(
            "escape",
            "abort",
            "Stop reply",
            id="chat.abort",
            tooltip="Abort on the host",
            priority=True,
        ),
        Binding("ctrl+c", "abort", "Stop", show=False, priority=True, id="chat.abort_ctrl_c"),
        Binding("escape", "cancel_edit", "Cancel edit", priority=True, id="chat.cancel_edit"),
        Binding("ctrl+n", "new_chat", "New chat", id="chat.new"),
        Binding("ctrl+o", "app.options", "Options", id="chat.options"),
        Binding("ctrl+l", "pick_model", "Model", id="chat.model"),
        Binding("ctrl+t", "saved_chats", "Chats", id="chat.saved", tooltip="Saved chats"),
        # not in the footer, which they would crowd at 80 columns: the welcome lists them
        Binding("ctrl+g", "regenerate", "Again", show=False, id="chat.again"),
        # Ctrl+Y: before the prompt's redo, but only while there is nothing to redo (check_action)
        Binding("ctrl+y", "copy_reply", "Copy", show=False, priority=True, id="chat.copy"),
        # the transcript scrolls while the prompt keeps the focus
        Binding("pageup", "scroll_transcript(-1)", show=False, priority=True, id="chat.page_up"),
        Binding("pagedown", "scroll_transcript(1)", show=False, priority=True, id="chat.page_down"),
    ]

    def __init__(self, store: ChatStore | None = None) -> None:
        super().__init__()
        self.history: list[ChatMessage] = []
        self.left_out = 0  # the history's first messages, no longer sent: past the context
        self.saved: SavedChat | None = None  # where this conversation is kept, once it has a reply
        self.store = store or ChatStore()
        self.reply: ChatReply | None = None
        self.editing: UserMessage | None = None  # the last question, while ↑ has it in the prompt
        self.stop_question: ConfirmModal | None = None  # Ctrl+N's, while a reply streams

    def compose(self) -> ComposeResult:
        yield HostBar()
        yield VerticalScroll(id="transcript")
        yield Static("", id="reply-status", markup=False)
        yield PromptArea(
            placeholder="Ask something · Enter sends · Ctrl+J new line · Esc stops a reply",
            id="prompt",
        )
        yield KeysFooter()

    def on_mount(self) -> None:
        transcript = self.query_one("#transcript", VerticalScroll)
        transcript.anchor()
        transcript.mount(Static(welcome_text(self.bound_keys()), id="welcome"))
        self.query_one("#prompt", PromptArea).focus()

    def bound_keys(self) -> dict[str, str]:
        """Each binding id's key, as the keymap binds it now (a remap left the welcome naming
        the old key)."""
        bindings = (*self.BINDINGS, *self.app.BINDINGS)
        keys = {b.id: b.key for b in bindings if isinstance(b, Binding) and b.id}
        return keys | infertui_app(self).settings.keymap

    @property
    def generating(self) -> bool:
        return self.reply is not None

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "abort":
            return self.generating  # otherwise Escape and Ctrl+C keep their usual meaning
        if action == "cancel_edit":
            return self.editing is not None and not self.generating
        if action == "copy_reply":  # Ctrl+Y stays the prompt's redo while one types
            prompt = self.query_one("#prompt", PromptArea)
            return not prompt.text and not prompt.history.redo_stack
        if action == "regenerate":
            return not self.generating and self.last_question() is not None
        return True

    @on(PromptArea.Submitted, "#prompt")
    async def send(self, event: PromptArea.Submitted) -> None:
        text = event.value.strip()
        if not text:
            return
        if infertui_app(self).client is None:
            self.notify(infertui_app(self).not_connected(), severity="warning")
            return
        if self.generating:
            self.notify("A reply is still coming: Esc stops it.", severity="warning")
            return
        event.area.clear()
        if self.editing is not None:  # the edited question replaces the last turn
            old = self.editing.text
            await self.forget_turn(self.editing, keep_question=False)
            self.end_edit()
            chat = self.as_stored(self.saved) if not self.history else None
            if chat is not None and chat.title == title_of(old):
                chat.title = title_of(text)  # a chat titled by its first words follows them
                try:
                    self.store.save(chat, touched=False)
                except OSError as err:
                    self.notify(f"Could not rename the chat: {err}", severity="warning")
        self.query("#welcome").remove()
        question = UserMessage(text)
        await self.query_one("#transcript", VerticalScroll).mount(question)
        await self.ask(question)

    async def ask(self, question: UserMessage) -> None:
        """Sends the history and this question (in the transcript already); streams the reply."""
        client = infertui_app(self).client
        assert client is not None
        view = AssistantMessage(infertui_app(self).options.model or client.info.model)
        transcript = self.query_one("#transcript", VerticalScroll)
        await transcript.mount(view)
        transcript.anchor()  # a question asked brings the view back down, following the reply
        self.history.append(ChatMessage(role="user", content=question.text))
        question.in_history = True
        self.stream_reply(question, view)

    def last_question(self) -> UserMessage | None:
        questions = self.query_one("#transcript", VerticalScroll).query(UserMessage)
        return questions.last() if questions else None

    async def forget_turn(self, question: UserMessage, *, keep_question: bool) -> None:
        """Takes the last turn out of the transcript and the history: its reply, and the
        question too unless it is to be asked again."""
        if question.in_history:  # a question whose reply failed was taken out already
            last = max(i for i, m in enumerate(self.history) if m.role == "user")
            del self.history[last:]
            question.in_history = False
        transcript = self.query_one("#transcript", VerticalScroll)
        turn = list(transcript.children)
        start = turn.index(question) + (1 if keep_question else 0)
        await transcript.remove_children(turn[start:])

    async def action_regenerate(self) -> None:
        """Ctrl+G: the last question again, for a new reply in place of the last one."""
        question = self.last_question()
        if question is None or self.generating:
            return
        if self.editing is not None:
            self.action_cancel_edit()
        await self.forget_turn(question, keep_question=True)
        await self.ask(question)

    @on(PromptArea.RecallLast, "#prompt")
    def edit_last(self, event: PromptArea.RecallLast) -> None:
        """↑ in an empty prompt: the last question back in the prompt, to edit and send again
        (it and its reply are replaced when Enter sends; Esc leaves them as they were)."""
        question = self.last_question()
        if question is None or self.generating:
            return
        self.end_edit()
        self.editing = question
        question.add_class("editing")
        event.area.value = question.text
        self.query_one("#reply-status", Static).update(
            "Editing your last message · Enter sends it instead · Esc cancels"
        )
        self.refresh_bindings()

    def action_cancel_edit(self) -> None:
        self.query_one("#prompt", PromptArea).clear()
        self.end_edit()

    def end_edit(self) -> None:
        if self.editing is not None:
            self.editing.remove_class("editing")
            self.editing = None
            self.query_one("#reply-status", Static).update("")
            self.refresh_bindings()

    def action_copy_reply(self) -> None:
        """Ctrl+Y: the last reply's Markdown to the clipboard (OSC 52: the terminal's own,
        which reaches the laptop's clipboard over SSH where the terminal allows it)."""
        replies = self.query(AssistantMessage)
        text = replies.last().body.source if replies else ""
        if not text:
            self.notify("The last reply has no text to copy.", severity="warning")
            return
        self.app.copy_to_clipboard(text)
        self.notify("Copied the last reply to the clipboard.")

    @work(exclusive=True, group="reply")
    async def stream_reply(self, question: UserMessage, view: AssistantMessage) -> None:
        app = infertui_app(self)
        client, options = app.client, app.options
        if client is None:
            return
        history = self.history  # this conversation's, even if a new chat starts meanwhile
        saved = self.saved
        prompt = options.system_prompt
        system = [ChatMessage(role="system", content=prompt)] if prompt else []
        start = min(self.left_out, len(history) - 1)

        def send() -> ChatReply:
            self.reply = client.chat(
                [*system, *history[start:]], model=options.model, **options.sampling()
            )
            return self.reply

        reply = send()
        self.refresh_bindings()
        stream = view.stream()
        status = self.query_one("#reply-status", Static)
        parts: list[str] = []
        queue_timer = self.set_interval(QUEUE_POLL_S, self.show_queue_position)
        started = shown = time.monotonic()
        left_out_note: Static | None = None
        try:
            await self.show_queue_position()
            while True:
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
                            text = (
                                f"Generating · {len(parts)} tokens · {rate:.0f} tok/s · Esc stops"
                            )
                            status.update(text, layout=False)  # one fixed line: no layout pass
                            shown = now
                    break
                except InferError as err:
                    overflow = err.kind is ErrorKind.CONTEXT_OVERFLOW and not parts
                    later = without_oldest_turn(history, start) if overflow else None
                    if later is None:
                        raise
                    start = later  # the oldest exchange is left out, and asked again
                    if history is self.history:
                        self.left_out = start
                    # said in the transcript, above the question, where it stays (a toast went)
                    said = (
                        f"The conversation is longer than the model's context: from here on, "
                        f"its first {start} messages are no longer sent."
                    )
                    if left_out_note is not None:
                        left_out_note.update(said)
                    elif history is self.history and question.is_attached:  # (not a new chat)
                        left_out_note = Static(said, classes="context-note", markup=False)
                        transcript = self.query_one("#transcript", VerticalScroll)
                        await transcript.mount(left_out_note, before=question)
                    reply = send()
            await stream.close()  # the whole text first, then the stats under it
            view.finished(reply.stats)
        except InferError as err:
            await stream.close()
            view.failed(explain(err))
            if err.kind is ErrorKind.MODEL_NOT_FOUND:
                await app.update_host_info()
                self.notify("Ctrl+L picks one of the host's models.", severity="warning")
        finally:  # also when the worker is cancelled: the history never keeps a dangling turn
            queue_timer.stop()
            await stream.close()
            self.reply = None
            self.refresh_bindings()
            self.drop_stop_question()
            status.update("")
            model = (reply.stats.model if reply.stats else "") or view.model
            self.record(history, saved, question, "".join(parts), model, client.info.address)

    def record(
        self,
        history: list[ChatMessage],
        saved: SavedChat | None,
        question: UserMessage,
        answer: str,
        model: str,
        host: str,
    ) -> None:
        """A reply ended: into the history and the saved chat it goes; with nothing in it, the
        question leaves the history, to be asked again (↑, Ctrl+G)."""
        if answer:
            history.append(ChatMessage(role="assistant", content=answer))
            kept = self.keep(history, saved, model, host)
            if history is self.history:
                self.saved = kept
            return
        if history and history[-1].role == "user":
            history.pop()
            question.in_history = False
        # a turn asked again that failed: the file follows (a chat the list deleted stays so
        # until a reply saves it anew)
        if saved is not None and history and self.as_stored(saved) is not None:
            self.keep(history, saved, saved.model, host)

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
        # the asked engine's queue alone, where the chat names one (the host's default is
        # resolved on the host, so then every engine's queue counts)
        model = infertui_app(self).options.model
        asked = [q for q in queues if model in (q.pool_id, q.pool_id.removesuffix(":latest"))]
        loading = next((q for q in asked if q.loaded_in_ms is not None), None)
        if loading is not None:  # a library model, loaded for this question
            status.update(
                f"Loading {loading.pool_id} · ready in ≈ {(loading.loaded_in_ms or 0) / 1000:.1f}"
                " s · Esc cancels"
            )
            return
        queues = asked or queues
        where = f"on {asked[0].pool_id}" if asked else "on the host"
        entries = [e for q in queues for e in q.waiting]
        me = client.queue_client_id
        mine = [e for e in entries if me and (e.client_id or "").partition("/")[0] == me]
        if mine:  # this client's own place in the queue
            e = mine[0]
            status.update(
                f"Queued: position {e.position + 1} of {len(entries)} · "
                f"starts in ≈ {e.predicted_start_ms / 1000:.1f} s · Esc cancels"
            )
        elif entries:
            eta = max(e.predicted_start_ms for e in entries)
            status.update(
                f"Queued {where} · {len(entries)} waiting · start in ≤ {eta / 1000:.1f} s"
            )
        else:
            busy = sum(1 for q in queues for s in q.slots if s.phase != "idle")
            status.update(f"Starting · {busy} slot(s) busy {where}")

    def action_abort(self) -> None:
        if self.reply is not None:
            self.reply.abort()
            self.query_one("#reply-status", Static).update("Stopping…")

    def keep(
        self, history: list[ChatMessage], saved: SavedChat | None, model: str, host: str
    ) -> SavedChat | None:
        """Save the conversation after each reply (a new one gets its first words as title)."""
        chat = self.as_stored(saved) or SavedChat.start(history[0].content, host)
        chat.messages, chat.model = list(history), model
        try:
            self.store.save(chat)
        except OSError as err:
            self.notify(f"Could not save the chat: {err}", severity="warning")
            return saved
        return chat

    def as_stored(self, saved: SavedChat | None) -> SavedChat | None:
        """The open chat with its title as the store has it, which the saved chats' list may
        have renamed meanwhile; None where the list deleted it (its next reply saves it anew)."""
        if saved is None:
            return None
        try:
            saved.title = self.store.load(saved.id).title
        except FileNotFoundError:
            return None
        except (OSError, ValidationError) as err:  # unreadable: the title it had
            log.warning("saved chat %s: %s", saved.id, str(err).splitlines()[0])
        return saved

    def action_saved_chats(self) -> None:
        async def chosen(chat: SavedChat | None) -> None:
            if chat is not None:
                await self.resume(chat)

        self.app.push_screen(ChatsModal(self.store), chosen)

    async def resume(self, chat: SavedChat) -> None:
        """Carry on a saved conversation: its turns in the transcript and in the history."""
        if self.generating:
            self.action_abort()
        await self.start_over(welcome=False)
        self.history, self.saved = list(chat.messages), chat
        transcript = self.query_one("#transcript", VerticalScroll)
        for message in chat.messages:
            if message.role == "assistant":
                view = AssistantMessage(chat.model)
                await transcript.mount(view)
                await view.body.update(message.content)
                view.note(f"{chat.model} · saved")
            elif message.role == "user":
                await transcript.mount(UserMessage(message.content))
        self.notify(f"Resumed '{chat.title}'.")

    def action_scroll_transcript(self, pages: int) -> None:
        transcript = self.query_one("#transcript", VerticalScroll)
        if pages < 0:
            transcript.scroll_page_up()
        elif transcript.scroll_target_y + transcript.size.height >= transcript.max_scroll_y:
            # the last page: follow the reply again (paging lands short of a growing end)
            transcript.scroll_end(animate=False)
        else:
            transcript.scroll_page_down()

    async def action_pick_model(self) -> None:
        app = infertui_app(self)
        client = app.client
        if client is None:
            self.notify(app.not_connected(), severity="warning")
            return
        try:
            library = await client.library()
        except InferError:  # an older host: its engines alone
            library = []

        def chosen(choice: ModelChoice | None) -> None:
            if choice is None:
                return
            app.options = app.options.model_copy(update={"model": choice.model})
            app.connection = app.connection  # the host bar names the model asked
            asked = choice.model or "the host's default"
            self.notify(f"Asking {asked} from the next message.")

        picker = ModelPicker(client.info.models, client.info.model, app.options.model, library)
        self.app.push_screen(picker, chosen)

    async def action_new_chat(self) -> None:
        if not self.generating:
            await self.start_over()
            return

        asked = self.reply

        async def answer(stop: bool | None) -> None:
            self.stop_question = None
            if stop and self.reply is asked:  # (a yes after that reply ended starts nothing)
                self.action_abort()
                await self.start_over()

        self.stop_question = ConfirmModal("A reply is still coming. Stop it and start a new chat?")
        self.app.push_screen(self.stop_question, answer)

    def drop_stop_question(self) -> None:
        """The reply that Ctrl+N asked to stop has ended: the question goes, unanswered (it
        stayed, and the y of the next words typed answered it). Under the palette, or on
        another screen, it stays; a yes to it then starts nothing."""
        if self.stop_question is not None and self.stop_question.is_active:
            self.stop_question.dismiss(False)
            self.notify("The reply has ended: Ctrl+N starts a new chat.")

    async def start_over(self, *, welcome: bool = True) -> None:
        """A new conversation: a new history (a reply still ending keeps to its own)."""
        self.end_edit()
        self.history, self.saved, self.left_out = [], None, 0
        transcript = self.query_one("#transcript", VerticalScroll)
        await transcript.remove_children()
        if welcome:
            await transcript.mount(Static(welcome_text(self.bound_keys()), id="welcome"))
