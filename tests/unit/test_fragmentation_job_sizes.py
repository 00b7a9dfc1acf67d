"""Job-size files for the FGD measure: CSV, JSON and YAML, and one-line errors naming the line."""

from __future__ import annotations

import pytest

from slurmopt.errors import UsageError
from slurmopt.policy.fragmentation import JobShape, parse_job_sizes


def test_csv_with_header_merges_identical_shapes() -> None:
    text = "nodes,gpus_per_node,weight\n1,8,2\n# comment\n\n4, 8, 0.5\n1,8,1\n"
    dist = parse_job_sizes(text, "sizes.csv")
    assert dist.source == "sizes.csv"
    assert dist.shapes == (JobShape(1, 8, 3.0), JobShape(4, 8, 0.5))


def test_csv_weight_column_is_optional() -> None:
    assert parse_job_sizes("gpus_per_node,nodes\n2,1\n", "s.csv").shapes == (JobShape(1, 2, 1.0),)


def test_json_and_yaml_lists() -> None:
    js = '[{"nodes": 2, "gpus_per_node": 8, "weight": 3},\n {"nodes": 1, "gpus_per_node": 1}]'
    yml = "- {nodes: 2, gpus_per_node: 8, weight: 3}\n- nodes: 1\n  gpus_per_node: 1\n"
    expected = (JobShape(1, 1, 1.0), JobShape(2, 8, 3.0))
    assert parse_job_sizes(js, "s.json").shapes == expected
    assert parse_job_sizes(yml, "s.yaml").shapes == expected
    assert parse_job_sizes(js, "sizes").shapes == expected  # sniffed from the first character


def test_json_with_tabs_still_parses() -> None:
    js = '[\n\t{"nodes": 1, "gpus_per_node": 4}\n]'
    assert parse_job_sizes(js, "s.json").shapes == (JobShape(1, 4, 1.0),)


def test_empty_file_is_an_empty_distribution() -> None:
    assert parse_job_sizes("", "s.yaml").shapes == ()
    assert parse_job_sizes("nodes,gpus_per_node,weight\n", "s.csv").shapes == ()


@pytest.mark.parametrize(
    ("text", "path", "message"),
    [
        ("nodes,gpus_per_node,weight\n1,8,1\n2,x,1\n", "s.csv", "s.csv:3: gpus_per_node is not"),
        ("nodes,gpus_per_node,weight\n1,8\n", "s.csv", "s.csv:2: expected 3 fields, got 2"),
        ("nodes,gpus_per_node,weight\n0,8,1\n", "s.csv", "s.csv:2: nodes must be a positive"),
        ("nodes,gpus_per_node,weight\n1,8,-1\n", "s.csv", "s.csv:2: weight must be a positive"),
        ("size,weight\n1,1\n", "s.csv", "s.csv:1: header must be nodes,gpus_per_node,weight"),
        (
            "- nodes: 1\n  gpus_per_node: 8\n- nodes: 2\n",
            "s.yaml",
            "s.yaml:3: missing gpus_per_node",
        ),
        (
            "- {nodes: 1, gpus_per_node: 8, colour: red}\n",
            "s.yml",
            "s.yml:1: unknown field(s) colour",
        ),
        ('[\n{"nodes": 1,\n "gpus_per_node": 8,,}\n]', "s.json", "s.json:3: cannot parse"),
        ('{"nodes": 1}', "s.json", "s.json:1: expected a list"),
        ("[\n 1,\n 2\n]", "s.json", "s.json:2: expected an object"),
    ],
)
def test_bad_files_name_file_and_line(text: str, path: str, message: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_job_sizes(text, path)
    assert str(info.value).startswith(message)
    assert "\n" not in str(info.value)
    assert info.value.exit_code == 2
