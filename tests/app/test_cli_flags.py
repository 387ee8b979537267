"""The command line's flags are the settings' fields (app/flags.py over core/config/): every
engine setting is a flag, every flag reaches its field, and its help and default are the
field's, so a setting is declared once."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from infertui.app import flags
from infertui.app.cli import build_parser, host_overrides, main
from infertui.core.config import EngineDefaults, HostSettings, UserPolicy, load_settings

# Host settings kept to the file and the environment: tuning a person rarely changes per run
FILE_ONLY = {
    "host.model_dirs",
    "host.host_name",
    "host.peer_job_limit",
    "host.drain_on_stop_ms",
    "host.upstream.health_interval_s",
    "host.http.max_body_mb",
    "host.http.header_timeout_s",
    "host.http.body_timeout_s",
    "host.http.keep_alive_s",
    "host.http.max_connections",
    "host.http.default_max_tokens",
    "host.http.allowed_hosts",
    # issue 37: tables of names, each with its own limits, and the ledger's upkeep
    "host.keys",
    "host.shares.users",
    *(f"host.shares.default.{name}" for name in UserPolicy.model_fields),
    "host.ledger.retention_days",
    "host.ledger.keep_text",
}


# The host's flags before the settings made them
FLAGS_OF_BEFORE = (
    "--model", "--upstream", "--upstream-model", "--upstream-key", "--upstream-concurrency",
    "--ctx", "--gpu-layers", "--main-gpu", "--threads", "--parallel", "--batch",
    "--deterministic", "--chat-template", "--pooling", "--backend-sampling", "--queue",
    "--http", "--api-key", "--admin-key", "--origins", "--cors-origin", "--no-p2p", "--topic",
    "--bootstrap", "--allow", "--allow-file", "--admin", "--reset-id", "--headless",
)  # fmt: skip


def leaves(model: type[BaseModel], prefix: str) -> list[str]:
    found = []
    for name, info in model.model_fields.items():
        nested = info.annotation
        if isinstance(nested, type) and issubclass(nested, BaseModel):
            found += leaves(nested, f"{prefix}{name}.")
        else:
            found.append(prefix + name)
    return found


def test_every_host_setting_is_a_flag_or_said_to_be_file_only() -> None:
    flagged = {flag.path for flag in flags.HOST_FLAGS}
    missing = set(leaves(HostSettings, "host.")) - flagged - FILE_ONLY
    assert not missing, f"give these a flag in app/flags.py, or list them in FILE_ONLY: {missing}"
    assert not flagged & FILE_ONLY
    engine = {f"host.engine.{name}" for name in EngineDefaults.model_fields}
    assert engine <= flagged, "every engine setting is a flag, without a line in flags.py"


@pytest.mark.parametrize("table", [flags.HOST_FLAGS, flags.CLIENT_FLAGS], ids=["host", "client"])
def test_each_flag_takes_its_help_and_default_from_its_field(table) -> None:
    for flag in table:
        info = flags.field_at(flag.loc)  # a KeyError: the flag names no setting
        assert info.description, f"{flag.path} says nothing for {flag.names[0]}'s help"
        text = flags.help_of(flag, info)
        if flag.help is None:
            assert text.startswith(info.description.replace("%", "%%"))
        plain = not flags.shape_of(info.annotation).many and flag.const is None
        if plain and info.default not in (None, "", False):
            assert f"(default {info.default})" in text, flag.names[0]


def test_host_help_lists_every_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["host", "--help"])
    shown = capsys.readouterr().out
    for flag in flags.HOST_FLAGS:
        for name in flag.names:
            assert name in shown
    for name in FLAGS_OF_BEFORE:  # each still there
        assert f"{name} " in shown or f"{name}," in shown or f"{name}\n" in shown, name


def test_help_says_a_default_once_and_ps_offers_no_chat_flags(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A helper's audit: `--no-p2p ... (default: listen) (default True)`, and `ps --help`
    offering --system, --temperature and --max-tokens, which it never uses."""
    with pytest.raises(SystemExit):
        main(["host", "--help"])
    host = " ".join(capsys.readouterr().out.split())  # (argparse wraps lines)
    assert "(default: listen)" in host and "(default: listen) (default" not in host
    with pytest.raises(SystemExit):
        main(["ps", "--help"])
    ps = capsys.readouterr().out
    assert "--api-key" in ps and "--bootstrap" in ps
    assert not {"--model", "--system", "--temperature", "--max-tokens"} & set(ps.split())


def sample(name: str) -> tuple[list[str], object]:
    """A value other than the default for an engine setting, as typed and as read."""
    info = EngineDefaults.model_fields[name]
    shape = flags.shape_of(info.annotation)
    flag = "--" + name.replace("_", "-")
    if shape.base is bool:
        return [flag if not info.default else f"--no-{name.replace('_', '-')}"], not info.default
    if shape.choices:
        word = next(w for w in reversed(shape.choices) if w != info.default)
        return [flag, word], word
    if shape.base is int:
        return [flag, "4099"], 4099
    return [flag, "x.jinja"], "x.jinja"


@pytest.mark.parametrize("name", list(EngineDefaults.model_fields))
def test_each_engine_flag_reaches_its_setting(name: str, monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("INFERTUI_CONFIG", str(tmp_path / "none.toml"))
    argv, value = sample(name)
    settings = load_settings(**host_overrides(build_parser().parse_args(["host", *argv])))
    assert getattr(settings.host.engine, name) == value
    untouched = load_settings(**host_overrides(build_parser().parse_args(["host"])))
    assert getattr(untouched.host.engine, name) == EngineDefaults.model_fields[name].default


def test_a_boolean_flag_turns_off_what_the_file_turned_on(monkeypatch, tmp_path) -> None:
    file = tmp_path / "config.toml"
    file.write_text("[host.engine]\ndeterministic = true\n")
    monkeypatch.setenv("INFERTUI_CONFIG", str(file))
    args = build_parser().parse_args(["host", "--no-deterministic"])
    assert load_settings(**host_overrides(args)).host.engine.deterministic is False
    assert load_settings(
        **host_overrides(build_parser().parse_args(["host"]))
    ).host.engine.deterministic


def test_a_bad_value_names_its_flag_in_a_nested_section(
    monkeypatch, tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before, only a flag named as its field (--queue) was named; --upstream-concurrency was
    said as the settings' `host.upstream.concurrency`."""
    monkeypatch.setenv("INFERTUI_CONFIG", str(tmp_path / "none.toml"))
    assert main(["host", "--headless", "--no-p2p", "--upstream-concurrency", "0"]) == 2
    assert capsys.readouterr().err.startswith("infertui: --upstream-concurrency 0: input should")
    assert main(["host", "--headless", "--no-p2p", "--ctx", "5"]) == 2
    assert capsys.readouterr().err.startswith("infertui: --ctx 5: input should")
