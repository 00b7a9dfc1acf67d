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


def _forms(d: int, h: int, m: int, s: int) -> list[tuple[str, int]]:
    """Every ``--time`` form with its seconds, from one set of numbers."""
    return [
        (f"{m}", 60 * m),
        (f"{m}:{s}", 60 * m + s),
        (f"{h}:{m}:{s}", 3600 * h + 60 * m + s),
        (f"{d}-{h}", 86400 * d + 3600 * h),
        (f"{d}-{h}:{m}", 86400 * d + 3600 * h + 60 * m),
        (f"{d}-{h}:{m}:{s}", 86400 * d + 3600 * h + 60 * m + s),
    ]


@given(
    numbers=st.tuples(small, small, small, small),
    form=st.integers(0, 5),
    pad=st.integers(0, 3),
    blanks=st.sampled_from(["", " ", "\t", " \n"]),
)
def test_every_form_from_random_numbers(
    numbers: tuple[int, int, int, int], form: int, pad: int, blanks: str
) -> None:
    """Any numbers (not only clock ranges), zero-padded or not, blanks around: exact seconds."""
    text, seconds = _forms(*numbers)[form]
    padded = ":".join(part.zfill(len(part) + pad) for part in text.split(":"))
    assert slurm_duration_s(f"{blanks}{padded}{blanks}") == seconds
    assert slurm_duration_min(padded) == -(-seconds // 60)


@given(word=st.sampled_from(["unlimited", "infinite", "none", "partition_limit"]), data=st.data())
def test_no_limit_words_in_any_case(word: str, data: st.DataObject) -> None:
    flips = data.draw(st.lists(st.booleans(), min_size=len(word), max_size=len(word)))
    text = "".join(c.upper() if up else c for c, up in zip(word, flips, strict=True))
    assert slurm_duration_s(f" {text} ") is None


@given(text=st.text(alphabet="0123456789:- \tx", max_size=14))
def test_junk_of_time_characters_is_the_documented_error(text: str) -> None:
    """Near misses (``1-``, ``1:2:3:4``, ``-5``): ``bad time`` and the text, or a count."""
    try:
        value = slurm_duration_s(text)
    except ValueError as exc:
        assert str(exc) == f"bad time {text.strip()!r}"
    else:
        assert value is None or value >= 0


@pytest.mark.parametrize(
    "text", ["9" * 5000, "1-" + "9" * 5000, "1:" + "9" * 4400], ids=["minutes", "days", "seconds"]
)
def test_a_number_too_long_to_convert_is_a_bad_time_too(text: str) -> None:
    with pytest.raises(ValueError, match=r"^bad time '"):
        slurm_duration_s(text)
