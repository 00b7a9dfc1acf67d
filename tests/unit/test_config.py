"""Config loading: search path, precedence, sources, and errors that name file and key."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from slurmopt.config import (
    DEFAULT_CONFIG_PATH,
    ENV_OVERRIDES,
    Config,
    config_keys,
    find_config_file,
    load_config,
    search_config_file,
    slurm_conf_dir,
)
from slurmopt.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "etc" / "slurmopt.toml.example"


def _write(tmp_path: Path, text: str, name: str = "slurmopt.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_defaults_with_no_file_anywhere(tmp_path: Path) -> None:
    cfg = load_config(env={}, default_path=tmp_path / "absent.toml")
    assert cfg == Config()
    assert cfg.enforce is False
    assert cfg.interval_s == 5.0
    assert cfg.db == "sqlite:////var/lib/slurmopt/slurmopt.db"
    assert cfg.backend == "cli"
    assert cfg.managed_partitions == ()
    assert cfg.heartbeat_path == "/run/slurmopt/heartbeat"
    assert set(cfg.sources) == set(config_keys())
    assert set(cfg.sources.values()) == {"default"}


def test_default_search_path_is_etc() -> None:
    assert DEFAULT_CONFIG_PATH == "/etc/slurmopt/slurmopt.toml"


def test_file_values_and_sources(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        'enforce = true\ninterval_s = 2\nmanaged_partitions = ["gpu", "a100"]\n'
        'log_level = "DEBUG"\n',
    )
    cfg = load_config(path, env={})
    assert cfg.enforce is True
    assert cfg.interval_s == 2.0 and isinstance(cfg.interval_s, float)
    assert cfg.managed_partitions == ("gpu", "a100")
    assert cfg.log_level == "debug"
    assert cfg.sources["enforce"] == f"file:{path}"
    assert cfg.sources["db"] == "default"


def test_search_order_flag_then_env_then_default(tmp_path: Path) -> None:
    flag = _write(tmp_path, "backfill_depth = 1\n", "flag.toml")
    envf = _write(tmp_path, "backfill_depth = 2\n", "env.toml")
    default = _write(tmp_path, "backfill_depth = 3\n", "default.toml")
    env = {"SLURMOPT_CONFIG": str(envf)}
    assert load_config(flag, env=env, default_path=default).backfill_depth == 1
    assert load_config(None, env=env, default_path=default).backfill_depth == 2
    assert load_config(None, env={}, default_path=default).backfill_depth == 3
    assert find_config_file(None, {}, tmp_path / "nope.toml") is None


def test_file_beside_slurm_conf_comes_after_env_and_before_default(tmp_path: Path) -> None:
    etc = tmp_path / "etc"
    etc.mkdir()
    beside = _write(etc, "backfill_depth = 4\n", "slurmopt.toml")
    envf = _write(tmp_path, "backfill_depth = 2\n", "env.toml")
    default = _write(tmp_path, "backfill_depth = 3\n", "default.toml")
    slurm = {"SLURM_CONF": str(etc / "slurm.conf")}
    cfg = load_config(None, env=slurm, default_path=default)
    assert cfg.backfill_depth == 4
    assert cfg.sources["backfill_depth"] == f"file:{beside}"
    assert load_config(None, env={**slurm, "SLURMOPT_CONFIG": str(envf)}).backfill_depth == 2
    beside.unlink()
    assert load_config(None, env=slurm, default_path=default).backfill_depth == 3


def test_search_reports_what_it_tried(tmp_path: Path) -> None:
    slurm = {"SLURM_CONF": str(tmp_path / "etc" / "slurm.conf")}
    search = search_config_file(None, slurm, tmp_path / "absent.toml")
    assert search.found is None and search.how is None
    assert search.tried == (
        ("beside slurm.conf", str(tmp_path / "etc" / "slurmopt.toml")),
        ("default", str(tmp_path / "absent.toml")),
    )
    flag = _write(tmp_path, "", "flag.toml")
    assert search_config_file(flag, slurm).tried == (("--config", str(flag)),)


def test_slurm_conf_unset_means_etc_slurm() -> None:
    assert slurm_conf_dir({}) == Path("/etc/slurm")
    assert slurm_conf_dir({"SLURM_CONF": ""}) == Path("/etc/slurm")
    assert slurm_conf_dir({"SLURM_CONF": "/opt/slurm/etc/slurm.conf"}) == Path("/opt/slurm/etc")


@pytest.mark.parametrize("how", ["flag", "env"])
def test_explicit_file_must_exist(tmp_path: Path, how: str) -> None:
    missing = tmp_path / "missing.toml"
    with pytest.raises(ConfigError, match="missing.toml: no such config file") as err:
        if how == "flag":
            load_config(missing, env={}, default_path=tmp_path / "absent")
        else:
            load_config(env={"SLURMOPT_CONFIG": str(missing)}, default_path=tmp_path / "a")
    assert err.value.exit_code == 78


def test_precedence_default_file_env_cli(tmp_path: Path) -> None:
    path = _write(tmp_path, 'enforce = true\ninterval_s = 7\ndb = "sqlite:///file.db"\n')
    env = {
        "SLURMOPT_INTERVAL": "3.5",
        "SLURMOPT_DB": "sqlite:///env.db",
        "SLURMOPT_BACKEND": "rest",
    }
    cfg = load_config(path, overrides={"db": "sqlite:///cli.db", "backend": None}, env=env)
    assert cfg.enforce is True and cfg.sources["enforce"] == f"file:{path}"
    assert cfg.interval_s == 3.5 and cfg.sources["interval_s"] == "env:SLURMOPT_INTERVAL"
    assert cfg.backend == "rest" and cfg.sources["backend"] == "env:SLURMOPT_BACKEND"
    assert cfg.db == "sqlite:///cli.db" and cfg.sources["db"] == "cli"
    assert cfg.metrics_port == Config().metrics_port and cfg.sources["metrics_port"] == "default"


@pytest.mark.parametrize(
    ("text", "expected"), [("1", True), ("yes", True), ("ON", True), ("0", False), ("false", False)]
)
def test_env_enforce_spellings(tmp_path: Path, text: str, expected: bool) -> None:
    path = _write(tmp_path, f"enforce = {'false' if expected else 'true'}\n")
    cfg = load_config(path, env={"SLURMOPT_ENFORCE": text})
    assert cfg.enforce is expected
    assert cfg.sources["enforce"] == "env:SLURMOPT_ENFORCE"


def test_empty_env_var_is_ignored(tmp_path: Path) -> None:
    path = _write(tmp_path, "enforce = true\n")
    assert load_config(path, env={"SLURMOPT_ENFORCE": "", "SLURMOPT_CONFIG": ""}).enforce is True


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({"SLURMOPT_ENFORCE": "maybe"}, "$SLURMOPT_ENFORCE"),
        ({"SLURMOPT_INTERVAL": "soon"}, "$SLURMOPT_INTERVAL"),
        ({"SLURMOPT_INTERVAL": "-1"}, "$SLURMOPT_INTERVAL"),
        ({"SLURMOPT_BACKEND": "slurmdbd"}, "$SLURMOPT_BACKEND"),
        ({"SLURMOPT_HEALTH_MAX_TEMPERATURE_C": "hot"}, "$SLURMOPT_HEALTH_MAX_TEMPERATURE_C"),
        ({"SLURMOPT_HEALTH_EXPECTED_GPUS": "-1"}, "$SLURMOPT_HEALTH_EXPECTED_GPUS"),
        ({"SLURMOPT_HEALTH_MAX_DRAIN_SHARE": "lots"}, "$SLURMOPT_HEALTH_MAX_DRAIN_SHARE"),
        ({"SLURMOPT_HEALTH_XID_DRAIN": "79,x"}, "$SLURMOPT_HEALTH_XID_DRAIN"),
        ({"SLURMOPT_HEALTH_INTERVAL_S": "0"}, "$SLURMOPT_HEALTH_INTERVAL_S"),
    ],
)
def test_bad_env_value_names_the_variable(tmp_path: Path, env: dict[str, str], needle: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(env=env, default_path=tmp_path / "absent")
    assert needle in str(err.value)


def test_unknown_key_names_file_key_and_suggestion(tmp_path: Path) -> None:
    path = _write(tmp_path, "enforc = true\n")
    with pytest.raises(ConfigError) as err:
        load_config(path, env={})
    msg = str(err.value)
    assert str(path) in msg and "'enforc'" in msg and "did you mean 'enforce'" in msg


def test_tables_are_rejected(tmp_path: Path) -> None:
    path = _write(tmp_path, "[daemon]\ninterval_s = 3\n")
    with pytest.raises(ConfigError, match=r"unknown table \[daemon\]"):
        load_config(path, env={})


@pytest.mark.parametrize(
    ("line", "key"),
    [
        ('enforce = "yes"', "enforce"),
        ('interval_s = "5"', "interval_s"),
        ("interval_s = 0", "interval_s"),
        ("interval_s = true", "interval_s"),
        ("backfill_depth = 1.5", "backfill_depth"),
        ("metrics_port = 70000", "metrics_port"),
        ('managed_partitions = "gpu"', "managed_partitions"),
        ("managed_partitions = [1, 2]", "managed_partitions"),
        ('managed_partitions = ["a,b"]', "managed_partitions"),
        ('managed_partitions = ["gpu long"]', "managed_partitions"),
        ('managed_partitions = ["a=b"]', "managed_partitions"),
        ("heartbeat_max_age_s = 3601", "heartbeat_max_age_s"),
        ("heartbeat_max_age_s = 1e9", "heartbeat_max_age_s"),
        ('backend = "slurmdbd"', "backend"),
        ('log_level = "loud"', "log_level"),
        ('rest_url = "localhost:6820"', "rest_url"),
        ('rest_api = "v0.0.39"', "rest_api"),
        ('rest_api = "0.0.42"', "rest_api"),
        ("rest_token_command = \"scontrol 'token\"", "rest_token_command"),
        ('heartbeat_path = "relative/heartbeat"', "heartbeat_path"),
        ("db = 5", "db"),
        ("health_max_temperature_c = 80.5", "health_max_temperature_c"),
        ("health_expected_gpus = -1", "health_expected_gpus"),
        ('health_xid_drain = "79"', "health_xid_drain"),
        ("health_xid_drain = [79, 0]", "health_xid_drain"),
        ("health_xid_degraded = [true]", "health_xid_degraded"),
        ("health_max_drain_share = 1.5", "health_max_drain_share"),
        ("health_max_drain_nodes = 2.0", "health_max_drain_nodes"),
        ("health_interval_s = 0", "health_interval_s"),
        ("health_xid_wait_ms = -5", "health_xid_wait_ms"),
    ],
)
def test_wrong_type_or_value_names_file_and_key(tmp_path: Path, line: str, key: str) -> None:
    path = _write(tmp_path, line + "\n")
    with pytest.raises(ConfigError) as err:
        load_config(path, env={})
    assert f"{path}: key {key!r}:" in str(err.value)


def test_toml_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    path = _write(tmp_path, "enforce = false\ninterval_s = 5\ndb = sqlite\n")
    with pytest.raises(ConfigError) as err:
        load_config(path, env={})
    assert str(err.value).startswith(f"{path}:3: invalid TOML:")


def test_unreadable_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(tmp_path, env={})  # a directory


def test_not_utf8_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "latin1.toml"
    path.write_bytes(b'db = "caf\xe9"\n')
    with pytest.raises(ConfigError, match="invalid TOML"):
        load_config(path, env={})


def test_cli_override_is_checked(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="command line: interval_s"):
        load_config(overrides={"interval_s": -2}, env={}, default_path=tmp_path / "absent")
    with pytest.raises(ConfigError, match="unknown key 'intervl_s'"):
        load_config(overrides={"intervl_s": 2}, env={}, default_path=tmp_path / "absent")


def test_config_is_frozen_and_checked_when_built_in_code() -> None:
    cfg = Config()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.enforce = True  # type: ignore[misc]
    with pytest.raises(ConfigError, match="interval_s"):
        Config(interval_s=0)
    assert Config(managed_partitions=["gpu"]).managed_partitions == ("gpu",)  # type: ignore[arg-type]


def test_as_dict_has_every_key() -> None:
    data = Config(managed_partitions=("gpu",)).as_dict()
    assert list(data) == list(config_keys())
    assert data["managed_partitions"] == ["gpu"]


def test_example_file_parses_and_shows_every_default(tmp_path: Path) -> None:
    """The shipped example loads as is, and uncommented it names every key with its default."""
    text = EXAMPLE.read_text()
    assert isinstance(load_config(EXAMPLE, env={}), Config)
    settings = [line.removeprefix("# ") for line in text.splitlines() if _is_setting(line)]
    assert sorted(line.split(" = ")[0] for line in settings) == sorted(config_keys())
    uncommented = _write(tmp_path, "\n".join(settings) + "\n", "uncommented.toml")
    cfg = load_config(uncommented, env={})
    assert cfg == Config()
    assert set(cfg.sources.values()) == {f"file:{uncommented}"}


def _is_setting(line: str) -> bool:
    """``# key = value`` where key is a config key (prose comments are not settings)."""
    body = line.removeprefix("# ")
    return body.split(" = ")[0] in config_keys() and " = " in body


def test_docs_mention_every_key_and_env_var() -> None:
    doc = (REPO / "docs" / "config.md").read_text()
    for key in config_keys():
        assert f"`{key}`" in doc, key
    for var in ("SLURMOPT_CONFIG", *ENV_OVERRIDES):
        assert f"${var}" in doc or f"`{var}`" in doc, var


# ---------------------------------------------------------------------- health_* keys


def test_health_defaults_are_the_rules_and_caps_own() -> None:
    """The config's defaults must not drift from HealthThresholds() and DrainCap()."""
    from slurmopt.health.agent import DrainCap
    from slurmopt.health.rules import HealthThresholds

    cfg = Config()
    assert HealthThresholds.from_config(cfg) == HealthThresholds()
    assert DrainCap(cfg.health_max_drain_nodes, cfg.health_max_drain_share) == DrainCap()
    assert cfg.health_xid_drain == tuple(sorted(HealthThresholds().xid_drain))


def test_health_keys_from_file_env_and_cli(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "health_max_temperature_c = 70\nhealth_xid_drain = [95, 79, 79]\n"
        "health_max_drain_share = 0\nhealth_interval_s = 30\nhealth_expected_gpus = 8\n",
    )
    env = {
        "SLURMOPT_HEALTH_MAX_TEMPERATURE_C": "75",
        "SLURMOPT_HEALTH_XID_DEGRADED": "13, 31",
        "SLURMOPT_HEALTH_MAX_DRAIN_SHARE": "0.25",
    }
    cfg = load_config(path, overrides={"health_expected_gpus": 4}, env=env)
    assert cfg.health_max_temperature_c == 75
    assert cfg.sources["health_max_temperature_c"] == "env:SLURMOPT_HEALTH_MAX_TEMPERATURE_C"
    assert cfg.health_xid_drain == (79, 95) and cfg.sources["health_xid_drain"] == f"file:{path}"
    assert cfg.health_xid_degraded == (13, 31)
    assert cfg.health_max_drain_share == 0.25
    assert cfg.health_interval_s == 30.0 and isinstance(cfg.health_interval_s, float)
    assert cfg.health_expected_gpus == 4 and cfg.sources["health_expected_gpus"] == "cli"
    assert cfg.as_dict()["health_xid_drain"] == [79, 95]


def test_every_health_key_has_an_env_var() -> None:
    health = [key for key in config_keys() if key.startswith("health_")]
    assert len(health) == 13
    for key in health:
        assert ENV_OVERRIDES[f"SLURMOPT_{key.upper()}"] == key


def test_an_xid_in_both_lists_is_a_config_error(tmp_path: Path) -> None:
    path = _write(tmp_path, "health_xid_degraded = [63, 79]\n")
    with pytest.raises(ConfigError, match="both list Xid 79") as err:
        load_config(path, env={})
    assert err.value.exit_code == 78


def test_misspelt_health_key_suggests_the_right_one(tmp_path: Path) -> None:
    path = _write(tmp_path, "health_max_temperature = 80\n")
    with pytest.raises(ConfigError, match="did you mean 'health_max_temperature_c'"):
        load_config(path, env={})


def test_planner_keys_reach_the_daemons_policy(tmp_path: Path) -> None:
    from slurmopt.daemon.loop import Daemon

    text = "compact_wait_share = 0.25\nalign_ends = false\nbackfill_depth = 7\n"
    path = _write(tmp_path, text + "reserve_one_leaf = false\n")
    cfg = load_config(path, env={})
    assert (cfg.compact_wait_share, cfg.align_ends, cfg.backfill_depth) == (0.25, False, 7)
    policy = Daemon.policy_for(cfg)
    assert (policy.compact_wait_share, policy.align_ends, policy.backfill_depth) == (0.25, False, 7)
    assert not policy.reserve_one_leaf
    assert Daemon.policy_for(load_config(_write(tmp_path, ""), env={})).reserve_one_leaf


@pytest.mark.parametrize(
    ("text", "needle"),
    [("compact_wait_share = -0.5", "must be 0 or more"), ("align_ends = 1", "true or false")],
)
def test_bad_planner_key_is_named(tmp_path: Path, text: str, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        load_config(_write(tmp_path, text + "\n"), env={})


def test_deeply_nested_toml_is_one_error(tmp_path: Path) -> None:
    path = _write(tmp_path, "a = " + "[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(ConfigError, match="nested too deeply"):
        load_config(path, env={})


def test_node_name_starts_the_daemons_holder_identity(tmp_path: Path) -> None:
    import os
    import socket

    from slurmopt.daemon.loop import default_holder

    path = _write(tmp_path, 'node_name = "ctl-a"\n')
    assert load_config(path, env={}).node_name == "ctl-a"
    assert load_config(path, env={"SLURMOPT_NODE_NAME": "ctl-b"}).node_name == "ctl-b"
    node, pid, _boot, _start = default_holder("ctl-b").split(":")
    assert (node, pid) == ("ctl-b", str(os.getpid()))
    assert default_holder().split(":")[0] == socket.gethostname()
    for bad in ("ctl:a", "ctl a", "ctl\na"):
        with pytest.raises(ConfigError, match="node_name"):
            Config(node_name=bad)
