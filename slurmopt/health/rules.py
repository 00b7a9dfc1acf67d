"""GPU health rules: NVML readings and thresholds in, a verdict per GPU and per node out.

Pure: no NVML, no Slurm, no clock.  A verdict is ``healthy``, ``degraded``
(report, keep scheduling) or ``drain`` (take the node out of service), with
every finding that led to it.  The table of rules and Xid codes is in
``docs/health.md``; the numbers are :class:`HealthThresholds`, which the
node agent builds from the config's ``health_*`` keys.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from enum import StrEnum
from typing import Any

from slurmopt.errors import ConfigError
from slurmopt.health.nvml import GpuReading, NodeReading, plain


class Severity(StrEnum):
    """How bad a finding is; the node takes its worst finding's severity."""

    HEALTHY = "healthy"
    DEGRADED = "degraded"
    DRAIN = "drain"

    @property
    def rank(self) -> int:
        return _RANK[self]


_RANK = {Severity.HEALTHY: 0, Severity.DEGRADED: 1, Severity.DRAIN: 2}


class Reason(StrEnum):
    """Why a GPU or node is not healthy (the names appear in Slurm's drain reason)."""

    ECC_UNCORRECTED = "ecc-uncorrected"
    ECC_CORRECTED = "ecc-corrected"
    RETIRED_PAGES_PENDING = "retired-pages-pending"
    RETIRED_PAGES = "retired-pages"
    ROW_REMAP_PENDING = "row-remap-pending"
    ROW_REMAP_FAILURE = "row-remap-failure"
    XID = "xid"
    NVLINK_DOWN = "nvlink-down"
    NVLINK_ERRORS = "nvlink-errors"
    PCIE_WIDTH = "pcie-width"
    TEMPERATURE = "temperature"
    GPU_LOST = "gpu-lost"
    GPU_MISSING = "gpu-missing"


#: What each Xid in the default tables means (NVIDIA's Xid catalogue).
XID_MEANINGS: Mapping[int, str] = {
    48: "double-bit ECC error",
    63: "ECC page retirement or row remapping recorded",
    64: "ECC page retirement or row remapping failed",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
}


#: Optional thresholds (None: off, or the device's own figure) that a config writes as 0.
ZERO_IS_NONE = frozenset(
    {
        "pcie_min_width",
        "nvlink_min_active",
        "volatile_corrected_degraded",
        "nvlink_errors_degraded",
        "expected_gpus",
    }
)


@dataclass(frozen=True)
class HealthThresholds:
    """The numbers the rules compare readings with; every one has a default.

    ``pcie_min_width`` None: the device's own maximum width.
    ``nvlink_min_active`` None: every link NVML reports must be up.
    ``expected_gpus`` None: no GPU-count check (the agent may fill it in).
    ``volatile_corrected_degraded`` and ``nvlink_errors_degraded`` None: off.
    Xids in neither set are recorded in the readings but judged healthy.
    """

    max_temperature_c: int = 85
    pcie_min_width: int | None = None
    nvlink_min_active: int | None = None
    xid_drain: frozenset[int] = frozenset({48, 64, 74, 79, 95})
    xid_degraded: frozenset[int] = frozenset({63, 92, 94})
    retired_pages_degraded: int = 60
    volatile_corrected_degraded: int | None = None
    nvlink_errors_degraded: int | None = None
    expected_gpus: int | None = None

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            try:
                object.__setattr__(self, f.name, _check(f.name, value))
            except ValueError as exc:
                raise ConfigError(f"health threshold {f.name}: {exc}") from None
        both = self.xid_drain & self.xid_degraded
        if both:
            raise ConfigError(
                f"health thresholds: Xid {', '.join(map(str, sorted(both)))} "
                "is in both xid_drain and xid_degraded"
            )

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any], prefix: str = "") -> HealthThresholds:
        """Thresholds from ``{prefix + field: value}``; other keys are ignored, bad values raise."""
        names = {f.name for f in fields(cls)}
        chosen = {
            key[len(prefix) :]: value
            for key, value in values.items()
            if key.startswith(prefix) and key[len(prefix) :] in names and value is not None
        }
        return replace(cls(), **chosen)

    @classmethod
    def from_config(cls, config: object) -> HealthThresholds:
        """Thresholds from a config's ``health_<field>`` attributes, where it has them.

        In the config 0 stands for None in the optional fields (TOML has no
        null), so ``health_expected_gpus = 0`` means no GPU-count check.
        """
        values: dict[str, Any] = {}
        for f in fields(cls):
            key = f"health_{f.name}"
            if hasattr(config, key):
                value = getattr(config, key)
                values[key] = None if value == 0 and f.name in ZERO_IS_NONE else value
        return replace(cls(), **{key.removeprefix("health_"): v for key, v in values.items()})

    def xid_severity(self, xid: int) -> Severity:
        if xid in self.xid_drain:
            return Severity.DRAIN
        if xid in self.xid_degraded:
            return Severity.DEGRADED
        return Severity.HEALTHY


def _check(name: str, value: Any) -> Any:
    if name in ("xid_drain", "xid_degraded"):
        if isinstance(value, str | bytes) or not isinstance(value, Iterable):
            raise ValueError(f"expected a list of Xid numbers, got {value!r}")
        items = list(value)
        if not all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in items):
            raise ValueError(f"expected positive Xid numbers, got {items!r}")
        return frozenset(items)
    if value is None and name != "max_temperature_c" and name != "retired_pages_degraded":
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"expected a number, got {value!r}")
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        raise ValueError(f"expected a whole number, got {value!r}")
    number = int(value)
    if number < (1 if name in ("pcie_min_width", "expected_gpus") else 0):
        raise ValueError(f"must not be {number}")
    return number


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing wrong: on GPU ``gpu`` (None: the node), with an Xid ``code`` for Xid findings."""

    reason: Reason
    severity: Severity
    detail: str
    gpu: int | None = None
    code: int | None = None

    @property
    def tag(self) -> str:
        """Short form for Slurm's reason field: ``gpu3:ecc-uncorrected``, ``gpu5:xid79``."""
        what = f"xid{self.code}" if self.reason is Reason.XID else self.reason.value
        return what if self.gpu is None else f"gpu{self.gpu}:{what}"


def _worst(severities: Iterable[Severity]) -> Severity:
    return max(severities, key=lambda s: s.rank, default=Severity.HEALTHY)


@dataclass(frozen=True, slots=True)
class GpuVerdict:
    """One GPU's verdict and the findings behind it."""

    index: int
    uuid: str
    severity: Severity
    findings: tuple[Finding, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeVerdict:
    """A node's verdict: its worst GPU's, or worse for node-level findings such as a missing GPU."""

    node: str
    severity: Severity
    gpus: tuple[GpuVerdict, ...] = ()
    node_findings: tuple[Finding, ...] = field(default=())

    @property
    def findings(self) -> tuple[Finding, ...]:
        """Node-level findings, then each GPU's, most severe first (stable otherwise)."""
        every = list(self.node_findings) + [f for g in self.gpus for f in g.findings]
        return tuple(sorted(every, key=lambda f: -f.severity.rank))

    def slurm_reason(self, max_len: int = 120) -> str:
        """``slurmopt: gpu3:ecc-uncorrected, gpu5:xid79``: the findings at the node's severity."""
        tags: list[str] = []
        for finding in self.findings:
            if finding.severity is self.severity and finding.tag not in tags:
                tags.append(finding.tag)
        text = "slurmopt: " + (", ".join(tags) if tags else self.severity.value)
        if len(text) > max_len:
            text = text[: max_len - 3].rstrip(", ") + "..."
        return text

    def as_dict(self) -> dict[str, Any]:
        result: dict[str, Any] = plain(self)
        result["findings"] = plain(self.findings)
        return result


def judge_gpu(gpu: GpuReading, t: HealthThresholds, node_uses_nvlink: bool = True) -> GpuVerdict:
    """The findings for one GPU's reading.

    ``node_uses_nvlink`` False (no GPU of the node has an active link, as on
    PCIe cards without bridges) turns off the link-down rule.
    """
    found: list[Finding] = []

    def add(reason: Reason, severity: Severity, detail: str, code: int | None = None) -> None:
        found.append(Finding(reason, severity, detail, gpu.index, code))

    if gpu.lost:
        add(Reason.GPU_LOST, Severity.DRAIN, "NVML reports the GPU lost (GPU_IS_LOST)")
    ecc = gpu.ecc
    if ecc is not None and (ecc.volatile_uncorrected or 0) > 0:
        add(
            Reason.ECC_UNCORRECTED,
            Severity.DRAIN,
            f"{ecc.volatile_uncorrected} uncorrected (double-bit) ECC errors since driver load",
        )
    if (
        ecc is not None
        and t.volatile_corrected_degraded is not None
        and (ecc.volatile_corrected or 0) >= t.volatile_corrected_degraded
    ):
        add(
            Reason.ECC_CORRECTED,
            Severity.DEGRADED,
            f"{ecc.volatile_corrected} corrected (single-bit) ECC errors since driver load "
            f"(threshold {t.volatile_corrected_degraded})",
        )
    pages = gpu.retired_pages
    if pages is not None and pages.pending:
        add(
            Reason.RETIRED_PAGES_PENDING,
            Severity.DRAIN,
            "retired pages wait for a GPU reset to take effect",
        )
    if pages is not None and pages.single_bit + pages.double_bit >= t.retired_pages_degraded:
        add(
            Reason.RETIRED_PAGES,
            Severity.DEGRADED,
            f"{pages.single_bit + pages.double_bit} pages retired "
            f"(threshold {t.retired_pages_degraded})",
        )
    rows = gpu.remapped_rows
    if rows is not None and rows.failure:
        add(Reason.ROW_REMAP_FAILURE, Severity.DRAIN, "a row remapping failed")
    if rows is not None and rows.pending:
        add(Reason.ROW_REMAP_PENDING, Severity.DRAIN, "row remapping waits for a GPU reset")
    for xid in gpu.xids or ():
        severity = t.xid_severity(xid)
        if severity is not Severity.HEALTHY:
            meaning = XID_MEANINGS.get(xid, "critical Xid")
            add(Reason.XID, severity, f"Xid {xid}: {meaning}", code=xid)
    _judge_links(gpu, t, node_uses_nvlink, add)
    if gpu.temperature_c is not None and gpu.temperature_c > t.max_temperature_c:
        add(
            Reason.TEMPERATURE,
            Severity.DEGRADED,
            f"{gpu.temperature_c} C, above {t.max_temperature_c} C",
        )
    return GpuVerdict(gpu.index, gpu.uuid, _worst(f.severity for f in found), tuple(found))


def _judge_links(gpu: GpuReading, t: HealthThresholds, node_uses_nvlink: bool, add: Any) -> None:
    links = gpu.nvlinks
    if links is not None and node_uses_nvlink:
        down = [link.link for link in links if not link.active]
        active = len(links) - len(down)
        if t.nvlink_min_active is None and down:
            add(
                Reason.NVLINK_DOWN,
                Severity.DRAIN,
                f"NVLink {','.join(map(str, down))} down ({active}/{len(links)} active)",
            )
        elif t.nvlink_min_active is not None and active < t.nvlink_min_active:
            add(
                Reason.NVLINK_DOWN,
                Severity.DRAIN,
                f"{active}/{len(links)} NVLinks active, fewer than {t.nvlink_min_active}",
            )
    if links is not None and t.nvlink_errors_degraded is not None:
        errors = sum(link.error_total for link in links)
        if errors >= t.nvlink_errors_degraded:
            add(
                Reason.NVLINK_ERRORS,
                Severity.DEGRADED,
                f"{errors} NVLink replay/recovery/CRC errors "
                f"(threshold {t.nvlink_errors_degraded})",
            )
    pcie = gpu.pcie
    if pcie is not None and pcie.width is not None:
        expected = t.pcie_min_width if t.pcie_min_width is not None else pcie.max_width
        if expected is not None and pcie.width < expected:
            add(
                Reason.PCIE_WIDTH,
                Severity.DEGRADED,
                f"PCIe link x{pcie.width}, expected x{expected}"
                + (f" (gen {pcie.generation})" if pcie.generation is not None else ""),
            )


def judge_node(reading: NodeReading, thresholds: HealthThresholds | None = None) -> NodeVerdict:
    """The node's verdict from its reading: each GPU's findings plus the GPU count."""
    t = thresholds or HealthThresholds()
    uses_nvlink = any(link.active for gpu in reading.gpus for link in (gpu.nvlinks or ()))
    gpus = tuple(judge_gpu(gpu, t, node_uses_nvlink=uses_nvlink) for gpu in reading.gpus)
    node_findings: list[Finding] = []
    if t.expected_gpus is not None and len(reading.gpus) < t.expected_gpus:
        node_findings.append(
            Finding(
                Reason.GPU_MISSING,
                Severity.DRAIN,
                f"NVML sees {len(reading.gpus)} GPUs, expected {t.expected_gpus}",
            )
        )
    for xid in reading.unattributed_xids:
        xid_severity = t.xid_severity(xid)
        if xid_severity is not Severity.HEALTHY:
            meaning = XID_MEANINGS.get(xid, "critical Xid")
            node_findings.append(
                Finding(
                    Reason.XID, xid_severity, f"Xid {xid} from an unnamed GPU: {meaning}", code=xid
                )
            )
    severity = _worst([*(f.severity for f in node_findings), *(g.severity for g in gpus)])
    return NodeVerdict(reading.node, severity, gpus, tuple(node_findings))


__all__ = [
    "XID_MEANINGS",
    "ZERO_IS_NONE",
    "Finding",
    "GpuVerdict",
    "HealthThresholds",
    "NodeVerdict",
    "Reason",
    "Severity",
    "judge_gpu",
    "judge_node",
]
