"""The planner's knobs: :class:`Policy`, and one :data:`KNOBS` row per field saying how it is set.

A knob used to be spelt out wherever it was set: the config keys and their
checks, the daemon's policy, the simulator's ``slurmopt:KEY=VALUE`` variants
and the benchmark's levers.  Each row here names the field's config key and
variant key (either may be absent), the :class:`Kind` that reads and checks
its values, a one-line help, and the variants the policy benchmark measures;
those callers read the table, so a new knob is one field and one row
(``docs/planner.md``, "Adding a knob").  Pure: no I/O at import.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from slurmopt.words import BoolWordError, parse_bool

if TYPE_CHECKING:
    from slurmopt.policy.fragmentation import JobSizeDistribution

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Policy:
    """The planner's knobs.

    ``backfill_depth``: how many jobs that cannot start get a reservation
    (Slurm's ``bf_max_job_test`` plays the same role); jobs past it simply
    wait and may not delay any reservation.  ``require_single_leaf``: a gang
    that fits on one leaf switch waits for one rather than spreading;
    ``compact_wait_share`` bounds that wait (compare Slurm's ``bf_topopt``;
    0 by default: the gang's reservation is on one leaf, but it starts now
    on the best placement it has now (the fewest tiers, then leaves) when it can):
    when one leaf frees up only later than this share of the job's time
    limit from now, the gang starts now on its best placement instead (None:
    wait however long it takes).
    ``reserve_one_leaf``: a gang that cannot start now, and fits one leaf, is
    reserved on the leaf that frees up first, however much later than a block
    over several leaves (off: the earliest block on the fewest leaves it then
    needs, as Slurm's backfill reserves; gangs wait less, the jobs behind them
    more).
    ``align_ends``: when FGD picks a partly used node for a single-node job,
    the job goes instead to the partly used node it fits on whose running
    jobs end closest to its own time limit, so that nodes empty at once
    rather than leaving a few free GPUs stranded while one job runs on.
    ``elastic``: a job tagged ``elastic=MIN:MAX`` that cannot start on MAX
    nodes now starts on the most nodes between MIN and MAX that are free
    now, when it would finish sooner that way than by waiting for MAX (its
    time limit is the budget at MIN nodes; the work is taken to scale with
    the nodes).
    ``plan_budget``: the most jobs one pass plans, in priority order (0: all
    of them), so a pass on a very long queue stays bounded.  The jobs past it
    are left ``NOT_PLANNED`` for a later pass: none starts, is given back to
    Slurm or is chosen to preempt for, since the pass made no reservations
    beyond the cut that such a start could have delayed.
    ``plan_seconds``: the same cut made by the clock (0: none): once a pass
    has run this long (wall clock, from the start of :func:`plan`), the jobs
    it has not reached are left ``NOT_PLANNED``.  The head of the queue is
    always planned, so a pass that overruns still makes progress; a pass
    cut by the clock is not replayable, one cut by ``plan_budget`` is.
    ``plan_check_every``: every this many passes that share one
    :class:`~slurmopt.policy.cache.PlannerCache`, :func:`plan` also plans
    without it and compares (0: never); a difference is logged as an error,
    the plan without the cache is the one returned and the cache starts over.
    ``partitions``: the partitions slurmopt places jobs in (None: all).
    ``job_sizes``: the distribution the FGD measure uses (None: the queue).
    """

    backfill_depth: int = 100
    require_single_leaf: bool = True
    compact_wait_share: float | None = 0.0
    reserve_one_leaf: bool = True
    align_ends: bool = True
    elastic: bool = True
    plan_budget: int = 0
    plan_seconds: float = 0.0
    plan_check_every: int = 100
    partitions: frozenset[str] | None = None
    job_sizes: JobSizeDistribution | None = None


class Kind(Generic[T]):
    """How one kind of knob value reads from text and what range it must be in.

    ``read`` takes a variant's value (stripped, lower case); ``check`` takes
    a value already of the right type (a config file's); both raise
    ValueError with a one-line message that quotes the bad value and says
    what is allowed (the caller prefixes the key).
    """

    #: The Python type a config file's value must have (a TOML boolean, integer or number).
    config_type: ClassVar[type]
    #: What a config value of the wrong type should have been, for the message.
    expected: ClassVar[str]
    #: Values tests may set (at least one differs from any default).
    examples: ClassVar[tuple[Any, ...]]

    def read(self, text: str) -> T:
        raise NotImplementedError

    def check(self, value: T) -> T:
        return value

    def text(self, value: T) -> str:
        """The variant text that reads back as ``value``."""
        return str(value)


class Flag(Kind[bool]):
    """On or off: the config's true and false words in a variant, a TOML boolean in the file."""

    config_type = bool
    expected = "true or false"
    examples = (True, False)

    def read(self, text: str) -> bool:
        try:
            return parse_bool(text, what="value")
        except BoolWordError:
            raise ValueError(f"must be on or off, got {text!r}") from None

    def text(self, value: bool) -> str:
        return "on" if value else "off"


class Count(Kind[int]):
    """A whole number, 0 or more."""

    config_type = int
    expected = "an integer"
    examples = (0, 7)

    def read(self, text: str) -> int:
        if not text.isdecimal():  # the digits int() reads, and no sign
            raise ValueError(f"must be a whole number, got {text!r}")
        return self.check(int(text))

    def check(self, value: int) -> int:
        if value < 0:
            raise ValueError(f"must be 0 or more, got {value}")
        return value


class Seconds(Kind[float]):
    """A length of time in seconds, 0 or more (0: no bound)."""

    config_type = float
    expected = "a number of seconds"
    examples = (0.0, 0.5)

    def read(self, text: str) -> float:
        try:
            return self.check(float(text))
        except ValueError:
            raise ValueError(f"must be a number of seconds >= 0, got {text!r}") from None

    def check(self, value: float) -> float:
        if not 0 <= value < math.inf:  # NaN fails too
            raise ValueError(f"must be 0 or more, got {value!r}")
        return value

    def text(self, value: float) -> str:
        return repr(value)


class Share(Kind[float | None]):
    """A share of a job's time limit, 0 or more; ``none`` (no bound) only in a variant.

    A TOML file has no null, so a config file cannot say ``none``.
    """

    config_type = float
    expected = "a share of the time limit"
    examples = (0.0, 0.25, None)

    def read(self, text: str) -> float | None:
        if text == "none":
            return None
        try:
            return self.check(float(text))
        except ValueError:
            raise ValueError(f"must be a share >= 0 or none, got {text!r}") from None

    def check(self, value: float | None) -> float | None:
        if value is not None and not 0 <= value < math.inf:  # NaN fails too
            raise ValueError(f"must be 0 or more, got {value!r}")
        return value

    def text(self, value: float | None) -> str:
        return "none" if value is None else repr(value)


@dataclass(frozen=True, slots=True)
class Knob:
    """One :class:`Policy` field and every way it is set.

    ``kind`` None: set only in code (no key reads it).  ``levers``: the
    variant values the policy benchmark measures one at a time, each with
    what it does, as ``(text, what)``.
    """

    field: str
    help: str
    kind: Kind[Any] | None = None
    config_key: str | None = None
    variant_key: str | None = None
    levers: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.kind is None and (self.config_key or self.variant_key or self.levers):
            raise ValueError(f"knob {self.field}: a key needs a kind to read its values")

    def read(self, text: str) -> Any:
        """The value a variant's ``text`` sets; ValueError says what is allowed."""
        if self.kind is None:
            raise ValueError(f"is set only in code, got {text!r}")
        return self.kind.read(text)


FLAG = Flag()
COUNT = Count()
SHARE = Share()
SECONDS = Seconds()

#: Every :class:`Policy` field, in field order (a unit test checks).
KNOBS: tuple[Knob, ...] = (
    Knob(
        "backfill_depth",
        "how many jobs that cannot start get a reservation",
        COUNT,
        config_key="backfill_depth",
        variant_key="backfill_depth",
    ),
    Knob(
        "require_single_leaf",
        "a gang that fits one leaf switch waits for one rather than spreading",
        FLAG,
        variant_key="require_single_leaf",
    ),
    Knob(
        "compact_wait_share",
        "how long, as a share of its time limit, a gang waits for one leaf (none: no bound)",
        SHARE,
        config_key="compact_wait_share",
        variant_key="compact_wait_share",
        levers=(
            ("none", "gangs wait for one leaf however long"),
            ("0.5", "gangs wait for one leaf up to half their time limit"),
            (
                "0.1",
                "gangs wait for one leaf at most a tenth of their time limit, about what "
                "spreading costs",
            ),
        ),
    ),
    Knob(
        "reserve_one_leaf",
        "a gang that cannot start now is reserved on the leaf that frees up first",
        FLAG,
        config_key="reserve_one_leaf",
        variant_key="reserve_one_leaf",
        levers=(
            (
                "off",
                "a gang that cannot start now is reserved at the earliest time on any leaves, as "
                "Slurm's backfill reserves",
            ),
        ),
    ),
    Knob(
        "align_ends",
        "one-node jobs join the partly used node whose jobs end nearest their own",
        FLAG,
        config_key="align_ends",
        variant_key="align_ends",
        levers=(("off", "no end-time alignment of one-node jobs"),),
    ),
    Knob(
        "elastic",
        "an elastic job starts on fewer nodes when that finishes sooner than waiting",
        FLAG,
        config_key="elastic_starts",
        variant_key="elastic",
    ),
    Knob(
        "plan_budget",
        "the most jobs one pass plans, in priority order; the rest wait for a later pass (0: all)",
        COUNT,
        config_key="plan_budget",
        variant_key="plan_budget",
    ),
    Knob(
        "plan_seconds",
        "how long one pass may run (wall clock) before the jobs not yet reached wait (0: no bound)",
        SECONDS,
        config_key="plan_seconds",
    ),
    Knob(
        "plan_check_every",
        "every this many cached passes one is checked against a pass without the cache (0: never)",
        COUNT,
        config_key="plan_check_every",
        variant_key="plan_check_every",
    ),
    Knob("partitions", "the partitions slurmopt places jobs in (None: all)"),
    Knob("job_sizes", "the job-size distribution the FGD measure uses (None: the queue)"),
)

#: The knobs a config key sets, by key.
CONFIG_KNOBS: Mapping[str, Knob] = {k.config_key: k for k in KNOBS if k.config_key}
#: The knobs a ``slurmopt:KEY=VALUE`` variant sets, by key.
VARIANT_KNOBS: Mapping[str, Knob] = {k.variant_key: k for k in KNOBS if k.variant_key}


def policy_with(values: Mapping[str, Any]) -> Policy:
    """The default policy with ``values`` (by field) set; each as its knob's kind read it."""
    return replace(Policy(), **values)


def configured(setting: Mapping[str, Any]) -> Policy:
    """The policy the config values ``setting`` (by config key) make; other fields default."""
    return policy_with({k.field: setting[key] for key, k in CONFIG_KNOBS.items()})


def lever_variants() -> tuple[tuple[str, str], ...]:
    """The benchmark's knob levers: ``(slurmopt:KEY=VALUE, what it does)``, in table order."""
    return tuple(
        (f"slurmopt:{k.variant_key}={text}", what)
        for k in KNOBS
        if k.variant_key
        for text, what in k.levers
    )


__all__ = [
    "CONFIG_KNOBS",
    "COUNT",
    "FLAG",
    "KNOBS",
    "SECONDS",
    "SHARE",
    "VARIANT_KNOBS",
    "Count",
    "Flag",
    "Kind",
    "Knob",
    "Policy",
    "Seconds",
    "Share",
    "configured",
    "lever_variants",
    "policy_with",
]
