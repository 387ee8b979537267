"""Settings precedence: flags over INFERTUI_* environment over the TOML file."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from infertui.app.host import build_service
from infertui.core.config import load_settings


def test_file_then_environment_then_flags(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    file = tmp_path / "config.toml"
    file.write_text(
        '[host]\nqueue = 5\nmodels = ["a.gguf"]\n[host.engine]\nctx = 1024\nparallel = 3\n'
    )
    monkeypatch.setenv("INFERTUI_CONFIG", str(file))
    settings = load_settings()
    assert (settings.host.queue, settings.host.engine.ctx, settings.host.engine.parallel) == (
        5,
        1024,
        3,
    )

    monkeypatch.setenv("INFERTUI_HOST__ENGINE__CTX", "2048")
    settings = load_settings()
    assert settings.host.engine.ctx == 2048
    assert settings.host.engine.parallel == 3, "the file still fills what env does not set"

    settings = load_settings(host={"engine": {"ctx": 512, "parallel": None}, "queue": None})
    assert settings.host.engine.ctx == 512
    assert settings.host.engine.parallel == 3, "a flag not given hides nothing"
    assert settings.host.queue == 5
    assert settings.host.models == ["a.gguf"]


def test_defaults_without_a_file(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFERTUI_CONFIG", str(tmp_path / "missing.toml"))
    settings = load_settings()
    assert settings.host.engine.ctx == 4096
    assert settings.host.engine.parallel == 4
    assert settings.host.queue == 64
    assert settings.host.models == []


def test_client_settings_and_keymap_follow_the_same_order(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    file = tmp_path / "config.toml"
    file.write_text(
        '[client]\nsystem_prompt = "Be terse."\ntemperature = 0.2\n'
        '[keymap]\n"chat.abort" = "ctrl+k"\n'
    )
    monkeypatch.setenv("INFERTUI_CONFIG", str(file))
    monkeypatch.setenv("INFERTUI_CLIENT__MAX_TOKENS", "64")
    settings = load_settings(client={"temperature": 0.0, "system_prompt": None})
    assert settings.client.system_prompt == "Be terse."
    assert settings.client.temperature == 0.0  # the flag
    # top_p is left out: the model's own applies (issue 34 §2)
    assert settings.client.sampling() == {"temperature": 0.0, "max_tokens": 64}
    assert settings.keymap == {"chat.abort": "ctrl+k"}


def test_client_sampling_left_unset_is_the_models_own() -> None:
    """Issue 34 §2: the apps send no temperature or top_p unless the user set one, so the
    model's recommended sampling (its GGUF's keys, else the host's defaults) applies, and no
    length limit, as Ollama's `num_predict` -1; an options field left empty means the same."""
    assert load_settings().client.sampling() == {}  # max_tokens too: until the context fills
    blank = load_settings(client={"temperature": " ", "top_p": "", "max_tokens": ""}).client
    assert blank.temperature is None and blank.top_p is None and blank.max_tokens is None


def test_parallel_takes_a_number_or_auto(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFERTUI_HOST__ENGINE__PARALLEL", "auto")
    assert load_settings().host.engine.parallel == "auto"
    monkeypatch.setenv("INFERTUI_HOST__ENGINE__PARALLEL", "128")
    assert load_settings().host.engine.parallel == 128, "no fixed ceiling: memory decides"
    monkeypatch.setenv("INFERTUI_HOST__ENGINE__PARALLEL", "0")
    with pytest.raises(ValidationError):
        load_settings()


def test_keys_from_file_and_environment_reach_the_http_gate(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Keys kept off the command line (issue 12 §8): the file's per-person keys and the
    environment's admin key are what the HTTP app checks; a public bind closes engine
    management to everyone but the admin."""
    file = tmp_path / "config.toml"
    file.write_text('api_keys = ["alice", "bob"]\n[host.http]\nlisten = "0.0.0.0:0"\n')
    monkeypatch.setenv("INFERTUI_CONFIG", str(file))
    monkeypatch.setenv("INFERTUI_ADMIN_KEY", "root-key")
    settings = load_settings(host={"p2p": {"enabled": False}})
    (http,) = build_service(settings).transports
    access = http.app.state.access  # type: ignore[attr-defined]
    assert access.keys_required and not access.loopback
    assert [access.identity(f"Bearer {k}".encode()) for k in ("alice", "bob", "root-key", "eve")] == [
        "key0", "key1", "admin", None
    ]  # fmt: skip


def test_a_bad_setting_is_one_sentence_not_a_pydantic_dump(
    tmp_path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 13: `host` with a bad value prints the setting, what is wrong and what was given."""
    from infertui.app.cli import main

    monkeypatch.setenv("INFERTUI_CONFIG", str(tmp_path / "none.toml"))
    monkeypatch.setenv("INFERTUI_HOST__QUEUE", "-1")
    assert main(["host", "--headless", "--no-p2p"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "host.queue" in err and "greater than or equal to 1" in err and "'-1'" in err
    assert "validation error" not in err and "pydantic.dev" not in err
    with pytest.raises(SystemExit):
        main(["host", "--parallel", "0"])  # argparse's own one line
    assert "needs at least 1 slot" in capsys.readouterr().err
    monkeypatch.setenv("INFERTUI_BOOTSTRAP", "[1")  # `hosts` said it with a traceback
    assert main(["hosts", "--topic", "t"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("infertui: invalid settings") and err.count("\n") == 1, err


@pytest.mark.parametrize(
    "argv", [["list"], ["show", "m"], ["rm", "m"], ["cp", "m", "n"], ["pull", "m"]]
)
@pytest.mark.parametrize("config", ["[client", '[client]\ntemperature = "hot"\n'])
def test_the_library_commands_say_a_bad_setting_in_one_line(
    argv: list[str], config: str, tmp_path, monkeypatch, capsys
) -> None:
    """They read the settings (the model folders) outside their error handling: broken TOML
    or a bad value was a traceback of 40 lines (a helper's walkthrough)."""
    from infertui.app.cli import main

    file = tmp_path / "config.toml"
    file.write_text(config)
    monkeypatch.setenv("INFERTUI_CONFIG", str(file))
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("infertui: invalid settings") and err.count("\n") == 1, err


def test_a_bad_flag_value_names_the_flag_not_the_config_file(
    tmp_path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from infertui.app.cli import main

    monkeypatch.setenv("INFERTUI_CONFIG", str(tmp_path / "none.toml"))
    assert main(["ask", "http://127.0.0.1:1", "hi", "--max-tokens", "0"]) == 2
    err = capsys.readouterr().err
    assert err == "infertui: --max-tokens 0: input should be greater than or equal to 1\n"
    assert main(["host", "--headless", "--no-p2p", "--queue", "0"]) == 2
    assert capsys.readouterr().err.startswith("infertui: --queue 0: input should be")


def test_connect_and_ask_take_a_model(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    from infertui.app.cli import build_parser, client_overrides

    monkeypatch.setenv("INFERTUI_CONFIG", str(tmp_path / "none.toml"))
    for command in (["connect", "http://127.0.0.1:1"], ["ask", "http://127.0.0.1:1", "hi"]):
        args = build_parser().parse_args([*command, "--model", "qwen-7b"])
        assert load_settings(**client_overrides(args)).client.model == "qwen-7b"
    args = build_parser().parse_args(["connect", "http://127.0.0.1:1"])
    assert load_settings(**client_overrides(args)).client.model is None  # the host's default


def test_infertui_says_its_version(capsys) -> None:
    from importlib.metadata import version

    from infertui.app.cli import main

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"infertui {version('infertui')}"


def test_a_tree_run_from_source_without_metadata_starts(monkeypatch, capsys) -> None:
    """The GPU kit puts the tree on PYTHONPATH with no package metadata: `version("infertui")`
    raised PackageNotFoundError at start-up, before any flag was read."""
    from importlib.metadata import PackageNotFoundError

    from infertui.app.cli import main
    from infertui.core import version as module

    def not_installed(name: str) -> str:
        raise PackageNotFoundError(name)

    monkeypatch.setattr(module, "version", not_installed)
    module.infertui_version.cache_clear()
    try:
        with pytest.raises(SystemExit) as done:
            main(["--version"])
    finally:
        module.infertui_version.cache_clear()
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == "infertui 0+unknown (not installed)"


@pytest.mark.parametrize("argv", [["config"], ["config", "path"]])
def test_config_prints_where_the_settings_file_is(argv: list[str], capsys) -> None:
    """`infertui config` alone did not say it: "the following arguments are required"."""
    from infertui.app.cli import main
    from infertui.core.paths import config_file

    assert main(argv) == 0
    assert capsys.readouterr().out.strip() == str(config_file())


def test_show_knows_the_bundled_model_by_its_name(tmp_path, monkeypatch, capsys) -> None:
    """A host serves it without any library, and `show smollm2-135m` said "no model
    smollm2-135m in the library" (a helper's walkthrough)."""
    from infertui.app.cli import main

    monkeypatch.setenv("INFERTUI_CONFIG", str(tmp_path / "none.toml"))
    monkeypatch.setenv("INFERTUI_DATA_DIR", str(tmp_path / "data"))
    assert main(["show", "smollm2-135m:latest"]) == 0
    out = capsys.readouterr().out
    assert "bundled with infertui" in out and "SmolLM2-135M-Instruct.Q4_1.gguf" in out
    assert "temperature 0.2" in out  # the sampling a host gives it, not "the host's defaults"
    assert main(["show", "nope"]) == 1
    assert "no model nope" in capsys.readouterr().err

    def missing() -> None:
        raise FileNotFoundError("the bundled model is missing")

    monkeypatch.setattr("infertui.app.models.bundled_model_path", missing)
    assert main(["show", "smollm2-135m"]) == 1  # without the package: said, no traceback
    assert "no model smollm2-135m" in capsys.readouterr().err
