"""`[host]`: what `infertui host` serves and to whom: its models, HTTP and Hyperswarm faces,
upstream servers, keys, fair shares and the ledger."""

from __future__ import annotations

import socket
from typing import Literal

from pydantic import BaseModel, Field, SecretStr, field_validator

from ..protocol.keep_alive import seconds_of
from .engine import EngineDefaults
from .lists import CommaList


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
    cors_origins: CommaList = Field(
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
        0, ge=0, description="models loaded at once, as OLLAMA_MAX_LOADED_MODELS (those the "
        "host started with count, and stay); a load past it waits for a loaded model to be "
        "idle; 0: as many as the memory budget holds",
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
