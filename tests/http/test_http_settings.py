"""Issue 34 §4: the HTTP settings newcomers' clients need, from the file, the environment and
the flags: a reply length for requests that set none, and CORS origins as OLLAMA_ORIGINS."""

from __future__ import annotations

import re

import pytest

from infertui.app.cli import build_parser, host_overrides
from infertui.core.config import load_settings
from infertui.core.transport.http.middleware import cors_options


def test_default_max_tokens_is_unset_unless_the_file_or_environment_sets_it(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INFERTUI_CONFIG", str(tmp_path / "none.toml"))
    assert load_settings().host.http.default_max_tokens is None  # until the context is full
    file = tmp_path / "config.toml"
    file.write_text("[host.http]\ndefault_max_tokens = 128\n")
    monkeypatch.setenv("INFERTUI_CONFIG", str(file))
    assert load_settings().host.http.default_max_tokens == 128
    monkeypatch.setenv("INFERTUI_HOST__HTTP__DEFAULT_MAX_TOKENS", "64")
    assert load_settings().host.http.default_max_tokens == 64


def test_oc_ctrl_2070_cors_origins_come_as_ollama_origins_do(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Off by default; a comma-separated list in the environment (or JSON), a TOML list, and
    --origins (or --cors-origin), repeatable and comma-separated, on the command line."""
    monkeypatch.setenv("INFERTUI_CONFIG", str(tmp_path / "none.toml"))
    assert load_settings().host.http.cors_origins == []
    monkeypatch.setenv("INFERTUI_HOST__HTTP__CORS_ORIGINS", "http://localhost:*, app://x")
    assert load_settings().host.http.cors_origins == ["http://localhost:*", "app://x"]
    monkeypatch.setenv("INFERTUI_HOST__HTTP__CORS_ORIGINS", '["https://a.example"]')
    assert load_settings().host.http.cors_origins == ["https://a.example"]
    args = build_parser().parse_args(
        ["host", "--origins", "http://a.example,http://b.example", "--cors-origin", "http://c"]
    )
    flags = load_settings(**host_overrides(args)).host.http.cors_origins
    assert flags == ["http://a.example", "http://b.example", "http://c"]


def test_cors_patterns_match_as_ollama_s() -> None:
    options = cors_options(["http://localhost:*", "https://app.example"])
    assert options["allow_origins"] == ["https://app.example"]
    pattern = re.compile(options["allow_origin_regex"])
    assert pattern.fullmatch("http://localhost:5173")
    assert not pattern.fullmatch("http://localhost.evil.example")
    assert cors_options(["*"])["allow_origins"] == ["*"]
