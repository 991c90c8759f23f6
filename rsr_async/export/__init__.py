"""The export stage: public-only training data from a run's kept trajectories.

::

    from rsr_async.export import ExportRecord, write_export

    manifest = write_export(records, run_dir / "export", validation_share=0.1, seed=0)

- :mod:`.records`: :class:`ExportRecord`, what the pipeline hands over per trajectory;
- :mod:`.collect`: :func:`collect_records`, a run's records read from its store;
- :mod:`.public`: :func:`public_messages`, the conversation a deployed plain Terminus 2
  model sees and says (no private guidance, no StateM/RSRT control text), and
  :func:`check_conversation`, TRL's conversational format;
- :mod:`.atif`: one trajectory as an ATIF-v1.7 document (Harbor's format);
- :mod:`.writer`: :func:`write_export`, the files, the dataset card, the manifest, the
  split by task; :func:`written_counts`, what an export keeps after dedupe;
- :mod:`.harbor_jobs`: :func:`write_harbor_jobs`, the SFT set as a Harbor job directory
  (``harbor view``, ``harbor traces export``).
"""

from __future__ import annotations

from .atif import ATIF_VERSION, HARBOR_AGENTS, atif_document
from .collect import DIRECT_HARNESS, collect_records
from .harbor_jobs import write_harbor_jobs
from .public import (
    PublicMessage,
    check_conversation,
    drop_rejected,
    is_terminus_protocol,
    public_conversation,
    public_messages,
    rejected_replies,
)
from .records import ExportRecord, ExportSet
from .writer import (
    FILES,
    REJECTED_MODES,
    RejectedMode,
    split_tasks,
    write_export,
    written_counts,
    written_keys,
)

__all__ = [
    "ATIF_VERSION",
    "DIRECT_HARNESS",
    "FILES",
    "HARBOR_AGENTS",
    "REJECTED_MODES",
    "ExportRecord",
    "ExportSet",
    "PublicMessage",
    "RejectedMode",
    "atif_document",
    "check_conversation",
    "collect_records",
    "drop_rejected",
    "is_terminus_protocol",
    "public_conversation",
    "public_messages",
    "rejected_replies",
    "split_tasks",
    "write_export",
    "write_harbor_jobs",
    "written_counts",
    "written_keys",
]
