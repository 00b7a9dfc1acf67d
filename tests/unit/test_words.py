"""The one set of boolean words, and the options readers use to keep accepting their extras."""

from __future__ import annotations

import pytest

from slurmopt.words import (
    FALSE_WORDS,
    TRACE_FALSE_WORDS,
    TRACE_TRUE_WORDS,
    TRUE_WORDS,
    BoolWordError,
    parse_bool,
)


@pytest.mark.parametrize("word", sorted(TRUE_WORDS))
def test_true_words_any_case_and_blanks(word: str) -> None:
    assert parse_bool(f" {word.upper()}\t", what="x") is True


@pytest.mark.parametrize("word", sorted(FALSE_WORDS))
def test_false_words_any_case_and_blanks(word: str) -> None:
    assert parse_bool(f" {word.upper()} ", what="x") is False


@pytest.mark.parametrize("text", ["maybe", "", "y", "n", "2", "tru"])
def test_other_text_is_an_error_naming_what(text: str) -> None:
    with pytest.raises(BoolWordError) as info:
        parse_bool(text, what="$SLURMOPT_ENFORCE")
    assert str(info.value) == (
        f"$SLURMOPT_ENFORCE: expected 1/0, true/false, yes/no or on/off, got {text!r}"
    )
    assert isinstance(info.value, ValueError)
    assert (info.value.what, info.value.text) == ("$SLURMOPT_ENFORCE", text)


@pytest.mark.parametrize(("text", "value"), [("y", True), ("N", False), ("", False), ("on", True)])
def test_trace_words_are_an_explicit_extra(text: str, value: bool) -> None:
    parsed = parse_bool(text, what="x", also_true=TRACE_TRUE_WORDS, also_false=TRACE_FALSE_WORDS)
    assert parsed is value


@pytest.mark.parametrize(
    ("text", "value"), [("no", False), ("off", False), ("", True), ("x", True)]
)
def test_otherwise_answers_any_other_word(text: str, value: bool) -> None:
    assert parse_bool(text, what="x", otherwise=True) is value


def test_word_sets_do_not_overlap() -> None:
    assert not (TRUE_WORDS | TRACE_TRUE_WORDS) & (FALSE_WORDS | TRACE_FALSE_WORDS)
