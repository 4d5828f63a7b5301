"""The ``singa-train`` command line: train, evaluate and export the zoo's models.

Entry point: :func:`singa.cli.main.main` (``singa-train = "singa.cli.main:main"`` in pyproject.toml).
Modules: :mod:`singa.cli.main` (click commands), :mod:`singa.cli.config` (settings and TOML files),
:mod:`singa.cli.trainer` (the training loop, checkpoints and resume), :mod:`singa.cli.output`
(console lines, progress bars, JSON-lines log, plots), :mod:`singa.cli.errors`.
"""
