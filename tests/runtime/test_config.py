from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from magnetar.base import InvalidArgumentError
from magnetar.runtime.config import env_var_name, load_config, read_toml, section_of


@dataclass(frozen=True)
class ExampleConfig:
    port: int = 3181
    journal_group_wait_ms_max: float = 2.0
    journal_sync: bool = True
    data_dir: str = "data"
    metadata_url: str | None = None
    listeners: tuple[str, ...] = ()


def test_precedence_defaults_file_env_flags(tmp_path: Path) -> None:
    path = tmp_path / "m.toml"
    path.write_text('[bookie]\nport = 4000\ndata_dir = "/d"\njournal_group_wait_ms_max = 1.5\n')
    file_values = section_of(read_toml(str(path)), "bookie")
    env = {"MAGNETAR_BOOKIE_PORT": "5000", "MAGNETAR_BOOKIE_JOURNAL_SYNC": "false"}
    config = load_config(ExampleConfig, "bookie", file_values=file_values, environ=env, overrides={"port": 6000, "data_dir": None})
    assert config == ExampleConfig(port=6000, journal_group_wait_ms_max=1.5, journal_sync=False, data_dir="/d")
    assert load_config(ExampleConfig, "bookie", environ={}) == ExampleConfig()


def test_types_are_checked() -> None:
    with pytest.raises(InvalidArgumentError, match="MAGNETAR_BOOKIE_PORT: expected an integer"):
        load_config(ExampleConfig, "bookie", environ={"MAGNETAR_BOOKIE_PORT": "eighty"})
    with pytest.raises(InvalidArgumentError, match="expected true/false"):
        load_config(ExampleConfig, "bookie", environ={"MAGNETAR_BOOKIE_JOURNAL_SYNC": "maybe"})
    with pytest.raises(InvalidArgumentError, match="unknown key 'prot'"):
        load_config(ExampleConfig, "bookie", file_values={"prot": 1}, environ={})
    with pytest.raises(InvalidArgumentError, match="unknown option"):
        load_config(ExampleConfig, "bookie", environ={}, overrides={"nope": 1})


def test_optional_and_tuple_fields() -> None:
    env = {"MAGNETAR_BOOKIE_METADATA_URL": "zk://127.0.0.1:2181/m", "MAGNETAR_BOOKIE_LISTENERS": "a, b"}
    config = load_config(ExampleConfig, "bookie", environ=env)
    assert config.metadata_url == "zk://127.0.0.1:2181/m"
    assert config.listeners == ("a", "b")
    assert env_var_name("broker", "web-port") == "MAGNETAR_BROKER_WEB_PORT"


def test_bad_files(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="does not exist"):
        read_toml(str(tmp_path / "missing.toml"))
    bad = tmp_path / "bad.toml"
    bad.write_text("[bookie\nport=1")
    with pytest.raises(InvalidArgumentError, match="not valid TOML"):
        read_toml(str(bad))
    assert read_toml(None) == {}


def test_standalone_bookies_take_magnetar_bookie_settings_but_not_their_address() -> None:
    from magnetar.runtime.standalone import StandaloneConfig

    config = StandaloneConfig(data_dir="/d", bookie_port=4000)
    env = {"MAGNETAR_BOOKIE_GC_INTERVAL_MS": "0", "MAGNETAR_BOOKIE_PORT": "1", "MAGNETAR_BOOKIE_DATA_DIR": "/x"}
    bookie = config.bookie_config(2, environ=env)
    assert bookie.gc_interval_ms == 0
    assert (bookie.port, bookie.data_dir) == (4002, "/d/bookie-2")
    assert config.bookie_config(0, environ={}).gc_interval_ms > 0
