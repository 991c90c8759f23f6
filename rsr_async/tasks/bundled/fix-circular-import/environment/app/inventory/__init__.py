from .loader import load
from .models import Item
from .report import report

__all__ = ["Item", "load", "report"]
