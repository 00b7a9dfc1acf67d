"""What one GPU and one node report, as frozen readings that print as plain JSON."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, is_dataclass
from enum import Enum
from types import MappingProxyType
from typing import Any

# ---------------------------------------------------------------------- readings


class _PlainRecord:
    """``as_dict()`` for the frozen reading types: plain JSON-ready values."""

    __slots__ = ()

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values."""
        result: dict[str, Any] = plain(self)
        return result


class _FrozenReading(_PlainRecord):
    """A reading whose ``unavailable`` map (query -> why it failed) is read-only."""

    __slots__ = ()
    unavailable: Mapping[str, str]

    def __post_init__(self) -> None:
        object.__setattr__(self, "unavailable", MappingProxyType(dict(self.unavailable)))


@dataclass(frozen=True, slots=True)
class EccCounts:
    """ECC error counts: corrected are single-bit, uncorrected double-bit.

    Volatile counts start at zero when the driver loads; aggregate ones
    cover the board's life.  Each is None where the device cannot tell.
    """

    volatile_corrected: int | None
    volatile_uncorrected: int | None
    aggregate_corrected: int | None
    aggregate_uncorrected: int | None


@dataclass(frozen=True, slots=True)
class RetiredPages:
    """Dynamic page retirement (pre-A100): pages retired by cause, and whether some await reset."""

    single_bit: int
    double_bit: int
    pending: bool | None


@dataclass(frozen=True, slots=True)
class RemappedRows:
    """Row remapping (A100 and later): counts, and whether a remap awaits reset or failed."""

    correctable: int
    uncorrectable: int
    pending: bool
    failure: bool


@dataclass(frozen=True, slots=True)
class NvLink:
    """One NVLink: up or down, and its data-link error counters (None where unsupported)."""

    link: int
    active: bool
    replay_errors: int | None = None
    recovery_errors: int | None = None
    crc_flit_errors: int | None = None
    crc_data_errors: int | None = None

    @property
    def error_total(self) -> int:
        """All counted errors on this link (unsupported counters count as 0)."""
        return sum(
            v or 0
            for v in (
                self.replay_errors,
                self.recovery_errors,
                self.crc_flit_errors,
                self.crc_data_errors,
            )
        )


@dataclass(frozen=True, slots=True)
class PcieLink:
    """The PCIe link as trained now and at most (generation 1-6, width x1-x16)."""

    generation: int | None
    max_generation: int | None
    width: int | None
    max_width: int | None


@dataclass(frozen=True, slots=True)
class GpuReading(_FrozenReading):
    """One GPU as NVML reported it.

    ``lost`` is set when NVML says the GPU is gone (``GPU_IS_LOST``); the
    fields read before that are kept.  ``xids`` are the critical Xid events
    seen since the reader opened (None where events are unsupported).
    ``unavailable`` maps each field NVML could not give to the reason.
    """

    index: int
    name: str = ""
    uuid: str = ""
    pci_bus_id: str = ""
    gpu_util_pct: int | None = None
    memory_util_pct: int | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    power_draw_w: float | None = None
    power_limit_w: float | None = None
    temperature_c: int | None = None
    ecc: EccCounts | None = None
    retired_pages: RetiredPages | None = None
    remapped_rows: RemappedRows | None = None
    xids: tuple[int, ...] | None = None
    nvlinks: tuple[NvLink, ...] | None = None
    pcie: PcieLink | None = None
    lost: bool = False
    unavailable: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class NodeReading(_PlainRecord):
    """Every GPU of one node, read at ``taken_at``.

    ``errors`` are node-level read problems; ``unattributed_xids`` are Xid
    events from a GPU that NVML could no longer name (it fell off the bus).
    """

    node: str
    gpus: tuple[GpuReading, ...]
    driver_version: str = ""
    taken_at: float = 0.0
    errors: tuple[str, ...] = ()
    unattributed_xids: tuple[int, ...] = ()


def plain(value: Any) -> Any:
    """Dataclasses, mappings, tuples and enums as JSON-ready dicts, lists and strings."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | frozenset | set):
        items = sorted(value) if isinstance(value, frozenset | set) else value
        return [plain(v) for v in items]
    return value
