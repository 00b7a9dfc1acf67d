"""A fake NVML for tests and the node agent's hidden ``--fake-nvml``: pynvml's calls from JSON.

Named as a fake: nothing here talks to a GPU.  It raises the same codes and
prints the same texts as pynvml, so the reader cannot tell it from the real one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType, SimpleNamespace
from typing import Any

from slurmopt.health.nvml.backend import (
    _ERROR_TEXT,
    _EVENT_XID,
    _MEMORY_ERROR_CORRECTED,
    _NVLINK_COUNTERS,
    _NVLINK_DEVICE_GPU,
    _NVLINK_DEVICE_SWITCH,
    _RETIRED_BY_SBE,
    _VOLATILE_ECC,
    NVML_ERROR_DRIVER_NOT_LOADED,
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_INVALID_ARGUMENT,
    NVML_ERROR_LIBRARY_NOT_FOUND,
    NVML_ERROR_NO_PERMISSION,
    NVML_ERROR_NOT_SUPPORTED,
    NVML_ERROR_TIMEOUT,
    NVML_ERROR_UNKNOWN,
    TOPOLOGY_LABELS,
)

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
