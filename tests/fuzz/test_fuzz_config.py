"""Config TOML through ``config show``: one line and exit 78, or the config as strict JSON."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurmopt.config import config_keys
from tests.fuzz.sandbox import Driver, Outcome, assert_clean
from tests.fuzz.strategies import toml_values

CODES = {78}


def show(driver: Driver, text: str) -> Outcome:
    path = driver.file("slurmopt.toml", text)
    return driver.cli("config", "show", "--config", str(path), "--json")


#: Inputs that passed the check and broke later, or gave a traceback; each is now exit 78.
KNOWN = [
    'managed_partitions = ["a,b"]\n',
    'managed_partitions = ["gpu long"]\n',
    "heartbeat_max_age_s = 1e9\n",
    "heartbeat_max_age_s = nan\n",
    "a = " + "[" * 100_000 + "]" * 100_000 + "\n",
]


@pytest.mark.parametrize("text", KNOWN, ids=range(len(KNOWN)))
def test_known_bad_configs(driver: Driver, text: str) -> None:
    outcome = show(driver, text)
    assert_clean(outcome, CODES, json_out=True)
    assert outcome.rc == 78, outcome.stderr


@given(
    st.lists(
        st.builds(
            lambda key, value: f"{key} = {value}",
            st.one_of(st.sampled_from(config_keys()), st.sampled_from(["[t]", "x", "a.b"])),
            toml_values,
        ),
        max_size=4,
        unique_by=lambda line: line.split(" = ")[0],
    )
)
def test_config_toml(driver: Driver, lines: list[str]) -> None:
    assert_clean(show(driver, "\n".join(lines) + "\n"), CODES, json_out=True)
