"""Health rules: fixture verdicts, the Xid table, thresholds and their loading."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from slurmopt.errors import ConfigError
from slurmopt.health.nvml import (
    EccCounts,
    FakeNvml,
    GpuReading,
    NodeReading,
    NvLink,
    PcieLink,
    RemappedRows,
    RetiredPages,
    read_node,
)
from slurmopt.health.rules import (
    HealthThresholds,
    Reason,
    Severity,
    judge_gpu,
    judge_node,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "nvml"


def fixture_reading(name: str) -> NodeReading:
    description: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return read_node("gpu001", FakeNvml(description))


def healthy_gpu(**changes: Any) -> GpuReading:
    base = GpuReading(
        index=0,
        name="NVIDIA H100 80GB HBM3",
        uuid="GPU-0",
        temperature_c=40,
        ecc=EccCounts(0, 0, 0, 0),
        remapped_rows=RemappedRows(0, 0, False, False),
        xids=(),
        nvlinks=tuple(NvLink(i, True, 0, 0, 0, 0) for i in range(18)),
        pcie=PcieLink(5, 5, 16, 16),
    )
    return replace(base, **changes)


@pytest.mark.parametrize(
    ("name", "severity", "tags"),
    [
        ("h100_healthy", Severity.HEALTHY, []),
        ("h100_ecc_dbe", Severity.DRAIN, ["gpu3:ecc-uncorrected", "gpu3:row-remap-pending"]),
        ("h100_xid79", Severity.DRAIN, ["gpu5:gpu-lost", "gpu5:xid79"]),
        ("h100_nvlink_down", Severity.DRAIN, ["gpu2:nvlink-down"]),
        ("h100_pcie_x8", Severity.DEGRADED, ["gpu6:pcie-width"]),
        ("v100_retired_pages_pending", Severity.DRAIN, ["gpu1:retired-pages-pending"]),
    ],
)
def test_fixture_verdicts(name: str, severity: Severity, tags: list[str]) -> None:
    verdict = judge_node(fixture_reading(name))
    assert verdict.severity is severity
    assert [f.tag for f in verdict.findings] == tags
    if tags:
        assert verdict.slurm_reason() == "slurmopt: " + ", ".join(tags)
    healthy = [g.index for g in verdict.gpus if g.severity is Severity.HEALTHY]
    assert len(healthy) == (8 if severity is Severity.HEALTHY else 7)


@pytest.mark.parametrize(
    ("xid", "severity"),
    [
        (48, Severity.DRAIN),  # double-bit ECC
        (63, Severity.DEGRADED),  # row remap recorded
        (64, Severity.DRAIN),  # row remap failed
        (74, Severity.DRAIN),  # NVLink
        (79, Severity.DRAIN),  # fell off the bus
        (92, Severity.DEGRADED),  # high single-bit rate
        (94, Severity.DEGRADED),  # contained ECC
        (95, Severity.DRAIN),  # uncontained ECC
        (13, Severity.HEALTHY),  # graphics engine exception: the application's fault
        (31, Severity.HEALTHY),  # MMU fault: usually the application
    ],
)
def test_xid_table(xid: int, severity: Severity) -> None:
    verdict = judge_gpu(healthy_gpu(xids=(xid,)), HealthThresholds())
    assert verdict.severity is severity
    if severity is not Severity.HEALTHY:
        (finding,) = verdict.findings
        assert finding.reason is Reason.XID and finding.code == xid
        assert finding.tag == f"gpu0:xid{xid}"


def test_xid_table_is_configurable() -> None:
    t = HealthThresholds(xid_drain=frozenset({13}), xid_degraded=frozenset())
    assert judge_gpu(healthy_gpu(xids=(13,)), t).severity is Severity.DRAIN
    assert judge_gpu(healthy_gpu(xids=(79,)), t).severity is Severity.HEALTHY
    with pytest.raises(ConfigError, match="Xid 79 is in both"):
        HealthThresholds(xid_degraded=frozenset({79}))


def test_ecc_rules() -> None:
    t = HealthThresholds()
    assert judge_gpu(healthy_gpu(ecc=EccCounts(500, 0, 900, 3)), t).severity is Severity.HEALTHY
    dbe = judge_gpu(healthy_gpu(ecc=EccCounts(0, 1, 0, 1)), t)
    assert dbe.severity is Severity.DRAIN and dbe.findings[0].reason is Reason.ECC_UNCORRECTED
    noisy = HealthThresholds(volatile_corrected_degraded=100)
    sbe = judge_gpu(healthy_gpu(ecc=EccCounts(100, 0, 100, 0)), noisy)
    assert sbe.severity is Severity.DEGRADED and sbe.findings[0].reason is Reason.ECC_CORRECTED
    assert judge_gpu(healthy_gpu(ecc=None), t).severity is Severity.HEALTHY


def test_page_retirement_and_row_remapping_rules() -> None:
    t = HealthThresholds()
    many = judge_gpu(healthy_gpu(retired_pages=RetiredPages(58, 2, False)), t)
    assert many.severity is Severity.DEGRADED and many.findings[0].reason is Reason.RETIRED_PAGES
    few = judge_gpu(healthy_gpu(retired_pages=RetiredPages(58, 1, False)), t)
    assert few.severity is Severity.HEALTHY
    failed = judge_gpu(healthy_gpu(remapped_rows=RemappedRows(0, 5, False, True)), t)
    assert [f.reason for f in failed.findings] == [Reason.ROW_REMAP_FAILURE]
    assert failed.severity is Severity.DRAIN


def test_nvlink_rules() -> None:
    links = tuple(NvLink(i, i not in (3,), 0, 0, 0, 0) for i in range(18))
    t = HealthThresholds()
    down = judge_gpu(healthy_gpu(nvlinks=links), t)
    assert down.severity is Severity.DRAIN
    assert down.findings[0].detail == "NVLink 3 down (17/18 active)"
    tolerant = HealthThresholds(nvlink_min_active=17)
    assert judge_gpu(healthy_gpu(nvlinks=links), tolerant).severity is Severity.HEALTHY
    noisy = tuple(NvLink(i, True, 10, 1, 0, 0) for i in range(18))
    counted = judge_gpu(healthy_gpu(nvlinks=noisy), HealthThresholds(nvlink_errors_degraded=100))
    assert counted.severity is Severity.DEGRADED
    assert judge_gpu(healthy_gpu(nvlinks=noisy), t).severity is Severity.HEALTHY


def test_pcie_cards_without_active_nvlinks_are_not_drained_for_links() -> None:
    no_bridge = tuple(NvLink(i, False) for i in range(18))
    gpus = tuple(replace(healthy_gpu(nvlinks=no_bridge), index=i) for i in range(4))
    assert judge_node(NodeReading("n", gpus)).severity is Severity.HEALTHY
    # ...but one GPU whose links all died among GPUs with links up is drained.
    mixed = (*gpus[:3], healthy_gpu(index=3))
    verdict = judge_node(NodeReading("n", mixed))
    assert verdict.severity is Severity.DRAIN
    assert {f.gpu for f in verdict.findings} == {0, 1, 2}


def test_pcie_width_and_temperature_thresholds() -> None:
    narrow = healthy_gpu(pcie=PcieLink(1, 5, 8, 16))
    assert judge_gpu(narrow, HealthThresholds()).severity is Severity.DEGRADED
    assert judge_gpu(narrow, HealthThresholds(pcie_min_width=8)).severity is Severity.HEALTHY
    # PCIe generation drops at idle to save power; it is not a rule.
    idle = healthy_gpu(pcie=PcieLink(1, 5, 16, 16))
    assert judge_gpu(idle, HealthThresholds()).severity is Severity.HEALTHY
    hot = healthy_gpu(temperature_c=86)
    assert judge_gpu(hot, HealthThresholds()).severity is Severity.DEGRADED
    assert judge_gpu(hot, HealthThresholds(max_temperature_c=90)).severity is Severity.HEALTHY


def test_lost_gpu_and_missing_gpu() -> None:
    lost = judge_gpu(GpuReading(index=2, lost=True), HealthThresholds())
    assert lost.severity is Severity.DRAIN and lost.findings[0].reason is Reason.GPU_LOST
    seven = NodeReading("n", tuple(replace(healthy_gpu(), index=i) for i in range(7)))
    assert judge_node(seven).severity is Severity.HEALTHY
    verdict = judge_node(seven, HealthThresholds(expected_gpus=8))
    assert verdict.severity is Severity.DRAIN
    assert verdict.slurm_reason() == "slurmopt: gpu-missing"
    assert verdict.findings[0].detail == "NVML sees 7 GPUs, expected 8"


def test_xid_from_a_gpu_nvml_cannot_name_is_judged_at_node_level() -> None:
    reading = NodeReading("n", (healthy_gpu(),), unattributed_xids=(79,))
    verdict = judge_node(reading)
    assert verdict.severity is Severity.DRAIN
    assert verdict.slurm_reason() == "slurmopt: xid79"


def test_slurm_reason_lists_only_findings_at_the_node_severity_and_is_bounded() -> None:
    gpus = tuple(
        replace(healthy_gpu(ecc=EccCounts(0, 1, 0, 1), temperature_c=99), index=i) for i in range(8)
    )
    verdict = judge_node(NodeReading("n", gpus))
    reason = verdict.slurm_reason(max_len=60)
    assert reason.startswith("slurmopt: gpu0:ecc-uncorrected, gpu1:ecc-uncorrected")
    assert "temperature" not in reason
    assert len(reason) <= 60 and reason.endswith("...")


def test_thresholds_from_mapping_and_config() -> None:
    t = HealthThresholds.from_mapping(
        {"health_max_temperature_c": 90, "health_xid_drain": [79], "other": 1},
        prefix="health_",
    )
    assert t.max_temperature_c == 90 and t.xid_drain == frozenset({79})
    assert t.xid_degraded == HealthThresholds().xid_degraded

    class ConfigWithHealthKeys:
        health_pcie_min_width = 8
        health_expected_gpus = 8
        enforce = False

    c = HealthThresholds.from_config(ConfigWithHealthKeys())
    assert (c.pcie_min_width, c.expected_gpus) == (8, 8)
    assert HealthThresholds.from_config(object()) == HealthThresholds()


def test_config_keys_become_thresholds_with_zero_for_none(tmp_path: Path) -> None:
    from slurmopt.config import Config, load_config

    assert HealthThresholds.from_config(Config()) == HealthThresholds()
    path = tmp_path / "slurmopt.toml"
    path.write_text(
        "health_max_temperature_c = 35\nhealth_pcie_min_width = 8\nhealth_expected_gpus = 0\n"
        "health_xid_drain = [13, 79]\nhealth_xid_degraded = []\n"
        "health_nvlink_errors_degraded = 0\nhealth_nvlink_min_active = 0\n"
    )
    t = HealthThresholds.from_config(load_config(path, env={}))
    assert (t.max_temperature_c, t.pcie_min_width, t.expected_gpus) == (35, 8, None)
    assert (t.nvlink_errors_degraded, t.nvlink_min_active) == (None, None)
    assert t.xid_drain == frozenset({13, 79}) and t.xid_degraded == frozenset()
    # The config changes verdicts: 40 C is now too hot, x8 is wide enough, Xid 13 drains.
    assert judge_gpu(healthy_gpu(), t).severity is Severity.DEGRADED
    assert judge_gpu(healthy_gpu(), HealthThresholds()).severity is Severity.HEALTHY
    narrow = healthy_gpu(temperature_c=30, pcie=PcieLink(5, 5, 8, 16))
    assert judge_gpu(narrow, t).severity is Severity.HEALTHY
    assert judge_gpu(healthy_gpu(xids=(13,)), t).severity is Severity.DRAIN
    assert judge_gpu(healthy_gpu(xids=(13,)), HealthThresholds()).severity is Severity.HEALTHY


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"max_temperature_c": "hot"}, "max_temperature_c: expected a number"),
        ({"max_temperature_c": None}, "max_temperature_c: expected a number"),
        ({"pcie_min_width": 0}, "pcie_min_width: must not be 0"),
        ({"xid_drain": "79"}, "xid_drain: expected a list of Xid numbers"),
        ({"xid_drain": [79, -1]}, "xid_drain: expected positive Xid numbers"),
        ({"retired_pages_degraded": 1.5}, "expected a whole number"),
    ],
)
def test_bad_thresholds_are_config_errors(values: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        HealthThresholds(**values)
