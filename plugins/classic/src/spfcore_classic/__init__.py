"""The classic cache algorithms as spfcore policies (policy-ordered mode).

``arc``, ``s3fifo``, ``sieve``, ``lirs``, ``gdsf`` and ``twoq``: each keeps its
own order of the cached blocks and names the victims through
:func:`spfcore.hookspecs.spfcore_evict_blocks`. :mod:`spfcore_classic._base`
says how chains map onto these object-cache algorithms; each module says which
paper and which libCacheSim variant it follows.
"""

from spfcore_classic.arc import ARC
from spfcore_classic.gdsf import GDSF
from spfcore_classic.lirs import LIRS
from spfcore_classic.s3fifo import S3FIFO
from spfcore_classic.sieve import Sieve
from spfcore_classic.twoq import TwoQ

__all__ = ["ARC", "GDSF", "LIRS", "S3FIFO", "Sieve", "TwoQ"]
