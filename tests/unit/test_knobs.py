"""The knob table: every Policy field has a row, and every key in it works where it is read.

Generated from ``KNOBS``, so a new knob is tested here as soon as it has a row.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from slurmopt.config import Config, load_config
from slurmopt.daemon.loop import Daemon
from slurmopt.errors import ConfigError
from slurmopt.policy.knobs import CONFIG_KNOBS, KNOBS, VARIANT_KNOBS, Knob, Policy, lever_variants
from slurmopt.sim.schedulers import SIM_POLICY, VARIANT_KEYS, parse_variant

DEFAULT = Policy()


def _toml(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else repr(value)


def _cases(table: Mapping[str, Knob], null: bool = True) -> list[tuple[str, Any]]:
    """Each key with each example value of its kind; ``null`` False: none that is None.

    A TOML file has no null, so config keys are tried without None.
    """
    return [
        (key, value)
        for key, knob in table.items()
        if knob.kind is not None
        for value in knob.kind.examples
        if null or value is not None
    ]


def _only_changed(policy: Policy, field: str, value: Any, base: Policy = DEFAULT) -> None:
    assert getattr(policy, field) == value
    assert type(getattr(policy, field)) is type(value)
    for other in fields(Policy):
        if other.name != field:
            assert getattr(policy, other.name) == getattr(base, other.name), other.name


def test_every_policy_field_has_one_row_in_field_order() -> None:
    assert [k.field for k in KNOBS] == [f.name for f in fields(Policy)]
    for knob in KNOBS:
        assert knob.help and "\n" not in knob.help
        if knob.kind is None:  # set only in code, e.g. job_sizes
            assert knob.config_key is None and knob.variant_key is None


def test_the_code_only_fields_are_the_ones_no_key_sets() -> None:
    assert {k.field for k in KNOBS if k.kind is None} == {"partitions", "job_sizes"}


def test_a_key_without_a_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="needs a kind"):
        Knob("x", "help", variant_key="x")


def test_config_defaults_make_the_default_policy() -> None:
    assert Daemon.policy_for(Config()) == DEFAULT


@pytest.mark.parametrize(("key", "value"), _cases(CONFIG_KNOBS, null=False))
def test_a_config_key_sets_its_field_in_the_daemons_policy(
    tmp_path: Path, key: str, value: Any
) -> None:
    path = tmp_path / "slurmopt.toml"
    path.write_text(f"{key} = {_toml(value)}\n")
    policy = Daemon.policy_for(load_config(path, env={}))
    _only_changed(policy, CONFIG_KNOBS[key].field, value)


@pytest.mark.parametrize("key", sorted(CONFIG_KNOBS))
def test_a_config_value_of_the_wrong_type_names_key_and_value(tmp_path: Path, key: str) -> None:
    path = tmp_path / "slurmopt.toml"
    path.write_text(f'{key} = "bogus"\n')
    with pytest.raises(ConfigError, match=f"{key}.*'bogus'") as info:
        load_config(path, env={})
    assert info.value.exit_code == 78


@pytest.mark.parametrize(("key", "value"), _cases(VARIANT_KNOBS))
def test_a_variant_key_round_trips_through_parse_variant(key: str, value: Any) -> None:
    knob = VARIANT_KNOBS[key]
    assert knob.kind is not None
    policy, runtime, preempt = parse_variant(f"slurmopt:{key}={knob.kind.text(value)}")
    assert (runtime, preempt) == ("limit", True)
    _only_changed(policy, knob.field, value, SIM_POLICY)


@pytest.mark.parametrize("key", VARIANT_KEYS)
def test_a_bad_variant_value_names_key_and_value(key: str) -> None:
    with pytest.raises(ValueError, match=f"{key} must .*'bogus'"):
        parse_variant(f"slurmopt:{key}=bogus")


def test_every_variant_key_is_a_knob_and_every_lever_parses() -> None:
    assert set(VARIANT_KEYS) == set(VARIANT_KNOBS)
    for name, what in lever_variants():
        assert what
        assert parse_variant(name)[0] != SIM_POLICY
