"""Issue 13: the chat as people use it, driven by Pilot against a real host (bundled model,
loopback testnet and HTTP): a host whose engines change, a new chat while a reply streams,
multi-line prompts, the model picker, a remapped abort key."""

from __future__ import annotations

import pytest
from textual import events
from textual.pilot import Pilot
from textual.widgets import DataTable, Input, OptionList, Static

from infertui.core.config import Settings
from infertui.core.engine import bundled_model_path
from infertui.core.protocol import AddEngineRequest
from infertui.tui.app import ClientApp
from infertui.tui.screens.chat import ChatScreen
from infertui.tui.screens.engines import EnginesScreen
from infertui.tui.screens.forms import ConfirmModal
from infertui.tui.screens.library_pane import PullModal
from infertui.tui.screens.model_picker import ModelPicker
from infertui.tui.widgets.message import AssistantMessage, UserMessage
from infertui.tui.widgets.prompt import PromptArea

from ..conftest import CLIENT_SEED, CUT_NAME, HostFactory, ServedHost, SharedHost, over_p2p
from ..library.fake_sources import Sources
from .test_client_app import SIZE, ask, stats_of, until

pytestmark = pytest.mark.model


def app_for(host: ServedHost, transport: str, **settings: object) -> ClientApp:
    merged = Settings(bootstrap=host.bootstrap, client={"max_tokens": 16}, **settings)  # type: ignore[arg-type]
    return ClientApp(host.target(transport), merged, client_seed=CLIENT_SEED)


def bar_text(app: ClientApp) -> str:
    return str(app.screen.query_one("HostBar", Static).render())


@pytest.fixture
async def host(shared_host: SharedHost, request: pytest.FixtureRequest) -> ServedHost:
    """The shared host (tests/conftest.py, SharedHosts), on Hyperswarm too unless the test runs over HTTP alone; a test marked `fresh_host` gets its own."""
    return await shared_host(p2p=over_p2p(request, default=True))


@pytest.mark.parametrize("transport", ["p2p", "http"])
@pytest.mark.fresh_host
async def test_the_chat_follows_the_hosts_engines_as_they_change(
    host: ServedHost, transport: str
) -> None:
    """Bug 3: the default engine is removed and the same GGUF comes back as `g2`. The chat
    sends no model name, so the host's default (now g2) answers; the bar follows."""
    app = app_for(host, transport)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.client is not None)
        await host.service.remove_engine("smollm2-135m")
        request = AddEngineRequest(engine_id="g2", model_path=str(bundled_model_path()), n_ctx=1024)
        await host.service.add_engine(request)
        view = await ask(pilot, app, "Name a colour.")
        await until(pilot, lambda: "tokens" in stats_of(view), 60)
        assert "g2 · " in stats_of(view), stats_of(view)  # the engine that answered
        await until(pilot, lambda: "g2" in bar_text(app), 10)


async def new_chat_asked_midway(pilot: Pilot[object], app: ClientApp) -> ChatScreen:
    """Ctrl+N pressed while a long reply streams, its question up; the chat screen."""
    # long enough that the reply is still coming while the keys are pressed, on any machine
    app.options = app.options.model_copy(update={"max_tokens": 960, "temperature": 0})
    await until(pilot, lambda: app.client is not None)
    chat = app.screen
    assert isinstance(chat, ChatScreen)
    view = await ask(pilot, app, "Write a long story about the sea.")
    await until(pilot, lambda: len(view.body.source) > 20)
    await pilot.press("ctrl+n")
    await until(pilot, lambda: isinstance(app.screen, ConfirmModal))
    return chat


@pytest.mark.parametrize("transport", ["p2p", "http"])
async def test_a_new_chat_during_a_reply_asks_first_and_starts_clean(
    host: ServedHost, transport: str
) -> None:
    """Bug 4: Ctrl+N while a reply streams asks; yes stops the reply, and the next message
    is a fresh conversation (the aborted reply is not carried into it)."""
    app = app_for(host, transport)
    async with app.run_test(size=SIZE) as pilot:
        chat = await new_chat_asked_midway(pilot, app)
        await pilot.press("escape")  # no: the reply goes on
        assert app.screen is chat and chat.generating
        await pilot.press("ctrl+n")
        await until(pilot, lambda: isinstance(app.screen, ConfirmModal))
        await pilot.press("y")
        await until(pilot, lambda: not chat.generating and host.busy_slots() == 0)
        app.options = app.options.model_copy(update={"max_tokens": 4})
        fresh = await ask(pilot, app, "Hi")
        await until(pilot, lambda: fresh.stats is not None, 60)
        assert [m.role for m in chat.history] == ["user", "assistant"]
        assert chat.history[0].content == "Hi"
        assert fresh.stats is not None and fresh.stats.tokens_in is not None
        # "Hi" after the template's own system turn (31 tokens), not the old story as well
        assert fresh.stats.tokens_in < 40, fresh.stats


async def test_the_new_chat_question_goes_when_its_reply_ends_first(host: ServedHost) -> None:
    """A helper's walkthrough: Ctrl+N's question outlived the reply it asked about, and the
    y of the next words typed answered it (the chat was gone, the words with it). When the
    reply ends first, the question goes unanswered and the keys reach the prompt again."""
    app = app_for(host, "http")
    async with app.run_test(size=SIZE) as pilot:
        chat = await new_chat_asked_midway(pilot, app)
        chat.action_abort()  # the reply ends (as by itself) while the question is up
        await until(pilot, lambda: not chat.generating and app.screen is chat)
        await pilot.press("y", "e", "s")
        assert chat.query_one("#prompt", PromptArea).text == "yes"
        assert [m.role for m in chat.history] == ["user", "assistant"]  # the chat stays


async def test_a_pasted_multi_line_prompt_is_sent_whole(host: ServedHost) -> None:
    """Bug 5: a paste keeps its lines; Ctrl+J adds one; Enter sends them all."""
    app = app_for(host, "p2p")
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.client is not None)
        prompt = app.screen.query_one("#prompt", PromptArea)
        prompt.focus()
        app.post_message(events.Paste("first line\nsecond line"))  # as the terminal does
        await pilot.pause()
        await pilot.press("ctrl+j", "t", "h", "i", "r", "d")
        assert prompt.value == "first line\nsecond line\nthird"
        await pilot.press("enter")
        await until(pilot, lambda: app.screen.query(AssistantMessage))
        chat = app.screen
        assert isinstance(chat, ChatScreen)
        assert chat.history[0].content == "first line\nsecond line\nthird"
        assert "second line" in str(chat.query_one(UserMessage).render())
        assert prompt.value == ""


@pytest.mark.parametrize("transport", ["p2p", "http"])
async def test_the_model_picker_chooses_the_engine_that_answers(
    host: ServedHost, transport: str
) -> None:
    request = AddEngineRequest(engine_id="second", model_path=str(bundled_model_path()), n_ctx=512)
    await host.service.add_engine(request)
    app = app_for(host, transport)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.client is not None)
        await until(pilot, lambda: app.client is not None and "second" in app.client.info.models)
        await pilot.press("ctrl+l")
        await until(pilot, lambda: isinstance(app.screen, ModelPicker))
        picker = app.screen.query_one(OptionList)
        assert picker.option_count == 3  # the host's default, then both engines
        await pilot.press("down", "down", "enter")
        await until(pilot, lambda: app.options.model == "second")
        assert "second" in bar_text(app)
        view = await ask(pilot, app, "Name a colour.")
        await until(pilot, lambda: "tokens" in stats_of(view), 60)
        assert stats_of(view).startswith("second · ")
        # the chosen engine removed: the bar and the chat go back to the host's default
        await host.service.remove_engine("second")
        await app.update_host_info()
        await until(pilot, lambda: app.options.model is None and "second" not in bar_text(app))
        view = await ask(pilot, app, "Name a colour.")
        await until(pilot, lambda: "tokens" in stats_of(view), 60)
        assert stats_of(view).startswith("smollm2-135m · "), stats_of(view)


@pytest.mark.parametrize("transport", ["p2p", "http"])
async def test_a_remapped_abort_key_stops_the_reply(host: ServedHost, transport: str) -> None:
    """Bug 7: the README's keymap example ("chat.abort" = "ctrl+k") must work even though the
    prompt has its own Ctrl+K."""
    app = app_for(host, transport, keymap={"chat.abort": "ctrl+k"})
    app.options = app.options.model_copy(update={"max_tokens": 960, "temperature": 0})
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.client is not None)
        view = await ask(pilot, app, "Write a long story about the sea.")
        await until(pilot, lambda: len(view.body.source) > 20)
        await pilot.press("ctrl+k")
        await until(pilot, lambda: "aborted" in stats_of(view))
        await until(pilot, lambda: host.busy_slots() == 0, 5)


async def test_a_conversation_is_saved_resumed_renamed_and_exported(
    host: ServedHost, tmp_path
) -> None:
    from infertui.core.client.chats import ChatStore
    from infertui.tui.screens.chats import ChatsModal, RenameModal

    app = app_for(host, "http")
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.client is not None)
        chat = app.screen
        assert isinstance(chat, ChatScreen)
        chat.store = ChatStore(tmp_path / "chats")
        view = await ask(pilot, app, "Name three colours.")
        await until(pilot, lambda: view.stats is not None, 60)
        (saved,) = chat.store.list()
        assert saved.title == "Name three colours." and len(saved.messages) == 2
        await pilot.press("ctrl+n")  # a new chat; the old one stays saved
        await until(pilot, lambda: not chat.history)
        await pilot.press("ctrl+t")
        await until(pilot, lambda: isinstance(app.screen, ChatsModal))
        modal = app.screen
        assert isinstance(modal, ChatsModal)
        modal.export_to = tmp_path
        await pilot.press("m")
        assert (tmp_path / f"infertui-chat-{saved.id}.md").read_text().startswith("# Name three")
        await pilot.press("r")
        await until(pilot, lambda: isinstance(app.screen, RenameModal))
        app.screen.query_one("#title").value = "colours"  # type: ignore[attr-defined]
        await pilot.press("enter")
        await until(pilot, lambda: chat.store.list()[0].title == "colours")
        await until(pilot, lambda: isinstance(app.screen, ChatsModal))
        await pilot.press("enter")  # resume it
        await until(pilot, lambda: app.screen is chat and len(chat.history) == 2)
        assert len(chat.query(AssistantMessage)) == 1 and len(chat.query(UserMessage)) == 1
        follow = await ask(pilot, app, "And two more?")
        await until(pilot, lambda: follow.stats is not None, 60)
        assert follow.stats is not None and follow.stats.tokens_in is not None
        assert follow.stats.tokens_in > 20  # the resumed turns went to the host too
        (kept,) = chat.store.list()
        assert kept.title == "colours" and len(kept.messages) == 4

        # The open chat renamed in the list: its next reply keeps the new title (it put the
        # old one back); deleted there, its next reply saves it anew.
        app.options = app.options.model_copy(update={"max_tokens": 4})
        await pilot.press("ctrl+t")
        await until(pilot, lambda: isinstance(app.screen, ChatsModal))
        await pilot.press("r")
        await until(pilot, lambda: isinstance(app.screen, RenameModal))
        app.screen.query_one("#title").value = "palette"  # type: ignore[attr-defined]
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, ChatsModal))
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is chat)
        third = await ask(pilot, app, "One more?")
        await until(pilot, lambda: third.stats is not None, 60)
        (kept,) = chat.store.list()
        assert kept.title == "palette" and len(kept.messages) == 6
        await pilot.press("ctrl+t")
        await until(pilot, lambda: isinstance(app.screen, ChatsModal))
        await pilot.press("d")
        await until(pilot, lambda: isinstance(app.screen, ConfirmModal))
        await pilot.press("y", "escape")
        await until(pilot, lambda: app.screen is chat)
        assert chat.store.list() == []
        fourth = await ask(pilot, app, "The last?")
        await until(pilot, lambda: fourth.stats is not None, 60)
        (anew,) = chat.store.list()
        assert anew.id != kept.id and len(anew.messages) == 8
        assert anew.title == "Name three colours."


@pytest.mark.deterministic
@pytest.mark.parametrize("transport", ["p2p", "http"])
async def test_the_last_reply_is_copied_asked_again_and_its_question_edited(
    host: ServedHost, transport: str, tmp_path
) -> None:
    """Copy reply (Ctrl+Y), regenerate last (Ctrl+G) and edit-and-resend last (↑ in an empty
    prompt): each replaces the last turn in the transcript, the history and the saved chat.
    The host is deterministic: the question asked again is read afresh, as the first time,
    not on the cells the first reply left, so greedy gives the same words."""
    from infertui.core.client.chats import ChatStore

    app = app_for(host, transport)
    app.options = app.options.model_copy(update={"max_tokens": 8, "temperature": 0})
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.client is not None)
        chat = app.screen
        assert isinstance(chat, ChatScreen)
        chat.store = ChatStore(tmp_path / "chats")
        first = await ask(pilot, app, "Name a colour.")
        await until(pilot, lambda: first.stats is not None, 60)
        await pilot.press("ctrl+y")  # the prompt is empty: copy, not redo
        assert first.body.source and app.clipboard == first.body.source

        await pilot.press("ctrl+g")  # the same question, a new reply in place of the first
        await until(pilot, lambda: first not in chat.query(AssistantMessage))
        again = chat.query(AssistantMessage).last()
        await until(pilot, lambda: again.stats is not None, 60)
        assert len(chat.query(AssistantMessage)) == 1 and len(chat.query(UserMessage)) == 1
        assert [m.role for m in chat.history] == ["user", "assistant"]
        assert first.stats is not None and again.stats is not None
        assert again.stats.tokens_in == first.stats.tokens_in  # not the old reply on top
        assert again.body.source == first.body.source  # greedy: the same words again

        prompt = chat.query_one("#prompt", PromptArea)
        await pilot.press("up")  # the last question back, to edit
        assert prompt.value == "Name a colour." and chat.editing is not None
        prompt.value = "Name a fruit."
        await pilot.press("enter")
        await until(pilot, lambda: chat.history[0].content == "Name a fruit.")
        await until(pilot, lambda: not chat.generating and len(chat.history) == 2, 60)
        assert [str(q.render()) for q in chat.query(UserMessage)] == ["Name a fruit."]
        assert len(chat.query(AssistantMessage)) == 1
        (saved,) = chat.store.list()
        assert [m.role for m in saved.messages] == ["user", "assistant"]
        assert saved.messages[0].content == "Name a fruit." and saved.title == "Name a fruit."

        await pilot.press("up", "escape")  # Esc leaves the last turn as it was
        assert prompt.value == "" and chat.editing is None and len(chat.history) == 2
        assert len(chat.query(UserMessage)) == 1

        copied = app.clipboard
        await pilot.press("x", "y", "ctrl+z", "ctrl+y")  # while one types, Ctrl+Y is redo
        assert prompt.value == "xy" and app.clipboard == copied


@pytest.mark.parametrize("transport", ["p2p", "http"])
async def test_a_conversation_longer_than_the_context_goes_on_without_its_oldest_turns(
    host: ServedHost, transport: str, tmp_path
) -> None:
    """A chat ended after a few exchanges. Over P2P the whole history counted against spec
    000's 8 KB prompt bound (BAD_MESSAGE); over either transport, a history past the model's
    context (1,024 tokens here) was refused (CONTEXT_OVERFLOW) with no way on but a new chat.
    Now the oldest exchanges are left out until the question fits, as Ollama does."""
    from infertui.core.client.chats import ChatStore
    from infertui.core.protocol import ChatMessage

    filler = "The sea is wide and the sky is grey. " * 80  # ~3 KB, ~800 tokens
    turns = []
    for i in range(3):  # 9 KB: over the 8 KB bound, and twice the context
        turns.append(ChatMessage(role="user", content=f"Part {i}. {filler}"))
        turns.append(ChatMessage(role="assistant", content=f"Noted part {i}."))
    app = app_for(host, transport)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.client is not None)
        chat = app.screen
        assert isinstance(chat, ChatScreen)
        chat.store = ChatStore(tmp_path / "chats")
        chat.history = list(turns)
        view = await ask(pilot, app, "Name a colour.")
        await until(pilot, lambda: view.stats is not None, 60)
        assert view.body.source, view.query_one(Static).render()
        assert chat.left_out == 4  # two exchanges left out; the third and the question fit
        (note,) = chat.query(".context-note")  # said where it stays (it was a toast)
        assert "first 4 messages are no longer sent" in str(note.render())
        assert view.stats is not None and view.stats.tokens_in is not None
        assert 800 < view.stats.tokens_in < 1024
        assert len(chat.history) == 8  # nothing is lost from the conversation itself
        follow = await ask(pilot, app, "And another?")  # goes from there at once
        await until(pilot, lambda: follow.stats is not None, 60)
        assert follow.body.source and chat.left_out == 4


async def test_asking_again_after_scrolling_up_follows_the_new_reply(host: ServedHost) -> None:
    """Paging up mid-reply stops the view following it, and it stays where it was put. The
    next question brings it back down to follow its reply: it used to stay out of sight."""
    from textual.containers import VerticalScroll

    app = app_for(host, "http")
    app.options = app.options.model_copy(update={"max_tokens": 400, "temperature": 0})
    async with app.run_test(size=(48, 16)) as pilot:  # narrow: the reply outgrows it soon
        await until(pilot, lambda: app.client is not None)
        transcript = app.screen.query_one("#transcript", VerticalScroll)

        def at_end() -> bool:
            return transcript.max_scroll_y > 0 and transcript.scroll_y >= transcript.max_scroll_y

        view = await ask(pilot, app, "Write a long story about the sea.")
        await until(pilot, lambda: transcript.max_scroll_y > transcript.size.height, 60)
        await pilot.press("pageup", "pageup")
        await until(pilot, lambda: "tokens" in stats_of(view), 120)
        assert not at_end()  # left where the reader put it
        app.options = app.options.model_copy(update={"max_tokens": 8})
        await ask(pilot, app, "And a short one?")
        await until(pilot, at_end, 30)  # a short reply, but a loaded box is slow to lay out
        for _ in range(20):  # paging down to the end follows again
            await pilot.press("pageup")
        for _ in range(40):
            await pilot.press("pagedown")
            if at_end():
                break
        assert at_end()


@pytest.mark.parametrize("transport", ["http"])
async def test_the_picker_lists_the_library_and_the_first_message_loads_the_model(
    start_host: HostFactory,
    transport: str,
    cut_hub: Sources,
) -> None:
    """Issue 36 §4: a library model that is not loaded is offered; picked, the first message
    loads it and it answers; unloaded after its keep_alive, it stays the chat's choice."""
    host = await start_host(p2p=False, more={"keep_alive": "1s"})
    name = CUT_NAME
    async for _ in host.service.pull_model(name):
        pass
    app = app_for(host, transport)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.client is not None)
        await pilot.press("ctrl+l")
        await until(pilot, lambda: isinstance(app.screen, ModelPicker))
        picker = app.screen.query_one(OptionList)
        assert picker.option_count == 3  # the host's default, its engine, the library model
        assert "not loaded" in str(picker.get_option_at_index(2).prompt)
        await pilot.press("down", "down", "enter")
        await until(pilot, lambda: app.options.model == name)
        view = await ask(pilot, app, "Name a colour.")
        await until(pilot, lambda: "tokens" in stats_of(view), 60)
        assert stats_of(view).startswith(f"{name} · "), stats_of(view)
        await until(pilot, lambda: name not in host.service.engine_ids(), 10)  # keep_alive
        await app.update_host_info()
        assert app.options.model == name  # unloaded, not gone: the next message loads it


async def test_the_engine_manager_pulls_loads_unloads_and_deletes_library_models(
    start_host: HostFactory, cut_hub: Sources
) -> None:
    """Issue 36 §4: the library under the engines, its keys acting on the model under the
    cursor; a pull shows its progress and its end."""
    host = await start_host(p2p=False)
    name = CUT_NAME
    app = app_for(host, "http")
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.client is not None)
        await pilot.press("f5")
        await until(pilot, lambda: isinstance(app.screen, EnginesScreen))
        library = app.screen.query_one("#library", DataTable)
        await pilot.press("tab")  # into the library
        await pilot.press("p")
        await until(pilot, lambda: isinstance(app.screen, PullModal))
        app.screen.query_one("#name", Input).value = name
        await pilot.press("enter")
        status = app.screen.query_one("#pull-status", Static)
        await until(pilot, lambda: "Pulled" in str(status.render()), 30)
        await until(pilot, lambda: library.row_count == 1)
        assert library.get_row_at(0)[0] == name and library.get_row_at(0)[5] == "–"

        library.focus()
        await pilot.press("l")  # load
        await until(pilot, lambda: "left" in str(library.get_row_at(0)[5]), 30)
        assert name in host.service.engine_ids()
        await pilot.press("o")  # unload
        await until(pilot, lambda: library.get_row_at(0)[5] == "–", 30)
        assert name not in host.service.engine_ids()
        await pilot.press("delete", "y")
        await until(pilot, lambda: library.row_count == 0, 30)
        assert host.service.library.find(name) is None
