"""``python -m benchmarks.policies [--workers N] [--render] ...``: see the package docstring."""

from benchmarks.policies.cli import main

main()
