from .models import Item
from .loader import load
from .report import report

__all__ = ["Item", "load", "report"]
