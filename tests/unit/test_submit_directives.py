"""sbatch's grammar as slurmopt submit reads it: directive lines and command-line splitting."""

from __future__ import annotations

import pytest

from slurmopt.errors import UsageError
from slurmopt.submit import OWN_OPTIONS, parse_command_line
from slurmopt.submit.directives import (
    DirectiveError,
    UnknownOption,
    join_tokens,
    resolve_long,
    script_directives,
    split_args,
    split_directive,
)
from slurmopt.submit.options import Arity, tables

LONG = tables()["22.05"].long


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (" -N 2 --gres=gpu:4", ["-N", "2", "--gres=gpu:4"]),
        (" -N 2 # two nodes", ["-N", "2"]),
        (" -N 2# no space before the comment", ["-N", "2"]),
        (' --job-name="train run" -t 5', ["--job-name=train run", "-t", "5"]),
        (" --comment 'a # not a comment'", ["--comment", "a # not a comment"]),
        (r" --comment a\#b", ["--comment", "a#b"]),
        (r" --comment it\'s", ["--comment", "it's"]),
        (' --comment "" -N 2', ["--comment"]),  # sbatch: an empty word ends the line
        ("", []),
        ("   # only a comment", []),
        ("\t-p\tgpu\r", ["-p", "gpu"]),
    ],
)
def test_split_directive_matches_sbatch_tokenizer(text: str, words: list[str]) -> None:
    assert split_directive(text) == words


def test_unmatched_quote_is_an_error_with_its_line() -> None:
    with pytest.raises(DirectiveError) as err:
        split_directive(' --comment "open', lineno=4)
    assert err.value.lineno == 4


def test_directives_stop_at_first_command() -> None:
    script = (
        "#!/bin/sh\n"
        "#SBATCH -N 1\n"
        "\n"
        "# a comment\n"
        "   # an indented comment\n"
        "  #SBATCH -N 7\n"  # not in column one: a comment, not a directive
        "#SBATCH --hold\n"
        "echo hi\n"
        "#SBATCH -N 3\n"
    )
    found = script_directives(script)
    assert [(d.lineno, d.words) for d in found] == [(2, ("-N", "1")), (7, ("--hold",))]


def test_directives_are_case_sensitive_and_need_the_exact_prefix() -> None:
    script = "#!/bin/sh\n#sbatch -N 4\n#SBATCH-N 2\n#SBATCHX\ntrue\n"
    assert [d.words for d in script_directives(script)] == [("-N", "2"), ("X",)]


def test_hetjob_line_ends_the_first_component() -> None:
    script = "#!/bin/sh\n#SBATCH -N 1\n#SBATCH hetjob\n#SBATCH -N 2\nsrun true\n"
    assert [d.words for d in script_directives(script)] == [("-N", "1")]


def test_own_prefix_lines_are_read_by_the_same_rules() -> None:
    script = "#!/bin/sh\n#SOPT --elastic 2:4 # note\n#SBATCH -N 2\nhostname\n#SOPT --preemptible\n"
    assert [d.words for d in script_directives(script, "#SOPT")] == [("--elastic", "2:4")]


def test_split_args_stops_at_the_script() -> None:
    parsed = split_args(["-p", "gpu", "--hold", "job.sh", "-N", "4", "--hold"])
    assert [o.name for o in parsed.options] == ["partition", "hold"]
    assert parsed.script == "job.sh"
    assert parsed.script_args == ("-N", "4", "--hold")


def test_required_value_swallows_the_next_word_even_if_it_looks_like_an_option() -> None:
    parsed = split_args(["--comment", "--hold", "job.sh"])
    assert parsed.options[0].name == "comment"
    assert parsed.options[0].value == "--hold"
    assert parsed.script == "job.sh"


def test_optional_value_is_only_ever_attached() -> None:
    parsed = split_args(["--exclusive", "job.sh"])
    assert parsed.options[0].value is None
    assert parsed.script == "job.sh"
    assert split_args(["--exclusive=user", "job.sh"]).options[0].value == "user"


def test_short_cluster_keeps_its_words() -> None:
    parsed = split_args(["-HN", "2", "-vvpgpu", "job.sh"])
    assert [(o.name, o.value) for o in parsed.options] == [
        ("hold", None),
        ("nodes", "2"),
        ("verbose", None),
        ("verbose", None),
        ("partition", "gpu"),
    ]
    assert join_tokens(parsed.options) == ["-HN", "2", "-vvpgpu"]
    assert parsed.script == "job.sh"


def test_long_options_resolve_unique_prefixes_like_getopt_long() -> None:
    assert resolve_long("part", LONG) == "partition"
    assert resolve_long("time", LONG) == "time"  # exact beats time-min
    assert resolve_long("gpu", LONG) is None  # ambiguous
    assert resolve_long("nosuch", LONG) is None


@pytest.mark.parametrize(
    ("argv", "word", "matches"),
    [
        (["--bogus=1", "job.sh"], "--bogus", ()),
        (["-p", "gpu", "-Z", "job.sh"], "-Z", ()),
        (["-HZ", "job.sh"], "-Z", ()),
        (["--gpu=1", "job.sh"], "--gpu", ("gpu-bind", "gpu-freq", "gpus", "gpus-per-node")),
    ],
)
def test_unknown_or_ambiguous_options_stop_the_split(
    argv: list[str], word: str, matches: tuple[str, ...]
) -> None:
    with pytest.raises(UnknownOption) as caught:
        split_args(argv)
    assert caught.value.word == word
    assert caught.value.matches[: len(matches)] == matches


def test_hetjob_separator_counts_components() -> None:
    parsed = split_args(["-N1", ":", "-N2", "job.sh"])
    assert [(o.name, o.component) for o in parsed.options] == [
        ("nodes", 0),
        (":", 0),
        ("nodes", 1),
    ]
    assert parsed.script == "job.sh"


def test_double_dash_ends_options_and_is_kept() -> None:
    parsed = split_args(["--hold", "--", "--weird-name.sh", "x"])
    assert parsed.rest == ("--", "--weird-name.sh", "x")
    assert parsed.script == "--weird-name.sh"
    assert parsed.script_args == ("x",)


def test_own_options_only_match_when_spelled_in_full() -> None:
    parsed = parse_command_line(["--elastic", "2:4", "job.sh"])
    assert [(o.name, o.value) for o in parsed.options] == [("elastic", "2:4")]
    with pytest.raises(UsageError, match="--preemptible is spelled in full"):
        parse_command_line(["--elastic", "2:4", "--preempt", "job.sh"])


@pytest.mark.parametrize("release", sorted(tables()))
def test_own_options_do_not_collide_with_sbatch(release: str) -> None:
    long = tables()[release].long
    assert not set(OWN_OPTIONS) & set(long)
    for name in OWN_OPTIONS:
        # none is a prefix of an sbatch option, so a full spelling can never mean sbatch's
        assert resolve_long(name, long) is None


@pytest.mark.parametrize("release", sorted(tables()))
def test_option_table_is_consistent(release: str) -> None:
    table = tables()[release]
    for letter, name in table.short.items():
        assert name in table.long, letter
    assert table.long["wrap"] is Arity.REQUIRED
    assert table.long["parsable"] is Arity.NONE
    assert table.long["hold"] is Arity.NONE
    assert table.short["N"] == "nodes"
