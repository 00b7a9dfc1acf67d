"""slurmopt's configuration: one frozen :class:`Config`, from defaults, a TOML file, env and CLI.

Every key has a default, so every command works with no file at all.  The
file is found like ClusterShell finds its own: the first of

1. ``--config FILE`` (the ``path`` argument; it must exist),
2. ``$SLURMOPT_CONFIG`` (it must exist too: a typo must not silently mean
   "defaults" on a controller that is meant to enforce),
3. ``slurmopt.toml`` beside slurm.conf (``$SLURM_CONF``'s directory, else
   ``/etc/slurm``) when present, so a cluster whose Slurm lives elsewhere
   needs no second variable,
4. ``/etc/slurmopt/slurmopt.toml`` when present,
5. nothing: defaults only.

Then a few environment variables (``SLURMOPT_DB``, ``SLURMOPT_ENFORCE``,
``SLURMOPT_INTERVAL``, ``SLURMOPT_BACKEND``, ``SLURMOPT_NODE_NAME``, and ``SLURMOPT_HEALTH_<NAME>``
for each ``health_<name>`` key) override the file, and values given
explicitly on the command line override everything.
:attr:`Config.sources` records where each value came from, so an operator
can see why the daemon is (or is not) enforcing.

The file is flat: top-level ``key = value`` pairs named like the fields of
:class:`Config`.  Unknown keys are errors, not warnings: a misspelt
``enforce`` must not be ignored.
"""

from __future__ import annotations

import difflib
import math
import os
import re
import shlex
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from slurmopt.errors import ConfigError
from slurmopt.policy.knobs import CONFIG_KNOBS, Knob
from slurmopt.signals import check_signal
from slurmopt.slurm import BACKENDS
from slurmopt.slurm.parse import REST_API_VERSIONS
from slurmopt.words import BoolWordError, parse_bool

DEFAULT_CONFIG_PATH = "/etc/slurmopt/slurmopt.toml"
CONFIG_ENV = "SLURMOPT_CONFIG"
#: The config file's name when it sits beside slurm.conf.
CONFIG_NAME = "slurmopt.toml"
#: Where slurm.conf lives when ``$SLURM_CONF`` is unset.
DEFAULT_SLURM_CONF = "/etc/slurm/slurm.conf"
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")

#: The node agent's keys (``slurmopt node-agent``, docs/health.md).  Integer keys map to their
#: least value; where a threshold is optional, 0 means "none" (TOML has no null), as ``None``
#: does in ``HealthThresholds``.
_HEALTH_INTS: Mapping[str, int] = MappingProxyType(
    {
        "health_max_temperature_c": 0,
        "health_pcie_min_width": 0,
        "health_nvlink_min_active": 0,
        "health_retired_pages_degraded": 0,
        "health_volatile_corrected_degraded": 0,
        "health_nvlink_errors_degraded": 0,
        "health_expected_gpus": 0,
        "health_max_drain_nodes": 0,
        "health_xid_wait_ms": 0,
    }
)
_HEALTH_XID_LISTS = ("health_xid_drain", "health_xid_degraded")
_HEALTH_FLOATS = ("health_max_drain_share", "health_interval_s")
HEALTH_KEYS = (*_HEALTH_INTS, *_HEALTH_XID_LISTS, *_HEALTH_FLOATS)
#: The largest ``heartbeat_max_age_s``: past it the plugin would hold jobs for a dead daemon.
HEARTBEAT_MAX_AGE_LIMIT_S = 3600.0

#: What a partition name cannot contain (Slurm separates partitions and keys with these).
_BAD_PARTITION_CHARS = re.compile(r"[,=\s]")

_SECONDS = (
    "interval_s",
    "heartbeat_max_age_s",
    "pin_timeout_s",
    "preempt_grace_s",
    "preempt_restart_s",
    "health_interval_s",
    "retain_plans_s",
    "retain_samples_s",
    "retain_finished_jobs_s",
)

#: Environment variables that override a key, and the key each one sets.
ENV_OVERRIDES: Mapping[str, str] = MappingProxyType(
    {
        "SLURMOPT_DB": "db",
        "SLURMOPT_ENFORCE": "enforce",
        "SLURMOPT_INTERVAL": "interval_s",
        "SLURMOPT_BACKEND": "backend",
        "SLURMOPT_NODE_NAME": "node_name",
        **{f"SLURMOPT_{key.upper()}": key for key in HEALTH_KEYS},
    }
)


@dataclass(frozen=True)
class Config:
    """Every setting slurmopt reads, with its default; see ``docs/config.md``.

    ``sources`` maps each key to where its value came from: ``default``,
    ``file:<path>``, ``env:<VAR>`` or ``cli``.  It does not take part in
    equality, so two configs with the same values compare equal.
    """

    enforce: bool = False
    interval_s: float = 5.0
    db: str = "sqlite:////var/lib/slurmopt/slurmopt.db"
    backend: str = "cli"
    rest_url: str = ""
    rest_api: str = ""
    rest_token_file: str = ""
    rest_token_command: str = ""
    fabric: str = ""
    managed_partitions: tuple[str, ...] = ()
    backfill_depth: int = 100
    compact_wait_share: float = 0.0
    reserve_one_leaf: bool = True
    align_ends: bool = True
    elastic_starts: bool = True
    plan_budget: int = 0
    plan_seconds: float = 0.0
    plan_check_every: int = 100
    heartbeat_path: str = "/run/slurmopt/heartbeat"
    node_name: str = ""
    heartbeat_max_age_s: float = 30.0
    pin_timeout_s: float = 300.0
    metrics_port: int = 9817
    log_level: str = "info"
    preempt_enabled: bool = True
    preempt_signal: str = "USR2"
    preempt_grace_s: float = 120.0
    preempt_restart_s: float = 120.0
    preempt_on_no_ack: str = "keep-running"
    daemon_user: str = ""
    # The node agent; defaults equal HealthThresholds() and DrainCap() (a unit test checks).
    health_max_temperature_c: int = 85
    health_pcie_min_width: int = 0
    health_nvlink_min_active: int = 0
    health_xid_drain: tuple[int, ...] = (48, 64, 74, 79, 95)
    health_xid_degraded: tuple[int, ...] = (63, 92, 94)
    health_retired_pages_degraded: int = 60
    health_volatile_corrected_degraded: int = 0
    health_nvlink_errors_degraded: int = 0
    health_expected_gpus: int = 0
    health_max_drain_share: float = 0.10
    health_max_drain_nodes: int = 4
    health_interval_s: float = 60.0
    health_xid_wait_ms: int = 100
    # How long the store keeps history (docs/store.md): plans, samples, ended jobs' records.
    retain_plans_s: float = 7 * 86400.0
    retain_samples_s: float = 30 * 86400.0
    retain_finished_jobs_s: float = 30 * 86400.0
    sources: Mapping[str, str] = field(
        default_factory=lambda: MappingProxyType({}), compare=False, repr=False
    )

    def __post_init__(self) -> None:
        # Check every value, so a Config built in code is as valid as a loaded one;
        # then fill in "default" for keys nobody named, and freeze the mapping.
        for key in config_keys():
            try:
                object.__setattr__(self, key, _coerce(key, getattr(self, key)))
            except ValueError as exc:
                raise ConfigError(f"{key}: {exc}") from exc
        both = set(self.health_xid_drain) & set(self.health_xid_degraded)
        if both:
            raise ConfigError(
                f"health_xid_drain and health_xid_degraded both list Xid "
                f"{', '.join(map(str, sorted(both)))}: an Xid drains or degrades, not both"
            )
        known = dict.fromkeys(config_keys(), "default")
        known.update(self.sources)
        object.__setattr__(self, "sources", MappingProxyType(known))

    def as_dict(self) -> dict[str, Any]:
        """The values by key (lists for sequences), e.g. for JSON output."""
        return {
            k: list(v) if isinstance(v, tuple) else v
            for k, v in ((k, getattr(self, k)) for k in config_keys())
        }


def config_keys() -> tuple[str, ...]:
    """The configurable keys, in declaration order (``sources`` is not one)."""
    return tuple(f.name for f in fields(Config) if f.name != "sources")


def _describe(value: object) -> str:
    kind = {bool: "boolean", int: "integer", float: "float", str: "string", list: "array"}.get(
        type(value), type(value).__name__
    )
    return f"{kind} {value!r}"


def _real(value: object, expected: str, infinite: str = "must be 0 or more") -> float:
    """A finite TOML number as a float; ValueError naming what was expected otherwise."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"expected {expected}, got {_describe(value)}")
    if not math.isfinite(value):
        raise ValueError(f"{infinite}, got {value!r}")
    return float(value)


def _flag(value: object) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {_describe(value)}")
    return value


def _integer(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"expected an integer, got {_describe(value)}")
    return value


def _knob(knob: Knob, value: object) -> Any:
    """A planner knob's value: of the TOML type its kind reads, then in the kind's range."""
    assert knob.kind is not None  # a knob with a config key has a kind (a unit test checks)
    kind = knob.kind
    if kind.config_type is bool:
        return kind.check(_flag(value))
    if kind.config_type is int:
        return kind.check(_integer(value))
    return kind.check(_real(value, kind.expected))


def _coerce(key: str, value: object) -> Any:
    """``value`` checked and converted for ``key``; raises ValueError saying what is wrong."""
    if key in CONFIG_KNOBS:
        return _knob(CONFIG_KNOBS[key], value)
    if key in ("enforce", "preempt_enabled"):
        return _flag(value)
    if key in _SECONDS:
        number = _real(value, "a number of seconds", "must be a positive number of seconds")
        if number <= 0:
            raise ValueError(f"must be a positive number of seconds, got {value!r}")
        if key == "heartbeat_max_age_s" and number > HEARTBEAT_MAX_AGE_LIMIT_S:
            # until the heartbeat is this old the plugin holds jobs for a daemon that may be dead
            raise ValueError(f"must be at most {HEARTBEAT_MAX_AGE_LIMIT_S:g} s, got {value!r}")
        return number
    if key in _HEALTH_INTS:
        if _integer(value) < _HEALTH_INTS[key]:
            raise ValueError(f"must be {_HEALTH_INTS[key]} or more, got {value}")
        return value
    if key in _HEALTH_XID_LISTS:
        if not isinstance(value, list | tuple) or not all(
            isinstance(x, int) and not isinstance(x, bool) for x in value
        ):
            raise ValueError(f"expected an array of Xid numbers, got {_describe(value)}")
        if any(x <= 0 for x in value):
            raise ValueError(f"Xid numbers are positive, got {list(value)!r}")
        return tuple(sorted(set(value)))
    if key == "health_max_drain_share":
        share = _real(value, "a share from 0 to 1", "must be from 0 to 1")
        if not 0 <= share <= 1:
            raise ValueError(f"must be from 0 to 1, got {value!r}")
        return share
    if key == "metrics_port":
        if not 0 <= _integer(value) <= 65535:
            raise ValueError(f"must be a TCP port from 1 to 65535, or 0 for none, got {value}")
        return value
    if key == "managed_partitions":
        if not isinstance(value, list | tuple) or not all(isinstance(p, str) for p in value):
            raise ValueError(f"expected an array of partition names, got {_describe(value)}")
        if any(not p.strip() for p in value):
            raise ValueError("partition names must not be empty")
        bad = next((p for p in value if _BAD_PARTITION_CHARS.search(p)), None)
        if bad is not None:  # Slurm joins partition lists with commas: "a,b" would be two
            raise ValueError(
                f"partition name {bad!r} contains a comma, '=' or whitespace; "
                "list each partition as its own string"
            )
        return tuple(value)
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {_describe(value)}")
    if key == "backend" and value not in BACKENDS:
        raise ValueError(f"must be one of {', '.join(BACKENDS)}, got {value!r}")
    if key == "log_level" and value.lower() not in LOG_LEVELS:
        raise ValueError(f"must be one of {', '.join(LOG_LEVELS)}, got {value!r}")
    if key == "log_level":
        return value.lower()
    if key == "preempt_signal":
        return check_signal(value)
    if key == "preempt_on_no_ack" and value not in ("keep-running", "requeue-anyway"):
        raise ValueError(f"must be keep-running or requeue-anyway, got {value!r}")
    if key == "daemon_user" and any(c.isspace() or c in ":/" for c in value):
        raise ValueError(f"must be a user name, got {value!r}")
    if key == "rest_url" and value and not value.startswith(("unix:", "http://", "https://")):
        raise ValueError(f"must start with unix:, http:// or https://, got {value!r}")
    if key == "rest_api" and value and value not in REST_API_VERSIONS:
        raise ValueError(f"must be one of {', '.join(REST_API_VERSIONS)} or empty, got {value!r}")
    if key == "rest_token_command":
        try:
            shlex.split(value)
        except ValueError as exc:
            raise ValueError(f"cannot split {value!r} into words: {exc}") from None
    if key in ("db", "heartbeat_path") and not value:
        raise ValueError("must not be empty")
    if key == "heartbeat_path" and not os.path.isabs(value):
        raise ValueError(f"must be an absolute path, got {value!r}")
    if key == "node_name" and re.search(r"[:\s]", value):
        # It starts the lease holder ``node:pid:boot:start``, a one-line field.
        raise ValueError(f"must have no ':' and no white space, got {value!r}")
    return value


_DEFAULTS = Config()


def _unknown_key(where: str, key: str) -> ConfigError:
    close = difflib.get_close_matches(key, config_keys(), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return ConfigError(f"{where}: unknown key {key!r}{hint}")


def slurm_conf_dir(env: Mapping[str, str] | None = None) -> Path:
    """The directory of slurm.conf: ``$SLURM_CONF``'s, else ``/etc/slurm``."""
    env = os.environ if env is None else env
    return Path(env.get("SLURM_CONF") or DEFAULT_SLURM_CONF).parent


@dataclass(frozen=True, slots=True)
class ConfigSearch:
    """Where the search path led: the file found (None: defaults only), how, and what was tried.

    ``tried`` lists ``(how, path)`` in search order, up to and including the
    one found; ``how`` is ``--config``, ``$SLURMOPT_CONFIG``,
    ``beside slurm.conf`` or ``default``.
    """

    found: Path | None
    how: str | None
    tried: tuple[tuple[str, str], ...]


def search_config_file(
    path: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    default_path: str | os.PathLike[str] = DEFAULT_CONFIG_PATH,
) -> ConfigSearch:
    """Follow the search path; a named file (``--config``, ``$SLURMOPT_CONFIG``) must exist."""
    env = os.environ if env is None else env
    explicit: tuple[Path, str] | None = None
    if path is not None:
        explicit = Path(path), "--config"
    elif env.get(CONFIG_ENV):
        explicit = Path(env[CONFIG_ENV]), f"${CONFIG_ENV}"
    if explicit is not None:
        named, how = explicit
        if not named.exists():
            raise ConfigError(f"{named}: no such config file (from {how})")
        return ConfigSearch(named, how, ((how, str(named)),))
    tried: list[tuple[str, str]] = []
    for how, candidate in (
        ("beside slurm.conf", slurm_conf_dir(env) / CONFIG_NAME),
        ("default", Path(default_path)),
    ):
        tried.append((how, str(candidate)))
        if candidate.exists():
            return ConfigSearch(candidate, how, tuple(tried))
    return ConfigSearch(None, None, tuple(tried))


def find_config_file(
    path: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    default_path: str | os.PathLike[str] = DEFAULT_CONFIG_PATH,
) -> Path | None:
    """The file to read, following the search path; None means defaults only."""
    return search_config_file(path, env, default_path).found


def read_config_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The checked values one TOML file sets, by key; ConfigError names the file and key."""
    try:
        with open(path, "rb") as fh:
            raw = tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        m = re.search(r"\(at line (\d+), column \d+\)", message)
        where = f"{path}:{m.group(1)}" if m else str(path)
        raise ConfigError(f"{where}: invalid TOML: {message}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: not UTF-8 text ({exc.reason})") from exc
    except RecursionError:
        raise ConfigError(f"{path}: invalid TOML: nested too deeply") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config file: {exc.strerror or exc}") from exc
    keys = set(config_keys())
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in keys:
            if isinstance(value, dict):
                raise ConfigError(
                    f"{path}: unknown table [{key}]: slurmopt's keys are top-level, not in tables"
                )
            raise _unknown_key(str(path), key)
        try:
            values[key] = _coerce(key, value)
        except ValueError as exc:
            raise ConfigError(f"{path}: key {key!r}: {exc}") from exc
    return values


def _from_env(var: str, key: str, text: str) -> Any:
    value: object = text
    if key == "enforce":
        try:
            value = parse_bool(text, what=f"${var}")
        except BoolWordError as exc:
            raise ConfigError(str(exc)) from None
    elif key in _SECONDS or key in _HEALTH_FLOATS:
        try:
            value = float(text)
        except ValueError:
            what = "a number of seconds" if key in _SECONDS else "a number"
            raise ConfigError(f"${var}: expected {what}, got {text!r}") from None
    elif key in _HEALTH_INTS:
        try:
            value = int(text.strip())
        except ValueError:
            raise ConfigError(f"${var}: expected an integer, got {text!r}") from None
    elif key in _HEALTH_XID_LISTS:
        try:
            value = [int(x) for x in re.split(r"[\s,]+", text.strip()) if x]
        except ValueError:
            raise ConfigError(
                f"${var}: expected comma-separated Xid numbers, got {text!r}"
            ) from None
    try:
        return _coerce(key, value)
    except ValueError as exc:
        raise ConfigError(f"${var} ({key}): {exc}") from exc


def load_config(
    path: str | os.PathLike[str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    default_path: str | os.PathLike[str] = DEFAULT_CONFIG_PATH,
) -> Config:
    """The effective configuration: defaults < file < environment < ``overrides``.

    ``path`` is ``--config``.  ``overrides`` holds the values given on the
    command line; keys whose value is None are ignored, so a click option
    left unset can be passed as is.  ``env`` and ``default_path`` exist for
    tests.
    """
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    found = find_config_file(path, env, default_path)
    if found is not None:
        for key, value in read_config_file(found).items():
            values[key] = value
            sources[key] = f"file:{found}"
    for var, key in ENV_OVERRIDES.items():
        text = env.get(var)
        if not text:  # unset or empty: as if absent
            continue
        values[key] = _from_env(var, key, text)
        sources[key] = f"env:{var}"
    for key, value in (overrides or {}).items():
        if value is None:
            continue
        if key not in config_keys():
            raise _unknown_key("command line", key)
        try:
            values[key] = _coerce(key, value)
        except ValueError as exc:
            raise ConfigError(f"command line: {key}: {exc}") from exc
        sources[key] = "cli"
    return replace(_DEFAULTS, **values, sources=sources)


__all__ = [
    "CONFIG_ENV",
    "CONFIG_NAME",
    "DEFAULT_CONFIG_PATH",
    "DEFAULT_SLURM_CONF",
    "ENV_OVERRIDES",
    "HEALTH_KEYS",
    "Config",
    "ConfigSearch",
    "config_keys",
    "find_config_file",
    "load_config",
    "read_config_file",
    "search_config_file",
    "slurm_conf_dir",
]
