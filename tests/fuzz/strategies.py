"""Hypothesis strategies for hostile inputs: numbers at the edges, odd text, bad structure."""

from __future__ import annotations

from hypothesis import strategies as st

#: Cells that have broken readers before, or sit on a boundary.
TRICKY_NUMBERS = (
    "0",
    "1",
    "-1",
    "0.5",
    "8",
    "1e308",
    "1e400",
    "-1e308",
    "nan",
    "NaN",
    "inf",
    "-inf",
    "Infinity",
    "4294967295",
    "4294967296",
    "9" * 30,
    "1" * 5000,
    "",
    " ",
    "1_000",
    "0x10",
    "2024-01-01T00:00:00",
    "UNLIMITED",
    "1-00:00:00",
    "gres/gpu=8",
    "gres/gpu=" + "9" * 20,
)

numbers = st.one_of(
    st.sampled_from(TRICKY_NUMBERS),
    st.integers(-(10**6), 10**12).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
)
cells = st.one_of(numbers, st.text(max_size=10))

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**40), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=6),
)
json_values = st.one_of(
    json_scalars,
    st.fixed_dictionaries(
        {"set": st.booleans(), "infinite": st.booleans(), "number": json_scalars}
    ),
    st.lists(json_scalars, max_size=3),
)

#: Hostlists, well and badly formed, some naming far too many hosts.
hostlists = st.one_of(
    st.builds(
        lambda prefix, ranges: prefix + "".join(f"[{r}]" for r in ranges),
        st.sampled_from(["n", "gpu", "s", "leaf", "", "a-b", "x,"]),
        st.lists(
            st.one_of(
                st.builds(lambda a, b: f"{a}-{b}", st.integers(0, 10**9), st.integers(0, 10**9)),
                st.integers(0, 10**4).map(str),
                st.sampled_from(["1-2-3", "5-1", "", "-", "1-4/2", "1,3", "a", "01-10", "[1]"]),
            ),
            max_size=3,
        ),
    ),
    st.text(alphabet="ns0123456789[]-,/!&^ ", max_size=16),
)

toml_values = st.one_of(
    st.sampled_from(
        [
            "true",
            "1e9",
            "nan",
            "inf",
            "-1",
            "0",
            "3600",
            "3601",
            '"a,b"',
            '["a,b"]',
            '["gpu"]',
            '[" "]',
            '["a=b"]',
            "[1, 2]",
            '""',
            '"/abs"',
            '"rel"',
            "[[[]]]",
            "{a = 1}",
            "1979-05-27",
        ]
    ),
    st.integers(-(2**70), 2**70).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(lambda f: repr(f).replace("inf", "inf")),
    st.text(max_size=8).map(lambda s: '"' + s.replace("\\", "").replace('"', "") + '"'),
)

#: Words for #SBATCH / #SOPT lines: options, values, quotes and comments.
directive_words = st.one_of(
    st.sampled_from(
        [
            "--template",
            "--template=elastic-torchrun",
            "elastic-torchrun",
            "--preemptible",
            "--elastic",
            "1:2",
            "2:1",
            "0:0",
            "--elastic=1:2",
            "-N",
            "2",
            "--comment",
            "'x y'",
            '"x',
            "'",
            "\\",
            "#",
            "# note",
            "--gres=gpu:8",
            "--",
            "hetjob",
            ":",
            "--wrap=hostname",
        ]
    ),
    st.text(max_size=6),
)
