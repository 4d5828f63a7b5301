"""The size rules of the package, checked by ``.ci/run``.

- no function or method in ``singa/`` (the command's code included: ``singa/cli/``) at
  radon cyclomatic grade D or worse (complexity above 20: split it into named phases);
- no ``.py`` file there over 450 lines of code (split it by job; a family that outgrows
  it becomes a folder of the same name, ``singa/autograd/<family>/``). Lines of code are
  the lines that hold code: blank lines, comments and docstrings (any string that
  stands alone as a statement) are not counted, so explaining costs nothing.

Usage: ``python tools/check_complexity.py [folder ...]`` (default: singa). Prints
one line per offence and exits with status 1 when there is any.
"""

from __future__ import annotations

import ast
import io
import sys
import tokenize
from pathlib import Path

from radon.complexity import cc_rank, cc_visit

#: the most lines of code (not blank, comment or docstring lines) a file may have
MAX_CODE_LINES = 450
#: the worst radon grade allowed (A best ... F worst)
WORST_GRADE = "C"
ROOTS = ("singa",)

_NOT_CODE = {
    tokenize.COMMENT,
    tokenize.NL,
    tokenize.NEWLINE,
    tokenize.INDENT,
    tokenize.DEDENT,
    tokenize.ENDMARKER,
    tokenize.ENCODING,
}


def _string_statement_lines(tree: ast.AST) -> set[int]:
    """The lines of every string that stands alone as a statement (docstrings)."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            if isinstance(node.value.value, str):
                lines.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return lines


def code_lines(text: str) -> int:
    """The number of lines of ``text`` (Python source) that hold code: a line counts
    when a token other than a comment starts or continues on it, outside the strings
    that stand alone as statements."""
    docs = _string_statement_lines(ast.parse(text))
    lines: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type in _NOT_CODE:
            continue
        lines.update(n for n in range(tok.start[0], tok.end[0] + 1) if n not in docs)
    return len(lines)


def file_problems(path: Path) -> list[str]:
    """The offences of one Python file."""
    text = path.read_text(encoding="utf-8")
    out = []
    n = code_lines(text)
    if n > MAX_CODE_LINES:
        out.append(f"{path}: {n} lines of code (at most {MAX_CODE_LINES})")
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
    """Check ``argv``'s folders (default :data:`ROOTS`); 1 when anything offends."""
    roots = [Path(a) for a in argv] or [Path(__file__).resolve().parent.parent / r for r in ROOTS]
    roots = [r.relative_to(Path.cwd()) if r.is_relative_to(Path.cwd()) else r for r in roots]
    found = problems(roots)
    for line in found:
        print(line)
    if found:
        print(
            f"{len(found)} offence(s): functions must be radon grade {WORST_GRADE} or better "
            f"and files at most {MAX_CODE_LINES} lines of code",
            file=sys.stderr,
        )
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
