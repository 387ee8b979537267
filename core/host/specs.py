"""Engine specs from the host's settings: a `--model` or `--upstream` value, or an engine
added at run time, as the EngineSpec or UpstreamSpec a pool is started with; and the folders
models may be loaded from."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

from .. import paths
from ..config import HostSettings
from ..engine import BUNDLED_SAMPLING, EngineSpec, UpstreamSpec, is_bundled
from ..protocol.errors import ErrorKind, InferError


def spec_from_entry(entry: str, settings: HostSettings) -> EngineSpec:
    """An EngineSpec from a `--model` value: PATH, or ID=PATH."""
    engine_id, sep, path = entry.partition("=")
    if not sep:
        path, engine_id = entry, Path(entry).stem
    return engine_spec(engine_id, path, settings)


def upstream_spec(entry: str, settings: HostSettings) -> UpstreamSpec:
    """An UpstreamSpec from an `--upstream` value: URL, or ID=URL (the ID defaults to the
    server's host and port)."""
    engine_id, sep, url = entry.partition("=")
    if not sep or "://" in engine_id:
        url = entry
        where = urlsplit(entry)  # its host and port name it (never a user:password@ in it)
        engine_id = f"{where.hostname}-{where.port}" if where.port else where.hostname or ""
        engine_id = engine_id or "upstream"
    up = settings.upstream
    return UpstreamSpec(
        url=url,
        engine_id=engine_id,
        model=up.model,
        api_key=up.api_key.get_secret_value() if up.api_key else None,
        concurrency=up.concurrency,
        health_interval_s=up.health_interval_s,
    )


def engine_spec(
    engine_id: str,
    model_path: str,
    settings: HostSettings,
    *,
    n_ctx: int | None = None,
    n_gpu_layers: int | None = None,
    main_gpu_id: int | None = None,
) -> EngineSpec:
    e = settings.engine
    path = Path(model_path).expanduser()
    return EngineSpec(
        model_path=str(path),
        engine_id=engine_id,
        n_ctx=n_ctx or e.ctx,
        n_gpu_layers=n_gpu_layers if n_gpu_layers is not None else e.gpu_layers,
        main_gpu_id=main_gpu_id if main_gpu_id is not None else e.main_gpu,
        n_threads=e.threads,
        n_parallel=e.parallel,
        n_batch=e.batch,
        extra_buffers=e.extra_buffers,
        deterministic=e.deterministic,
        speculative=e.speculative,
        draft_model_path=str(Path(e.draft).expanduser()) if e.draft else None,
        backend_sampling={"auto": None, "on": True, "off": False}[e.backend_sampling],
        flash_attn={"auto": None, "on": True, "off": False}[e.flash_attn],
        chat_template=read_template(e.chat_template),
        pooling=None if e.pooling == "auto" else e.pooling,
        sampling=BUNDLED_SAMPLING if is_bundled(path) else (),
    )


def read_template(path: str | None) -> str | None:
    """A --chat-template file's text; a missing or unreadable one is said in one sentence."""
    if path is None:
        return None
    try:
        return Path(path).expanduser().read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise InferError(
            ErrorKind.INVALID_PARAMS, f"cannot read the chat template {path}: {err}"
        ) from None


def model_roots(settings: HostSettings, started_with: Sequence[str]) -> list[Path]:
    """Where engines may be loaded from at run time: the configured folders, the data dir's
    models/, and the folders of the models the host started with (the bundled one's too)."""
    folders = [Path(folder) for folder in settings.model_dirs]
    folders += [paths.data_dir() / "models", *(Path(path).parent for path in started_with)]
    return [folder.expanduser().resolve() for folder in folders]
