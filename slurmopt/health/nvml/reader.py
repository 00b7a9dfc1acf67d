"""Reading every GPU of a node through a backend, field by field, never raising.

A field the device does not support, or that fails for another reason, is
recorded as None with the reason in ``GpuReading.unavailable``; only a
missing driver or library raises (:class:`NvmlUnavailable`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Any

from slurmopt.health.nvml.backend import (
    _AGGREGATE_ECC,
    _EVENT_XID,
    _MEMORY_ERROR_CORRECTED,
    _MEMORY_ERROR_UNCORRECTED,
    _NVLINK_COUNTERS,
    _NVLINK_MAX_LINKS,
    _RETIRED_BY_DBE,
    _RETIRED_BY_SBE,
    _TEMPERATURE_GPU,
    _VOLATILE_ECC,
    NOT_SUPPORTED,
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_INVALID_ARGUMENT,
    NVML_ERROR_NOT_SUPPORTED,
    NVML_ERROR_TIMEOUT,
    NvmlBackend,
    T,
    _code,
    _error_text,
    _GpuLost,
    _initialise,
    _text,
    load_pynvml,
)
from slurmopt.health.nvml.readings import (
    EccCounts,
    GpuReading,
    NodeReading,
    NvLink,
    PcieLink,
    RemappedRows,
    RetiredPages,
)


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
