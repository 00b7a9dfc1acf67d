"""Which signals a preemption may send: one set, read by config, daemon and templates alike."""

from __future__ import annotations

#: The checkpoint request signal the templates trap unless the site configures another.
DEFAULT_SIGNAL = "USR2"
#: The only signals a preemption may send: catchable ones that a template (or a framework
#: such as Lightning, USR1) traps to checkpoint.  Never KILL or STOP: a victim must be able
#: to save its work, and the daemon must be able to tell it apart from a crash.
ALLOWED_SIGNALS = ("USR2", "USR1", "TERM")


def check_signal(name: str) -> str:
    """``name`` as Slurm spells it (``USR2``); ValueError unless one of :data:`ALLOWED_SIGNALS`."""
    spelled = name.strip().upper().removeprefix("SIG")
    if spelled not in ALLOWED_SIGNALS:
        raise ValueError(
            f"must be one of {', '.join(ALLOWED_SIGNALS)} (a signal the job can trap to "
            f"checkpoint), got {name!r}"
        )
    return spelled


__all__ = ["ALLOWED_SIGNALS", "DEFAULT_SIGNAL", "check_signal"]
