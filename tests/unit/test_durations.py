"""The one Slurm time parser, against every form ``sbatch --time`` documents."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurmopt.durations import slurm_duration_min, slurm_duration_s

small = st.integers(min_value=0, max_value=10_000)
clock = st.integers(min_value=0, max_value=59)


@given(minutes=small)
def test_minutes(minutes: int) -> None:
    assert slurm_duration_s(str(minutes)) == 60 * minutes


@given(minutes=small, seconds=clock)
def test_minutes_seconds(minutes: int, seconds: int) -> None:
    assert slurm_duration_s(f"{minutes}:{seconds:02d}") == 60 * minutes + seconds


@given(hours=small, minutes=clock, seconds=clock)
def test_hours_minutes_seconds(hours: int, minutes: int, seconds: int) -> None:
    text = f"{hours}:{minutes:02d}:{seconds:02d}"
    assert slurm_duration_s(text) == 3600 * hours + 60 * minutes + seconds


@given(days=small, hours=st.integers(0, 23), minutes=clock, seconds=clock, form=st.integers(0, 2))
def test_days_forms(days: int, hours: int, minutes: int, seconds: int, form: int) -> None:
    text = [f"{days}-{hours}", f"{days}-{hours}:{minutes}", f"{days}-{hours}:{minutes}:{seconds}"]
    expected = [
        86400 * days + 3600 * hours,
        86400 * days + 3600 * hours + 60 * minutes,
        86400 * days + 3600 * hours + 60 * minutes + seconds,
    ]
    assert slurm_duration_s(text[form]) == expected[form]


@pytest.mark.parametrize("text", ["UNLIMITED", "infinite", "", " ", "NONE", "Partition_Limit"])
def test_no_limit(text: str) -> None:
    assert slurm_duration_s(text) is None and slurm_duration_min(text) is None


def test_a_part_minute_counts_whole() -> None:
    assert slurm_duration_min("1:01") == 2 and slurm_duration_min("2:00") == 2


@given(text=st.text(max_size=20))
def test_anything_else_is_a_value_error_or_a_count(text: str) -> None:
    try:
        value = slurm_duration_s(text)
    except ValueError as exc:
        assert "bad time" in str(exc)
    else:
        assert value is None or value >= 0
