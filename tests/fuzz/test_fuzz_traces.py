"""Every trace format: a clean one-line error (exit 2 or 65) or a valid simulation, never worse."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.sandbox import Driver, Outcome, assert_clean
from tests.fuzz.strategies import cells, json_values

#: The simulation each trace drives: small, one policy, JSON out.
SIM = (
    "simulate",
    "--fabric",
    "fat-tree:16:8",
    "--policy",
    "slurmopt",
    "--limit-jobs",
    "20",
    "--json",
    "--no-series",
)
CODES = {2, 65}

#: Columns each CSV-like format reads (required first), and its delimiter.
COLUMNS: dict[str, tuple[tuple[str, ...], str]] = {
    "philly-sia": (("timestamp", "duration", "num_gpus"), ","),
    "itp": (("submission_time", "duration", "num_gpu"), ","),
    "tiresias": (("num_gpu", "submit_time", "duration"), ","),
    "openb": (("num_gpu", "gpu_milli", "creation_time", "deletion_time", "scheduled_time"), ","),
    "csv": (
        (
            "submit_s",
            "duration_s",
            "gpus",
            "nodes",
            "gpus_per_node",
            "priority",
            "time_limit_s",
            "min_nodes",
            "preemptible",
        ),
        ",",
    ),
    "sacct": (("Submit", "Start", "End", "Timelimit", "AllocTRES", "NNodes", "Priority"), "|"),
}


def simulate(driver: Driver, fmt: str, text: str) -> Outcome:
    trace = text if fmt == "synthetic" else str(driver.file("trace.in", text))
    return driver.cli(*SIM, "--trace", trace, "--trace-format", fmt)


def _gpu_job(times: str, extra: str = "", count: str = "8") -> str:
    tres = '"tres": {"allocated": [{"type": "gres", "name": "gpu", "count": ' + count + "}]}"
    return '{"jobs": [{"time": ' + times + ", " + extra + tres + "}]}"


#: Inputs that once hung, overflowed or gave a traceback, with what each gives now.
KNOWN = [
    ("sacct-json", _gpu_job('{"submission": NaN, "start": 1, "end": 100}'), 65),
    ("sacct-json", _gpu_job('{"submission": 1, "start": Infinity, "end": Infinity}'), 65),
    ("sacct-json", _gpu_job('{"submission": 1, "start": 2, "end": 100}', count='"eight"'), 65),
    (
        "sacct-json",
        _gpu_job('{"submission": 1, "start": 2, "end": 100}', '"allocation_nodes": 0.5, '),
        65,
    ),
    ("sacct-json", '{"jobs": ' + "[" * 100_000 + "]" * 100_000 + "}", 65),
    ("sacct-json", _gpu_job('{"submission": 1, "start": 2, "end": 1e308}'), 65),
    ("csv", "\ufeffsubmit_s,duration_s,gpus\n0,10,1\n5,10,2\n", 0),
    ("csv", "submit_s,duration_s,gpus\n0,1e308,1\n5,1e308,2\n", 65),
    ("itp", "submission_time,duration,num_gpu\nnan,10,1\n", 65),
    (
        "sacct",
        "Submit|Start|End|Timelimit|AllocTRES|NNodes\n"
        "2024-01-01T00:00:00|2024-01-01T00:00:01|2024-01-01T01:00:00|1|gres/gpu="
        + "9" * 5000
        + "|1\n",
        65,
    ),
    ("synthetic", "jobs=100000000", 65),
    ("synthetic", "duration_s=inf", 65),
]


@pytest.mark.parametrize(
    ("fmt", "text", "rc"), KNOWN, ids=[f"{k[0]}-{i}" for i, k in enumerate(KNOWN)]
)
def test_known_bad_traces(driver: Driver, fmt: str, text: str, rc: int) -> None:
    outcome = simulate(driver, fmt, text)
    assert_clean(outcome, CODES, json_out=True)
    assert outcome.rc == rc, outcome.stderr


@st.composite
def csv_traces(draw: st.DrawFn) -> tuple[str, str]:
    fmt = draw(st.sampled_from(sorted(COLUMNS)))
    columns, sep = COLUMNS[fmt]
    header = draw(st.lists(st.sampled_from(columns), min_size=1, unique=True))
    rows = draw(
        st.lists(st.lists(cells, min_size=len(header), max_size=len(header) + 1), max_size=6)
    )
    bom = draw(st.sampled_from(["", "\ufeff"]))
    lines = [sep.join(header)] + [sep.join(c.replace("\n", " ") for c in row) for row in rows]
    return fmt, bom + "\n".join(lines) + "\n"


@given(csv_traces())
def test_csv_like_traces(driver: Driver, case: tuple[str, str]) -> None:
    fmt, text = case
    assert_clean(simulate(driver, fmt, text), CODES, json_out=True)


sacct_jobs = st.fixed_dictionaries(
    {},
    optional={
        "time": st.one_of(
            st.fixed_dictionaries(
                {},
                optional={k: json_values for k in ("submission", "start", "end", "limit")},
            ),
            json_values,
        ),
        "allocation_nodes": json_values,
        "priority": json_values,
        "tres": st.one_of(
            st.fixed_dictionaries(
                {
                    "allocated": st.lists(
                        st.fixed_dictionaries(
                            {
                                "type": st.just("gres"),
                                "name": st.sampled_from(["gpu", "gpu:h100", "x"]),
                                "count": json_values,
                            }
                        ),
                        max_size=2,
                    )
                }
            ),
            json_values,
        ),
        "tres_alloc_str": st.one_of(st.text(max_size=10), st.just("gres/gpu=8")),
    },
)


@given(st.one_of(st.lists(st.one_of(sacct_jobs, json_values), max_size=4), json_values))
def test_sacct_json_traces(driver: Driver, jobs: object) -> None:
    assert_clean(simulate(driver, "sacct-json", json.dumps({"jobs": jobs})), CODES, json_out=True)


@given(
    st.lists(
        st.builds(
            lambda k, v: f"{k}={v}",
            st.sampled_from(
                ["jobs", "mix", "duration_s", "sigma", "seed", "preemptible", "elastic", "x"]
            ),
            st.one_of(cells, st.sampled_from(["8:1/16:inf", "1:0", "0:1", "3", "8:nan"])),
        ),
        max_size=4,
    ).map(",".join)
)
def test_synthetic_specs(driver: Driver, spec: str) -> None:
    assert_clean(simulate(driver, "synthetic", spec or "jobs=3"), CODES, json_out=True)
