"""``slurmopt verify``'s report for people: tables, flags, GPUs, verdict; and the plot.

Kept apart from the command (:mod:`slurmopt.cli.verify`) so that the command
module stays options and wiring; the JSON form is
:meth:`slurmopt.verify.VerifyReport.as_dict`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import click

from slurmopt.cli.common import print_table
from slurmopt.errors import UsageError
from slurmopt.verify import Measurement, VerifyReport
from slurmopt.verify_run import human_bytes


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _gb(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _group_row(group: Measurement, flagged: set[str]) -> list[str]:
    from slurmopt.hostlist import fold

    size = "-" if group.result is None else human_bytes(group.result.bytes)
    return [
        group.name,
        fold(group.nodes),
        str(group.ranks),
        size,
        _gb(group.busbw_GBps),
        _gb(group.expected.busbw_GBps),
        _pct(group.efficiency),
        "FLAGGED" if group.name in flagged else ("not run" if group.error else "ok"),
    ]


def _gpu_lines(node: str, info: Mapping[str, Any]) -> list[str]:
    state = str(info.get("nvml", "?"))
    if state != "ok":
        return [f"{node}: NVML {state}"]
    lines = [f"{node}: driver {info.get('driver_version') or '?'}"]
    topology = info.get("topology")
    if isinstance(topology, Mapping) and topology.get("gpus"):
        from slurmopt.health.nvml import GpuTopology

        matrix = GpuTopology(
            tuple(topology["gpus"]), tuple(tuple(r) for r in topology.get("matrix", ()))
        )
        lines += ["  " + row for row in matrix.lines()]
    for draw in info.get("power") or ():
        peak, mean, limit = draw.get("peak_w"), draw.get("mean_w"), draw.get("limit_w")
        text = (
            f"  GPU{draw.get('index')}: power under load peak "
            f"{'-' if peak is None else f'{peak:.0f}'} W, mean "
            f"{'-' if mean is None else f'{mean:.0f}'} W, limit "
            f"{'-' if limit is None else f'{limit:.0f}'} W"
        )
        if peak is not None and limit:
            text += f" (peak {peak / limit:.0%} of limit)"
        if draw.get("unavailable"):
            text += f"; {draw['unavailable']}"
        lines.append(text)
    lines += [f"  error: {e}" for e in info.get("errors") or ()]
    return lines


def print_report(report: VerifyReport) -> None:
    """The report for people: tables, expectation, flags, GPUs, verdict."""
    from slurmopt.hostlist import fold

    job = report.job
    click.echo(
        f"slurmopt verify: {len(report.nodes)} nodes ({fold(report.nodes)}) x "
        f"{report.nproc_per_node} process(es), {report.backend}, job {job.get('id', '?')}"
    )
    print_table(
        f"all-reduce over {report.world_size} ranks",
        ["size", "time (us)", "algbw (GB/s)", "busbw (GB/s)"],
        [
            [human_bytes(r.bytes), f"{r.time_us:.1f}", _gb(r.algbw_GBps), _gb(r.busbw_GBps)]
            for r in report.results
        ],
        right_align=lambda col: col != "size",
    )
    flagged = {f.subject for f in report.flags} | {
        f"leaf:{f.subject}" for f in report.flags if f.kind == "switch"
    }
    columns = ["group", "nodes", "ranks", "size", "busbw", "expected", "efficiency", "result"]
    rows = [_group_row(g, flagged) for g in (report.run, *report.groups)]
    numeric = ("ranks", "busbw", "expected", "efficiency")
    print_table(
        "groups (bus bandwidth in GB/s at the largest size)",
        columns,
        rows,
        right_align=lambda col: col in numeric,
    )
    expected = report.run.expected
    click.echo("")
    click.echo(
        f"expected bus bandwidth: {_gb(expected.busbw_GBps)} GB/s ({expected.source}); "
        f"fabric: {report.fabric_source or 'unnamed'}"
    )
    click.echo(
        f"measured: {_gb(report.run.busbw_GBps)} GB/s at "
        f"{human_bytes(report.run.result.bytes) if report.run.result else '?'}, efficiency "
        f"{_pct(report.run.efficiency)} (minimum {report.min_efficiency:.0%}; outlier below "
        f"{report.outlier:g} x median)"
    )
    click.echo("")
    click.echo("GPUs per node:")
    for node in report.nodes:
        info = report.node_gpus.get(node)
        for line in _gpu_lines(node, info) if info is not None else [f"{node}: no report"]:
            click.echo("  " + line)
    click.echo("")
    for flag in report.flags:
        click.echo(f"FLAG {flag.message}")
    if job.get("output"):
        click.echo(f"job output: {job['output']}; benchmark document: {job.get('document')}")
    click.echo("PASS: nothing flagged" if report.passed else f"FAIL: {len(report.flags)} flag(s)")


def write_plot(report: VerifyReport, path: str) -> None:
    """A PNG of algorithm and bus bandwidth against message size, with the expected line."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    from slurmopt.hostlist import fold

    fig = Figure(figsize=(8, 5), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    sizes = [r.bytes for r in report.results]
    ax.plot(sizes, [r.algbw_GBps for r in report.results], marker="o", label="algbw")
    ax.plot(sizes, [r.busbw_GBps for r in report.results], marker="s", label="busbw")
    expected = report.run.expected.busbw_GBps
    if expected:
        ax.axhline(
            expected, color="gray", linestyle="--", label=f"expected busbw {expected:.3g} GB/s"
        )
        if report.min_efficiency:
            floor = expected * report.min_efficiency
            ax.axhline(floor, color="red", linestyle=":", label=f"minimum {floor:.3g} GB/s")
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(
        FuncFormatter(lambda x, _pos: human_bytes(int(x)).replace(" ", ""))
    )
    ax.set_xlabel("message size")
    ax.set_ylabel("GB/s")
    verdict = "pass" if report.passed else f"{len(report.flags)} flag(s)"
    ax.set_title(
        f"all-reduce, {fold(report.nodes)}: {report.world_size} ranks, {report.backend} ({verdict})"
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    try:
        fig.savefig(path, format="png")
    except OSError as exc:
        raise UsageError(f"--plot {path}: {exc.strerror or exc}") from None
