"""Fuzz suite set-up: one fork server per session, and hypothesis profiles.

``fuzz`` (the default) keeps the suite within two minutes on two cores;
``ci`` is the same, derandomized, so a CI run is reproducible (chosen when
``$CI`` is set); ``HYPOTHESIS_PROFILE`` picks one by name.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from tests.fuzz.sandbox import Driver

_COMMON: dict[str, Any] = {
    "max_examples": 200,
    "deadline": None,
    "database": None,  # nothing written into the checkout
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
}
settings.register_profile("fuzz", **_COMMON)
settings.register_profile("ci", derandomize=True, **_COMMON)
settings.load_profile(
    os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "fuzz")
)


@pytest.fixture(scope="session")
def driver() -> Iterator[Driver]:
    server = Driver()
    yield server
    server.close()
