"""``slurmopt explain JOBID``: ids that cannot be Slurm's exit 2; a bad store is one line (74)."""

from __future__ import annotations

import os

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from tests.fuzz.sandbox import Driver, Outcome, assert_clean

#: Bad option, or the store missing or unreadable (StoreError) / the job unknown to it (1).
CODES = {1, 2, 74}


def explain(driver: Driver, job_id: str, db: bytes | None = None) -> Outcome:
    config = driver.file("empty.toml", "")
    path = driver.tmp / "absent.db"
    if db is not None:
        path = driver.file("store.db", db)
    return driver.cli("explain", job_id, "--db", f"sqlite:///{path}", "--config", str(config))


def test_an_id_past_32_bits_is_a_usage_error(driver: Driver) -> None:
    outcome = explain(driver, "99999999999999999999")
    assert_clean(outcome, CODES)
    assert outcome.rc == 2 and "JOBID" in outcome.stderr


@pytest.mark.parametrize("db", [os.urandom(4096), b"SQLite format 3\x00" + b"\xff" * 4080])
def test_a_store_that_is_not_a_database_is_one_line(driver: Driver, db: bytes) -> None:
    outcome = explain(driver, "5", db)
    assert_clean(outcome, CODES)
    assert outcome.rc == 74, outcome.stderr


@given(
    st.one_of(
        st.integers(-(2**70), 2**70).map(str),
        st.text(alphabet="0123456789-+_ x.e", min_size=1, max_size=25),
        st.text(min_size=1, max_size=8),
    )
)
@example("4294967293")
@example("4294967294")
@example("99999999999999999999")
def test_job_id_arguments(driver: Driver, job_id: str) -> None:
    assert_clean(explain(driver, job_id), CODES)
