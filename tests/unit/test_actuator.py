"""The actuator: write before act, fresh-snapshot checks, comments without storms, hand-backs."""

from __future__ import annotations

from pathlib import Path

from slurmopt.daemon.actuator import COMMENT_PREFIX, waiting_comment
from slurmopt.daemon.loop import Daemon
from slurmopt.daemon.reconcile import LEFT_TO_SLURM
from slurmopt.model import JobState
from slurmopt.policy.plan import Reason, Unplaced
from slurmopt.store import ManagedJob, ManagedJobState, Store
from tests.fakes.slurm import FakeSlurm
from tests.unit.test_daemon_fakes import config, held_job, node, two_leaves


def _watch_records(client: FakeSlurm, store: Store) -> list[tuple[str, ManagedJobState | None]]:
    """What the store already says about a job each time Slurm is asked to pin or release it."""
    seen: list[tuple[str, ManagedJobState | None]] = []

    def watch(call: str, job_id: int) -> None:
        if call in ("pin", "release"):
            with store.begin() as session:
                record = session.get(ManagedJob, job_id)
                seen.append((call, None if record is None else record.state))

    client.watchers.append(watch)
    return seen



def _daemon(tmp_path: Path, store: Store, client: FakeSlurm) -> Daemon:
    _, fabric = two_leaves()
    return Daemon(
        config(tmp_path),
        client,
        store,
        holder="host:1",
        clock=lambda: client.clock,
        fabric_loader=lambda _c, _s: fabric,
    )


def test_pin_is_recorded_before_slurm_is_called_then_released(tmp_path: Path, store: Store) -> None:
    nodes, _ = two_leaves()
    client = FakeSlurm(nodes, [held_job(7, nodes=3)])
    seen = _watch_records(client, store)
    _daemon(tmp_path, store, client).cycle()
    assert seen == [("pin", ManagedJobState.PINNED), ("release", ManagedJobState.PINNED)]
    assert client.writes(7, "pin") == 1 and client.writes(7, "release") == 1
    assert client.writes_total() == 2
    pin = [c for c in client.calls if c[0] == "pin"][0]
    assert pin[2] in (("a0", "a1", "a2"), ("b0", "b1", "b2"))  # one leaf
    with store.begin() as session:
        record = session.get(ManagedJob, 7)
        assert record is not None and record.nodes is not None
        assert record.reason == Reason.GANG_FEWEST_LEAVES.value


def test_two_gpu_job_goes_onto_the_partly_used_node(tmp_path: Path, store: Store) -> None:
    nodes = [node("a0"), node("a1", alloc=6), node("a2"), node("a3")]
    nodes += [node(f"b{i}") for i in range(4)]
    client = FakeSlurm(nodes, [held_job(7, gpus=2)])
    _daemon(tmp_path, store, client).cycle()
    assert client.calls == [("pin", 7, ("a1",)), ("release", 7)]


def test_job_no_longer_held_in_the_snapshot_is_not_touched(tmp_path: Path, store: Store) -> None:
    client = FakeSlurm(two_leaves()[0], [held_job(7)])
    daemon = _daemon(tmp_path, store, client)
    client.crash_on = "comment"  # no-op guard: nothing should comment either
    client.jobs[7] = held_job(7, reason="JobHeldUser", admin_comment="slurmopt:managed")
    daemon.cycle()
    assert client.calls == []


def test_waiting_job_gets_its_reason_as_admin_comment_once(tmp_path: Path, store: Store) -> None:
    nodes = [node(f"{leaf}{i}", alloc=8 if i == 0 else 0) for leaf in "ab" for i in range(4)]
    client = FakeSlurm(nodes, [held_job(7, nodes=7)])  # only 6 nodes are free
    daemon = _daemon(tmp_path, store, client)
    for _ in range(3):
        daemon.cycle()
    comments = [c for c in client.calls if c[0] == "comment"]
    assert len(comments) == 1
    # The status follows the plugin's tag, which is kept as it was.
    assert comments[0][2].startswith("slurmopt:managed,held | " + COMMENT_PREFIX)
    assert client.jobs[7].admin_comment == comments[0][2]
    assert client.count("pin", 7) == 0 and client.held_ids() == [7]


def test_waiting_comment_text() -> None:
    text = waiting_comment(Unplaced(1, Reason.WAITS_FOR_RESERVATION, "x", 1_800_000_000.0))
    assert text.startswith("waits: WAITS_FOR_RESERVATION, expected start 20")
    assert waiting_comment(Unplaced(1, Reason.RESERVED)) == "waits: RESERVED"


def test_job_slurmopt_cannot_place_is_handed_back_to_slurm_once(
    tmp_path: Path, store: Store
) -> None:
    client = FakeSlurm(two_leaves()[0], [held_job(7, het_job_id=7)])
    daemon = _daemon(tmp_path, store, client)
    daemon.cycle()
    assert client.count("release", 7) == 1 and client.count("pin", 7) == 0
    client.hold(7)  # an operator holds it again: that hold is theirs now
    daemon.cycle()
    daemon.cycle()
    assert client.count("release", 7) == 1
    with store.begin() as session:
        record = session.get(ManagedJob, 7)
        assert record is not None and record.reason == LEFT_TO_SLURM


def test_finished_job_is_not_started(tmp_path: Path, store: Store) -> None:
    client = FakeSlurm(two_leaves()[0], [held_job(7)])
    daemon = _daemon(tmp_path, store, client)
    client.end(7, JobState.CANCELLED)
    daemon.cycle()
    assert client.calls == []


def test_elastic_job_started_on_fewer_nodes_gets_its_node_count_set_first(
    tmp_path: Path, store: Store
) -> None:
    # Job 7 asks for 8 nodes, elastic 2:8; only a's 4 nodes are free and b's never free up.
    nodes = [node(f"a{i}") for i in range(4)] + [node(f"b{i}", alloc=8) for i in range(4)]
    tag = "slurmopt:managed,elastic=2:8"
    client = FakeSlurm(nodes, [held_job(7, nodes=8, comment=tag)])
    _daemon(tmp_path, store, client).cycle()
    calls = [c for c in client.calls if c[1] == 7]
    assert [c[0] for c in calls][:3] == ["shrink", "pin", "release"]
    assert calls[0] == ("shrink", 7, 4)
    assert calls[1][2] == ("a0", "a1", "a2", "a3")
    with store.begin() as session:
        record = session.get(ManagedJob, 7)
        assert record is not None and record.reason == Reason.ELASTIC_START.value


def test_elastic_job_set_smaller_earlier_is_set_back_to_all_its_nodes(
    tmp_path: Path, store: Store
) -> None:
    # Slurm shows NumNodes=4 from an earlier smaller start that never ran; all 8 are free now.
    tag = "slurmopt:managed,elastic=2:8"
    client = FakeSlurm(two_leaves()[0], [held_job(7, nodes=4, comment=tag)])
    _daemon(tmp_path, store, client).cycle()
    calls = [c for c in client.calls if c[1] == 7]
    assert calls[0] == ("shrink", 7, 8)
    assert len(calls[1][2]) == 8 and calls[2][0] == "release"
