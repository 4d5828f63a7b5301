"""singa: a small define-by-run deep-learning framework with Apache SINGA's API.

Modules: :mod:`singa.tensor`, :mod:`singa.device`, :mod:`singa.autograd`,
:mod:`singa.layer`, :mod:`singa.model`, :mod:`singa.opt`, :mod:`singa.sonnx`,
:mod:`singa.data`.
"""

__version__ = "0.1.0"

# SINGA's legacy layer names on singa.autograd (autograd.Conv2d, ...): see singa.layer.legacy.
from singa.layer import legacy as _legacy  # noqa: E402,F401
