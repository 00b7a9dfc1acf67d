"""Real Slurm 22.05 / 24.11 / 26.05 output parses into the same snapshot.

Every capture ran the same job mix on gpu[001-008] (8 GPUs each, leaf1 =
gpu[001-004], leaf2 = gpu[005-008]):
1 = 2-node gpu:8, -t 60, --comment, RUNNING on gpu[001-002];
2 = --hold (gpu:8, -t 30); 3 = 1-node gpu:3, no -t, RUNNING on gpu003;
4 = --gpus-per-node=2, -t 1-0, RUNNING beside 3 on gpu003;
5 = -N5 gpu:8, -t 10, PENDING(Resources).
gpu008 was drained while idle, gpu003 while busy.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from slurmopt.errors import SlurmResponseError
from slurmopt.model import ClusterSnapshot, JobState, NodeState
from slurmopt.slurm import parse

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "slurm-json"


def _doc(rel: str) -> dict[str, Any]:
    return parse.load_json((FIXTURES / rel).read_text(), rel)


def _snapshot(jobs: str, nodes: str, partitions: str) -> ClusterSnapshot:
    if partitions.endswith(".txt"):
        parts = parse.parse_partitions_text((FIXTURES / partitions).read_text(), partitions)
    else:
        parts = parse.parse_partitions_json(_doc(partitions), partitions)
    return parse.build_snapshot(_doc(jobs), _doc(nodes), parts, taken_at=0.0, source="fixture")


# (id, jobs document, nodes document, partitions, typed GPUs, release)
CAPTURES: list[tuple[str, str, str, str, bool, str]] = [
    ("22.05", "22.05/squeue.json", "22.05/sinfo.json",
     "22.05/scontrol_show_partition_o.txt", False, "22.05.8"),
    ("22.05-typed", "22.05/typed_gpu_features/squeue.json", "22.05/typed_gpu_features/sinfo.json",
     "22.05/typed_gpu_features/scontrol_show_partition_o.txt", True, "22.05.8"),
]
for _ver, _rel in (("24.11", "24.11.5"), ("26.05", "26.05.5")):
    for _sub, _typed in (("", False), ("typed_gpu_features/", True)):
        _tag = _ver + ("-typed" if _typed else "")
        CAPTURES += [
            (f"{_tag}-squeue", f"{_ver}/{_sub}squeue.json",
             f"{_ver}/{_sub}scontrol_show_nodes.json",
             f"{_ver}/{_sub}scontrol_show_partitions.json", _typed, _rel),
            (f"{_tag}-scontrol-jobs", f"{_ver}/{_sub}scontrol_show_jobs.json",
             f"{_ver}/{_sub}scontrol_show_nodes.json",
             f"{_ver}/{_sub}scontrol_show_partition_o.txt", _typed, _rel),
            (f"{_tag}-grouped-sinfo", f"{_ver}/{_sub}squeue.json", f"{_ver}/{_sub}sinfo.json",
             f"{_ver}/{_sub}scontrol_show_partition_o.txt", _typed, _rel),
        ]
for _p in ("40", "41"):
    CAPTURES += [
        (f"24.11-v0.0.{_p}", f"24.11/alt_data_parser/squeue.v0.0.{_p}.json",
         f"24.11/alt_data_parser/scontrol_show_nodes.v0.0.{_p}.json",
         "24.11/scontrol_show_partitions.json", False, "24.11.5"),
        (f"24.11-v0.0.{_p}-grouped", f"24.11/alt_data_parser/squeue.v0.0.{_p}.json",
         f"24.11/alt_data_parser/sinfo.v0.0.{_p}.json",
         "24.11/scontrol_show_partitions.json", False, "24.11.5"),
    ]
for _p in ("42", "43", "44"):
    CAPTURES.append(
        (f"26.05-v0.0.{_p}", f"26.05/alt_data_parser/squeue.v0.0.{_p}.json",
         f"26.05/alt_data_parser/sinfo.v0.0.{_p}.json",
         "26.05/scontrol_show_partitions.json", False, "26.05.5")
    )

ALL = [pytest.param(*c[1:], id=c[0]) for c in CAPTURES]
NODES = [f"gpu{i:03d}" for i in range(1, 9)]


@pytest.mark.parametrize(("jobs", "nodes", "partitions", "typed", "release"), ALL)
def test_jobs_match_the_known_job_mix(
    jobs: str, nodes: str, partitions: str, typed: bool, release: str
) -> None:
    snap = _snapshot(jobs, nodes, partitions)
    assert snap.slurm_version == release
    assert sorted(snap.jobs) == [1, 2, 3, 4, 5]
    gpu_type = "h100" if typed else None
    j1, j2, j3, j4, j5 = (snap.jobs[i] for i in range(1, 6))

    assert (j1.state, j1.nodes, j1.node_count, j1.gpus_per_node) == (
        JobState.RUNNING, ("gpu001", "gpu002"), 2, 8)
    assert dict(j1.gpu_indices) == {"gpu001": tuple(range(8)), "gpu002": tuple(range(8))}
    assert j1.gpus == 16 and j1.gpu_type == gpu_type
    assert (j1.time_limit_s, j1.comment, j1.name, j1.partition) == (
        3600, "two-node comment", "twonode", "gpu")
    assert j1.user == "root" and j1.requeue and not j1.held and j1.reason == ""
    assert j1.submit_time and j1.start_time and j1.end_time == j1.start_time + 3600

    assert (j2.state, j2.held, j2.reason, j2.priority) == (JobState.PENDING, True, "JobHeldUser", 0)
    assert (j2.nodes, j2.node_count, j2.gpus_per_node, j2.time_limit_s) == ((), 1, 8, 1800)
    assert j2.start_time is None and dict(j2.gpu_indices) == {}

    assert (j3.state, j3.nodes, j3.gpus_per_node, j3.time_limit_s) == (
        JobState.RUNNING, ("gpu003",), 3, None)
    assert dict(j3.gpu_indices) == {"gpu003": (0, 1, 2)}
    assert (j4.state, j4.nodes, j4.gpus_per_node, j4.time_limit_s) == (
        JobState.RUNNING, ("gpu003",), 2, 86400)
    assert dict(j4.gpu_indices) == {"gpu003": (3, 4)}

    assert (j5.state, j5.reason, j5.held, j5.node_count, j5.gpus_per_node, j5.time_limit_s) == (
        JobState.PENDING, "Resources", False, 5, 8, 600)
    assert j5.gpus == 40 and j5.nodes == ()
    for job in snap.jobs.values():
        assert job.array_job_id is None and job.array_task_id is None
        assert job.restarts == 0 and job.dependency == "" and job.excluded_nodes == ()
    running_priority = {j.priority for j in (j1, j3, j4, j5)}
    assert 0 not in running_priority


@pytest.mark.parametrize(("jobs", "nodes", "partitions", "typed", "release"), ALL)
def test_nodes_match_the_known_cluster_state(
    jobs: str, nodes: str, partitions: str, typed: bool, release: str
) -> None:
    snap = _snapshot(jobs, nodes, partitions)
    assert sorted(snap.nodes) == NODES
    gpu_type = "h100" if typed else None
    features = frozenset({"h100", "nvlink"}) if typed else frozenset()
    expect = {
        "gpu001": (NodeState.MIXED, 8, frozenset(range(8)), set(), ""),
        "gpu002": (NodeState.MIXED, 8, frozenset(range(8)), set(), ""),
        "gpu003": (NodeState.MIXED, 5, frozenset(range(5)), {"DRAIN"}, "drain while running"),
        "gpu004": (NodeState.IDLE, 0, frozenset(), set(), ""),
        "gpu005": (NodeState.IDLE, 0, frozenset(), set(), ""),
        "gpu006": (NodeState.IDLE, 0, frozenset(), set(), ""),
        "gpu007": (NodeState.IDLE, 0, frozenset(), set(), ""),
        "gpu008": (NodeState.IDLE, 0, frozenset(), {"DRAIN"}, "maint: bad gpu"),
    }
    for name, (state, alloc, indices, flags, reason) in expect.items():
        node = snap.nodes[name]
        assert node.state is state, name
        assert node.gpus_total == 8 and node.gpus_alloc == alloc, name
        assert node.alloc_gpu_indices == indices, name
        # PLANNED (backfill's reservation mark) is reported inconsistently across releases.
        assert set(node.flags) - {"PLANNED"} == flags, name
        assert node.reason == reason, name
        assert node.gpu_type == gpu_type and node.features == features, name
        assert node.partitions == ("gpu",) and node.cpus == 64, name
    assert {n for n, node in snap.nodes.items() if not node.available} == {"gpu003", "gpu008"}
    assert snap.nodes["gpu003"].unavailable_reason == "DRAIN"
    assert snap.nodes["gpu003"].alloc_cpus == 2 and snap.nodes["gpu007"].alloc_cpus == 0
    assert sum(n.gpus_free for n in snap.nodes.values()) == 64 - 21


@pytest.mark.parametrize(("jobs", "nodes", "partitions", "typed", "release"), ALL)
def test_partitions_match(
    jobs: str, nodes: str, partitions: str, typed: bool, release: str
) -> None:
    snap = _snapshot(jobs, nodes, partitions)
    part = snap.partitions["gpu"]
    assert list(snap.partitions) == ["gpu"]
    assert (part.nodes, part.state, part.max_time_s, part.max_nodes) == (
        tuple(NODES), "UP", None, None)
    # 24.11's partition JSON has no DEFAULT flag; every other source has it.
    assert part.default is not (
        partitions.startswith("24.11/") and partitions.endswith("scontrol_show_partitions.json")
    )


def _comparable(snap: ClusterSnapshot) -> dict[str, Any]:
    """What must not depend on the release: everything but clock times and priorities."""
    return {
        "jobs": {
            i: (j.state, j.held, j.reason, j.nodes, j.node_count, j.gpus_per_node,
                dict(j.gpu_indices), j.time_limit_s, j.comment, j.name, j.requeue, j.gpu_type)
            for i, j in snap.jobs.items()
        },
        "nodes": {
            n: (x.state, x.flags - {"PLANNED"}, x.gpus_total, x.gpus_alloc, x.alloc_gpu_indices,
                x.reason, x.features, x.gpu_type, x.partitions, x.cpus, x.alloc_cpus)
            for n, x in sorted(snap.nodes.items())
        },
        "partitions": {p: (x.nodes, x.state, x.max_time_s) for p, x in snap.partitions.items()},
    }


@pytest.mark.parametrize("typed", [False, True], ids=["untyped", "typed"])
def test_every_release_gives_the_same_snapshot(typed: bool) -> None:
    snaps = {c[0]: _comparable(_snapshot(*c[1:4])) for c in CAPTURES if c[4] is typed}
    assert len(snaps) >= 7
    reference = snaps.pop("22.05-typed" if typed else "22.05")
    for name, snap in snaps.items():
        assert snap == reference, name


# --------------------------------------------------------------------------- pieces


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("gpu:8", (8, None, None)),
        ("gpu:h100:8", (8, "h100", None)),
        ("gpu:5", (5, None, None)),
        ("gpu:h100:5(IDX:0-4)", (5, "h100", (0, 1, 2, 3, 4))),
        ("gpu:h100:0(IDX:N/A)", (0, "h100", ())),
        ("gpu:h100:2(IDX:0,3)", (2, "h100", (0, 3))),
        ("gpu:8(IDX:0-7)", (8, None, tuple(range(8)))),
        ("gpu:a100:2(IDX:0-1),gpu:h100:1(IDX:4)", (3, None, (0, 1, 4))),
        ("nic:2,gpu:4(S:0-1)", (4, None, None)),
        ("", (0, None, None)),
        ("(null)", (0, None, None)),
    ],
)
def test_gpu_gres_strings(
    text: str, expected: tuple[int, str | None, tuple[int, ...] | None]
) -> None:
    assert parse.gpu_gres(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("gres:gpu:8", (8, None)),
        ("gres/gpu:8", (8, None)),
        ("gres/gpu:h100:2", (2, "h100")),
        ("cpu:4,gres/gpu=3", (3, None)),
        ("gres/shard:4", (0, None)),
        ("", (0, None)),
    ],
)
def test_tres_gpu_strings(text: str, expected: tuple[int, str | None]) -> None:
    assert parse.tres_gpus(text) == expected


def _job(**extra: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"job_id": 7, "job_state": "PENDING", "state_reason": "Priority"}
    return {**base, **extra}


def test_gpus_per_job_are_divided_over_nodes_and_array_ids_kept() -> None:
    job = parse.parse_job(_job(
        tres_per_job="gres/gpu:16", node_count={"set": True, "infinite": False, "number": 4},
        array_job_id=5, array_task_id=3, required_nodes="gpu[001-002]",
        excluded_nodes="gpu009", dependency="afterok:5", restart_cnt=2,
    ))
    assert (job.gpus_per_node, job.node_count, job.array_job_id, job.array_task_id) == (4, 4, 5, 3)
    assert job.required_nodes == ("gpu001", "gpu002") and job.excluded_nodes == ("gpu009",)
    assert (job.dependency, job.restarts) == ("afterok:5", 2)


def test_typed_gres_detail_gives_type_and_sparse_indices() -> None:
    job = parse.parse_job(_job(
        job_state=["RUNNING"], nodes="gpu[001-002]", node_count=2,
        gres_detail=["gpu:h100:2(IDX:0,3)", "gpu:h100:2(IDX:5-6)"], tres_per_node="gres/gpu:2",
    ))
    assert job.gpu_type == "h100" and job.gpus_per_node == 2
    assert dict(job.gpu_indices) == {"gpu001": (0, 3), "gpu002": (5, 6)}


@pytest.mark.parametrize(
    ("limit", "seconds"),
    [(60, 3600), (None, None), (525600, None),
     ({"set": False, "infinite": True, "number": 0}, None),
     ({"set": True, "infinite": False, "number": 5}, 300)],
)
def test_time_limits(limit: Any, seconds: int | None) -> None:
    assert parse.parse_job(_job(time_limit=limit)).time_limit_s == seconds


def test_held_by_admin_without_hold_field() -> None:
    assert parse.parse_job(_job(state_reason="JobHeldAdmin")).held
    assert not parse.parse_job(_job(state_reason="Dependency")).held
    assert parse.parse_job(_job(hold=True, state_reason="Priority")).held


@pytest.mark.parametrize(
    ("text", "max_time_s", "max_nodes"),
    [("MaxTime=1-00:00:00 MaxNodes=4", 86400, 4), ("MaxTime=01:30:00 MaxNodes=UNLIMITED", 5400,
     None), ("MaxTime=30:00", 1800, None), ("MaxTime=45", 2700, None), ("MaxTime=2-12", 216000,
     None)],
)
def test_partition_text_limits(text: str, max_time_s: int, max_nodes: int | None) -> None:
    (part,) = parse.parse_partitions_text(f"PartitionName=p Nodes=n[1-2] State=DRAIN {text}\n")
    assert (part.max_time_s, part.max_nodes, part.nodes, part.state) == (
        max_time_s, max_nodes, ("n1", "n2"), "DRAIN")


def test_rest_v0038_partitions() -> None:
    doc = {"partitions": [{"flags": ["default"], "name": "gpu", "nodes": "gpu[001-004]",
                           "state": "UP", "max_time_limit": -1, "maximum_nodes_per_job": 2}]}
    (part,) = parse.parse_partitions_json(doc)
    assert (part.default, part.nodes[-1], part.max_time_s, part.max_nodes) == (
        True, "gpu004", None, 2)


# --------------------------------------------------------------------------- garbage


GOOD_JOBS = (FIXTURES / "22.05/squeue.json").read_text()
GOOD_NODES = (FIXTURES / "22.05/sinfo.json").read_text()


def _mutated(text: str, key: str, index: int, field: str, value: Any) -> dict[str, Any]:
    doc = json.loads(text)
    if value is KeyError:
        del doc[key][index][field]
    else:
        doc[key][index][field] = value
    return dict(doc)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "not JSON"),
        ("slurm_load_jobs error: Unable to contact slurm controller", "not JSON"),
        ('{"jobs": [', "not JSON"),
        ("[1, 2]", "expected a JSON object, got list"),
        ('{"meta": {}, "errors": []}', "missing top-level key 'jobs'"),
        ('{"jobs": {"1": {}}}', "jobs: expected a list"),
        ('{"jobs": [3]}', "jobs[0]: expected an object"),
        ('{"jobs": [], "errors": [{"error": "Unspecified error"}]}', "Unspecified error"),
    ],
)
def test_garbage_job_documents(text: str, message: str) -> None:
    with pytest.raises(SlurmResponseError, match="squeue --json: .*" + message.replace("[", r"\[")):
        parse.parse_jobs(parse.load_json(text, "squeue --json"), "squeue --json")


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("job_state", KeyError, "job 1: missing required field 'job_state'"),
        ("job_state", 3, "job 1 field 'job_state'"),
        ("job_id", "1", "field 'job_id': expected an integer"),
        ("node_count", "two", "field 'node_count': expected a number, got str"),
        ("time_limit", True, "field 'time_limit': expected a number, got bool"),
        ("gres_detail", "gpu:8", "field 'gres_detail'"),
        ("gres_detail", ["gpu:8(IDX:x-y)", "gpu:8(IDX:0-7)"], "bad GPU index list"),
        ("nodes", "gpu[001-", "field 'nodes': bad hostlist"),
        ("comment", 5, "field 'comment': expected a string"),
        ("hold", "yes", "field 'hold': expected a boolean"),
    ],
)
def test_malformed_job_fields(field: str, value: Any, message: str) -> None:
    doc = _mutated(GOOD_JOBS, "jobs", 0, field, value)
    with pytest.raises(SlurmResponseError, match=message.replace("[", r"\[")):
        parse.build_snapshot(doc, json.loads(GOOD_NODES), [], 0.0, "t")


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("state", KeyError, "node gpu001: missing required field 'state'"),
        ("state", 7, "node gpu001 field 'state'"),
        ("state_flags", "DRAIN", "field 'state_flags'"),
        ("name", None, "field 'name'"),
        ("features", 3, "field 'features'"),
        ("gres_used", ["gpu:1"], "field 'gres_used': expected a string"),
    ],
)
def test_malformed_node_fields_fail_the_whole_snapshot(
    field: str, value: Any, message: str
) -> None:
    doc = _mutated(GOOD_NODES, "nodes", 0, field, value)
    with pytest.raises(SlurmResponseError, match=message):
        parse.build_snapshot(json.loads(GOOD_JOBS), doc, [], 0.0, "t")


def test_node_document_without_nodes() -> None:
    with pytest.raises(SlurmResponseError, match="missing top-level key 'nodes' or 'sinfo'"):
        parse.parse_node_records({"meta": {}}, "sinfo --json")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no PartitionName= lines"),
        ("slurm_load_partitions error: Unable to contact slurm controller", "line 1: expected"),
        ("PartitionName=gpu MaxTime=soon", "line 1: bad time 'soon'"),
        ("PartitionName=gpu MaxNodes=many", "line 1: bad MaxNodes"),
        ("PartitionName=gpu Nodes=gpu[0", "line 1: bad hostlist"),
    ],
)
def test_garbage_partition_text(text: str, message: str) -> None:
    with pytest.raises(SlurmResponseError, match=message.replace("[", r"\[")):
        parse.parse_partitions_text(text, "scontrol show partition -o")


def test_errors_are_one_line() -> None:
    with pytest.raises(SlurmResponseError) as info:
        parse.load_json("<html>\n<body>bad gateway</body>\n</html>", "slurmrestd /jobs")
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("release", ["22.05", "24.11", "26.05"])
def test_hold_field_wins_where_the_release_has_it(release: str) -> None:
    """24.11+ say ``hold`` outright; 22.05 only shows priority 0 and a JobHeld* reason."""
    jobs = {j["job_id"]: j for j in _doc(f"{release}/squeue.json")["jobs"]}
    held, pending = jobs[2], jobs[5]
    assert ("hold" in held) is (release != "22.05")
    assert parse.parse_job(held).held and not parse.parse_job(pending).held
    relabelled = parse.parse_job({**held, "state_reason": "Priority"})
    assert relabelled.held is (release != "22.05")  # the field, not the reason, where present
    if release != "22.05":
        assert not parse.parse_job({**pending, "state_reason": "JobHeldUser", "hold": False}).held
