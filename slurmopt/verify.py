"""``slurmopt verify``'s judgement: what the benchmark's numbers mean.

Pure: a snapshot, a fabric and the benchmark's JSON document (read by
:mod:`slurmopt.verify_doc`) in, a frozen :class:`VerifyReport` out.
Running the job is :mod:`slurmopt.verify_run`'s business; which nodes it
tests and the groups it times are chosen in :mod:`slurmopt.verify_nodes`,
whose names are re-exported here.

The bandwidth model.  A ring all-reduce moves every byte over every link
of the ring, so its bus bandwidth (nccl-tests' ``busbw``, the algorithm
bandwidth times ``2(n-1)/n``) approaches the bandwidth of the slowest link
the ring crosses.  The expected bus bandwidth of a set of nodes is
therefore the slowest effective link between them on the fabric
(:meth:`Fabric.span`, nominal bandwidth over oversubscription, in Gb/s)
divided by 8, in GB/s.  It models one network link per node; a node with
several NICs that NCCL stripes over reaches more, and ``--expect-busbw``
then says what to expect instead.

The flag rules, at the largest message size:

* efficiency: the whole run, each ring pair and each leaf group whose bus
  bandwidth is below ``min_efficiency`` times its expected figure;
* outlier: a pair (or leaf group) whose score is below ``outlier`` times
  the median score of the other pairs (leaf groups).  The score is the
  efficiency when every group of that kind has an expected figure, else
  the bus bandwidth;
* node: a node both of whose ring pairs score below ``outlier`` times the
  median of the pairs that do not include it.  A slow node slows exactly
  its two pairs, so leaving them out keeps the median honest on rings as
  small as 3 nodes;
* switch: a leaf switch whose group is an outlier among the leaf groups;
* a group the benchmark could not run, and a chosen node that never
  reported, are flagged too.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from slurmopt.errors import FabricError, SlurmError, SlurmoptError, UsageError
from slurmopt.fabric.core import Fabric
from slurmopt.verify_doc import (
    BENCH_SCHEMA_VERSION,
    LEAF,
    PAIR,
    RUN,
    BenchDocument,
    BenchDocumentError,
    GroupResult,
    SizeResult,
    parse_document,
)
from slurmopt.verify_nodes import (
    PlannedGroup,
    choose_nodes,
    is_free,
    natural_key,
    plan_groups,
    ring_order,
    switch_of,
)

#: The layout of ``slurmopt verify --json``.
SCHEMA_VERSION = 1
DEFAULT_NODES = 4
DEFAULT_MAX_BYTES = 256 * 1024 * 1024
DEFAULT_MIN_EFFICIENCY = 0.5
DEFAULT_OUTLIER = 0.7


class BenchJobFailed(SlurmError):
    """The benchmark job ran but did not finish cleanly, so nothing was measured."""


class VerifyTimeout(SlurmoptError):
    """The benchmark job did not finish within ``--timeout`` (it was cancelled)."""

    exit_code = 75  # EX_TEMPFAIL


class VerifyFailed(SlurmoptError):
    """The cluster was measured and something is flagged: the acceptance test fails."""

    exit_code = 1


# ---------------------------------------------------------------------- judgement


@dataclass(frozen=True, slots=True)
class Expectation:
    """The bus bandwidth a set of nodes should reach (GB/s), and where the figure comes from."""

    busbw_GBps: float | None
    slowest_link_gbps: float | None
    source: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "busbw_GBps": self.busbw_GBps,
            "slowest_link_gbps": self.slowest_link_gbps,
            "source": self.source,
        }


def expectation(fabric: Fabric, nodes: Sequence[str], override: float | None = None) -> Expectation:
    """``override`` when given, else the slowest link the nodes' traffic crosses, over 8."""
    if override is not None:
        return Expectation(override, None, "--expect-busbw")
    try:
        span = fabric.span(nodes)
    except FabricError as exc:
        return Expectation(None, None, f"unknown: {exc}")
    if span.slowest_link_gbps is None:
        return Expectation(None, None, "unknown: no link between them")
    gbps = span.slowest_link_gbps
    return Expectation(gbps / 8, gbps, f"fabric: slowest link {gbps:g} Gb/s / 8")


@dataclass(frozen=True, slots=True)
class Measurement:
    """The bus bandwidth one set of nodes reached at the largest size, against its expectation."""

    name: str
    kind: str
    nodes: tuple[str, ...]
    ranks: int
    result: SizeResult | None
    expected: Expectation
    error: str = ""
    switches: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """The name, with the switches a pair hangs off (a pair across two leaves says so)."""
        if self.kind != PAIR or not self.switches:
            return self.name
        where = "across" if len(self.switches) > 1 else "under"
        return f"{self.name} ({where} {', '.join(self.switches)})"

    @property
    def busbw_GBps(self) -> float | None:
        return None if self.result is None else self.result.busbw_GBps

    @property
    def efficiency(self) -> float | None:
        """Measured over expected bus bandwidth, or None where either is unknown."""
        if self.result is None or not self.expected.busbw_GBps:
            return None
        return self.result.busbw_GBps / self.expected.busbw_GBps

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "kind": self.kind, "nodes": list(self.nodes)}
        out["ranks"] = self.ranks
        out.update(self.result.as_dict() if self.result is not None else {"bytes": None})
        out["expected"] = self.expected.as_dict()
        out["efficiency"] = self.efficiency
        out["switches"] = list(self.switches)
        if self.error:
            out["error"] = self.error
        return out


@dataclass(frozen=True, slots=True)
class Flag:
    """One thing that failed: what (``kind`` and ``subject``), by which rule, in words."""

    kind: str  # run, pair, leaf, node, switch, group
    subject: str
    rule: str  # efficiency, outlier, both-pairs, not-run, missing
    message: str

    def as_dict(self) -> dict[str, str]:
        return {
            "kind": self.kind,
            "subject": self.subject,
            "rule": self.rule,
            "message": self.message,
        }


@dataclass(frozen=True)
class VerifyReport:
    """Everything ``slurmopt verify`` prints: measurements, expectations, flags, GPUs."""

    nodes: tuple[str, ...]
    backend: str
    world_size: int
    nproc_per_node: int
    results: tuple[SizeResult, ...]
    run: Measurement
    groups: tuple[Measurement, ...]
    flags: tuple[Flag, ...]
    node_gpus: Mapping[str, Mapping[str, Any]]
    min_efficiency: float
    outlier: float
    fabric_source: str
    job: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "node_gpus", MappingProxyType(dict(self.node_gpus)))
        object.__setattr__(self, "job", MappingProxyType(dict(self.job)))

    @property
    def passed(self) -> bool:
        return not self.flags

    def as_dict(self) -> dict[str, Any]:
        """The ``--json`` document (schema_version 1)."""
        return {
            "schema_version": SCHEMA_VERSION,
            "passed": self.passed,
            "nodes": list(self.nodes),
            "backend": self.backend,
            "world_size": self.world_size,
            "nproc_per_node": self.nproc_per_node,
            "job": dict(self.job),
            "fabric_source": self.fabric_source,
            "thresholds": {"min_efficiency": self.min_efficiency, "outlier": self.outlier},
            "expected": self.run.expected.as_dict(),
            "results": [r.as_dict() for r in self.results],
            "run": self.run.as_dict(),
            "groups": [g.as_dict() for g in self.groups],
            "flags": [f.as_dict() for f in self.flags],
            "node_gpus": {k: dict(v) for k, v in self.node_gpus.items()},
        }


def _fmt(value: float | None) -> str:
    return "?" if value is None else f"{value:.3g} GB/s"


def _score(group: Measurement, by_efficiency: bool) -> float | None:
    return group.efficiency if by_efficiency else group.busbw_GBps


def _outliers(groups: Sequence[Measurement], outlier: float) -> dict[str, tuple[float, float]]:
    """Groups scoring below ``outlier`` x the median of the others: name -> (score, median)."""
    measured = [g for g in groups if g.result is not None]
    by_efficiency = all(g.efficiency is not None for g in measured)
    scores = {g.name: _score(g, by_efficiency) for g in measured}
    found: dict[str, tuple[float, float]] = {}
    if len(scores) < 2:
        return found
    for name, score in scores.items():
        others = [s for n, s in scores.items() if n != name and s is not None]
        if score is None or not others:
            continue
        median = statistics.median(others)
        if score < outlier * median:
            found[name] = (score, median)
    return found


def check_thresholds(min_efficiency: float, outlier: float, expect_busbw: float | None) -> None:
    """:class:`UsageError` for a threshold outside its range (checked before any job runs)."""
    if not 0 <= min_efficiency <= 1:
        raise UsageError(f"--min-efficiency must be 0 to 1, got {min_efficiency:g}")
    if not 0 < outlier <= 1:
        raise UsageError(f"--outlier must be above 0 and at most 1, got {outlier:g}")
    if expect_busbw is not None and not expect_busbw > 0:
        raise UsageError(f"--expect-busbw must be a positive number of GB/s, got {expect_busbw:g}")


def evaluate(
    document: BenchDocument,
    fabric: Fabric,
    nodes: Sequence[str] | None = None,
    *,
    min_efficiency: float = DEFAULT_MIN_EFFICIENCY,
    outlier: float = DEFAULT_OUTLIER,
    expect_busbw: float | None = None,
    job: Mapping[str, Any] | None = None,
) -> VerifyReport:
    """Judge a benchmark document against the fabric; ``nodes`` are the nodes asked for."""
    check_thresholds(min_efficiency, outlier, expect_busbw)
    asked = list(nodes or ())
    ran = tuple(
        [n for n in asked if n in document.nodes] + [n for n in document.nodes if n not in asked]
    )  # the order asked for (the ring), then any other
    largest = max(document.results, key=lambda r: r.bytes)
    run = Measurement(
        "all",
        RUN,
        ran,
        document.world_size,
        largest,
        expectation(fabric, ran, expect_busbw),
        switches=_switches(fabric, ran),
    )
    groups = tuple(
        Measurement(
            g.name,
            g.kind,
            g.nodes,
            len(g.ranks),
            g.result,
            expectation(fabric, g.nodes, expect_busbw),
            g.error,
            _switches(fabric, g.nodes),
        )
        for g in document.groups
    )
    flags: list[Flag] = []
    for name in asked:
        if name not in ran:
            flags.append(
                Flag("node", name, "missing", f"node {name} was asked for but never reported")
            )
    for group in (run, *groups):
        if group.error:
            flags.append(
                Flag(
                    "group", group.name, "not-run", f"{group.name} was not measured: {group.error}"
                )
            )
            continue
        efficiency = group.efficiency
        if efficiency is not None and efficiency < min_efficiency:
            subject = "the whole run" if group.kind == RUN else group.label
            flags.append(
                Flag(
                    group.kind,
                    group.name,
                    "efficiency",
                    f"{subject}: bus bandwidth {_fmt(group.busbw_GBps)} is {efficiency:.1%} of "
                    f"the expected {_fmt(group.expected.busbw_GBps)} "
                    f"(minimum {min_efficiency:.0%})",
                )
            )
    pairs = [g for g in groups if g.kind == PAIR]
    labels = {p.name: p.label for p in pairs}
    for name, (score, median) in _outliers(pairs, outlier).items():
        flags.append(
            Flag(
                PAIR,
                name,
                "outlier",
                f"{labels[name]}: {_score_text(score, pairs)} is below {outlier:g} x the median "
                f"of the other pairs ({_score_text(median, pairs)})",
            )
        )
    slow_nodes = _slow_nodes(pairs, outlier)
    flags.extend(slow_nodes)
    flags.extend(_slow_switches([g for g in groups if g.kind == LEAF], slow_nodes, outlier))
    return VerifyReport(
        nodes=ran,
        backend=document.backend,
        world_size=document.world_size,
        nproc_per_node=document.nproc_per_node,
        results=document.results,
        run=run,
        groups=groups,
        flags=tuple(flags),
        node_gpus=document.node_gpus,
        min_efficiency=min_efficiency,
        outlier=outlier,
        fabric_source=fabric.source,
        job=job or {},
    )


def _switches(fabric: Fabric, nodes: Sequence[str]) -> tuple[str, ...]:
    return tuple(sorted({sw for n in nodes if (sw := switch_of(fabric, n))}))


def _score_text(score: float, groups: Sequence[Measurement]) -> str:
    measured = [g for g in groups if g.result is not None]
    if measured and all(g.efficiency is not None for g in measured):
        return f"{score:.1%} of expected"
    return _fmt(score)


def _slow_switches(
    leaves: Sequence[Measurement], slow_nodes: Sequence[Flag], outlier: float
) -> list[Flag]:
    """Leaf groups that are outliers, unless some (not all) of their nodes are slow themselves.

    One slow node drags its leaf's group down with it: then the node is to
    blame, not the switch.  When every tested node under a leaf is slow, the
    switch they share is the likelier cause, so it is flagged as well.
    """
    slow = {f.subject for f in slow_nodes}
    outliers = _outliers(leaves, outlier)
    flags = []
    for group in leaves:
        switch = group.name.partition(":")[2]
        under = [n for n in group.nodes if n in slow]
        every = len(under) == len(group.nodes) >= 2
        if group.name in outliers and (every or not under):
            score, median = outliers[group.name]
            why = (
                f"its nodes reach {_score_text(score, leaves)}, below {outlier:g} x the median "
                f"of the other leaves ({_score_text(median, leaves)})"
            )
        elif every:
            why = "every tested node under it is slow with its ring neighbours"
        else:
            continue
        flags.append(Flag("switch", switch, "outlier", f"leaf switch {switch}: {why}"))
    return flags


def _slow_nodes(pairs: Sequence[Measurement], outlier: float) -> list[Flag]:
    """Nodes both of whose pairs score below ``outlier`` x the median of the pairs without them."""
    measured = [p for p in pairs if p.result is not None]
    if len(measured) < 3:
        return []
    by_efficiency = all(p.efficiency is not None for p in measured)
    flags = []
    nodes = dict.fromkeys(n for p in measured for n in p.nodes)
    for node in nodes:
        own = [p for p in measured if node in p.nodes]
        others = [
            s
            for p in measured
            if node not in p.nodes
            if (s := _score(p, by_efficiency)) is not None
        ]
        if len(own) < 2 or not others:
            continue
        median = statistics.median(others)
        scores = [_score(p, by_efficiency) for p in own]
        if all(s is not None and s < outlier * median for s in scores):
            shown = ", ".join(
                f"{p.name.partition(':')[2]} {_score_text(s or 0.0, measured)}"
                for p, s in zip(own, scores, strict=True)
            )
            flags.append(
                Flag(
                    "node",
                    node,
                    "both-pairs",
                    f"node {node}: slow with both ring neighbours ({shown}); the pairs without it "
                    f"reach {_score_text(median, measured)}",
                )
            )
    return flags


__all__ = [
    "BENCH_SCHEMA_VERSION",
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MIN_EFFICIENCY",
    "DEFAULT_NODES",
    "DEFAULT_OUTLIER",
    "LEAF",
    "PAIR",
    "RUN",
    "SCHEMA_VERSION",
    "BenchDocument",
    "BenchDocumentError",
    "BenchJobFailed",
    "Expectation",
    "Flag",
    "GroupResult",
    "Measurement",
    "PlannedGroup",
    "SizeResult",
    "VerifyFailed",
    "VerifyReport",
    "VerifyTimeout",
    "check_thresholds",
    "choose_nodes",
    "evaluate",
    "expectation",
    "is_free",
    "natural_key",
    "parse_document",
    "plan_groups",
    "ring_order",
]
