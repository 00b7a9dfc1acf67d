"""GPU node health: NVML readings (:mod:`.nvml`), pure rules (:mod:`.rules`), the node agent.

The node agent (``slurmopt node-agent``, :mod:`.agent`) runs on compute
nodes: it reads the node's GPUs through NVML, judges them healthy, degraded
or drain, and drains the node in Slurm under a cluster-wide cap.  Nothing
here imports ``pynvml`` until a reader opens, so importing this package is
safe on a host without the NVIDIA driver.  See ``docs/health.md``.
"""

from __future__ import annotations

from slurmopt.health.agent import DrainAction, DrainCap, DrainDecision, NodeAgent, decide_drains
from slurmopt.health.nvml import (
    FakeNvml,
    GpuReading,
    NodeReading,
    NvmlReader,
    NvmlUnavailable,
    read_node,
)
from slurmopt.health.rules import (
    Finding,
    HealthThresholds,
    NodeVerdict,
    Reason,
    Severity,
    judge_node,
)

__all__ = [
    "DrainAction",
    "DrainCap",
    "DrainDecision",
    "FakeNvml",
    "Finding",
    "GpuReading",
    "HealthThresholds",
    "NodeAgent",
    "NodeReading",
    "NodeVerdict",
    "NvmlReader",
    "NvmlUnavailable",
    "Reason",
    "Severity",
    "decide_drains",
    "judge_node",
    "read_node",
]
