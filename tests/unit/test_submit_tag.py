"""The slurmopt tag in the job comment, and --elastic validation."""

from __future__ import annotations

import pytest

from slurmopt.submit import NO_PLUGIN_WARNING, has_submit_plugin
from slurmopt.tag import (
    JobTag,
    TagError,
    check_template_name,
    format_comment,
    parse_comment,
    parse_elastic,
)

TAGS = [
    JobTag(),
    JobTag(preemptible=True),
    JobTag(elastic=(2, 4)),
    JobTag(preemptible=True, elastic=(1, 1), template="llm-train.v2"),
]
USER_COMMENTS = [None, "nightly run", "a | b | c", "slurmopt: not a tag", "  padded  ", "#3"]


@pytest.mark.parametrize("tag", TAGS)
@pytest.mark.parametrize("user", USER_COMMENTS)
def test_round_trip(tag: JobTag, user: str | None) -> None:
    text = format_comment(tag, user)
    assert parse_comment(text) == (tag, user)


def test_format_is_the_documented_one() -> None:
    assert format_comment(JobTag()) == "slurmopt:managed"
    assert (
        format_comment(JobTag(preemptible=True, elastic=(2, 4)), "mine")
        == "slurmopt:managed,preemptible,elastic=2:4 | mine"
    )
    assert format_comment(JobTag(template="t"), "") == "slurmopt:managed,template=t"


def test_untagged_comments_are_the_users() -> None:
    assert parse_comment(None) == (None, None)
    assert parse_comment("") == (None, None)
    assert parse_comment("just words") == (None, "just words")


def test_retagging_replaces_the_old_tag() -> None:
    old = "slurmopt:managed,preemptible | mine"
    assert format_comment(JobTag(elastic=(1, 2)), old) == "slurmopt:managed,elastic=1:2 | mine"


def test_unknown_fields_are_ignored_for_forward_compatibility() -> None:
    assert parse_comment("slurmopt:managed,gang=7,preemptible | x") == (
        JobTag(preemptible=True),
        "x",
    )


@pytest.mark.parametrize(
    "comment",
    [
        "slurmopt:",
        "slurmopt:preemptible",  # must start with managed
        "slurmopt:managed,elastic=4:2",
        "slurmopt:managed,elastic=0:2",
        "slurmopt:managed,Bad",
        "slurmopt:managed,,preemptible",
        "slurmopt:managed extra",
    ],
)
def test_malformed_tags_raise(comment: str) -> None:
    with pytest.raises(TagError):
        parse_comment(comment)


@pytest.mark.parametrize(
    ("text", "pair"),
    [("1:1", (1, 1)), ("2:4", (2, 4)), ("08:16", (8, 16)), ("1:100000", (1, 100000))],
)
def test_elastic_accepts(text: str, pair: tuple[int, int]) -> None:
    assert parse_elastic(text) == pair


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("0:4", "at least 1"),
        ("4:2", "must not exceed"),
        ("2", "MIN:MAX"),
        ("2:", "MIN:MAX"),
        (":4", "MIN:MAX"),
        ("-1:4", "MIN:MAX"),
        ("1.5:4", "MIN:MAX"),
        ("two:four", "MIN:MAX"),
        (" 2:4", "MIN:MAX"),
        ("2:4:8", "MIN:MAX"),
        ("", "MIN:MAX"),
    ],
)
def test_elastic_rejects(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_elastic(text)


@pytest.mark.parametrize("name", ["a,b", "a b", "a|b", "", "-x"])
def test_template_names_that_would_break_the_tag_are_refused(name: str) -> None:
    with pytest.raises(ValueError):
        check_template_name(name)


@pytest.mark.parametrize(
    ("config", "present"),
    [
        ("JobSubmitPlugins        = lua\n", True),
        ("JobSubmitPlugins = job_submit/lua,require_timelimit\n", True),
        ("JobSubmitPlugins        = (null)\n", False),
        ("JobSubmitPlugins = all_partitions\n", False),
        ("JobCompType = jobcomp/lua\n", False),
        ("", False),
    ],
)
def test_plugin_detection_reads_scontrol_show_config(config: str, present: bool) -> None:
    text = "Configuration data as of 2024-01-01T00:00:00\nAccountingStorageType = none\n" + config
    assert has_submit_plugin(text) is present


def test_warning_is_one_line() -> None:
    assert "\n" not in NO_PLUGIN_WARNING
    assert NO_PLUGIN_WARNING.startswith("slurmopt: warning: ")
