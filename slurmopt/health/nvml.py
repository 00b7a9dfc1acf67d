"""What this node's GPUs report through NVML, as frozen readings.

This is the only module that imports ``pynvml`` (nvidia-ml-py), and only
when a reader opens without an injected backend, so a controller or a test
machine without the NVIDIA driver can import slurmopt.  The backend is any
object with pynvml's function names, return shapes and ``NVMLError`` class:
the real module, or :class:`FakeNvml` built from a JSON description (tests
and the node agent's hidden ``--fake-nvml`` hook).

A field the device does not support (``NVML_ERROR_NOT_SUPPORTED``), or that
fails for another reason, is recorded as None with the reason in
``GpuReading.unavailable``; it never raises.  Only a missing driver or
library raises, as :class:`NvmlUnavailable`, whose one line names NVML and
the cause.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, is_dataclass
from enum import Enum
from functools import partial
from pathlib import Path
from types import MappingProxyType, SimpleNamespace
from typing import Any, Protocol, TypeVar

from slurmopt.errors import SlurmoptError

T = TypeVar("T")

# NVML's C return codes (nvml.h); stable across driver releases.
NVML_SUCCESS = 0
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_UNKNOWN = 999

# Arguments, as nvml.h numbers them.
_TEMPERATURE_GPU = 0
_MEMORY_ERROR_CORRECTED = 0  # single-bit
_MEMORY_ERROR_UNCORRECTED = 1  # double-bit
_VOLATILE_ECC = 0  # since the last driver load
_AGGREGATE_ECC = 1  # over the board's life
_RETIRED_BY_SBE = 0  # NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS
_RETIRED_BY_DBE = 1  # NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
_EVENT_XID = 0x8  # nvmlEventTypeXidCriticalError
_NVLINK_MAX_LINKS = 18  # NVLink 4 (H100/H200); later parts report the rest as invalid
_NVLINK_COUNTERS = ("replay", "recovery", "crc_flit", "crc_data")  # DL_REPLAY .. DL_CRC_DATA
_NVLINK_DEVICE_GPU = 0  # nvmlIntNvLinkDeviceType_t
_NVLINK_DEVICE_SWITCH = 2

#: nvmlGpuTopologyLevel_t, closest first, with the label ``nvidia-smi topo -m`` prints for it.
#: INTERNAL (two GPUs on one board) has no label of its own; it is at least as close as PIX.
TOPOLOGY_LABELS: Mapping[int, str] = MappingProxyType(
    {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
)

#: Codes meaning "this node has no usable NVML at all", with what an operator should check.
_NO_DRIVER_HINTS: Mapping[int, str] = MappingProxyType(
    {
        NVML_ERROR_LIBRARY_NOT_FOUND: "no libnvidia-ml.so.1: is the NVIDIA driver installed?",
        NVML_ERROR_DRIVER_NOT_LOADED: "the nvidia kernel module is not loaded",
        NVML_ERROR_NO_PERMISSION: "no permission to open /dev/nvidia*",
        NVML_ERROR_LIB_RM_VERSION_MISMATCH: "driver and library versions differ: reboot or reload",
    }
)

#: pynvml's strings for the codes slurmopt names; FakeNvml's errors print the same.
_ERROR_TEXT: Mapping[int, str] = MappingProxyType(
    {
        NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
        NVML_ERROR_NOT_SUPPORTED: "Not Supported",
        NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
        NVML_ERROR_NOT_FOUND: "Not Found",
        NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
        NVML_ERROR_TIMEOUT: "Timeout",
        NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
        NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
        NVML_ERROR_GPU_IS_LOST: "GPU is lost",
        NVML_ERROR_LIB_RM_VERSION_MISMATCH: "RM has detected an NVML/RM version mismatch.",
        NVML_ERROR_UNKNOWN: "Unknown Error",
    }
)

#: The reason recorded for a field the device does not have.
NOT_SUPPORTED = "not supported"


class NvmlUnavailable(SlurmoptError):
    """NVML cannot be used on this host (no driver, no library, no pynvml)."""

    exit_code = 69  # EX_UNAVAILABLE


class NvmlBackend(Protocol):
    """The part of pynvml's module interface the reader calls (the fake has the same)."""

    @property
    def NVMLError(self) -> type[Exception]:
        """The base class of every error the backend raises (``value`` holds NVML's code)."""
        ...

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlSystemGetDriverVersion(self) -> str | bytes: ...
    def nvmlDeviceGetCount(self) -> int: ...
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any: ...
    def nvmlDeviceGetName(self, handle: Any) -> str | bytes: ...
    def nvmlDeviceGetUUID(self, handle: Any) -> str | bytes: ...
    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any: ...
    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any: ...
    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any: ...
    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int: ...
    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Any) -> int: ...
    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int: ...
    def nvmlDeviceGetTotalEccErrors(self, handle: Any, error_type: int, counter: int) -> int: ...
    def nvmlDeviceGetRetiredPages(self, handle: Any, cause: int) -> Sequence[int]: ...
    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: Any) -> int: ...
    def nvmlDeviceGetRemappedRows(self, handle: Any) -> tuple[int, int, int, int]: ...
    def nvmlDeviceGetNvLinkState(self, handle: Any, link: int) -> int: ...
    def nvmlDeviceGetNvLinkErrorCounter(self, handle: Any, link: int, counter: int) -> int: ...
    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: Any, link: int) -> Any: ...
    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: Any, link: int) -> int: ...
    def nvmlDeviceGetTopologyCommonAncestor(self, handle1: Any, handle2: Any) -> int: ...
    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: Any) -> int: ...
    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: Any) -> int: ...
    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: Any) -> int: ...
    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: Any) -> int: ...
    def nvmlEventSetCreate(self) -> Any: ...
    def nvmlDeviceRegisterEvents(self, handle: Any, event_types: int, event_set: Any) -> None: ...
    def nvmlEventSetWait(self, event_set: Any, timeout_ms: int) -> Any: ...
    def nvmlEventSetFree(self, event_set: Any) -> None: ...


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


# ---------------------------------------------------------------------- backends


def load_pynvml() -> NvmlBackend:
    """The real pynvml module; a failed import is an :class:`NvmlUnavailable`."""
    try:
        import pynvml
    except ImportError as exc:
        raise NvmlUnavailable(
            f"NVML unavailable: cannot import pynvml ({exc}); install nvidia-ml-py"
        ) from None
    backend: NvmlBackend = pynvml
    return backend


def _code(exc: BaseException) -> int | None:
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


def _error_text(exc: BaseException) -> str:
    code = _code(exc)
    if code is not None and code in _ERROR_TEXT:
        return _ERROR_TEXT[code]
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _text(value: str | bytes) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


class _GpuLost(Exception):
    """Raised inside the reader when NVML reports the GPU gone; caught per GPU."""


class NvmlReader:
    """Reads this node's GPUs through an NVML backend.

    States::

        closed --open()--> open --read()--> open --close()--> closed

    ``open()`` initialises NVML (raising :class:`NvmlUnavailable` when there
    is no driver) and registers every GPU for critical Xid events.  Each
    ``read()`` first collects the Xid events queued since the last one
    (waiting at most ``xid_wait_ms`` for the first), so a long-running agent
    sees every Xid between passes; a one-shot read sees only those inside
    its window.  Xids stay in the readings until :meth:`forget_xids` (after
    the node was drained for them), so a drain that was capped is retried.
    ``close()`` frees the event set and shuts NVML down; the reader is a
    context manager doing both.
    """

    def __init__(self, backend: NvmlBackend | None = None, xid_wait_ms: int = 100) -> None:
        self._backend = backend
        self.xid_wait_ms = max(0, int(xid_wait_ms))
        self._open = False
        self._event_set: Any = None
        self._xid_registered: set[str] = set()
        self._xid_unavailable: dict[str, str] = {}
        self._xids: dict[str, list[int]] = {}
        self._event_errors: list[str] = []

    @property
    def nvml(self) -> NvmlBackend:
        if self._backend is None:
            self._backend = load_pynvml()
        return self._backend

    # ------------------------------------------------------------------ lifecycle

    def open(self) -> NvmlReader:
        """Initialise NVML and register for Xid events; NvmlUnavailable without a driver."""
        if self._open:
            return self
        _initialise(self.nvml)
        self._open = True
        self._register_xid_events()
        return self

    def close(self) -> None:
        """Free the event set and shut NVML down; safe to call twice."""
        if not self._open:
            return
        nvml = self.nvml
        if self._event_set is not None:
            try:
                nvml.nvmlEventSetFree(self._event_set)
            except nvml.NVMLError:
                pass
            self._event_set = None
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError:
            pass
        self._open = False

    def __enter__(self) -> NvmlReader:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def forget_xids(self) -> None:
        """Drop the Xids seen so far (they have been acted on)."""
        self._xids.clear()

    # ------------------------------------------------------------------ events

    def _register_xid_events(self) -> None:
        nvml = self.nvml
        try:
            self._event_set = nvml.nvmlEventSetCreate()
        except nvml.NVMLError as exc:
            self._event_errors.append(f"Xid events: nvmlEventSetCreate: {_error_text(exc)}")
            return
        try:
            count = nvml.nvmlDeviceGetCount()
        except nvml.NVMLError:
            return  # read() reports the count failure
        for index in range(count):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                uuid = _text(nvml.nvmlDeviceGetUUID(handle))
            except nvml.NVMLError:
                continue  # read() reports this GPU as lost or unreadable
            try:
                nvml.nvmlDeviceRegisterEvents(handle, _EVENT_XID, self._event_set)
            except nvml.NVMLError as exc:
                code = _code(exc)
                why = NOT_SUPPORTED if code == NVML_ERROR_NOT_SUPPORTED else _error_text(exc)
                self._xid_unavailable[uuid] = why
                continue
            self._xid_registered.add(uuid)

    def _collect_xid_events(self) -> list[str]:
        """Move queued Xid events into ``self._xids``; return node-level problems."""
        nvml = self.nvml
        problems = list(self._event_errors)
        if self._event_set is None:
            return problems
        wait_ms = self.xid_wait_ms
        for _ in range(10_000):  # bounded: a flood of events must not stall the pass
            try:
                data = nvml.nvmlEventSetWait(self._event_set, wait_ms)
            except nvml.NVMLError as exc:
                if _code(exc) != NVML_ERROR_TIMEOUT:
                    problems.append(f"Xid events: nvmlEventSetWait: {_error_text(exc)}")
                break
            wait_ms = 0
            if not int(getattr(data, "eventType", 0)) & _EVENT_XID:
                continue
            xid = int(getattr(data, "eventData", 0))
            try:
                uuid = _text(nvml.nvmlDeviceGetUUID(data.device))
            except nvml.NVMLError:
                uuid = ""  # the GPU went away with the event; keep it node-level
            seen = self._xids.setdefault(uuid, [])  # "": a GPU NVML can no longer name
            if xid not in seen:
                seen.append(xid)
        return problems

    # ------------------------------------------------------------------ reads

    def read(self, node: str, now: float | None = None) -> NodeReading:
        """Every GPU of this node now; unsupported fields are None, never exceptions."""
        if not self._open:
            self.open()
        nvml = self.nvml
        taken_at = time.time() if now is None else now
        errors = self._collect_xid_events()
        try:
            driver = _text(nvml.nvmlSystemGetDriverVersion())
        except nvml.NVMLError as exc:
            driver = ""
            errors.append(f"driver version: {_error_text(exc)}")
        try:
            count = nvml.nvmlDeviceGetCount()
        except nvml.NVMLError as exc:
            errors.append(f"GPU count: {_error_text(exc)}")
            count = 0
        gpus = tuple(self._read_gpu(index) for index in range(count))
        return NodeReading(
            node=node,
            gpus=gpus,
            driver_version=driver,
            taken_at=taken_at,
            errors=tuple(errors),
            unattributed_xids=tuple(self._xids.get("", ())),
        )

    def _read_gpu(self, index: int) -> GpuReading:
        fields_ = _FieldReader(self.nvml)
        values: dict[str, Any] = {"index": index}
        try:
            handle = fields_.get("handle", lambda: self.nvml.nvmlDeviceGetHandleByIndex(index))
            if handle is not None:
                self._read_fields(handle, values, fields_)
        except _GpuLost:
            values["lost"] = True
        uuid = values.get("uuid", "")
        if uuid in self._xid_registered:
            values["xids"] = tuple(self._xids.get(uuid, ()))
        else:
            fields_.unavailable["xids"] = self._xid_unavailable.get(
                uuid, "not registered for events"
            )
        return GpuReading(**values, unavailable=fields_.unavailable)

    def _read_fields(self, handle: Any, values: dict[str, Any], f: _FieldReader) -> None:
        """Fill ``values`` field by field; ``f`` records what NVML would not say."""
        nvml = self.nvml
        values["uuid"] = _text(f.get("uuid", lambda: nvml.nvmlDeviceGetUUID(handle)) or "")
        if not values["uuid"]:
            values.pop("uuid")
        values["name"] = _text(f.get("name", lambda: nvml.nvmlDeviceGetName(handle)) or "")
        pci = f.get("pci_bus_id", lambda: nvml.nvmlDeviceGetPciInfo(handle))
        values["pci_bus_id"] = _text(getattr(pci, "busId", b"")) if pci is not None else ""
        util = f.get("utilization", lambda: nvml.nvmlDeviceGetUtilizationRates(handle))
        if util is not None:
            values["gpu_util_pct"] = int(util.gpu)
            values["memory_util_pct"] = int(util.memory)
        memory = f.get("memory", lambda: nvml.nvmlDeviceGetMemoryInfo(handle))
        if memory is not None:
            values["memory_used_bytes"] = int(memory.used)
            values["memory_total_bytes"] = int(memory.total)
        power = f.get("power_draw_w", lambda: nvml.nvmlDeviceGetPowerUsage(handle))
        values["power_draw_w"] = None if power is None else power / 1000.0
        limit = f.get("power_limit_w", lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle))
        values["power_limit_w"] = None if limit is None else limit / 1000.0
        values["temperature_c"] = f.get(
            "temperature_c", lambda: nvml.nvmlDeviceGetTemperature(handle, _TEMPERATURE_GPU)
        )
        values["ecc"] = self._read_ecc(handle, f)
        values["retired_pages"] = self._read_retired_pages(handle, f)
        rows = f.get("remapped_rows", lambda: nvml.nvmlDeviceGetRemappedRows(handle))
        if rows is not None:
            corr, unc, pending, failure = (int(v) for v in rows)
            values["remapped_rows"] = RemappedRows(corr, unc, bool(pending), bool(failure))
        values["nvlinks"] = self._read_nvlinks(handle, f)
        values["pcie"] = self._read_pcie(handle, f)

    def _read_ecc(self, handle: Any, f: _FieldReader) -> EccCounts | None:
        nvml = self.nvml
        counts: list[int | None] = []
        for what, err, counter in (
            ("ecc.volatile_corrected", _MEMORY_ERROR_CORRECTED, _VOLATILE_ECC),
            ("ecc.volatile_uncorrected", _MEMORY_ERROR_UNCORRECTED, _VOLATILE_ECC),
            ("ecc.aggregate_corrected", _MEMORY_ERROR_CORRECTED, _AGGREGATE_ECC),
            ("ecc.aggregate_uncorrected", _MEMORY_ERROR_UNCORRECTED, _AGGREGATE_ECC),
        ):
            value = f.get(what, partial(nvml.nvmlDeviceGetTotalEccErrors, handle, err, counter))
            counts.append(None if value is None else int(value))
        if all(c is None for c in counts):
            f.collapse("ecc")
            return None
        return EccCounts(*counts)

    def _read_retired_pages(self, handle: Any, f: _FieldReader) -> RetiredPages | None:
        nvml = self.nvml
        sbe = f.get(
            "retired_pages", lambda: nvml.nvmlDeviceGetRetiredPages(handle, _RETIRED_BY_SBE)
        )
        if sbe is None:
            return None
        dbe = f.get(
            "retired_pages.double_bit",
            lambda: nvml.nvmlDeviceGetRetiredPages(handle, _RETIRED_BY_DBE),
        )
        pending = f.get(
            "retired_pages.pending", lambda: nvml.nvmlDeviceGetRetiredPagesPendingStatus(handle)
        )
        return RetiredPages(
            single_bit=len(sbe),
            double_bit=len(dbe or ()),
            pending=None if pending is None else bool(pending),
        )

    def _read_nvlinks(self, handle: Any, f: _FieldReader) -> tuple[NvLink, ...] | None:
        """Every link NVML knows; a link it calls invalid or unsupported does not exist."""
        nvml = self.nvml
        links: list[NvLink] = []
        other_error = ""
        for link in range(_NVLINK_MAX_LINKS):
            try:
                state = nvml.nvmlDeviceGetNvLinkState(handle, link)
            except nvml.NVMLError as exc:
                code = _code(exc)
                if code == NVML_ERROR_GPU_IS_LOST:
                    f.unavailable["nvlinks"] = _error_text(exc)
                    raise _GpuLost("nvlinks") from None
                if code not in (NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_INVALID_ARGUMENT):
                    other_error = other_error or _error_text(exc)
                continue
            counters: dict[str, int | None] = {}
            for number, counter in enumerate(_NVLINK_COUNTERS):
                value = f.get(
                    f"nvlink{link}.{counter}_errors",
                    partial(nvml.nvmlDeviceGetNvLinkErrorCounter, handle, link, number),
                )
                counters[f"{counter}_errors"] = None if value is None else int(value)
            links.append(NvLink(link=link, active=bool(state), **counters))
        if not links:
            f.unavailable["nvlinks"] = other_error or NOT_SUPPORTED
            return None
        return tuple(links)

    def _read_pcie(self, handle: Any, f: _FieldReader) -> PcieLink | None:
        nvml = self.nvml
        link = PcieLink(
            generation=f.get(
                "pcie.generation", lambda: nvml.nvmlDeviceGetCurrPcieLinkGeneration(handle)
            ),
            max_generation=f.get(
                "pcie.max_generation", lambda: nvml.nvmlDeviceGetMaxPcieLinkGeneration(handle)
            ),
            width=f.get("pcie.width", lambda: nvml.nvmlDeviceGetCurrPcieLinkWidth(handle)),
            max_width=f.get("pcie.max_width", lambda: nvml.nvmlDeviceGetMaxPcieLinkWidth(handle)),
        )
        if all(
            v is None for v in (link.generation, link.max_generation, link.width, link.max_width)
        ):
            f.collapse("pcie")
            return None
        return link


class _FieldReader:
    """Calls one NVML query at a time, turning its failure into a recorded reason."""

    def __init__(self, nvml: NvmlBackend) -> None:
        self.nvml = nvml
        self.unavailable: dict[str, str] = {}

    def get(self, what: str, call: Callable[[], T]) -> T | None:
        """``call()``, or None with the reason under ``what``; a lost GPU stops the GPU's read."""
        try:
            return call()
        except self.nvml.NVMLError as exc:
            code = _code(exc)
            if code == NVML_ERROR_GPU_IS_LOST:
                self.unavailable[what] = _error_text(exc)
                raise _GpuLost(what) from None
            self.unavailable[what] = (
                NOT_SUPPORTED if code == NVML_ERROR_NOT_SUPPORTED else _error_text(exc)
            )
            return None

    def collapse(self, prefix: str) -> None:
        """Record ``prefix`` once when every one of its parts failed for the same reason."""
        parts = {k: v for k, v in self.unavailable.items() if k.startswith(prefix + ".")}
        reasons = set(parts.values())
        if len(reasons) == 1:
            for k in parts:
                del self.unavailable[k]
            self.unavailable[prefix] = reasons.pop()


def read_node(node: str, backend: NvmlBackend | None = None, xid_wait_ms: int = 100) -> NodeReading:
    """One reading of this node: open NVML, read, close."""
    with NvmlReader(backend, xid_wait_ms=xid_wait_ms) as reader:
        return reader.read(node)


# ---------------------------------------------------------------------- topology and power


def init_nvml(backend: NvmlBackend | None = None) -> NvmlBackend:
    """An initialised NVML for one-off queries; :class:`NvmlUnavailable` without a driver.

    The caller shuts it down (``nvmlShutdown``) when done.
    """
    nvml = load_pynvml() if backend is None else backend
    _initialise(nvml)
    return nvml


def _initialise(nvml: NvmlBackend) -> None:
    """``nvmlInit``, or :class:`NvmlUnavailable` naming NVML, the cause and a hint."""
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        code = _code(exc)
        hint = _NO_DRIVER_HINTS.get(code or -1)
        cause = f"{_error_text(exc)} ({hint})" if hint else _error_text(exc)
        raise NvmlUnavailable(f"NVML unavailable: nvmlInit failed: {cause}") from None


def _bus_key(bus_id: str | bytes) -> tuple[int, ...]:
    """A PCI bus id as numbers, so ``0000:18:00.0`` and ``00000000:18:00.0`` compare equal."""
    text = _text(bus_id).strip().replace(".", ":")
    try:
        return tuple(int(part, 16) for part in text.split(":"))
    except ValueError:
        return (-1,)


@dataclass(frozen=True, slots=True)
class GpuTopology(_FrozenReading):
    """How this node's GPUs reach each other, as ``nvidia-smi topo -m`` shows it.

    ``matrix[i][j]`` is ``X`` on the diagonal, ``NV<n>`` where ``n`` active
    NVLinks join the two (directly, or both through NVSwitches: then ``n``
    is the smaller of their switch link counts), else the PCIe level of
    their closest common ancestor (PIX, PXB, PHB, NODE, SYS), or ``N/A``
    where NVML cannot tell.  ``unavailable`` says why, per query that failed.
    """

    gpus: tuple[str, ...]
    matrix: tuple[tuple[str, ...], ...]
    unavailable: Mapping[str, str] = field(default_factory=dict)

    def lines(self) -> list[str]:
        """The matrix as aligned text rows, header first."""
        width = max([4, *(len(c) for row in self.matrix for c in row), *map(len, self.gpus)])
        head = " " * width + "".join(f"  {g:>{width}}" for g in self.gpus)
        rows = [
            f"{g:<{width}}" + "".join(f"  {c:>{width}}" for c in row)
            for g, row in zip(self.gpus, self.matrix, strict=True)
        ]
        return [head.rstrip(), *rows]


def read_topology(nvml: NvmlBackend) -> GpuTopology:
    """The GPU-to-GPU matrix of an initialised NVML; failed queries become ``N/A``."""
    unavailable: dict[str, str] = {}
    try:
        count = nvml.nvmlDeviceGetCount()
    except nvml.NVMLError as exc:
        return GpuTopology((), (), {"count": _error_text(exc)})
    handles: list[Any] = []
    for index in range(count):
        try:
            handles.append(nvml.nvmlDeviceGetHandleByIndex(index))
        except nvml.NVMLError as exc:
            unavailable[f"gpu{index}"] = _error_text(exc)
            handles.append(None)
    by_bus: dict[tuple[int, ...], int] = {}
    for index, handle in enumerate(handles):
        if handle is None:
            continue
        try:
            by_bus[_bus_key(nvml.nvmlDeviceGetPciInfo(handle).busId)] = index
        except nvml.NVMLError as exc:
            unavailable[f"gpu{index}.pci"] = _error_text(exc)
    direct: dict[tuple[int, int], int] = {}
    to_switch = [0] * count
    for index, handle in enumerate(handles):
        if handle is not None:
            _count_nvlinks(nvml, index, handle, by_bus, direct, to_switch, unavailable)
    matrix: list[tuple[str, ...]] = []
    for i in range(count):
        row: list[str] = []
        for j in range(count):
            if i == j:
                row.append("X")
                continue
            links = max(direct.get((i, j), 0), direct.get((j, i), 0))
            links += min(to_switch[i], to_switch[j])
            if links:
                row.append(f"NV{links}")
            elif handles[i] is None or handles[j] is None:
                row.append("N/A")
            else:
                row.append(_pcie_level(nvml, i, j, handles[i], handles[j], unavailable))
        matrix.append(tuple(row))
    names = tuple(f"GPU{i}" for i in range(count))
    return GpuTopology(names, tuple(matrix), unavailable)


def _count_nvlinks(
    nvml: NvmlBackend,
    index: int,
    handle: Any,
    by_bus: Mapping[tuple[int, ...], int],
    direct: dict[tuple[int, int], int],
    to_switch: list[int],
    unavailable: dict[str, str],
) -> None:
    """Add GPU ``index``'s active NVLinks to ``direct`` (per peer GPU) or ``to_switch``."""
    for link in range(_NVLINK_MAX_LINKS):
        try:
            if not nvml.nvmlDeviceGetNvLinkState(handle, link):
                continue
            remote = nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link)
        except nvml.NVMLError as exc:
            if _code(exc) not in (NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_INVALID_ARGUMENT):
                unavailable.setdefault(f"gpu{index}.nvlink", _error_text(exc))
            continue
        peer = by_bus.get(_bus_key(remote.busId))
        if peer is not None and peer != index:
            direct[index, peer] = direct.get((index, peer), 0) + 1
            continue
        try:
            kind: int | None = nvml.nvmlDeviceGetNvLinkRemoteDeviceType(handle, link)
        except nvml.NVMLError:
            kind = None  # older drivers: a link to no GPU of this node goes to a switch
        if kind == _NVLINK_DEVICE_SWITCH or (kind is None and peer is None):
            to_switch[index] += 1


def _pcie_level(
    nvml: NvmlBackend, i: int, j: int, a: Any, b: Any, unavailable: dict[str, str]
) -> str:
    try:
        level = int(nvml.nvmlDeviceGetTopologyCommonAncestor(a, b))
    except nvml.NVMLError as exc:
        unavailable.setdefault("pcie", _error_text(exc))
        return "N/A"
    return TOPOLOGY_LABELS.get(level, "N/A")


@dataclass(frozen=True, slots=True)
class PowerDraw:
    """One GPU's power while sampled: peak and mean draw against its enforced limit (watts).

    ``unavailable`` says why draw or limit is missing.
    """

    index: int
    samples: int
    peak_w: float | None
    mean_w: float | None
    limit_w: float | None
    unavailable: str = ""

    @property
    def peak_share(self) -> float | None:
        """Peak draw as a share of the limit."""
        if self.peak_w is None or not self.limit_w:
            return None
        return self.peak_w / self.limit_w

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values."""
        result: dict[str, Any] = plain(self)
        result["peak_share"] = self.peak_share
        return result


class PowerSampler:
    """Samples every GPU's power draw from a background thread between start() and stop().

    ``start()`` and ``stop()`` each take one sample themselves, so even a
    load shorter than the interval is measured.  NVML must be initialised
    (:func:`init_nvml`) for the whole time.
    """

    def __init__(self, nvml: NvmlBackend, interval_s: float = 0.1) -> None:
        self.nvml = nvml
        self.interval_s = max(0.01, float(interval_s))
        self._handles: list[Any] = []
        self._limits: list[float | None] = []
        self._samples: list[list[float]] = []
        self._why: list[str] = []
        self._opened = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _open(self) -> None:
        self._opened = True
        nvml = self.nvml
        try:
            count = nvml.nvmlDeviceGetCount()
        except nvml.NVMLError:
            count = 0
        for index in range(count):
            why, limit, handle = "", None, None
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                limit = nvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000.0
            except nvml.NVMLError as exc:
                why = f"power limit: {_error_text(exc)}"
            self._handles.append(handle)
            self._limits.append(limit)
            self._samples.append([])
            self._why.append(why)

    def sample(self) -> None:
        """Read every GPU's draw once."""
        if not self._opened:
            self._open()
        nvml = self.nvml
        for index, handle in enumerate(self._handles):
            if handle is None:
                continue
            try:
                self._samples[index].append(nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0)
            except nvml.NVMLError as exc:
                self._why[index] = f"power draw: {_error_text(exc)}"

    def start(self) -> None:
        """Take a sample now and keep sampling every ``interval_s`` until :meth:`stop`."""
        self.sample()
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="power-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def stop(self) -> tuple[PowerDraw, ...]:
        """Stop sampling, take a last sample, and summarise each GPU."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        self.sample()
        return self.summary()

    def summary(self) -> tuple[PowerDraw, ...]:
        """Peak and mean of the samples so far, per GPU."""
        draws = []
        for index, samples in enumerate(self._samples):
            draws.append(
                PowerDraw(
                    index=index,
                    samples=len(samples),
                    peak_w=max(samples) if samples else None,
                    mean_w=sum(samples) / len(samples) if samples else None,
                    limit_w=self._limits[index],
                    unavailable=self._why[index],
                )
            )
        return tuple(draws)


# ---------------------------------------------------------------------- the fake


class FakeNvmlError(Exception):
    """What :class:`FakeNvml` raises: like pynvml's ``NVMLError``, with the code in ``value``."""

    def __init__(self, value: int) -> None:
        super().__init__(_ERROR_TEXT.get(value, f"NVML Error with code {value}"))
        self.value = value


#: Names usable in a fake description wherever a value may instead fail.
FAKE_ERRORS: Mapping[str, int] = MappingProxyType(
    {
        "NOT_SUPPORTED": NVML_ERROR_NOT_SUPPORTED,
        "NO_PERMISSION": NVML_ERROR_NO_PERMISSION,
        "DRIVER_NOT_LOADED": NVML_ERROR_DRIVER_NOT_LOADED,
        "LIBRARY_NOT_FOUND": NVML_ERROR_LIBRARY_NOT_FOUND,
        "GPU_IS_LOST": NVML_ERROR_GPU_IS_LOST,
        "UNKNOWN": NVML_ERROR_UNKNOWN,
    }
)


class FakeNvml:
    """An in-memory NVML for tests: pynvml's calls and return shapes, from a JSON description.

    The description (see ``tests/fixtures/nvml/``)::

        {"driver_version": "550.90.07", "gpu_count": 8,
         "init_error": null,                 # or "LIBRARY_NOT_FOUND", ...
         "defaults": {<gpu>},                 # every GPU starts from this
         "gpus": {"3": {<gpu overrides>}}}    # per index, merged over the defaults

    A GPU: ``name``, ``uuid``, ``pci_bus_id``, ``utilization`` ``{gpu, memory}``,
    ``memory`` ``{total, used}``, ``power_usage_mw``, ``power_limit_mw``,
    ``temperature_c``, ``ecc`` ``{volatile: {corrected, uncorrected}, aggregate: ...}``,
    ``retired_pages`` ``{single_bit, double_bit, pending}``, ``remapped_rows``
    ``[corr, unc, pending, failure]``, ``xid_events`` ``[79, ...]``, ``nvlink``
    ``{links, inactive: [..], errors: {"3": {recovery: 5}}}``, ``pcie``
    ``{generation, max_generation, width, max_width}``, ``lost``.  An ``nvlink``
    may name each link's far end in ``remote`` (``{"0": 3, "1": "switch"}``: GPU 3,
    an NVSwitch; ``remote_default`` for the links not listed); without it NVML
    cannot say (not supported).  The top-level ``topology`` is the PCIe matrix in
    ``nvidia-smi topo -m`` labels (``[["X", "PIX"], ["PIX", "X"]]``).  Any value may
    instead be an error name from :data:`FAKE_ERRORS` (e.g. ``"NOT_SUPPORTED"``),
    which that call then raises; a ``lost`` GPU raises ``GPU_IS_LOST`` for every
    query but still delivers its Xid events.
    """

    NVMLError = FakeNvmlError

    def __init__(self, description: Mapping[str, Any]) -> None:
        self.description = description
        count = int(description.get("gpu_count", len(description.get("gpus", {}))))
        defaults = dict(description.get("defaults", {}))
        overrides = description.get("gpus", {})
        self.gpus: list[dict[str, Any]] = []
        for index in range(count):
            gpu = {
                "uuid": f"GPU-fa4e{index:04x}-0000-4000-8000-{index:012x}",
                "pci_bus_id": f"00000000:{0x18 + 0x10 * index:02X}:00.0",
                **defaults,
                **dict(overrides.get(str(index), {})),
            }
            self.gpus.append(gpu)
        self.initialised = False
        self.shutdowns = 0
        self._events: list[SimpleNamespace] | None = None

    @classmethod
    def from_file(cls, path: str | Path) -> FakeNvml:
        """A fake from a JSON description file."""
        with open(path, encoding="utf-8") as fh:
            return cls(json.load(fh))

    # ------------------------------------------------------------------ plumbing

    @staticmethod
    def _value(value: Any) -> Any:
        if isinstance(value, str) and value in FAKE_ERRORS:
            raise FakeNvmlError(FAKE_ERRORS[value])
        return value

    def _gpu(self, handle: Any) -> dict[str, Any]:
        if not self.initialised:
            raise FakeNvmlError(1)  # NVML_ERROR_UNINITIALIZED
        gpu = self.gpus[int(handle)]
        if gpu.get("lost"):
            raise FakeNvmlError(NVML_ERROR_GPU_IS_LOST)
        return gpu

    def _field(self, handle: Any, key: str, default: Any = "NOT_SUPPORTED") -> Any:
        return self._value(self._gpu(handle).get(key, default))

    # ------------------------------------------------------------------ system

    def nvmlInit(self) -> None:
        error = self.description.get("init_error")
        if error:
            raise FakeNvmlError(FAKE_ERRORS[error])
        self.initialised = True

    def nvmlShutdown(self) -> None:
        self.initialised = False
        self.shutdowns += 1

    def nvmlSystemGetDriverVersion(self) -> str:
        return str(self.description.get("driver_version", "550.90.07"))

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        if not 0 <= index < len(self.gpus):
            raise FakeNvmlError(NVML_ERROR_INVALID_ARGUMENT)
        return index

    # ------------------------------------------------------------------ device

    def nvmlDeviceGetName(self, handle: Any) -> str:
        return str(self._field(handle, "name", "NVIDIA H100 80GB HBM3"))

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        # UUIDs answer even for a lost GPU, as the event path needs them.
        return str(self.gpus[int(handle)]["uuid"])

    def nvmlDeviceGetPciInfo(self, handle: Any) -> SimpleNamespace:
        bus_id = str(self._field(handle, "pci_bus_id"))
        return SimpleNamespace(busId=bus_id.encode(), busIdLegacy=bus_id[4:].encode())

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> SimpleNamespace:
        util = self._field(handle, "utilization", {"gpu": 0, "memory": 0})
        return SimpleNamespace(gpu=int(util["gpu"]), memory=int(util["memory"]))

    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> SimpleNamespace:
        mem = self._field(handle, "memory", {"total": 85520809984, "used": 0})
        total, used = int(mem["total"]), int(mem["used"])
        return SimpleNamespace(total=total, used=used, free=total - used)

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        return int(self._field(handle, "power_usage_mw", 70000))

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Any) -> int:
        return int(self._field(handle, "power_limit_mw", 700000))

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        return int(self._field(handle, "temperature_c", 30))

    def nvmlDeviceGetTotalEccErrors(self, handle: Any, error_type: int, counter: int) -> int:
        ecc = self._field(handle, "ecc")
        scope = self._value(ecc["volatile" if counter == _VOLATILE_ECC else "aggregate"])
        kind = "corrected" if error_type == _MEMORY_ERROR_CORRECTED else "uncorrected"
        return int(self._value(scope.get(kind, 0)))

    def nvmlDeviceGetRetiredPages(self, handle: Any, cause: int) -> list[int]:
        pages = self._field(handle, "retired_pages")
        number = int(pages.get("single_bit" if cause == _RETIRED_BY_SBE else "double_bit", 0))
        base = 0x1000 if cause == _RETIRED_BY_SBE else 0x80000
        return [base + 0x10 * i for i in range(number)]

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: Any) -> int:
        pages = self._field(handle, "retired_pages")
        return int(bool(self._value(pages.get("pending", False))))

    def nvmlDeviceGetRemappedRows(self, handle: Any) -> tuple[int, int, int, int]:
        corr, unc, pending, failure = (int(v) for v in self._field(handle, "remapped_rows"))
        return corr, unc, pending, failure

    def nvmlDeviceGetNvLinkState(self, handle: Any, link: int) -> int:
        nvlink = self._field(handle, "nvlink")
        if not 0 <= link < int(nvlink.get("links", 0)):
            raise FakeNvmlError(NVML_ERROR_INVALID_ARGUMENT)
        return 0 if link in nvlink.get("inactive", ()) else 1

    def nvmlDeviceGetNvLinkErrorCounter(self, handle: Any, link: int, counter: int) -> int:
        nvlink = self._field(handle, "nvlink")
        if not 0 <= link < int(nvlink.get("links", 0)):
            raise FakeNvmlError(NVML_ERROR_INVALID_ARGUMENT)
        errors = nvlink.get("errors", {}).get(str(link), {})
        return int(self._value(errors.get(_NVLINK_COUNTERS[counter], 0)))

    def _nvlink_remote(self, handle: Any, link: int) -> Any:
        nvlink = self._field(handle, "nvlink")
        if not 0 <= link < int(nvlink.get("links", 0)):
            raise FakeNvmlError(NVML_ERROR_INVALID_ARGUMENT)
        remote = nvlink.get("remote", {}).get(str(link), nvlink.get("remote_default"))
        return self._value("NOT_SUPPORTED" if remote is None else remote)

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: Any, link: int) -> SimpleNamespace:
        remote = self._nvlink_remote(handle, link)
        if remote == "switch":
            bus_id = f"00000000:{0xA0 + link % 4:02X}:00.0"  # one of four NVSwitches
        else:
            bus_id = str(self.gpus[int(remote)]["pci_bus_id"])
        return SimpleNamespace(busId=bus_id.encode(), busIdLegacy=bus_id[4:].encode())

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: Any, link: int) -> int:
        remote = self._nvlink_remote(handle, link)
        return _NVLINK_DEVICE_SWITCH if remote == "switch" else _NVLINK_DEVICE_GPU

    def nvmlDeviceGetTopologyCommonAncestor(self, handle1: Any, handle2: Any) -> int:
        self._gpu(handle1)
        self._gpu(handle2)
        matrix = self._value(self.description.get("topology", "NOT_SUPPORTED"))
        label = self._value(matrix[int(handle1)][int(handle2)])
        levels = {v: k for k, v in TOPOLOGY_LABELS.items() if k}  # PIX is SINGLE, not INTERNAL
        if label not in levels:
            raise FakeNvmlError(NVML_ERROR_INVALID_ARGUMENT)
        return levels[label]

    def _pcie(self, handle: Any, key: str) -> int:
        return int(self._value(self._field(handle, "pcie")[key]))

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: Any) -> int:
        return self._pcie(handle, "generation")

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: Any) -> int:
        return self._pcie(handle, "max_generation")

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: Any) -> int:
        return self._pcie(handle, "width")

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: Any) -> int:
        return self._pcie(handle, "max_width")

    # ------------------------------------------------------------------ events

    def nvmlEventSetCreate(self) -> str:
        if not self.initialised:
            raise FakeNvmlError(1)
        self._events = []
        return "fake-event-set"

    def nvmlDeviceRegisterEvents(self, handle: Any, event_types: int, event_set: Any) -> None:
        events = self._value(self.gpus[int(handle)].get("xid_events", []))
        if self._events is None:
            raise FakeNvmlError(NVML_ERROR_INVALID_ARGUMENT)
        for xid in events:
            if event_types & _EVENT_XID:
                self._events.append(
                    SimpleNamespace(
                        device=int(handle),
                        eventType=_EVENT_XID,
                        eventData=int(xid),
                        gpuInstanceId=0xFFFFFFFF,
                        computeInstanceId=0xFFFFFFFF,
                    )
                )

    def nvmlEventSetWait(self, event_set: Any, timeout_ms: int) -> SimpleNamespace:
        if not self._events:
            raise FakeNvmlError(NVML_ERROR_TIMEOUT)
        return self._events.pop(0)

    def nvmlEventSetFree(self, event_set: Any) -> None:
        self._events = None

    def inject_xid(self, index: int, xid: int) -> None:
        """Queue an Xid event on GPU ``index``, as the driver would after registration."""
        if self._events is not None:
            self._events.append(SimpleNamespace(device=index, eventType=_EVENT_XID, eventData=xid))
