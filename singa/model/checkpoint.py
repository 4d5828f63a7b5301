"""The checkpoint functions under their earlier name: :mod:`singa.checkpoint` is where
they live (a floor below the model); ``from singa.model import checkpoint`` keeps
working for existing code, with every public name of :mod:`singa.checkpoint`."""

from singa import checkpoint as _checkpoint
from singa.checkpoint import *  # noqa: F403

__all__ = list(_checkpoint.__all__)
