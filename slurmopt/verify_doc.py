"""The all-reduce benchmark's JSON document, as :mod:`slurmopt.elastic.bench` writes it, checked.

:func:`parse_document` turns the document into a frozen :class:`BenchDocument`
or raises :class:`BenchDocumentError` naming the first problem;
:mod:`slurmopt.verify` judges what it measured.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from slurmopt.errors import SlurmoptError

#: The layout of the benchmark document this module reads (``slurmopt.elastic.bench``).
BENCH_SCHEMA_VERSION = 1
#: Group kinds, and the prefix of their names in the benchmark's ``--group NAME=...``.
PAIR = "pair"
LEAF = "leaf"
RUN = "run"


class BenchDocumentError(SlurmoptError):
    """The benchmark's JSON document is missing or not what slurmopt.elastic.bench writes."""

    exit_code = 65  # EX_DATAERR


@dataclass(frozen=True, slots=True)
class SizeResult:
    """The all-reduce at one message size: mean time, algorithm and bus bandwidth (GB/s)."""

    bytes: int
    time_us: float
    algbw_GBps: float
    busbw_GBps: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "bytes": self.bytes,
            "time_us": self.time_us,
            "algbw_GBps": self.algbw_GBps,
            "busbw_GBps": self.busbw_GBps,
        }


@dataclass(frozen=True, slots=True)
class GroupResult:
    """One ``--group`` as the benchmark reported it (no ``result`` but an ``error`` if not run)."""

    name: str
    nodes: tuple[str, ...]
    ranks: tuple[int, ...]
    result: SizeResult | None
    error: str = ""

    @property
    def kind(self) -> str:
        prefix = self.name.partition(":")[0]
        return prefix if prefix in (PAIR, LEAF) else "group"


@dataclass(frozen=True)
class BenchDocument:
    """What ``slurmopt.elastic.bench`` wrote: the sweep, the groups and each node's GPUs."""

    backend: str
    world_size: int
    nproc_per_node: int
    ranks: tuple[str, ...]
    results: tuple[SizeResult, ...]
    groups: tuple[GroupResult, ...]
    node_gpus: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "node_gpus", MappingProxyType(dict(self.node_gpus)))

    @property
    def nodes(self) -> tuple[str, ...]:
        """The distinct nodes, in rank order."""
        return tuple(dict.fromkeys(self.ranks))


def _number(value: Any, what: str, source: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise BenchDocumentError(f"{source}: {what} is not a number: {value!r}")
    if value < 0:
        raise BenchDocumentError(f"{source}: {what} is negative: {value!r}")
    return float(value)


def _size_result(item: Any, what: str, source: str) -> SizeResult:
    if not isinstance(item, Mapping):
        raise BenchDocumentError(f"{source}: {what} is not an object")
    return SizeResult(
        bytes=int(_number(item.get("bytes"), f"{what}.bytes", source)),
        time_us=_number(item.get("time_us"), f"{what}.time_us", source),
        algbw_GBps=_number(item.get("algbw_gbps"), f"{what}.algbw_gbps", source),
        busbw_GBps=_number(item.get("busbw_gbps"), f"{what}.busbw_gbps", source),
    )


def parse_document(data: Any, source: str = "benchmark document") -> BenchDocument:
    """The benchmark's document, checked; :class:`BenchDocumentError` names the first problem."""
    if not isinstance(data, Mapping):
        raise BenchDocumentError(f"{source}: not a JSON object")
    version = data.get("schema_version")
    if version != BENCH_SCHEMA_VERSION:
        raise BenchDocumentError(
            f"{source}: schema_version {version!r}, this slurmopt reads {BENCH_SCHEMA_VERSION}"
        )
    ranks = data.get("ranks")
    if not isinstance(ranks, list) or not ranks or not all(isinstance(r, str) for r in ranks):
        raise BenchDocumentError(f"{source}: ranks is not a list of node names")
    raw_results = data.get("results")
    if not isinstance(raw_results, list) or not raw_results:
        raise BenchDocumentError(f"{source}: no results")
    results = tuple(_size_result(r, f"results[{i}]", source) for i, r in enumerate(raw_results))
    groups = []
    raw_groups = data.get("groups", [])
    if not isinstance(raw_groups, list):
        raise BenchDocumentError(f"{source}: groups is not a list")
    for i, g in enumerate(raw_groups):
        if not isinstance(g, Mapping) or not isinstance(g.get("name"), str):
            raise BenchDocumentError(f"{source}: groups[{i}] has no name")
        error = str(g.get("error") or "")
        result = None if error else _size_result(g, f"groups[{i}]", source)
        groups.append(
            GroupResult(
                name=g["name"],
                nodes=tuple(str(n) for n in g.get("nodes", ())),
                ranks=tuple(int(r) for r in g.get("ranks", ())),
                result=result,
                error=error,
            )
        )
    node_gpus = data.get("node_gpus", {})
    if not isinstance(node_gpus, Mapping):
        raise BenchDocumentError(f"{source}: node_gpus is not an object")
    world = int(_number(data.get("world_size"), "world_size", source))
    if world != len(ranks):
        raise BenchDocumentError(f"{source}: world_size {world} but {len(ranks)} ranks")
    return BenchDocument(
        backend=str(data.get("backend", "")),
        world_size=world,
        nproc_per_node=int(_number(data.get("nproc_per_node", 1), "nproc_per_node", source)),
        ranks=tuple(ranks),
        results=results,
        groups=tuple(groups),
        node_gpus={str(k): v for k, v in node_gpus.items() if isinstance(v, Mapping)},
    )


__all__ = [
    "BENCH_SCHEMA_VERSION",
    "LEAF",
    "PAIR",
    "RUN",
    "BenchDocument",
    "BenchDocumentError",
    "GroupResult",
    "SizeResult",
    "parse_document",
]
