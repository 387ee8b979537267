"""The one place log handlers are configured.

Headless: one line per record on stderr, for systemd and nohup. TUI: a file under the XDG
state directory, because the terminal belongs to the app.

Records are formatted and written by a thread of their own (a QueueListener): the event loop
that logged them only hands them over. Two lines per job, formatted and flushed where they
were logged, took a tenth of the event loop's time in a burst of requests.
"""

from __future__ import annotations

import atexit
import logging
import logging.handlers
import queue
from contextvars import ContextVar
from pathlib import Path

from . import paths

FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(correlation)s%(message)s"

# The request being served (HTTP's X-Correlation-Id), for every log line it causes.
correlation_id: ContextVar[str | None] = ContextVar("correlation_id", default=None)


class CorrelationFilter(logging.Filter):
    """Adds `[correlation-id] ` to records logged while a request is being served."""

    def filter(self, record: logging.LogRecord) -> bool:
        cid = getattr(record, "cid", None) or correlation_id.get()
        record.correlation = f"[{cid}] " if cid else ""
        return True


def configure_console(level: str | int = "INFO") -> None:
    _install(logging.StreamHandler(), level)


def configure_file(level: str | int = "INFO", file: Path | None = None) -> Path:
    """Send logs to a rotating file (default: <state dir>/infertui.log); returns its path."""
    target = file or paths.state_dir() / "infertui.log"
    target.parent.mkdir(parents=True, exist_ok=True)
    _install(logging.handlers.RotatingFileHandler(target, maxBytes=5 * 2**20, backupCount=3), level)
    return target


_listener: logging.handlers.QueueListener | None = None


def _install(handler: logging.Handler, level: str | int) -> None:
    global _listener
    handler.setFormatter(logging.Formatter(FORMAT))
    records: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
    hand_over = logging.handlers.QueueHandler(records)
    hand_over.addFilter(CorrelationFilter())  # on the logging thread: it reads a ContextVar
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
        old.close()
    if _listener is not None:
        _stop()  # writes out what it holds
    else:
        atexit.register(_stop)  # before logging's own shutdown, which runs after
    _listener = logging.handlers.QueueListener(records, handler)
    _listener.start()
    root.addHandler(hand_over)
    root.setLevel(level if isinstance(level, int) else level.upper())
    # llama.cpp's own chatter is DEBUG; keep it out unless asked for explicitly.
    logging.getLogger("infertui.llama_cpp").setLevel(
        logging.DEBUG if root.level <= logging.DEBUG else logging.WARNING
    )
    # httpx logs every request at INFO: a client polling the host twice a second would bury
    # the lines that matter.
    logging.getLogger("httpx").setLevel(
        logging.DEBUG if root.level <= logging.DEBUG else logging.WARNING
    )


def _stop() -> None:
    if _listener is not None:
        _listener.stop()
        for handler in _listener.handlers:
            handler.close()
