"""PNG plots of simulation runs (matplotlib, imported only when a plot is asked for)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from slurmopt.errors import UsageError


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only: no display on a head node
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError("--plot needs matplotlib: pip install matplotlib") from None
    return plt


def plot_over_time(
    series: Mapping[str, Sequence[Mapping[str, Any]]], path: Path, title: str
) -> None:
    """GPU allocation and pending jobs over time, one line per policy (``over_time`` samples)."""
    plt = _pyplot()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    for name, samples in series.items():
        hours = [s["t_s"] / 3600 for s in samples]
        top.plot(hours, [100 * s["gpu_allocation_ratio"] for s in samples], label=name)
        bottom.plot(hours, [s["pending_jobs"] for s in samples], label=name)
    top.set_ylabel("GPUs allocated (%)")
    top.set_ylim(0, 105)
    bottom.set_ylabel("pending jobs")
    bottom.set_xlabel("simulated time (h)")
    top.set_title(title)
    top.legend(loc="lower right")
    top.grid(alpha=0.3)
    bottom.grid(alpha=0.3)
    _save(fig, plt, path)


def plot_fill(
    curves: Mapping[str, Sequence[tuple[int, float]]],
    path: Path,
    title: str,
    published: Mapping[str, Sequence[tuple[int, float]]] | None = None,
) -> None:
    """GPU allocation against GPUs asked for (arrival-fill mode), one line per policy."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 5))
    for name, curve in curves.items():
        ax.plot([x for x, _ in curve], [y for _, y in curve], label=name)
    for name, curve in (published or {}).items():
        ax.plot([x for x, _ in curve], [y for _, y in curve], "--", label=f"{name} (published)")
    ax.plot([0, 100], [0, 100], ":", color="grey", linewidth=0.8)
    ax.set_xlabel("GPUs asked for, cumulative (% of capacity)")
    ax.set_ylabel("GPUs allocated (%)")
    ax.set_title(title)
    ax.legend(loc="lower right")
    ax.grid(alpha=0.3)
    _save(fig, plt, path)


def _save(fig: Any, plt: Any, path: Path) -> None:
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=110)
    except OSError as exc:
        raise UsageError(f"--plot: cannot write {path}: {exc.strerror or exc}") from None
    finally:
        plt.close(fig)
