"""The real NVML on a GPU host (marked ``gpu``; skipped, with the reason, where NVML is absent)."""

from __future__ import annotations

import json

import pytest

from slurmopt.health.nvml import NvmlReader, NvmlUnavailable
from slurmopt.health.rules import Severity, judge_node

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def reader() -> NvmlReader:
    candidate = NvmlReader(xid_wait_ms=50)
    try:
        candidate.open()
    except NvmlUnavailable as exc:
        pytest.skip(f"needs an NVIDIA GPU and driver: {exc}")
    return candidate


def test_real_readings_are_complete_and_judged(reader: NvmlReader) -> None:
    try:
        reading = reader.read("this-node")
    finally:
        reader.close()
    assert reading.driver_version
    assert reading.gpus, "NVML initialised but reports no GPU"
    for gpu in reading.gpus:
        assert not gpu.lost
        assert gpu.name and gpu.uuid.startswith(("GPU-", "MIG-"))
        assert gpu.pci_bus_id
        assert gpu.memory_total_bytes and gpu.memory_total_bytes > 0
        assert gpu.temperature_c is not None and 0 < gpu.temperature_c < 120
        # Every field is either read or explained.
        for name in ("ecc", "pcie", "nvlinks", "xids"):
            assert getattr(gpu, name) is not None or name in gpu.unavailable, name
        if gpu.pcie is not None and gpu.pcie.max_width is not None:
            assert gpu.pcie.max_width in (1, 2, 4, 8, 16, 32)
    json.dumps(reading.as_dict())
    verdict = judge_node(reading)
    assert verdict.severity in set(Severity)
