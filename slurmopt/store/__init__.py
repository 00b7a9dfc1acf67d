"""slurmopt's own state: managed jobs and their transitions, plans, history and leases.

Slurm stays the source of truth; the store remembers what slurmopt decided
and did, so a restarted daemon reconciles instead of acting twice.  Every
transition is committed before the Slurm call that causes it (see
``docs/store.md``).
"""

from slurmopt.store.db import DEFAULT_URL, URL_ENV, Store, StoreError, resolve_url
from slurmopt.store.models import (
    FINAL_STATES,
    TRANSITIONS,
    Base,
    Decision,
    FragmentationSample,
    Heartbeat,
    JobTransition,
    Lease,
    ManagedJob,
    ManagedJobState,
    NodeHealth,
    PlanRecord,
    Preemption,
)
from slurmopt.store.transitions import (
    Fence,
    IllegalTransition,
    JobIdReused,
    KeyConflict,
    LeaseLost,
    UnknownJob,
    history,
    idempotency_key,
    next_attempt,
    record_transition,
    register_job,
    transition,
)

__all__ = [
    "Fence",
    "LeaseLost",
    "DEFAULT_URL",
    "FINAL_STATES",
    "TRANSITIONS",
    "URL_ENV",
    "Base",
    "Decision",
    "FragmentationSample",
    "Heartbeat",
    "IllegalTransition",
    "JobIdReused",
    "JobTransition",
    "KeyConflict",
    "Lease",
    "ManagedJob",
    "ManagedJobState",
    "NodeHealth",
    "PlanRecord",
    "Preemption",
    "Store",
    "StoreError",
    "UnknownJob",
    "history",
    "idempotency_key",
    "next_attempt",
    "record_transition",
    "register_job",
    "resolve_url",
    "transition",
]
