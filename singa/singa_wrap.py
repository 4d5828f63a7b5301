"""The name of SINGA's compiled module, for scripts that import it as
``from singa import singa_wrap as singa``. Only what distributed scripts use from it
lives here: :class:`NcclIdHolder` (see :mod:`singa.dist.nccl`)."""

from singa.dist.nccl import NcclIdHolder

__all__ = ["NcclIdHolder"]
