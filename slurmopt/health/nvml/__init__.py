"""What this node's GPUs report through NVML, as frozen readings.

This package (``backend``) is the only code that imports ``pynvml`` (nvidia-ml-py), and only
when a reader opens without an injected backend, so a controller or a test
machine without the NVIDIA driver can import slurmopt.  The backend is any
object with pynvml's function names, return shapes and ``NVMLError`` class:
the real module, or :class:`~slurmopt.health.fake_nvml.FakeNvml` built from a JSON
description (tests and the node agent's hidden ``--fake-nvml`` hook).

A field the device does not support (``NVML_ERROR_NOT_SUPPORTED``), or that
fails for another reason, is recorded as None with the reason in
``GpuReading.unavailable``; it never raises.  Only a missing driver or
library raises, as :class:`NvmlUnavailable`, whose one line names NVML and
the cause.

The package, by concern: ``backend`` (pynvml, codes, errors), ``readings``
(frozen records), ``reader`` (reading a node), ``topology`` (how the GPUs
are wired), ``power`` (draw under load).  The fake lives apart, in
:mod:`slurmopt.health.fake_nvml`, and is re-exported here for its callers.
"""

from __future__ import annotations

from slurmopt.health.fake_nvml import FAKE_ERRORS, FakeNvml, FakeNvmlError
from slurmopt.health.nvml.backend import (
    NOT_SUPPORTED,
    NVML_ERROR_DRIVER_NOT_LOADED,
    NVML_ERROR_FUNCTION_NOT_FOUND,
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_INVALID_ARGUMENT,
    NVML_ERROR_LIB_RM_VERSION_MISMATCH,
    NVML_ERROR_LIBRARY_NOT_FOUND,
    NVML_ERROR_NO_PERMISSION,
    NVML_ERROR_NOT_FOUND,
    NVML_ERROR_NOT_SUPPORTED,
    NVML_ERROR_TIMEOUT,
    NVML_ERROR_UNKNOWN,
    NVML_SUCCESS,
    TOPOLOGY_LABELS,
    NvmlBackend,
    NvmlUnavailable,
    init_nvml,
    load_pynvml,
)
from slurmopt.health.nvml.power import PowerDraw, PowerSampler
from slurmopt.health.nvml.reader import NvmlReader, read_node
from slurmopt.health.nvml.readings import (
    EccCounts,
    GpuReading,
    NodeReading,
    NvLink,
    PcieLink,
    RemappedRows,
    RetiredPages,
    plain,
)
from slurmopt.health.nvml.topology import GpuTopology, read_topology

__all__ = [
    "EccCounts",
    "FAKE_ERRORS",
    "FakeNvml",
    "FakeNvmlError",
    "GpuReading",
    "GpuTopology",
    "NOT_SUPPORTED",
    "NVML_ERROR_DRIVER_NOT_LOADED",
    "NVML_ERROR_FUNCTION_NOT_FOUND",
    "NVML_ERROR_GPU_IS_LOST",
    "NVML_ERROR_INVALID_ARGUMENT",
    "NVML_ERROR_LIBRARY_NOT_FOUND",
    "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
    "NVML_ERROR_NOT_FOUND",
    "NVML_ERROR_NOT_SUPPORTED",
    "NVML_ERROR_NO_PERMISSION",
    "NVML_ERROR_TIMEOUT",
    "NVML_ERROR_UNKNOWN",
    "NVML_SUCCESS",
    "NodeReading",
    "NvLink",
    "NvmlBackend",
    "NvmlReader",
    "NvmlUnavailable",
    "PcieLink",
    "PowerDraw",
    "PowerSampler",
    "RemappedRows",
    "RetiredPages",
    "TOPOLOGY_LABELS",
    "init_nvml",
    "load_pynvml",
    "plain",
    "read_node",
    "read_topology",
]
