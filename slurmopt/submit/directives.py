"""sbatch's argument grammar, without sbatch's semantics: pure, no I/O.

``slurmopt submit`` must hand sbatch exactly what the user wrote, minus its
own options, so it only needs to know *where* each option and its value
are, never what they mean.  That takes two things sbatch itself does:

* splitting a command line with ``getopt_long`` as sbatch calls it: options
  stop at the first operand (the script), long names may be abbreviated to
  a unique prefix, short options may be clustered (``-HN2``), and an option
  that takes a value swallows the next word whatever it looks like;
* reading ``#SBATCH`` lines from the top of a script: only lines that start
  with ``#SBATCH`` in column one, only until the first line that is neither
  blank nor a comment, several options per line, quotes and backslashes
  as sbatch's own tokenizer treats them, and an unquoted ``#`` ending the
  line.

The option tables (:mod:`slurmopt.submit.options`, one per Slurm release)
record only whether each option takes a value and its short letter.  An
option the table lacks raises :class:`UnknownOption` rather than being
guessed at.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from slurmopt.submit.options import Arity, OptionTable, newest_table


class UnknownOption(ValueError):
    """A word that looks like an option the release's sbatch does not have (or an ambiguous prefix).

    Splitting on past it would guess whether it takes a value, and a wrong
    guess moves the script: so the caller stops with this, naming the word.
    """

    def __init__(self, word: str, matches: Sequence[str] = ()) -> None:
        self.word = word
        self.matches = tuple(matches)
        super().__init__(word)


#: What separates the option groups of a heterogeneous job: ``sbatch -N1 : -N2 job.sh``.
HETJOB_SEPARATOR = ":"


@dataclass(frozen=True, slots=True)
class Option:
    """One option as written, with the long name it resolves to.

    ``tokens`` are the exact words it occupied, so it can be passed on
    verbatim (for a cluster such as ``-HN2``, all on its first option);
    ``name`` is the full long name (``partition`` for ``-p`` or ``--part``).
    ``component`` counts the heterogeneous-job groups before it.
    """

    name: str
    value: str | None
    tokens: tuple[str, ...]
    component: int = 0


@dataclass(frozen=True, slots=True)
class ParsedArgs:
    """A command line split as sbatch splits it: options, then the script and its arguments.

    ``rest`` is everything from the first operand on (including a leading
    ``--``), verbatim; ``script`` and ``script_args`` are read from it.
    """

    options: tuple[Option, ...]
    rest: tuple[str, ...]

    @property
    def script(self) -> str | None:
        words = self.rest[1:] if self.rest[:1] == ("--",) else self.rest
        return words[0] if words else None

    @property
    def script_args(self) -> tuple[str, ...]:
        words = self.rest[1:] if self.rest[:1] == ("--",) else self.rest
        return tuple(words[1:])


def prefix_matches(name: str, table: Iterable[str]) -> list[str]:
    """The long options ``name`` could mean, as getopt_long resolves it: exact, else prefixes."""
    names = list(table)
    if name in names:
        return [name]
    return sorted(full for full in names if full.startswith(name))


def resolve_long(name: str, table: Iterable[str]) -> str | None:
    """The one long option ``name`` means, or None (no such option, or an ambiguous prefix)."""
    matches = prefix_matches(name, table)
    return matches[0] if len(matches) == 1 else None


def split_args(
    argv: Sequence[str],
    table: OptionTable | None = None,
    extra_long: dict[str, Arity] | None = None,
    exact_only: Iterable[str] = (),
) -> ParsedArgs:
    """Split ``argv`` into options and the script with its arguments, as sbatch does.

    ``table`` is the sbatch release's options (default: the newest shipped);
    ``extra_long`` adds options sbatch does not have (slurmopt's own);
    names in ``exact_only`` are recognised only when spelled in full, so
    that an abbreviation keeps meaning what it means to sbatch.  Raises
    :class:`UnknownOption` for an option (before the script) that is in
    neither, or an ambiguous abbreviation.
    """
    sbatch = table or newest_table()
    long = {**sbatch.long, **(extra_long or {})}
    exact = set(exact_only)
    abbreviable = [n for n in long if n not in exact]
    options: list[Option] = []
    component = 0
    i = 0
    while i < len(argv):
        word = argv[i]
        if word == "--" or word == "-" or not word.startswith("-"):
            if word == HETJOB_SEPARATOR:
                options.append(Option(HETJOB_SEPARATOR, None, (word,), component))
                component += 1
                i += 1
                continue
            return ParsedArgs(tuple(options), tuple(argv[i:]))
        if word.startswith("--"):
            spelled, eq, attached = word[2:].partition("=")
            matches = [spelled] if spelled in exact else prefix_matches(spelled, abbreviable)
            if len(matches) != 1:
                raise UnknownOption(word.partition("=")[0], matches)
            name = matches[0]
            arity = long[name]
            if eq:
                options.append(Option(name, attached, (word,), component))
                i += 1
            elif arity is Arity.REQUIRED and i + 1 < len(argv):
                options.append(Option(name, argv[i + 1], (word, argv[i + 1]), component))
                i += 2
            else:
                options.append(Option(name, None, (word,), component))
                i += 1
            continue
        i = _split_short(argv, i, component, options, sbatch)
    return ParsedArgs(tuple(options), ())


def _split_short(
    argv: Sequence[str], i: int, component: int, out: list[Option], table: OptionTable
) -> int:
    """Split one ``-abc`` cluster; returns the index of the next word.

    The cluster's words go, verbatim, with its first option (the others get
    none), so that passing the options on rebuilds ``-HN2`` and not ``-H -N2``.
    """
    word = argv[i]
    parts: list[tuple[str, str | None]] = []  # (name, value)
    consumed = i + 1
    j = 1
    while j < len(word):
        letter = word[j]
        long_name = table.short.get(letter)
        if long_name is None:
            raise UnknownOption(f"-{letter}")
        arity = table.long[long_name]
        attached = word[j + 1 :]
        if arity is Arity.NONE:
            parts.append((long_name, None))
            j += 1
            continue
        if attached:
            parts.append((long_name, attached))
        elif arity is Arity.REQUIRED and i + 1 < len(argv):
            parts.append((long_name, argv[i + 1]))
            consumed = i + 2
        else:
            parts.append((long_name, None))
        break
    tokens = tuple(argv[i:consumed])
    for k, (name, value) in enumerate(parts):
        out.append(Option(name, value, tokens if k == 0 else (), component))
    return consumed


def join_tokens(options: Iterable[Option]) -> list[str]:
    """The words the options occupied, in order: what sbatch is given back."""
    return [token for opt in options for token in opt.tokens]


# ---------------------------------------------------------------- script directives


#: What C's isspace() accepts; str.isspace() accepts more.
_C_SPACE = frozenset(" \t\n\v\f\r")


class DirectiveError(ValueError):
    """A directive line sbatch would reject while reading it (an unmatched quote)."""

    def __init__(self, lineno: int, message: str) -> None:
        self.lineno = lineno
        super().__init__(message)


@dataclass(frozen=True, slots=True)
class Directive:
    """The words of one directive line, and its line number (1-based)."""

    lineno: int
    words: tuple[str, ...]


def split_directive(text: str, lineno: int = 0) -> list[str]:
    """Split what follows ``#SBATCH`` into words, as sbatch's ``_get_argument`` does.

    Whitespace separates words; single and double quotes group (and are
    removed); a backslash keeps the next character; an unquoted ``#`` ends
    the line, so ``#SBATCH -N 2 # two nodes`` is just ``-N 2``.  Like
    sbatch, a word that comes out empty (``""``) ends the line too.
    """
    words: list[str] = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i] in _C_SPACE:
            i += 1
        if i >= n:
            return words
        chars: list[str] = []
        quote = ""
        escaped = False
        while i < n and (quote or text[i] not in _C_SPACE):
            c = text[i]
            i += 1
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
                continue
            elif quote:
                if c == quote:
                    quote = ""
                    continue
            elif c in "\"'":
                quote = c
                continue
            elif c == "#":
                i -= 1
                break
            chars.append(c)
        if quote:
            raise DirectiveError(lineno, f"unmatched {quote} in {text.strip()!r}")
        if not chars:
            return words
        words.append("".join(chars))


def _is_command(line: str) -> bool:
    """True for a line that ends the directive block: not blank, not a comment."""
    stripped = line.lstrip("".join(_C_SPACE))
    return bool(stripped) and not stripped.startswith("#")


def script_directives(script: str, prefix: str = "#SBATCH") -> list[Directive]:
    """Directive lines with ``prefix`` at the head of a script, as sbatch reads them.

    Stops at the first command line; a ``hetjob`` separator line ends the
    first job component, and only that component's lines are returned
    (slurmopt tags the job as a whole, through its first component).
    """
    found: list[Directive] = []
    for lineno, line in enumerate(script.split("\n"), start=1):
        if line.startswith(prefix):
            body = line[len(prefix) :]
            if prefix == "#SBATCH" and ("hetjob" in body.lower() or "packjob" in body.lower()):
                break
            words = split_directive(body, lineno)
            if words:
                found.append(Directive(lineno, tuple(words)))
        elif _is_command(line):
            break
    return found
