"""The words slurmopt reads as yes or no, so every reader of a boolean agrees on them.

Config files have TOML booleans, but environment variables, trace columns
and policy variants are text; all of them go through :func:`parse_bool`.
"""

from __future__ import annotations

from collections.abc import Collection

#: Words read as true (after stripping and lowercasing).
TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
#: Words read as false (after stripping and lowercasing).
FALSE_WORDS = frozenset({"0", "false", "no", "off"})

#: Extra true words trace files use: ``y``.
TRACE_TRUE_WORDS = frozenset({"y"})
#: Extra false words trace files use: ``n``, and an empty column, which means "not marked".
TRACE_FALSE_WORDS = frozenset({"n", ""})


class BoolWordError(ValueError):
    """Text that is not one of the boolean words; ``what`` names where it came from."""

    def __init__(self, what: str, text: str) -> None:
        self.what = what
        self.text = text
        super().__init__(f"{what}: expected 1/0, true/false, yes/no or on/off, got {text!r}")


def parse_bool(
    text: str,
    *,
    what: str,
    also_true: Collection[str] = (),
    also_false: Collection[str] = (),
    otherwise: bool | None = None,
) -> bool:
    """``text`` as a boolean, ignoring case and surrounding blanks.

    ``also_true`` / ``also_false`` add words a particular input has always
    accepted (trace files: :data:`TRACE_TRUE_WORDS`, :data:`TRACE_FALSE_WORDS`).
    ``otherwise``, when given, is the answer for any other word (for a switch
    that only a false word turns off); without it such a word raises
    :class:`BoolWordError` naming ``what``.
    """
    word = text.strip().lower()
    if word in TRUE_WORDS or word in also_true:
        return True
    if word in FALSE_WORDS or word in also_false:
        return False
    if otherwise is not None:
        return otherwise
    raise BoolWordError(what, text)
