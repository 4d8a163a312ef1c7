"""kvrules-kpool-tail: a third-party kvrules plugin for the kpool-tail scratch cache.

It adds the spec type ``kpool_tail``, the layer strategy ``kpool-tail-pad``, the tensor layout
``kpool-dedicated`` and the view layout ``kpool-ring``; it uses only kvrules' public plugin API.
"""

from kvrules_kpool_tail.rules import KpoolDedicated, KpoolTailPad
from kvrules_kpool_tail.spec import KpoolTailSpec
from kvrules_kpool_tail.views import KpoolRingView

__version__ = "0.1.0"

__all__ = ["KpoolDedicated", "KpoolRingView", "KpoolTailPad", "KpoolTailSpec"]
