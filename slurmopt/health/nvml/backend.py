"""NVML's backend: pynvml (the only import of it, done lazily) or any object shaped like it.

Also the status codes slurmopt names, the hints for a node without a usable
driver, and :class:`NvmlUnavailable`, whose one line names NVML and the cause.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
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
