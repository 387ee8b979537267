"""Settings: a TOML file under the XDG config dir, then `INFERTUI_*` environment, then flags.

Flags win over the environment, which wins over the file. Nested fields use `__` in the
environment: `INFERTUI_HOST__QUEUE=16`, `INFERTUI_HOST__ENGINE__CTX=2048`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, SecretStr, ValidationError
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from .. import paths
from .client import ClientSettings, UiSettings
from .host import HostSettings
from .lists import CommaList


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
    bootstrap: CommaList = Field(
        default_factory=list,
        description="a private DHT's nodes, HOST:PORT (comma-separated, in INFERTUI_BOOTSTRAP "
        "too); empty: the public Hyperswarm DHT",
    )

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
