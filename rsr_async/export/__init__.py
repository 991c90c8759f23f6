"""The export stage: public-only training data from a run's kept trajectories.

::

    from rsr_async.export import ExportRecord, write_export

    manifest = write_export(records, run_dir / "export", validation_share=0.1, seed=0)

- :mod:`.records`: :class:`ExportRecord`, what the pipeline hands over per trajectory;
- :mod:`.public`: :func:`public_messages`, the conversation a deployed plain Terminus 2
  model sees and says (no private guidance, no StateM/RSRT control text), and
  :func:`check_conversation`, TRL's conversational format;
- :mod:`.atif`: one trajectory as an ATIF-v1.7 document (Harbor's format);
- :mod:`.writer`: :func:`write_export`, the files, the manifest, the split by task.
"""

from __future__ import annotations

from .atif import ATIF_VERSION, atif_document
from .public import (
    PublicMessage,
    check_conversation,
    is_terminus_protocol,
    public_conversation,
    public_messages,
)
from .records import ExportRecord, ExportSet
from .writer import FILES, split_tasks, write_export

__all__ = [
    "ATIF_VERSION",
    "FILES",
    "ExportRecord",
    "ExportSet",
    "PublicMessage",
    "atif_document",
    "check_conversation",
    "is_terminus_protocol",
    "public_conversation",
    "public_messages",
    "split_tasks",
    "write_export",
]
