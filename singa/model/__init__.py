"""The Model API (:class:`Model`) with graph mode (:mod:`singa.model.graph`).

Example::

    from singa import model
    class Net(model.Model):
        ...
"""

from singa.model.graph import Graph, Recorder
from singa.model.model import Model
