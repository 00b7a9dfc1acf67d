"""sbatch script directives (``#SBATCH`` and ``#SOPT``): an sbatch argument list, or exit 2.

The builder runs in the child, not ``slurmopt submit``: the command would run sbatch.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.sandbox import Driver, assert_clean
from tests.fuzz.strategies import directive_words

CODES = {2}

#: Scripts that once lost options silently; each is now one line naming the line, exit 2.
KNOWN = [
    (
        "#!/bin/bash\n#SBATCH -N 2\n#SBATCH --time=1:00:00\n#SOPT --template elastic-torchrun\n"
        "python train.py\n",
        "job.sh:4: --template elastic-torchrun cannot be a #SOPT line",
    ),
    (
        "#!/bin/bash\n#SBATCH -N 2\n#SOPT --preemptible\n#SOPT --comment 'oops\npython train.py\n",
        "job.sh:4: unmatched '",
    ),
    ('#!/bin/bash\n#SBATCH --comment "x\n#SOPT --preemptible\nhostname\n', "job.sh:2: unmatched"),
]


@pytest.mark.parametrize(("script", "words"), KNOWN, ids=range(len(KNOWN)))
def test_known_bad_scripts(driver: Driver, script: str, words: str) -> None:
    outcome = driver.submit(script)
    assert_clean(outcome, CODES)
    assert outcome.rc == 2 and outcome.stderr.startswith(f"slurmopt: {words}"), outcome.stderr


@given(
    st.lists(
        st.one_of(
            st.builds(
                lambda prefix, words: prefix + " " + " ".join(words),
                st.sampled_from(["#SBATCH", "#SOPT", " #SBATCH", "#SBATCH\t"]),
                st.lists(directive_words, max_size=4),
            ),
            st.sampled_from(["", "# comment", "hostname", "#!/bin/bash"]),
            st.text(max_size=12),
        ),
        max_size=6,
    )
)
def test_script_directives(driver: Driver, lines: list[str]) -> None:
    assert_clean(driver.submit("\n".join(lines) + "\n"), CODES)
