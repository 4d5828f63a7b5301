"""The size rules of the package, checked by ``.ci/run``.

- no function or method in ``singa/`` (the command's code is ``singa/cli/``) at radon cyclomatic grade D or
  worse (complexity above 20: split it into named phases);
- no ``.py`` file there over 600 lines (split it by job).

Usage: ``python tools/check_complexity.py [folder ...]`` (default: singa). Prints
one line per offence and exits with status 1 when there is any.
"""

from __future__ import annotations

import sys
from pathlib import Path

from radon.complexity import cc_rank, cc_visit

MAX_LINES = 600
#: the worst radon grade allowed (A best ... F worst)
WORST_GRADE = "C"
ROOTS = ("singa",)


def file_problems(path: Path) -> list[str]:
    """The offences of one Python file."""
    text = path.read_text(encoding="utf-8")
    out = []
    n = len(text.splitlines())
    if n > MAX_LINES:
        out.append(f"{path}: {n} lines (at most {MAX_LINES})")
    for block in cc_visit(text):
        grade = cc_rank(block.complexity)
        if grade > WORST_GRADE:
            out.append(f"{path}:{block.lineno} {block.fullname}: grade {grade} ({block.complexity})")
    return out


def problems(roots: list[Path]) -> list[str]:
    """The offences of every ``.py`` file below ``roots``."""
    out: list[str] = []
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            out.extend(file_problems(path))
    return out


def main(argv: list[str]) -> int:
    roots = [Path(a) for a in argv] or [Path(__file__).resolve().parent.parent / r for r in ROOTS]
    roots = [r.relative_to(Path.cwd()) if r.is_relative_to(Path.cwd()) else r for r in roots]
    found = problems(roots)
    for line in found:
        print(line)
    if found:
        print(
            f"{len(found)} offence(s): functions must be radon grade {WORST_GRADE} or better "
            f"and files at most {MAX_LINES} lines",
            file=sys.stderr,
        )
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
