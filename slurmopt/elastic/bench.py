"""All-reduce bandwidth benchmark over torch.distributed (NCCL on GPUs, gloo on CPU).

Run under torchrun (the ``nccl-allreduce-bench`` template does).  NCCL is
used only when every rank on every node has a GPU of its own (two ranks on
one GPU make NCCL stop), gloo on CPU tensors otherwise; the document says
which and why (``backend``, ``backend_reason``).  Rank 0
prints one JSON document (and writes it to ``--out`` when given): per
message size, the mean time and the algorithm and bus bandwidths in GB/s
as nccl-tests defines them (bus = alg x 2(n-1)/n).  Sizes double from
``--min-bytes`` to ``--max-bytes`` (256 MiB).

The document also maps every rank to its node, and, after the full sweep,
times the all-reduce inside each ``--group NAME=HOSTLIST`` of nodes alone,
one group at a time (``slurmopt verify`` uses ring-neighbour pairs and the
nodes under each leaf switch).  Each node's first process reports its GPUs
through NVML: the GPU-to-GPU topology matrix and the power draw while the
largest sizes ran, or why NVML is unavailable; that never fails the run.

Only :func:`main` needs torch, so the rest can be used and tested without it.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MAX_BYTES = 256 * 1024 * 1024
#: The document's layout; ``slurmopt verify`` reads it.
SCHEMA_VERSION = 1
#: Power is sampled from the first size at least this share of ``--max-bytes``.
POWER_FROM_SHARE = 1 / 8


def sizes(low: int, high: int) -> list[int]:
    """Message sizes in bytes, doubling from ``low`` up to ``high`` (float32 multiples)."""
    out, size = [], max(4, low)
    while size <= high:
        out.append(size)
        size *= 2
    return out


def bandwidth(size: int, seconds: float, ranks: int) -> dict[str, float]:
    """Time and algorithm/bus bandwidth (GB/s) of one all-reduce of ``size`` bytes."""
    alg = size / seconds / 1e9 if seconds > 0 else 0.0
    return {
        "bytes": size,
        "time_us": seconds * 1e6,
        "algbw_gbps": alg,
        "busbw_gbps": alg * 2 * (ranks - 1) / ranks if ranks > 0 else 0.0,
    }


@dataclass(frozen=True, slots=True)
class Group:
    """A set of nodes whose ranks run the all-reduce by themselves."""

    name: str
    nodes: tuple[str, ...]


def parse_group(text: str) -> Group:
    """``NAME=HOSTLIST`` (``pair:a+b=a,b``, ``leaf:leaf1=gpu[001-004]``); ValueError if not."""
    from slurmopt.hostlist import HostlistError, expand

    name, sep, hosts = text.partition("=")
    if not sep or not name.strip() or not hosts.strip():
        raise ValueError(f"--group needs NAME=HOSTLIST, got {text!r}")
    try:
        nodes = expand(hosts.strip())
    except HostlistError as exc:
        raise ValueError(f"--group {name}: {exc}") from None
    return Group(name.strip(), tuple(dict.fromkeys(nodes)))


def node_name(environ: Mapping[str, str] | None = None) -> str:
    """The Slurm name of the node this process runs on.

    ``$SLURMD_NODENAME`` (set for every Slurm task), else the ``$SLURM_NODEID``-th
    name of ``$SLURM_JOB_NODELIST``, else the host name.  Emulated nodes share
    one host name, so the host name is only the last resort.
    """
    env = os.environ if environ is None else environ
    if env.get("SLURMD_NODENAME"):
        return env["SLURMD_NODENAME"]
    node_id, nodelist = env.get("SLURM_NODEID", ""), env.get("SLURM_JOB_NODELIST", "")
    if node_id.isdigit() and nodelist:
        from slurmopt.hostlist import HostlistError, expand

        try:
            names = expand(nodelist)
        except HostlistError:
            names = []
        if int(node_id) < len(names):
            return names[int(node_id)]
    return socket.gethostname().split(".")[0]


def group_ranks(rank_nodes: Sequence[str], group: Group) -> tuple[list[int], str]:
    """The ranks on the group's nodes, and why the group cannot run ("" when it can).

    Every rank computes the same answer from the same rank-to-node map, so
    they all agree on which groups to create.
    """
    present = set(rank_nodes)
    missing = [n for n in group.nodes if n not in present]
    if missing:
        return [], f"not in this job: {', '.join(missing)}"
    members = set(group.nodes)
    ranks = [r for r, node in enumerate(rank_nodes) if node in members]
    if len(ranks) < 2:
        return ranks, "fewer than 2 ranks"
    return ranks, ""


class NodeProbe:
    """One node's GPUs through NVML: the topology matrix, and power while under load.

    Never raises: without NVML the report is ``{"nvml": "unavailable: ..."}``,
    and a failure later is recorded as ``"error: ..."``.
    """

    def __init__(self, backend: Any = None, interval_s: float = 0.1) -> None:
        from slurmopt.health.nvml import NvmlUnavailable, PowerSampler, init_nvml

        self.report: dict[str, Any] = {}
        self._nvml: Any = None
        self._sampler: PowerSampler | None = None
        self._sampling = False
        try:
            self._nvml = init_nvml(backend)
        except NvmlUnavailable as exc:
            self.report["nvml"] = "unavailable: " + str(exc).removeprefix("NVML unavailable: ")
            return
        except Exception as exc:  # the benchmark runs whatever NVML does
            self.report["nvml"] = f"error: {type(exc).__name__}: {exc}"
            return
        self.report["nvml"] = "ok"
        self._sampler = PowerSampler(self._nvml, interval_s)
        self._guard("driver_version", lambda: _decode(self._nvml.nvmlSystemGetDriverVersion()))

    def _failed(self, key: str, exc: Exception) -> None:
        self.report[key] = None
        self.report.setdefault("errors", []).append(f"{key}: {type(exc).__name__}: {exc}")

    def _guard(self, key: str, call: Callable[[], Any]) -> None:
        """``report[key] = call()``; a failure is recorded under ``errors``, never raised."""
        try:
            self.report[key] = call()
        except Exception as exc:
            self._failed(key, exc)

    def start_power(self) -> None:
        """Begin sampling power (the large sizes are about to run); later calls do nothing."""
        if self._sampler is None or self._sampling:
            return
        try:
            self._sampler.start()
        except Exception as exc:
            self._sampler = None
            self._failed("power", exc)
            return
        self._sampling = True

    def finish(self) -> dict[str, Any]:
        """Stop sampling, read the topology, shut NVML down; the node's report."""
        if self._nvml is None:
            return self.report
        from slurmopt.health.nvml import read_topology

        sampler = self._sampler
        if sampler is not None and self._sampling:
            self._guard("power", lambda: [d.as_dict() for d in sampler.stop()])
        self._guard("topology", lambda: read_topology(self._nvml).as_dict())
        try:
            self._nvml.nvmlShutdown()
        except Exception:  # shutting down is best effort
            pass
        self._nvml = None
        return self.report


def _decode(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def build_parser() -> argparse.ArgumentParser:
    """The benchmark's options."""
    parser = argparse.ArgumentParser(
        prog="python -m slurmopt.elastic.bench",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    parser.add_argument("--min-bytes", type=int, default=1024)
    parser.add_argument("--max-bytes", type=int, default=MAX_BYTES)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--out", default=None, help="also write the JSON document here")
    parser.add_argument(
        "--group",
        action="append",
        default=[],
        metavar="NAME=HOSTLIST",
        help="after the sweep, time the all-reduce among these nodes alone (repeatable)",
    )
    parser.add_argument(
        "--group-bytes", type=int, default=None, help="message size for --group [--max-bytes]"
    )
    parser.add_argument("--no-nvml", action="store_true", help="skip the NVML report")
    return parser


def parse_args(argv: Sequence[str] | None = None) -> tuple[argparse.Namespace, list[Group]]:
    """Options and groups, checked; argparse exits 2 with one line on a bad value."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.max_bytes > MAX_BYTES:
        parser.error(f"--max-bytes is at most {MAX_BYTES}")
    if args.min_bytes < 4 or args.min_bytes > args.max_bytes:
        parser.error("--min-bytes must be at least 4 and at most --max-bytes")
    if args.iters < 1 or args.warmup < 0:
        parser.error("--iters must be at least 1 and --warmup at least 0")
    if args.group_bytes is None:
        args.group_bytes = sizes(args.min_bytes, args.max_bytes)[-1]
    if not 4 <= args.group_bytes <= MAX_BYTES:
        parser.error(f"--group-bytes must be 4 to {MAX_BYTES}")
    groups: list[Group] = []
    for text in args.group:
        try:
            group = parse_group(text)
        except ValueError as exc:
            parser.error(str(exc))
        if any(g.name == group.name for g in groups):
            parser.error(f"--group {group.name} is given twice")
        groups.append(group)
    return args, groups


def choose_backend(device_count: int, local_world_size: int) -> tuple[str, str]:
    """``(backend, why)`` for one node: NCCL only when each local rank gets a GPU of its own.

    NCCL refuses two ranks on one GPU ("Duplicate GPU detected"), so more
    ranks on a node than GPUs (or no GPU) means gloo on CPU tensors.
    """
    if device_count <= 0:
        return "gloo", "no CUDA device on this node"
    if local_world_size > device_count:
        return "gloo", (
            f"{local_world_size} ranks on a node with {device_count} GPU(s): NCCL needs one "
            "GPU per rank"
        )
    return "nccl", f"one GPU per rank ({local_world_size} ranks, {device_count} GPU(s))"


def main(argv: list[str] | None = None) -> int:
    args, groups = parse_args(argv)
    import torch
    import torch.distributed as dist

    # gloo first, so that every rank can agree on the backend before any GPU is touched.
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    choices: list[Any] = [None] * world
    dist.all_gather_object(choices, choose_backend(gpus, local_world))
    backend, backend_why = next((c for c in choices if c[0] == "gloo"), choices[0])
    use_cuda = backend == "nccl"
    device = torch.device("cuda", local_rank) if use_cuda else None
    if device is not None:
        torch.cuda.set_device(device)
    everyone = dist.new_group(backend=backend) if use_cuda else None

    def synchronize() -> None:
        if use_cuda:
            torch.cuda.synchronize()

    def timed(size: int, group: Any = None) -> float:
        """Mean seconds of one all-reduce of ``size`` bytes among ``group``'s ranks."""
        group = group if group is not None else everyone
        tensor = torch.ones(max(1, size // 4), dtype=torch.float32, device=device)
        for _ in range(args.warmup):
            dist.all_reduce(tensor, group=group)
        synchronize()
        dist.barrier(group=group)
        began = time.perf_counter()
        for _ in range(args.iters):
            dist.all_reduce(tensor, group=group)
        synchronize()
        return (time.perf_counter() - began) / int(args.iters)

    rank_nodes: list[Any] = [None] * world
    dist.all_gather_object(rank_nodes, node_name())
    probe = NodeProbe() if local_rank == 0 and not args.no_nvml else None

    results = []
    all_sizes = sizes(args.min_bytes, args.max_bytes)
    power_from = max(all_sizes[-1] * POWER_FROM_SHARE, all_sizes[0])
    for size in all_sizes:
        if probe is not None and size >= power_from:
            probe.start_power()
        results.append(bandwidth(size, timed(size), world))
    node_report = probe.finish() if probe is not None else None

    measured: dict[str, dict[str, Any]] = {}
    planned: list[tuple[Group, list[int], str, Any]] = []
    for group in groups:
        ranks, why = group_ranks(rank_nodes, group)
        # every rank, same order
        handle = dist.new_group(ranks, backend=backend) if not why else None
        planned.append((group, ranks, why, handle))
    for group, ranks, why, handle in planned:
        if not why and rank in ranks:
            seconds = timed(args.group_bytes, handle)
            if rank == ranks[0]:
                measured[group.name] = bandwidth(args.group_bytes, seconds, len(ranks))
        dist.barrier()  # one group at a time: groups must not share links while timed

    gathered: list[Any] = [None] * world
    dist.all_gather_object(gathered, (measured, node_report))
    if rank == 0:
        nodes: dict[str, Any] = {}
        timings: dict[str, dict[str, Any]] = {}
        for r, (their_groups, report) in enumerate(gathered):
            timings.update(their_groups)
            if report is not None:
                nodes.setdefault(rank_nodes[r], report)
        doc = {
            "schema_version": SCHEMA_VERSION,
            "backend": backend,
            "backend_reason": backend_why,
            "world_size": world,
            "nproc_per_node": int(os.environ.get("LOCAL_WORLD_SIZE", 1)),
            "iters": args.iters,
            "warmup": args.warmup,
            "ranks": rank_nodes,
            "results": results,
            "groups": [
                {
                    "name": group.name,
                    "nodes": list(group.nodes),
                    "ranks": ranks,
                    **({"error": why} if why else timings.get(group.name, {})),
                }
                for group, ranks, why, _ in planned
            ],
            "node_gpus": nodes,
        }
        text = json.dumps(doc)
        if args.out:
            from slurmopt.fsutil import atomic_write

            atomic_write(args.out, text + "\n")
        print(text, flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
