"""Power draw under load: a background sampler of every GPU's draw against its limit."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from slurmopt.health.nvml.backend import NvmlBackend, _error_text
from slurmopt.health.nvml.readings import plain


@dataclass(frozen=True, slots=True)
class PowerDraw:
    """One GPU's power while sampled: peak and mean draw against its enforced limit (watts).

    ``unavailable`` says why draw or limit is missing.
    """

    index: int
    samples: int
    peak_w: float | None
    mean_w: float | None
    limit_w: float | None
    unavailable: str = ""

    @property
    def peak_share(self) -> float | None:
        """Peak draw as a share of the limit."""
        if self.peak_w is None or not self.limit_w:
            return None
        return self.peak_w / self.limit_w

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values."""
        result: dict[str, Any] = plain(self)
        result["peak_share"] = self.peak_share
        return result


class PowerSampler:
    """Samples every GPU's power draw from a background thread between start() and stop().

    ``start()`` and ``stop()`` each take one sample themselves, so even a
    load shorter than the interval is measured.  NVML must be initialised
    (:func:`init_nvml`) for the whole time.
    """

    def __init__(self, nvml: NvmlBackend, interval_s: float = 0.1) -> None:
        self.nvml = nvml
        self.interval_s = max(0.01, float(interval_s))
        self._handles: list[Any] = []
        self._limits: list[float | None] = []
        self._samples: list[list[float]] = []
        self._why: list[str] = []
        self._opened = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _open(self) -> None:
        self._opened = True
        nvml = self.nvml
        try:
            count = nvml.nvmlDeviceGetCount()
        except nvml.NVMLError:
            count = 0
        for index in range(count):
            why, limit, handle = "", None, None
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                limit = nvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000.0
            except nvml.NVMLError as exc:
                why = f"power limit: {_error_text(exc)}"
            self._handles.append(handle)
            self._limits.append(limit)
            self._samples.append([])
            self._why.append(why)

    def sample(self) -> None:
        """Read every GPU's draw once."""
        if not self._opened:
            self._open()
        nvml = self.nvml
        for index, handle in enumerate(self._handles):
            if handle is None:
                continue
            try:
                self._samples[index].append(nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0)
            except nvml.NVMLError as exc:
                self._why[index] = f"power draw: {_error_text(exc)}"

    def start(self) -> None:
        """Take a sample now and keep sampling every ``interval_s`` until :meth:`stop`."""
        self.sample()
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="power-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def stop(self) -> tuple[PowerDraw, ...]:
        """Stop sampling, take a last sample, and summarise each GPU."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        self.sample()
        return self.summary()

    def summary(self) -> tuple[PowerDraw, ...]:
        """Peak and mean of the samples so far, per GPU."""
        draws = []
        for index, samples in enumerate(self._samples):
            draws.append(
                PowerDraw(
                    index=index,
                    samples=len(samples),
                    peak_w=max(samples) if samples else None,
                    mean_w=sum(samples) / len(samples) if samples else None,
                    limit_w=self._limits[index],
                    unavailable=self._why[index],
                )
            )
        return tuple(draws)
