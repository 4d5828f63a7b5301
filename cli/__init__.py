"""The ``singa-train`` command line: train, evaluate and export the zoo's models.

Entry point: :func:`cli.main.main` (``singa-train = "cli.main:main"`` in pyproject.toml).
Modules: :mod:`cli.main` (click commands), :mod:`cli.config` (settings and TOML files),
:mod:`cli.trainer` (the training loop, checkpoints and resume), :mod:`cli.output`
(console lines, progress bars, JSON-lines log, plots), :mod:`cli.errors`.
"""
