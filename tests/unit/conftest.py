"""Fixtures the unit tests share."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from slurmopt.store import Store


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """A fresh SQLite store in the test's own directory, closed afterwards."""
    opened = Store.open(f"sqlite:///{tmp_path / 'slurmopt.db'}")
    yield opened
    opened.close()
