"""Settings: a TOML file under the XDG config dir, then `INFERTUI_*` environment, then flags.

Flags win over the environment, which wins over the file. Nested fields use `__` in the
environment: `INFERTUI_HOST__QUEUE=16`, `INFERTUI_HOST__ENGINE__CTX=2048`.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Annotated, Any, Literal, TypedDict

from pydantic import BaseModel, Field, SecretStr, ValidationError, field_validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from . import paths
from .protocol.keep_alive import seconds_of
from .protocol.sampling import MaxTokens, Temperature, TopP


class EngineDefaults(BaseModel):
    """How each engine is loaded unless a request says otherwise."""

    ctx: int = Field(
        4096, ge=128, description="context tokens per slot, the prompt and the output together"
    )
    gpu_layers: int | None = Field(
        None,
        description="layers offloaded to the GPU; unset: all when the build supports a GPU, else 0",
    )
    main_gpu: int | None = Field(
        None,
        ge=0,
        description="the one GPU that holds the model; unset: spread over all, as llama.cpp does",
    )
    threads: int | None = Field(
        None, ge=1, description="decode threads; unset: one per CPU, up to 8"
    )
    parallel: Annotated[int, Field(ge=1)] | Literal["auto"] = Field(
        4,
        description="slots: jobs decoded together; auto: as many as free (device) memory holds, "
        "within llama.cpp's 256 sequences",
    )
    batch: int = Field(
        512, ge=16, description="prompt tokens per decode step: how long a prefill may hold streams"
    )
    deterministic: bool = Field(
        False,
        description="prefill each prompt alone, so that batching never changes a job's output; "
        "off: prompts are prefilled in the same decode as running streams (faster under load)",
    )
    speculative: bool = Field(
        True,
        description="speculative decoding: each stream guesses tokens ahead from its own text "
        "(prompt lookup) and keeps those the model picks, as many as pay at the batch's size; "
        "the output is the same either way",
    )
    draft: str | None = Field(
        None,
        description="a small GGUF with the model's vocabulary that guesses ahead for "
        "speculative decoding, in place of prompt lookup (llama-server's --model-draft)",
    )
    backend_sampling: Literal["auto", "on", "off"] = Field(
        "auto",
        description="sample inside the graph, on the device; auto: when every layer is on a GPU",
    )
    extra_buffers: bool = Field(
        False,
        description="repacked CPU weight buffers (AMX etc.); off by default: they crash some "
        "sandboxes",
    )
    chat_template: str | None = Field(
        None,
        description="a Jinja chat template (as in a GGUF or a Hugging Face tokenizer_config) "
        "in place of the model's own; it also decides the tool-call format",
    )
    pooling: Literal["auto", "mean", "cls", "last"] = Field(
        "auto", description="how /v1/embeddings pools token vectors; auto: the GGUF's, else mean"
    )


class HttpSettings(BaseModel):
    """The optional HTTP API of `infertui host`."""

    listen: str | None = Field(
        None,
        description="also serve the HTTP API (OpenAI, Ollama-style, tasks) on [HOST:]PORT; "
        "unset: no HTTP API",
    )
    max_body_mb: float = Field(
        4.0, gt=0, description="largest request body (413 above it); 4 MB is ~1M tokens of text"
    )
    header_timeout_s: float = Field(
        10.0, gt=0, description="a new connection must send a whole request head by then"
    )
    body_timeout_s: float = Field(
        30.0, gt=0, description="longest wait for the next piece of a request body (408)"
    )
    keep_alive_s: int = Field(5, ge=1, description="an idle kept-alive connection is closed")
    max_connections: int = Field(
        1000, ge=1, description="connections and requests at once; beyond it a 503"
    )
    default_max_tokens: int | None = Field(
        None,
        ge=1,
        description="reply length of an OpenAI request that sets none; unset: until the "
        "context is full, as OpenAI's, Ollama's and llama-server's (spec 004 says 128)",
    )
    cors_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="let web pages of these origins call the HTTP API, as OLLAMA_ORIGINS: "
        "http://localhost:3000, http://localhost:*, * (comma-separated, in "
        "INFERTUI_HOST__HTTP__CORS_ORIGINS too); empty: CORS off",
    )
    allowed_hosts: list[str] = Field(
        default_factory=list,
        description="names a request's Host may give besides localhost, on a loopback listen "
        "without API keys (a proxy's name); others are refused against DNS rebinding",
    )

    @field_validator("cors_origins", mode="before")
    @classmethod
    def _origins(cls, value: Any) -> Any:
        return _comma_separated(value)


class P2PSettings(BaseModel):
    """The Hyperswarm face of `infertui host`."""

    enabled: bool = Field(True, description="listen under the server ID (--no-p2p turns it off)")
    topics: list[str] = Field(
        default_factory=list,
        description="also announce on these topics, so that `infertui hosts --topic NAME` "
        "finds the host",
    )
    allow: list[str] = Field(
        default_factory=list, description="let in only the peers of these server IDs; empty: anyone"
    )
    allow_file: str | None = Field(
        None, description="let in the peers listed in this file (one server ID a line, # comments)"
    )
    admins: list[str] = Field(
        default_factory=list,
        description="let the peers of these server IDs add, remove, reload and drain engines",
    )
    share: list[str] = Field(
        default_factory=list,
        description="let the hosts or clients of these server IDs pull this host's models "
        "(infertui pull peer:ID/NAME); admins may too",
    )


class UpstreamSettings(BaseModel):
    """Engines that are OpenAI-compatible servers elsewhere (vLLM, SGLang, llama-server)."""

    urls: list[str] = Field(
        default_factory=list,
        description="OpenAI-compatible servers to serve as engines, each as the URL of its API "
        "root or ID=URL, e.g. vllm=http://gpu1:8000/v1; with only these, no model is loaded here",
    )
    model: str | None = Field(
        None, description="the model to ask the upstreams for; unset: the first each lists"
    )
    api_key: SecretStr | None = Field(
        None,
        description="API key for the upstreams, sent as a Bearer token (or "
        "INFERTUI_HOST__UPSTREAM__API_KEY)",
    )
    concurrency: int = Field(
        8, ge=1, description="jobs sent to each upstream at once; more wait in infertui's queue"
    )
    health_interval_s: float = Field(2.0, gt=0, description="how often each is asked if it is up")


class UserPolicy(BaseModel):
    """What one identity (an API key's name, a named peer, an address) may do; unset: no
    limit."""

    weight: float = Field(
        1.0, gt=0, description="its share of the slots against others whose work waits too"
    )
    priority: Literal["interactive", "batch"] = Field(
        "interactive",
        description="the class of its requests that name none (service_tier flex, or a "
        "priority above 0, is batch)",
    )
    running: int | None = Field(
        None, ge=1, description="its jobs decoding at once; more wait in the queue"
    )
    queued: int | None = Field(
        None, ge=0, description="its jobs waiting at once; more are refused (429)"
    )
    requests_per_minute: int | None = Field(None, ge=1, description="beyond it, 429")
    tokens_per_minute: int | None = Field(
        None, ge=1, description="tokens in and out, counted as jobs end; beyond it, 429"
    )
    tokens_per_day: int | None = Field(
        None, ge=1, description="tokens in and out per UTC day; beyond it, 429 until midnight"
    )


class SharesSettings(BaseModel):
    """How the host's slots are shared between the people who use it (issue 37)."""

    interactive_slots: int = Field(
        0,
        ge=0,
        description="slots on each engine that batch work never takes, kept for people "
        "waiting on a reply",
    )
    default: UserPolicy = Field(
        default_factory=UserPolicy, description="for every identity without its own entry"
    )
    users: dict[str, UserPolicy] = Field(
        default_factory=dict, description="per identity: [host.shares.users.alice] weight = 2"
    )


class LedgerSettings(BaseModel):
    """The usage ledger: a record of every job in an SQLite file in the data dir."""

    enabled: bool = Field(True, description="record every job (identity, tokens, times)")
    retention_days: int = Field(
        90, ge=0, description="records older than this are deleted; 0: kept forever"
    )
    keep_text: bool = Field(
        False, description="also keep each job's prompt and reply in its record"
    )


class HostSettings(BaseModel):
    """`infertui host`."""

    models: list[str] = Field(
        default_factory=list,
        description="GGUF files to serve, each as PATH or ID=PATH; empty: the bundled SmolLM2 "
        "135M Instruct",
    )
    model_dirs: list[str] = Field(
        default_factory=list,
        description="folders engines may be added or reloaded from at run time, besides the "
        "data dir's models/ and the folders of the models given at start",
    )
    engine: EngineDefaults = EngineDefaults()
    keep_alive: str = Field(
        "5m",
        description="how long a model loaded on demand (a request naming a library model) "
        "stays after its last request, as OLLAMA_KEEP_ALIVE: 5m, 1h, 0 (unload once idle), "
        "-1 (forever); a request's keep_alive overrides it",
    )
    memory_budget_mb: int | None = Field(
        None,
        ge=1,
        description="memory the models loaded on demand may take, weights and KV cache, beside "
        "the engines the host started with; unset: what is free, on the GPU when layers are "
        "offloaded, else RAM. Idle ones are unloaded, least recently used first, to make room",
    )
    max_loaded: int = Field(
        0, ge=0, description="models loaded at once, as OLLAMA_MAX_LOADED_MODELS; 0: as many "
        "as the memory budget holds",
    )  # fmt: skip
    upstream: UpstreamSettings = UpstreamSettings()
    keys: dict[str, SecretStr] = Field(
        default_factory=dict,
        description='named API keys, one per person: [host.keys] alice = "..."; the name '
        "is who asks, in fair shares, limits, logs and the ledger",
    )
    keys_file: str | None = Field(
        None, description="more named API keys, one NAME=KEY a line (# comments)"
    )
    shares: SharesSettings = SharesSettings()
    ledger: LedgerSettings = LedgerSettings()
    queue: int = Field(64, ge=1, description="jobs that may wait per engine before QUEUE_FULL")
    host_name: str = Field(default_factory=socket.gethostname)
    peer_job_limit: int = Field(1, ge=1, description="concurrent jobs per P2P peer (MODEL_BUSY)")
    drain_on_stop_ms: int = Field(2000, ge=0, description="grace for running jobs at shutdown")
    http: HttpSettings = HttpSettings()
    p2p: P2PSettings = P2PSettings()

    @field_validator("keep_alive")
    @classmethod
    def _duration(cls, value: str) -> str:
        seconds_of(value)  # a ValueError names the bad value
        return value

    @property
    def keep_alive_s(self) -> float:
        return seconds_of(self.keep_alive) or 0.0


class ChatSampling(TypedDict, total=False):
    """The chat app's sampling options, as keyword arguments for `Client.chat`; a field left
    out is the model's own (its GGUF's recommendation, else the host's default)."""

    temperature: float
    top_p: float
    max_tokens: int


class ClientSettings(BaseModel):
    """`infertui connect` and `infertui ask`."""

    model: str | None = Field(
        None, description="the host's engine to ask; unset: the host's default"
    )
    system_prompt: str = Field(
        "", description="the system prompt, sent first in every conversation; empty: none"
    )
    # Unset, as in Ollama's clients: the model's own sampling suits it better than any figure
    # written here for every model (a 135M model wanders at a temperature a 7B takes well).
    temperature: Temperature | None = Field(None, description="0 is greedy; unset: the model's own")
    top_p: TopP | None = Field(None, description="unset: the model's own")
    max_tokens: MaxTokens | None = Field(
        None, description="longest reply, in tokens; unset: until the context is full"
    )
    connect_timeout_s: float = Field(10.0, gt=0, description="give up connecting after this")

    @field_validator("temperature", "top_p", "max_tokens", mode="before")
    @classmethod
    def _blank_is_unset(cls, value: Any) -> Any:
        """An options field left empty means the model's own value (no limit, for max_tokens)."""
        return None if isinstance(value, str) and not value.strip() else value

    def sampling(self) -> ChatSampling:
        chosen: ChatSampling = {}
        if self.max_tokens is not None:
            chosen["max_tokens"] = self.max_tokens
        if self.temperature is not None:
            chosen["temperature"] = self.temperature
        if self.top_p is not None:
            chosen["top_p"] = self.top_p
        return chosen


class UiSettings(BaseModel):
    """How the apps look; kept by the apps themselves."""

    theme: str | None = Field(None, description="Textual theme (Ctrl+P, then theme)")


class Settings(BaseSettings):
    """Everything infertui reads from its config file and environment."""

    model_config = SettingsConfigDict(
        env_prefix="INFERTUI_", env_nested_delimiter="__", extra="ignore"
    )

    host: HostSettings = HostSettings()
    client: ClientSettings = ClientSettings()
    log_level: str = Field("INFO", description="DEBUG, INFO, WARNING or ERROR")
    ui: UiSettings = UiSettings()
    keymap: dict[str, str] = Field(
        default_factory=dict,
        description='[keymap] binding id = keys, e.g. "chat.abort" = "ctrl+k" (see the footer)',
    )
    api_key: SecretStr | None = Field(
        None, description="INFERTUI_API_KEY: required of HTTP clients (host), sent (client)"
    )
    api_keys: list[SecretStr] = Field(
        default_factory=list,
        description="more API keys the host accepts, e.g. one per teammate: each owns its tasks",
    )
    admin_key: SecretStr | None = Field(
        None,
        description="HTTP clients that send this key may manage engines (or INFERTUI_ADMIN_KEY); "
        "unset: only on a loopback bind",
    )
    bootstrap: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="a private DHT's nodes, HOST:PORT (comma-separated, in INFERTUI_BOOTSTRAP "
        "too); empty: the public Hyperswarm DHT",
    )

    @field_validator("bootstrap", mode="before")
    @classmethod
    def _bootstrap(cls, value: Any) -> Any:
        return _comma_separated(value)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (
            init_settings,
            env_settings,
            TomlConfigSettingsSource(settings_cls, toml_file=paths.config_file()),
        )


def _comma_separated(value: Any) -> Any:
    """A list given in the environment: JSON, or its items between commas; and a list whose
    items hold commas (a flag given `--origins a,b --origins c`), as one list."""
    if isinstance(value, str):
        if value.lstrip().startswith("["):
            return json.loads(value)
        return [part.strip() for part in value.split(",") if part.strip()]
    if isinstance(value, list):
        return [part.strip() for item in value for part in str(item).split(",") if part.strip()]
    return value


def load_settings(**overrides: Any) -> Settings:
    """Settings with flags given as nested dicts, e.g. `host={"queue": 8}`. Flags that were not
    given must be left out, so that they do not hide the file or the environment."""
    return Settings(**_drop_none(overrides))


def first_problem(err: ValidationError) -> str:
    """One sentence for a person: the first setting that is wrong and why (and how many
    more), not pydantic's multi-line dump."""
    problems = err.errors()
    first = problems[0]
    where = ".".join(str(part) for part in first["loc"]) or "settings"
    sentence = f"{where}: {first['msg']}"
    if "input" in first and not isinstance(first["input"], dict | list):
        sentence += f" (got {str(first['input'])[:60]!r})"
    if len(problems) > 1:
        sentence += f"; and {len(problems) - 1} more"
    return sentence


def _drop_none(value: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, item in value.items():
        if isinstance(item, dict):
            item = _drop_none(item)
            if item:
                out[key] = item
        elif item is not None:
            out[key] = item
    return out


def config_path() -> Path:
    return paths.config_file()


def save_to_file(section: str, values: dict[str, Any]) -> Path:
    """Write `values` into `[section]` of the config file, keeping everything else in it
    (comments and layout included); a None value removes its key. Raises OSError."""
    import tomlkit  # only the apps that persist options need it

    file = config_path()
    document = tomlkit.parse(file.read_text()) if file.exists() else tomlkit.document()
    table = document.get(section)
    if not isinstance(table, dict):
        table = tomlkit.table()
        document[section] = table
    for key, value in values.items():
        if value is None:
            table.pop(key, None)
        else:
            table[key] = value
    file.parent.mkdir(parents=True, exist_ok=True)
    temporary = file.with_name(f".{file.name}.tmp")
    temporary.write_text(tomlkit.dumps(document))
    temporary.replace(file)
    return file
