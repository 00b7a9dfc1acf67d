"""NVML readings through FakeNvml: fields, unsupported fields, Xid events, a missing driver."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from slurmopt.health.nvml import (
    NOT_SUPPORTED,
    EccCounts,
    FakeNvml,
    NvLink,
    NvmlReader,
    NvmlUnavailable,
    PcieLink,
    PowerSampler,
    RemappedRows,
    RetiredPages,
    init_nvml,
    read_node,
    read_topology,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "nvml"


def fixture(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return data


def fake(name: str, **changes: Any) -> FakeNvml:
    description = copy.deepcopy(fixture(name))
    description.update(changes)
    return FakeNvml(description)


def test_healthy_h100_node_reads_every_field() -> None:
    reading = read_node("gpu001", fake("h100_healthy"))
    assert reading.node == "gpu001"
    assert reading.driver_version == "550.90.07"
    assert len(reading.gpus) == 8
    assert reading.errors == ()
    gpu = reading.gpus[0]
    assert gpu.index == 0
    assert gpu.name == "NVIDIA H100 80GB HBM3"
    assert gpu.uuid.startswith("GPU-")
    assert gpu.pci_bus_id == "00000000:18:00.0"
    assert (gpu.gpu_util_pct, gpu.memory_util_pct) == (0, 0)
    assert (gpu.memory_used_bytes, gpu.memory_total_bytes) == (553648128, 85520809984)
    assert gpu.power_draw_w == pytest.approx(71.234)
    assert gpu.power_limit_w == pytest.approx(700.0)
    assert gpu.temperature_c == 31
    assert gpu.ecc == EccCounts(0, 0, 2, 0)
    assert gpu.remapped_rows == RemappedRows(0, 0, pending=False, failure=False)
    assert gpu.pcie == PcieLink(5, 5, 16, 16)
    assert gpu.nvlinks is not None and len(gpu.nvlinks) == 18
    assert all(link.active and link.error_total == 0 for link in gpu.nvlinks)
    assert gpu.xids == ()
    assert not gpu.lost
    # H100 has row remapping, not page retirement: recorded as unsupported, not an error.
    assert gpu.retired_pages is None
    assert dict(gpu.unavailable) == {"retired_pages": NOT_SUPPORTED}
    assert len({g.uuid for g in reading.gpus}) == 8


def test_double_bit_ecc_fixture() -> None:
    gpu = read_node("n", fake("h100_ecc_dbe")).gpus[3]
    assert gpu.ecc == EccCounts(14, 2, 40, 2)
    assert gpu.remapped_rows == RemappedRows(0, 2, pending=True, failure=False)


def test_xid79_gpu_is_lost_and_its_xid_is_kept() -> None:
    reading = read_node("n", fake("h100_xid79"))
    lost = reading.gpus[5]
    assert lost.lost
    assert lost.xids == (79,)
    assert lost.temperature_c is None and lost.ecc is None
    assert "GPU is lost" in lost.unavailable.values()
    assert not reading.gpus[4].lost


def test_nvlink_down_and_error_counters() -> None:
    links = read_node("n", fake("h100_nvlink_down")).gpus[2].nvlinks
    assert links is not None
    assert [lk.link for lk in links if not lk.active] == [4, 11]
    assert links[4] == NvLink(4, False, replay_errors=120, recovery_errors=7,
                              crc_flit_errors=0, crc_data_errors=0)  # fmt: skip


def test_pcie_width_fixture() -> None:
    gpu = read_node("n", fake("h100_pcie_x8")).gpus[6]
    assert gpu.pcie == PcieLink(5, 5, 8, 16)


def test_v100_retired_pages_pending_and_no_row_remapping() -> None:
    gpu = read_node("n", fake("v100_retired_pages_pending")).gpus[1]
    assert gpu.retired_pages == RetiredPages(single_bit=3, double_bit=1, pending=True)
    assert gpu.remapped_rows is None
    assert gpu.unavailable["remapped_rows"] == NOT_SUPPORTED
    assert gpu.nvlinks is not None and len(gpu.nvlinks) == 6


def test_unsupported_and_failing_fields_are_none_with_reasons() -> None:
    description = copy.deepcopy(fixture("h100_healthy"))
    description["defaults"].update(
        ecc="NOT_SUPPORTED",
        nvlink="NOT_SUPPORTED",
        pcie="NOT_SUPPORTED",
        temperature_c="NO_PERMISSION",
        power_usage_mw="UNKNOWN",
        xid_events="NOT_SUPPORTED",
    )
    gpu = read_node("n", FakeNvml(description)).gpus[0]
    assert gpu.ecc is None and gpu.nvlinks is None and gpu.pcie is None
    assert gpu.temperature_c is None and gpu.power_draw_w is None
    assert gpu.xids is None
    assert gpu.unavailable["ecc"] == NOT_SUPPORTED
    assert gpu.unavailable["nvlinks"] == NOT_SUPPORTED
    assert gpu.unavailable["pcie"] == NOT_SUPPORTED
    assert gpu.unavailable["xids"] == NOT_SUPPORTED
    assert gpu.unavailable["temperature_c"] == "Insufficient Permissions"
    assert gpu.unavailable["power_draw_w"] == "Unknown Error"
    assert gpu.power_limit_w == pytest.approx(700.0)  # the rest is still read


def test_some_ecc_counters_unsupported_keeps_the_others() -> None:
    description = copy.deepcopy(fixture("h100_healthy"))
    description["defaults"]["ecc"] = {
        "volatile": {"corrected": 1, "uncorrected": 0},
        "aggregate": "NOT_SUPPORTED",
    }
    gpu = read_node("n", FakeNvml(description)).gpus[0]
    assert gpu.ecc == EccCounts(1, 0, None, None)
    assert gpu.unavailable["ecc.aggregate_corrected"] == NOT_SUPPORTED


def test_xid_events_accumulate_across_reads_until_forgotten() -> None:
    nvml = fake("h100_healthy")
    with NvmlReader(nvml, xid_wait_ms=0) as reader:
        assert reader.read("n").gpus[2].xids == ()
        nvml.inject_xid(2, 74)
        nvml.inject_xid(2, 74)
        nvml.inject_xid(6, 94)
        first = reader.read("n")
        assert first.gpus[2].xids == (74,)
        assert first.gpus[6].xids == (94,)
        nvml.inject_xid(2, 79)
        assert reader.read("n").gpus[2].xids == (74, 79)
        reader.forget_xids()
        assert reader.read("n").gpus[2].xids == ()


def test_reader_shuts_nvml_down_once() -> None:
    nvml = fake("h100_healthy")
    reader = NvmlReader(nvml)
    with reader:
        reader.read("n")
    reader.close()
    assert nvml.shutdowns == 1 and not nvml.initialised


def test_readings_serialise_to_json() -> None:
    reading = read_node("n", fake("h100_xid79"))
    doc = json.loads(json.dumps(reading.as_dict()))
    assert doc["gpus"][5]["lost"] is True
    assert doc["gpus"][5]["xids"] == [79]
    assert doc["gpus"][0]["nvlinks"][0]["active"] is True
    assert doc["gpus"][0]["unavailable"] == {"retired_pages": "not supported"}


@pytest.mark.parametrize(
    ("error", "words"),
    [
        ("LIBRARY_NOT_FOUND", ["NVML Shared Library Not Found", "NVIDIA driver installed"]),
        ("DRIVER_NOT_LOADED", ["Driver Not Loaded", "kernel module"]),
        ("NO_PERMISSION", ["Insufficient Permissions", "/dev/nvidia"]),
    ],
)
def test_no_driver_is_one_line_naming_nvml_and_the_cause(error: str, words: list[str]) -> None:
    with pytest.raises(NvmlUnavailable) as info:
        read_node("n", fake("h100_healthy", init_error=error))
    message = str(info.value)
    assert message.startswith("NVML unavailable: ")
    assert "\n" not in message
    for word in words:
        assert word in message
    assert info.value.exit_code == 69


def test_missing_pynvml_is_an_nvml_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    with pytest.raises(NvmlUnavailable, match=r"^NVML unavailable: cannot import pynvml"):
        NvmlReader().open()


def test_importing_the_health_package_does_not_import_pynvml() -> None:
    import subprocess

    code = "import sys, slurmopt.health, slurmopt.cli; print('pynvml' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ---------------------------------------------------------------------- topology and power


def _topology_fake(count: int, pcie: list[list[str]] | None, **gpus: Any) -> FakeNvml:
    description: dict[str, Any] = {"gpu_count": count, "defaults": {}, "gpus": gpus}
    if pcie is not None:
        description["topology"] = pcie
    return FakeNvml(description)


def test_nvswitch_node_is_nv18_between_every_pair() -> None:
    description = copy.deepcopy(fixture("h100_healthy"))
    description["defaults"]["nvlink"]["remote_default"] = "switch"
    nvml = init_nvml(FakeNvml(description))
    topology = read_topology(nvml)
    assert topology.gpus == tuple(f"GPU{i}" for i in range(8))
    for i, row in enumerate(topology.matrix):
        assert row[i] == "X"
        assert [c for j, c in enumerate(row) if j != i] == ["NV18"] * 7
    assert dict(topology.unavailable) == {}


def test_direct_nvlinks_are_counted_per_peer_and_pcie_levels_fill_the_rest() -> None:
    pcie = [
        ["X", "PIX", "NODE", "SYS"],
        ["PIX", "X", "NODE", "SYS"],
        ["NODE", "NODE", "X", "PXB"],
        ["SYS", "SYS", "PXB", "X"],
    ]
    nvml = _topology_fake(
        4,
        pcie,
        **{
            # GPUs 0 and 1 share 3 links, one of which is down; 2 and 3 share 1.
            "0": {"nvlink": {"links": 3, "inactive": [2], "remote": {"0": 1, "1": 1, "2": 1}}},
            "1": {"nvlink": {"links": 3, "inactive": [2], "remote": {"0": 0, "1": 0, "2": 0}}},
            "2": {"nvlink": {"links": 1, "remote": {"0": 3}}},
            "3": {"nvlink": {"links": 1, "remote": {"0": 2}}},
        },
    )
    topology = read_topology(init_nvml(nvml))
    assert topology.matrix == (
        ("X", "NV2", "NODE", "SYS"),
        ("NV2", "X", "NODE", "SYS"),
        ("NODE", "NODE", "X", "NV1"),
        ("SYS", "SYS", "NV1", "X"),
    )
    lines = topology.lines()
    assert lines[0].split() == ["GPU0", "GPU1", "GPU2", "GPU3"]
    assert lines[1].split() == ["GPU0", "X", "NV2", "NODE", "SYS"]
    assert json.loads(json.dumps(topology.as_dict()))["matrix"][2][3] == "NV1"


def test_topology_without_nvlink_or_pcie_answers_is_na_with_the_reason() -> None:
    topology = read_topology(init_nvml(_topology_fake(2, None)))
    assert topology.matrix == (("X", "N/A"), ("N/A", "X"))
    assert topology.unavailable["pcie"] == "Not Supported"


def test_power_sampler_reports_peak_and_mean_against_the_limit() -> None:
    nvml = fake("h100_healthy", gpu_count=2)
    nvml.gpus[1]["power_usage_mw"] = "NOT_SUPPORTED"
    init_nvml(nvml)
    sampler = PowerSampler(nvml, interval_s=3600)  # the thread never fires: samples are explicit
    sampler.start()  # first sample: 71.234 W
    nvml.gpus[0]["power_usage_mw"] = 650000
    sampler.sample()
    nvml.gpus[0]["power_usage_mw"] = 550000
    draws = sampler.stop()  # last sample
    first, second = draws
    assert (first.index, first.samples) == (0, 3)
    assert first.peak_w == pytest.approx(650.0)
    assert first.mean_w == pytest.approx((71.234 + 650.0 + 550.0) / 3)
    assert first.limit_w == pytest.approx(700.0)
    assert first.peak_share == pytest.approx(650.0 / 700.0)
    assert first.unavailable == ""
    assert second.samples == 0 and second.peak_w is None and second.peak_share is None
    assert second.unavailable == "power draw: Not Supported"
    assert second.limit_w == pytest.approx(700.0)
    assert json.loads(json.dumps(first.as_dict()))["peak_share"] == pytest.approx(650 / 700)


def test_init_nvml_without_a_driver_is_nvml_unavailable() -> None:
    with pytest.raises(NvmlUnavailable, match=r"^NVML unavailable: nvmlInit failed: Driver Not"):
        init_nvml(fake("h100_healthy", init_error="DRIVER_NOT_LOADED"))
