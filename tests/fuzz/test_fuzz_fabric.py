"""topology.conf, Slurm's topology.yaml and slurmopt's fabric YAML through ``topology show``.

A clean one-line error (exit 2 or 65) or a fabric printed as strict JSON, never worse.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.sandbox import Driver, Outcome, assert_clean
from tests.fuzz.strategies import cells, hostlists

CODES = {2, 65}


def show(driver: Driver, name: str, text: str) -> Outcome:
    config = driver.file("empty.toml", "")
    path = driver.file(name, text)
    return driver.cli("topology", "show", "--fabric", str(path), "--config", str(config), "--json")


def _bomb() -> str:
    lines = ["switches:", "  - switch: s1", "    nodes: &a [n1, n1, n1, n1, n1, n1, n1, n1, n1]"]
    for i in range(8):
        refs = ", ".join([f"*{chr(97 + i)}"] * 9)
        lines += [f"  - switch: t{i}", f"    nodes: &{chr(98 + i)} [{refs}]"]
    return "\n".join(lines) + "\n"


#: Inputs that once exhausted memory, hung or gave a traceback; each is now exit 65.
KNOWN = [
    ("huge.conf", "SwitchName=s1 Nodes=n[0-99999999]\n"),
    ("mesh.yaml", "switches:\n  - switch: s[0-50000]\nlinks:\n  - mesh: s[0-50000]\n"),
    ("bomb.yaml", _bomb()),
    ("recursive.yaml", "switches: &a\n  - *a\n"),
    ("empty-switch.yaml", "switches:\n  - switch: []\n"),
    ("binary.yaml", "switches:\n  - switch: !!binary 'not base64!!'\n"),
    ("timestamp.yaml", "switches:\n  - switch: !!timestamp 'nope'\n"),
    ("range.conf", "SwitchName=s1 Nodes=n[1-2-3]\n"),
    ("range.yaml", "switches:\n  - switch: s1\n    nodes: n[1-2-3]\n"),
    (
        "nan.yaml",
        "node_links: {bandwidth_gbps: .nan}\nswitches:\n  - switch: s1\n    nodes: n[1-2]\n",
    ),
    (
        "inf.yaml",
        "node_links: {bandwidth_gbps: .inf}\nswitches:\n  - switch: s1\n    nodes: n[1-2]\n",
    ),
    ("deep.yaml", "switches: " + "[" * 20_000 + "]" * 20_000 + "\n"),
    (
        "slurm.yaml",
        "- topology: t\n  tree:\n    switches:\n      - switch: s1\n        nodes: n[0-99999999]\n",
    ),
]


@pytest.mark.parametrize(("name", "text"), KNOWN, ids=[k[0] for k in KNOWN])
def test_known_bad_fabrics(driver: Driver, name: str, text: str) -> None:
    outcome = show(driver, name, text)
    assert_clean(outcome, CODES, json_out=True)
    assert outcome.rc == 65, outcome.stderr


conf_lines = st.lists(
    st.one_of(
        st.builds(
            lambda name, nodes, kids, speed: " ".join(
                p
                for p in (
                    f"SwitchName={name}",
                    nodes and f"Nodes={nodes}",
                    kids and f"Switches={kids}",
                    speed and f"LinkSpeed={speed}",
                )
                if p
            ),
            st.sampled_from(["s1", "s2", "top", "n1", ""]),
            st.one_of(st.just(""), hostlists),
            st.one_of(st.just(""), hostlists),
            st.one_of(st.just(""), cells),
        ),
        st.builds(
            lambda n, b: f"BlockName={n} Nodes={b}", st.sampled_from(["b1", "b2"]), hostlists
        ),
        st.builds(lambda s: f"BlockSizes={s}", cells),
        st.text(max_size=20),
    ),
    max_size=5,
)


@given(conf_lines)
def test_topology_conf(driver: Driver, lines: list[str]) -> None:
    assert_clean(show(driver, "topology.conf", "\n".join(lines) + "\n"), CODES, json_out=True)


scalars = st.one_of(
    hostlists, cells, st.floats(allow_nan=True, allow_infinity=True), st.booleans(), st.none()
)
links = st.fixed_dictionaries(
    {}, optional={"bandwidth_gbps": scalars, "oversubscription": scalars, "x": scalars}
)
switch_entries = st.fixed_dictionaries(
    {"switch": st.one_of(hostlists, st.lists(hostlists, max_size=2))},
    optional={
        "nodes": st.one_of(hostlists, st.lists(hostlists, max_size=2)),
        "parents": hostlists,
        "group": scalars,
        "uplink": links,
        "node_link": links,
    },
)
fabric_docs = st.fixed_dictionaries(
    {"switches": st.lists(switch_entries, max_size=4)},
    optional={
        "fabric": scalars,
        "node_links": links,
        "uplinks": st.dictionaries(st.integers(-1, 3), links, max_size=2),
        "links": st.lists(
            st.fixed_dictionaries(
                {},
                optional={
                    "mesh": hostlists,
                    "between": st.lists(hostlists, max_size=3),
                    "bandwidth_gbps": scalars,
                },
            ),
            max_size=2,
        ),
        "domains": st.dictionaries(st.text(max_size=4), hostlists, max_size=2),
    },
)


def _dump(doc: Any) -> str:
    return yaml.safe_dump(doc, allow_unicode=True)


@given(fabric_docs)
def test_fabric_yaml(driver: Driver, doc: dict[str, Any]) -> None:
    assert_clean(show(driver, "fabric.yaml", _dump(doc)), CODES, json_out=True)


slurm_topologies = st.lists(
    st.fixed_dictionaries(
        {"topology": scalars},
        optional={
            "cluster_default": scalars,
            "tree": st.fixed_dictionaries(
                {
                    "switches": st.lists(
                        st.fixed_dictionaries(
                            {"switch": scalars},
                            optional={
                                "children": hostlists,
                                "nodes": hostlists,
                                "link_speed": scalars,
                            },
                        ),
                        max_size=3,
                    )
                }
            ),
            "block": st.fixed_dictionaries(
                {
                    "blocks": st.lists(
                        st.fixed_dictionaries({"block": scalars}, optional={"nodes": hostlists}),
                        max_size=3,
                    )
                },
                optional={"block_sizes": st.lists(scalars, max_size=2)},
            ),
            "flat": scalars,
        },
    ),
    max_size=3,
)


@given(slurm_topologies)
def test_slurm_topology_yaml(driver: Driver, doc: list[dict[str, Any]]) -> None:
    assert_clean(show(driver, "topology.yaml", _dump(doc)), CODES, json_out=True)


@given(st.text(alphabet="abs:-[]{}&*!|>'\"\n #.0123456789nTf", max_size=80))
def test_raw_yaml_text(driver: Driver, text: str) -> None:
    assert_clean(show(driver, "raw.yaml", text), CODES, json_out=True)
