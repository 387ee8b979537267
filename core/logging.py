"""The one place log handlers are configured.

Headless: one line per record on stderr, for systemd and nohup. TUI: a file under the XDG
state directory, because the terminal belongs to the app.
"""

from __future__ import annotations

import logging
import logging.handlers
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


def _install(handler: logging.Handler, level: str | int) -> None:
    handler.setFormatter(logging.Formatter(FORMAT))
    handler.addFilter(CorrelationFilter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
        old.close()
    root.addHandler(handler)
    # Records without the caller's file and line, thread or process, which FORMAT does not
    # show (the logging HOWTO's "Optimization"): a third less per line logged.
    logging._srcfile = None
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
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
