"""Keys, the command palette (remappable by binding id; every action listed) and the bar."""

from __future__ import annotations

from dataclasses import replace

import pytest
from textual.widgets import DataTable, Input, Label, Sparkline, Static

from infertui.core.client import ConnectionState
from infertui.core.config import Settings
from infertui.tui.screens.engines import EnginesScreen
from infertui.tui.screens.metrics import MetricsScreen
from infertui.tui.screens.queue import QueueScreen
from infertui.tui.widgets.host_bar import HostBar

from ..conftest import until
from .scripted import ScriptedClientApp


async def test_a_binding_id_remaps_its_key_from_the_config() -> None:
    app = ScriptedClientApp(Settings(keymap={"app.queue": "f9"}))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("f3")
        assert not isinstance(app.screen, QueueScreen)
        await pilot.press("f9")
        assert isinstance(app.screen, QueueScreen)
        help_texts = {c.title: c.help for c in app.get_system_commands(app.screen)}
        assert help_texts["Queue"].endswith("(f9)")  # the palette shows the key as remapped


async def test_the_palette_lists_the_screens_and_the_current_screens_actions() -> None:
    app = ScriptedClientApp(Settings())
    async with app.run_test(size=(80, 24)) as pilot:
        chat = {c.title for c in app.get_system_commands(app.screen)}
        assert {"Chat", "Queue", "Metrics", "Engines", "Options", "Reconnect"} <= chat
        assert {"New chat", "Model", "Chats", "Copy"} <= chat  # shown or not in the footer
        # what cannot be done now is left out, as the footer leaves it out
        assert not {"Stop reply", "Stop", "Cancel edit", "Again"} & chat
        help_texts = {c.title: c.help for c in app.get_system_commands(app.screen)}
        assert "^n" in help_texts["New chat"]  # the key, as the footer shows it
        assert help_texts["Queue"].endswith("(f3)") and help_texts["Reconnect"].endswith("(^r)")
        assert help_texts["Options"].endswith("(^o)")  # a chat screen key for an app action
        assert help_texts["New chat"] == "Key: ^n"  # not its title again
        chat_screen = app.screen
        await pilot.press("ctrl+p")  # as the palette asks, with its own screen on top
        await pilot.pause()
        asked = {c.title: c.help for c in app.get_system_commands(chat_screen)}
        assert asked["Engines"].endswith("(f5)") and asked["Reconnect"].endswith("(^r)")
        await pilot.press("escape")
        await pilot.pause()
        await pilot.press("f5")
        assert isinstance(app.screen, EnginesScreen)
        engines = {c.title for c in app.get_system_commands(app.screen)}
        assert {"Add", "Remove", "Reload", "Drain"} <= engines


async def test_engine_actions_are_disabled_for_a_client_that_is_not_admin() -> None:
    app = ScriptedClientApp(Settings(), admin=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("f5")
        await pilot.pause()
        await pilot.press("a")
        await pilot.pause()
        assert isinstance(app.screen, EnginesScreen)  # no add form opened
        said = str(app.screen.query_one("#outcome", Static).render())
        assert "infertui id --client" in said  # over Hyperswarm, the client key makes one admin
    web = ScriptedClientApp(Settings(), admin=False)
    web.scripted.info = replace(web.scripted.info, transport="http", address="http://h:8080")
    async with web.run_test(size=(80, 24)) as pilot:
        await pilot.press("f5")
        await pilot.pause()
        said = str(web.screen.query_one("#outcome", Static).render())
        assert "admin key" in said and "id --client" not in said  # over HTTP, the admin key


async def test_the_retry_countdown_moves_while_the_host_is_down(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [100.0]
    monkeypatch.setattr(HostBar, "clock", staticmethod(lambda: now[0]))
    app = ScriptedClientApp(Settings())
    async with app.run_test(size=(80, 24)) as pilot:
        app.set_connection(ConnectionState("waiting", "Host offline.", retry_in_s=5.0))
        bar = app.screen.query_one(HostBar)
        assert "Retrying in 5 s" in str(bar.render())
        now[0] += 2.5
        await until(pilot, lambda: "Retrying in 3 s" in str(bar.render()))  # its 1 s tick
        app.set_connection(ConnectionState("connecting", "Connecting…"))
        assert "Retrying" not in str(bar.render())


async def test_the_bar_says_when_the_engine_a_chat_asks_is_not_ready() -> None:
    """An upstream that cannot be reached, a drain: the bar says it on every screen, not
    only the engine manager."""
    import dataclasses

    app = ScriptedClientApp(Settings())
    async with app.run_test(size=(120, 24)) as pilot:
        await until(pilot, lambda: app.client is not None)
        bar = app.screen.query_one(HostBar)
        assert "not ready" not in str(bar.render())
        client = app.client
        assert client is not None
        client.info = dataclasses.replace(client.info, unready=("gemma-3-270m",))
        app.connection = app.connection
        await until(pilot, lambda: "gemma-3-270m not ready" in str(bar.render()))
        assert str(bar.render()).startswith("◐")
        client.info = dataclasses.replace(client.info, unready=("qwen-7b",))  # not the chat's
        app.connection = app.connection
        await until(pilot, lambda: "not ready" not in str(bar.render()))


async def test_the_metrics_screen_shows_the_apps_history_while_the_host_is_away() -> None:
    app = ScriptedClientApp(Settings())
    async with app.run_test(size=(120, 32)) as pilot:
        await until(pilot, lambda: app.client is not None)
        app.set_connection(ConnectionState("waiting", "Host offline.", retry_in_s=5.0))
        await pilot.press("f4")
        screen = app.screen
        assert isinstance(screen, MetricsScreen)
        label = screen.query_one("#label-tps", Label)
        await until(pilot, lambda: str(label.render()) != "tokens/s")
        assert any(v > 0 for v in screen.query_one("#plot-tps", Sparkline).data or [])
        assert screen.query_one("#totals", DataTable).row_count == 1


async def test_options_and_theme_persist_to_the_config_file_keeping_its_comments(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 13: Ctrl+O options and the theme are there next time, in config.toml."""
    from textual.widgets import Input

    from infertui.core.config import load_settings
    from infertui.tui.screens.options import OptionsModal

    file = tmp_path / "config.toml"
    file.write_text("# my settings\n[client]\nmax_tokens = 64  # short answers\n")
    monkeypatch.setenv("INFERTUI_CONFIG", str(file))
    app = ScriptedClientApp(load_settings())
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("ctrl+o")
        assert isinstance(app.screen, OptionsModal)
        app.screen.query_one("#temperature", Input).value = "0.3"
        await pilot.press("ctrl+s")
        assert app.options.temperature == 0.3
        app.theme = "nord"
        await pilot.pause()
    text = file.read_text()
    assert "# my settings" in text and "# short answers" in text
    again = load_settings()
    assert again.client.temperature == 0.3 and again.client.max_tokens == 64
    assert again.ui.theme == "nord"
    assert ScriptedClientApp(again).theme == "nord"


# ---- issue 13's small things, each as a person meets it ----------------------------------------


async def test_page_keys_scroll_the_transcript_while_the_prompt_keeps_the_focus() -> None:
    from textual.containers import VerticalScroll

    from infertui.tui.widgets.prompt import PromptArea

    app = ScriptedClientApp(Settings())
    async with app.run_test(size=(80, 24)) as pilot:
        transcript = app.screen.query_one("#transcript", VerticalScroll)
        from textual.widgets import Static

        for i in range(40):
            await transcript.mount(Static(f"line {i}"))
        transcript.scroll_end(animate=False)
        await pilot.pause()
        bottom = transcript.scroll_y
        assert bottom > 0
        await pilot.press("pageup")
        await pilot.pause()
        assert transcript.scroll_y < bottom
        assert isinstance(app.focused, PromptArea)
        await pilot.press("pagedown")
        await pilot.pause()
        assert transcript.scroll_y == bottom


async def test_a_long_host_bar_is_cut_with_the_whole_text_in_its_tooltip() -> None:
    app = ScriptedClientApp(Settings())
    async with app.run_test(size=(60, 24)) as pilot:
        long = "No host is answering at that address right now; is `infertui host` running? " * 2
        app.set_connection(ConnectionState("waiting", long, retry_in_s=9.0))
        await pilot.pause()
        bar = app.screen.query_one(HostBar)
        assert bar.size.height == 1  # one line, cut, not wrapped over the screen
        assert isinstance(bar.tooltip, str) and long.strip() in bar.tooltip


async def test_a_refused_engine_form_comes_back_as_typed(monkeypatch: pytest.MonkeyPatch) -> None:
    from infertui.core.protocol import ErrorKind, InferError
    from infertui.core.protocol.host_api import AddEngineRequest
    from infertui.tui.screens.engines import AddEngineModal

    app = ScriptedClientApp(Settings())

    async def refuse(request: AddEngineRequest) -> None:
        raise InferError(ErrorKind.MODEL_LOAD_FAILED, "not a GGUF file")

    async with app.run_test(size=(80, 24)) as pilot:
        assert app.client is not None
        monkeypatch.setattr(app.client, "add_engine", refuse)
        await pilot.press("f5")
        screen = app.screen
        assert isinstance(screen, EnginesScreen)
        typed = AddEngineRequest(engine_id="mine", model_path="/models/mine.gguf", n_ctx=2048)
        screen.add_engine(typed)
        await pilot.pause(0.3)
        assert screen.draft == typed  # kept for the next try
        await pilot.press("a")
        await pilot.pause()
        modal = app.screen
        assert isinstance(modal, AddEngineModal) and modal.draft == typed
        await pilot.press(*"theirs")  # the first field is selected: typing replaces it
        assert modal.query_one("#engine_id", Input).value == "theirs"


def test_id_and_hosts_say_what_they_do_and_httpx_stays_quiet(capsys, tmp_path) -> None:
    import logging
    import subprocess
    import sys

    from infertui.app.cli import main

    for command, words in (("id", "server ID"), ("hosts", "--topic NAME")):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        assert words in capsys.readouterr().out
    # in a process of its own: configuring logging replaces the root's handlers
    probe = (
        "import logging; from infertui.core.logging import configure_file; "
        f"configure_file('INFO', __import__('pathlib').Path({str(tmp_path / 'x.log')!r})); "
        "print(logging.getLogger('httpx').getEffectiveLevel())"
    )
    level = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    assert int(level.stdout) == logging.WARNING


async def test_a_keymap_id_that_names_no_binding_is_said_not_ignored() -> None:
    """`chat.abortt` (a helper's typo) left Esc as it was without a word."""
    app = ScriptedClientApp(Settings(keymap={"chat.abortt": "ctrl+k", "app.queue": "f9"}))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        said = [str(n.message) for n in app._notifications]
        assert any("chat.abortt" in m and "app.queue" not in m for m in said), said
    quiet = ScriptedClientApp(Settings(keymap={"chat.abort": "ctrl+k"}))
    async with quiet.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert not [n for n in quiet._notifications if "keymap" in str(n.message)]


async def test_the_chats_welcome_names_the_keys_as_remapped() -> None:
    """With `chat.new` on Ctrl+B, the welcome still said Ctrl+N (a helper's walkthrough)."""
    app = ScriptedClientApp(Settings(keymap={"chat.new": "ctrl+b", "app.queue": "f9"}))
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        text = str(app.screen.query_one("#welcome", Static).render())
        assert "Ctrl+B new chat" in text and "Ctrl+N" not in text
        assert "F9 F4 F5" in text and "Esc stops a reply" in text


async def test_the_arrows_move_the_cursor_in_a_prompt_taller_than_its_box() -> None:
    """The prompt leaves F6 and F7 to the app; its other keys stay TextArea's own: ↑ in a
    20-line prompt moves the cursor, where a scroll binding of the same key would win."""
    from infertui.tui.widgets.prompt import PromptArea

    app = ScriptedClientApp(Settings())
    async with app.run_test(size=(80, 24)) as pilot:
        prompt = app.screen.query_one("#prompt", PromptArea)
        prompt.text = "\n".join(f"line {i}" for i in range(20))
        prompt.move_cursor((19, 3))
        await pilot.pause()
        await pilot.press("up", "up", "up", "home")
        assert prompt.cursor_location == (16, 0)
        assert "f6" not in PromptArea._merge_bindings().key_to_bindings
