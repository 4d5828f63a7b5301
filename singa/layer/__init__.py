"""Layers: parameterised building blocks that size themselves on first call."""

from singa.layer.base import Layer, LoadResult
