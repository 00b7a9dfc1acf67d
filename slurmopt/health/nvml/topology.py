"""How the node's GPUs are wired: NVLink counts and PCIe levels between each pair."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from slurmopt.health.nvml.backend import (
    _NVLINK_DEVICE_SWITCH,
    _NVLINK_MAX_LINKS,
    NVML_ERROR_INVALID_ARGUMENT,
    NVML_ERROR_NOT_SUPPORTED,
    TOPOLOGY_LABELS,
    NvmlBackend,
    _code,
    _error_text,
    _text,
)
from slurmopt.health.nvml.readings import _FrozenReading


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
