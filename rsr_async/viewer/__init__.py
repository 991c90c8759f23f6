"""A local, read-only web viewer over a run directory (``python -m rsr_async view``).

Pages: the run's tasks and counts, job lists filtered by stage, harness, domain and status,
one trajectory with its messages coloured by origin and the leak audit's marks, and a
source trajectory beside its runbooks, critic verdicts and rewrites. The store is opened
read-only and never locked, so a live run keeps writing while it is viewed.
"""

from __future__ import annotations

from .queries import PAGE_SIZE, Filters, RunView
from .server import ViewerServer, open_run

__all__ = ["PAGE_SIZE", "Filters", "RunView", "ViewerServer", "open_run"]
