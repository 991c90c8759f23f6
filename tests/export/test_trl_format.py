"""TRL's own format checks pass on every row of our export (recorded: TRL needs transformers).

``golden/trl_format.json`` holds what TRL 1.16.0's data utilities said of
``write_export(samples.suite())`` (``scripts/record_trl_format.py``: ``is_conversational``
and ``apply_chat_template`` on ``sft``/``direct_sft``, ``is_conversational_from_value`` and
``maybe_convert_to_chatml`` on ``sharegpt``), with the sha256 of the files it read. Here
the same export is written again: the files must be those bytes, so the verdict holds.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from rsr_async.export import write_export
from tests.export import samples

GOLDEN = json.loads((Path(__file__).parent / "golden" / "trl_format.json").read_text("utf-8"))


def test_trl_checked_these_bytes_and_every_row_passed(tmp_path: Path) -> None:
    out = tmp_path / "export"
    write_export(samples.suite(), out)
    assert "trl==1.16.0" in GOLDEN["$comment"]
    for name, digest in GOLDEN["files_sha256"].items():
        assert hashlib.sha256((out / name).read_bytes()).hexdigest() == digest, name
    files = {"sft": "sft.jsonl", "direct_sft": "direct_sft.jsonl", "sharegpt": "sharegpt.jsonl"}
    for config, counts in GOLDEN["configs"].items():
        rows = (out / files[config]).read_text("utf-8").splitlines()
        assert counts["rows"] == counts["passed"] == len(rows), config
    # TRL trains on what its assistant mask covers, and that covers the replies we weigh 0:
    # TRL does not honour `weight` (README: use --rejected drop for it).
    sft = GOLDEN["configs"]["sft"]
    assert sft["rejected_replies"] == sft["rejected_in_assistant_mask"] > 0
