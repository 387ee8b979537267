"""The two Textual apps: `infertui connect` (chat and remote dashboards) and the host's
dashboard. Both show the same dashboards through the Client API; the host's reads its own
HostService through LocalClient."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import signal
import sys
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path

from textual import work
from textual.app import SystemCommand
from textual.binding import Binding, BindingType
from textual.dom import DOMNode
from textual.screen import Screen
from textual.worker import Worker

from infertui.core.client import Client, ConnectionState, Reconnector, check_target, explain
from infertui.core.config import ClientSettings, Settings, save_to_file
from infertui.core.host import HostService
from infertui.core.logging import configure_file
from infertui.core.protocol import InferError
from infertui.core.transport.p2p.ids import load_seed

from .base import InfertuiApp as BaseApp
from .local import LocalClient
from .screens.chat import ChatScreen
from .screens.engines import EnginesScreen
from .screens.hosts import HostsScreen
from .screens.metrics import MetricsScreen
from .screens.options import OptionsModal
from .screens.queue import QueueScreen
from .screens.streams import StreamsScreen
from .screens.users import UsersScreen

log = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def mode_keys(titles: dict[str, str]) -> list[BindingType]:
    """F2, F3, … switch to an app's screens in order; ids `app.<mode>` for the keymap. They
    come before a focused widget's keys (the prompt's TextArea takes F6 and F7 otherwise)."""
    return [
        Binding(f"f{key}", f"switch_mode('{mode}')", title, id=f"app.{mode}", priority=True)
        for key, (mode, title) in enumerate(titles.items(), start=2)
    ]


def binding_ids() -> set[str]:
    """Every binding id a keymap can name: those of every screen, widget and app class loaded
    (the apps' mode keys included, Textual's own too)."""
    ids: set[str] = set()
    classes: list[type[DOMNode]] = [DOMNode]
    while classes:
        cls = classes.pop()
        classes.extend(cls.__subclasses__())
        ids |= {b.id for b in cls.__dict__.get("BINDINGS", ()) if isinstance(b, Binding) and b.id}
    return ids


class InfertuiApp(BaseApp):
    """Modes and the command palette, shared by both apps."""

    CSS_PATH = Path(__file__).parent / "infertui.tcss"  # absolute: subclasses live elsewhere
    MODE_TITLES: dict[str, str] = {}

    def on_mount(self) -> None:
        """A [keymap] id that names no key was ignored without a word (a helper's walkthrough
        typed `chat.abortt`): say which, once. (Each app's own on_mount runs too.)"""
        if unknown := sorted(set(self.settings.keymap) - binding_ids()):
            said = ", ".join(unknown)
            log.warning("[keymap] names no key binding: %s", said)
            self.notify(
                f"[keymap] names no key binding: {said} (ignored; the README lists the ids)",
                severity="warning",
                timeout=15,
                markup=False,
            )

    def get_system_commands(self, screen: Screen[object]) -> Iterable[SystemCommand]:
        """Every action is in the palette: the screens, then what the current screen's keys do."""
        yield from super().get_system_commands(screen)
        for mode, title in self.MODE_TITLES.items():
            help_text = f"Switch to the {title.lower()} screen"
            keys = self.keys_for(f"switch_mode('{mode}')", screen)
            yield SystemCommand(title, help_text + keys, self._go(mode))
        app_wide: set[str] = set()
        for title, help_text, name in self.app_commands():
            app_wide.add(title)
            run = partial(self.run_action, name)
            yield SystemCommand(title, help_text + self.keys_for(name, screen), run)
        seen: set[str] = set()  # one entry per action (Esc and Ctrl+C both stop a reply)
        for binding in screen.BINDINGS:
            if (
                not isinstance(binding, Binding)
                or not binding.description
                or binding.description in app_wide
                or binding.action in seen
                or screen.check_action(binding.action, ()) is False  # not now (as the footer)
            ):
                continue
            seen.add(binding.action)
            keys = self.get_key_display(binding)
            help_text = f"{binding.tooltip} ({keys})" if binding.tooltip else f"Key: {keys}"
            action = partial(self.run_action, binding.action, screen)
            yield SystemCommand(binding.description, help_text, action)

    def app_commands(self) -> list[tuple[str, str, str]]:
        """Palette entries that work on every screen: (title, help, action)."""
        return []

    def keys_for(self, action: str, screen: Screen[object]) -> str:
        """' (key)' for an app-wide action, as the keymap has it now (bound on the app, or on
        `screen` as `app.<action>`); '' where no key has it. (`screen`'s, not the app's
        active bindings: those are the command palette's while it asks.)"""
        keys = [
            self.get_key_display(active.binding)
            for active in screen.active_bindings.values()
            if active.binding.action in (action, f"app.{action}")
        ]
        return f" ({', '.join(keys)})" if keys else ""

    def action_options(self) -> None:
        """Ctrl+O: the conversation's options, kept in the config file for next time."""

        def apply(options: ClientSettings | None) -> None:
            if options is None:
                return
            self.options = options
            kept = options.model_dump(
                include={"system_prompt", "temperature", "top_p", "max_tokens"}
            )
            try:
                where = save_to_file("client", kept)
            except OSError as err:
                self.notify(f"Applied from the next message; not saved: {err}", severity="warning")
                return
            self.notify(
                f"Applied from the next message, and saved in {where} for `infertui ask` too."
            )

        self.push_screen(OptionsModal(self.options), apply)

    def watch_theme(self, theme: str) -> None:
        """A theme picked in the palette is the theme next time too."""
        if theme == self.settings.ui.theme:
            return
        self.settings.ui.theme = theme
        try:
            save_to_file("ui", {"theme": theme})
        except OSError as err:
            log.warning("could not save the theme: %s", err)

    def _go(self, mode: str) -> Callable[[], object]:
        return lambda: self.switch_mode(mode)


class ClientApp(InfertuiApp):
    """`infertui connect TARGET`."""

    TITLE = "infertui"
    MODES = {
        "chat": ChatScreen,
        "queue": QueueScreen,
        "metrics": MetricsScreen,
        "engines": EnginesScreen,
        "hosts": HostsScreen,
        "users": UsersScreen,
    }
    MODE_TITLES = {
        "chat": "Chat",
        "queue": "Queue",
        "metrics": "Metrics",
        "engines": "Engines",
        "hosts": "Hosts",
        "users": "Users",
    }
    BINDINGS = [
        *mode_keys(MODE_TITLES),
        Binding("ctrl+r", "retry", "Reconnect", show=False, id="app.retry"),
    ]

    def __init__(
        self, target: str, settings: Settings, *, client_seed: bytes | None = None
    ) -> None:
        super().__init__(settings)
        self.target = target
        self.connected_once = False
        self.refusal: str | None = None  # why the host refused the first connection for good
        self.keeper: Worker[None] | None = None  # keep_connected's, from mount on
        self.reconnector = Reconnector(
            target,
            self.set_connection,
            api_key=settings.api_key.get_secret_value() if settings.api_key else None,
            bootstrap=settings.bootstrap,
            connect_timeout=settings.client.connect_timeout_s,
            seed=client_seed,
        )

    def on_mount(self) -> None:
        self.switch_mode("chat")
        self.keeper = self.keep_connected()

    def set_connection(self, state: ConnectionState) -> None:
        """As every app does; and where the very first try is refused for good (a missing or
        wrong key), the app ends saying why, as `ask` does: nothing on its screens could
        change that. Refused later (a host restarted with a new key), the chat stays."""
        super().set_connection(state)
        self.connected_once = self.connected_once or state.phase == "connected"
        if state.phase == "closed" and not self.connected_once:
            self.refusal = state.message
            self.exit(return_code=1)

    @work(group="connection")
    async def keep_connected(self) -> None:
        await self.reconnector.run()

    def app_commands(self) -> list[tuple[str, str, str]]:
        return [
            ("Options", "System prompt and sampling", "options"),
            ("Reconnect", "Try the host again now", "retry"),
        ]

    def action_retry(self) -> None:
        """Try the host now: during a wait between tries, or after a refusal that stopped them
        (a host restarted with another key, since put right)."""
        if self.keeper is None or self.keeper.is_finished:
            self.keeper = self.keep_connected()
        else:
            self.reconnector.retry_now()


class HostApp(InfertuiApp):
    """`infertui host` on a terminal: the host runs inside the app's event loop."""

    TITLE = "infertui host"
    MODES = {
        "streams": StreamsScreen,
        "queue": QueueScreen,
        "metrics": MetricsScreen,
        "engines": EnginesScreen,
        "chat": ChatScreen,  # the person on the GPU box chats here, with no second terminal
        "users": UsersScreen,
    }
    MODE_TITLES = {
        "streams": "Streams",
        "queue": "Queue",
        "metrics": "Metrics",
        "engines": "Engines",
        "chat": "Chat",
        "users": "Users",
    }
    # its own action: the footer leaves out keys of an action that Ctrl+Q (hidden) also has
    BINDINGS = [
        Binding("q", "stop_host", "Quit", id="app.quit"),
        # as a terminal server stops on it (llama-server, `ollama serve`); on the chat screen
        # while a reply streams, Ctrl-C stops that reply first
        Binding("ctrl+c", "stop_host", "Quit", show=False, id="app.quit_ctrl_c"),
        *mode_keys(MODE_TITLES),
    ]

    def __init__(self, settings: Settings, local: LocalClient, *, start: bool = True) -> None:
        super().__init__(settings)
        self.local = local
        self.live = local
        self._start = start
        self.exit_code = 0
        self.start_error = ""  # why the host could not start: said on stderr after the app
        self.stopping = False

    def on_mount(self) -> None:
        self.switch_mode("streams")
        if self._start:
            self.start_host()
            self.handle_signals(STOP_SIGNALS)
        else:
            self.set_connection(ConnectionState("connected", "Serving", self.local))

    def on_unmount(self) -> None:
        self.handle_signals(())

    def handle_signals(self, signals: Iterable[signal.Signals]) -> None:
        """SIGTERM (kill, systemd) and SIGHUP (the SSH session closed) stop the host as `q`
        does, letting running jobs finish; without this the process died mid-reply."""
        loop = asyncio.get_running_loop()
        for sig in STOP_SIGNALS:
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                if sig in signals:
                    loop.add_signal_handler(sig, self._on_stop_signal)
                else:
                    loop.remove_signal_handler(sig)

    def _on_stop_signal(self) -> None:
        if not self.is_headless and terminal_hung_up():  # (its SSH session closed)
            self._draw_nowhere()
        self.call_later(self.action_quit)

    def _draw_nowhere(self) -> None:
        """Textual's writes go to /dev/null from now on. Its writer thread dies on the first
        write to a hung-up terminal, and the next writes wait on its full queue: the event
        loop stopped dead a few redraws into the drain, the running replies' grace with it."""
        driver = self._driver
        if driver is None or not hasattr(driver, "_writer_thread"):
            return  # (another driver than Linux's: nothing of the kind to replace)
        from textual.drivers._writer_thread import WriterThread

        sink = WriterThread(open(os.devnull, "w"))  # noqa: SIM115 (for the process's life)
        sink.start()
        driver._writer_thread = sink

    @work(group="host")
    async def start_host(self) -> None:
        self.set_connection(ConnectionState("connecting", "Loading the model…"))
        try:
            await self.local.service.start()
        except InferError as err:
            log.error("cannot start: %s", err.message)
            self.start_error = err.message
            self.exit(1, return_code=1)  # a host that serves nothing has nothing to show
            return
        self.local.refresh_info()
        self.set_connection(ConnectionState("connected", "Serving", self.local))
        log.info("host dashboard ready: serving %s", ", ".join(self.local.service.engine_ids()))

    def dashboard_client(self) -> Client | None:
        """While `q` drains the host, the bar says it is stopping and the dashboards still read
        the host itself, as its replies finish (they stood still at the moment of `q`)."""
        return self.client or (self.local if self.stopping else None)

    async def action_stop_host(self) -> None:
        await self.action_quit()

    async def action_quit(self) -> None:
        if self.stopping:  # a second q or signal while the first one drains: now
            if self._start:
                self.local.service.stop_now()
            return
        self.stopping = True
        self.set_connection(
            ConnectionState("closed", "Stopping: finishing running jobs… (q again: now)")
        )
        self._stop_and_exit()

    @work(group="stop")
    async def _stop_and_exit(self) -> None:
        """Off the message loop, which must stay free for the second q (and the display)."""
        if self._start:
            await self.local.service.stop()
        if not self.is_headless and terminal_hung_up():
            # (its SSH session closed) Textual's goodbye to the terminal would never end: its
            # writer thread dies on the first write, and the next ones wait on its full queue.
            # The host has stopped and the terminal is gone: nothing is left to restore.
            log.info("the terminal hung up: leaving without it")
            logging.shutdown()
            os._exit(self.exit_code)
        self.exit(self.exit_code)


def terminal_hung_up() -> bool:
    """Whether the terminal the app draws on (stderr, Textual's) hung up: a hung-up tty fails
    its ioctls with EIO (not a tty at all, in tests, is ENOTTY)."""
    try:
        import termios  # (POSIX only)
    except ImportError:
        return False
    if sys.__stderr__ is None:
        return False
    try:
        termios.tcgetattr(sys.__stderr__.fileno())
    except termios.error as err:
        return bool(err.args and err.args[0] == errno.EIO)
    except (OSError, ValueError):  # (stderr closed, or a stream without a file)
        return False
    return False


def run_client_app(target: str, settings: Settings) -> int:
    try:
        check_target(target)  # a typo is said here, not in a header of a full-screen app
    except InferError as err:
        sys.stderr.write(f"infertui: {explain(err)}\n")
        return 1
    log_file = configure_file(settings.log_level)
    log.info("connect %s (logs: %s)", target, log_file)
    app = ClientApp(target, settings, client_seed=load_seed(role="client"))
    app.run()
    if app.refusal is not None:
        sys.stderr.write(f"infertui: {app.refusal}\n")
    return app.return_code or 0


def run_host_app(service: HostService, settings: Settings) -> int:
    log_file = configure_file(settings.log_level)
    log.info("host dashboard (logs: %s)", log_file)
    app = HostApp(settings, LocalClient(service))
    code = app.run()
    if app.start_error:
        sys.stderr.write(f"infertui: cannot start: {app.start_error}\n")
    return code or 0
