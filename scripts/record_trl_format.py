#!/usr/bin/env python3
"""Record TRL's own format checks on our export (run on demand, not in CI).

TRL's data utilities need ``transformers`` but not torch, so no GPU stack::

    python3.11 -m venv /tmp/trl-venv
    /tmp/trl-venv/bin/pip install transformers datasets
    /tmp/trl-venv/bin/pip install --no-deps trl==1.16.0
    /tmp/trl-venv/bin/python scripts/record_trl_format.py

With this repository's Python (``RSR_PYTHON``, default ``.venv/bin/python``) it writes the
export of ``tests/export/samples.suite()``, loads it with ``datasets.load_dataset`` (no
arguments but the config), and runs TRL's own code on every row:

- ``sft`` and ``direct_sft``: ``trl.data_utils.is_conversational`` is true, and
  ``trl.data_utils.apply_chat_template`` (what ``SFTTrainer`` applies to a conversational
  dataset) renders it with a ChatML template on a tokenizer built in memory, every
  message's content in order; the tokenizer's assistant-token mask (what
  ``assistant_only_loss`` trains on) is recorded for the rejected replies, to show
  whether TRL honours ``weight``;
- ``sharegpt``: ``is_conversational_from_value`` is true, and ``maybe_convert_to_chatml``
  gives the ``sft`` row's messages but for the role names, which TRL keeps as written.

It writes ``tests/export/golden/trl_format.json``: TRL's and transformers' versions, the
sha256 of each file checked, and per config the rows that passed each check;
``tests/export/test_trl_format.py`` checks in CI that the same export still has those
bytes. Exits non-zero when a row fails.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any

import datasets
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast
from trl.data_utils import (
    apply_chat_template,
    is_conversational,
    is_conversational_from_value,
    maybe_convert_to_chatml,
)

REPO = Path(__file__).resolve().parent.parent
GOLDEN = REPO / "tests" / "export" / "golden" / "trl_format.json"
BUILD = (
    "import sys; from pathlib import Path; from tests.export.samples import suite; "
    "from rsr_async.export import write_export; write_export(suite(), Path(sys.argv[1]))"
)
CHATML = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['role'] == 'assistant' %}{% generation %}{{ message['content'] }}<|im_end|>"
    "{% endgeneration %}{% else %}{{ message['content'] }}<|im_end|>{% endif %}\n{% endfor %}"
)


def tokenizer() -> PreTrainedTokenizerFast:
    """A word-level tokenizer built in memory (no download) with a ChatML template that
    marks assistant text for ``return_assistant_tokens_mask``."""
    core = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]")
    tok.chat_template = CHATML
    return tok


def in_order(text: str, parts: list[str]) -> bool:
    at = 0
    for part in parts:
        found = text.find(part, at)
        if found < 0:
            return False
        at = found + len(part)
    return True


def main() -> None:
    python = os.environ.get("RSR_PYTHON", str(REPO / ".venv" / "bin" / "python"))
    tok = tokenizer()
    failures = 0
    record: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "export"
        subprocess.run([python, "-c", BUILD, str(out)], cwd=REPO, check=True)
        hashes = {
            name: hashlib.sha256((out / name).read_bytes()).hexdigest()
            for name in ("sft.jsonl", "direct_sft.jsonl", "sharegpt.jsonl")
        }
        sft_rows = {
            json.loads(line)["key"]: json.loads(line)
            for line in (out / "sft.jsonl").read_text("utf-8").splitlines()
        }
        for config in ("sft", "direct_sft", "sharegpt"):
            loaded = datasets.load_dataset(str(out), config, cache_dir=str(Path(tmp) / "cache"))
            counts = {"rows": 0, "passed": 0, "rejected_replies": 0, "rejected_in_assistant_mask": 0}
            for split in loaded.values():
                for example in split:
                    counts["rows"] += 1
                    ok = True
                    if config == "sharegpt":
                        ok &= is_conversational_from_value(example)
                        chatml = maybe_convert_to_chatml(dict(example))
                        want = sft_rows[example["key"]]["messages"]
                        got = chatml["messages"]
                        ok &= [m["content"] for m in got] == [m["content"] for m in want]
                        ok &= [m["role"] for m in got] == [
                            {"user": "human", "assistant": "gpt"}.get(m["role"], m["role"])
                            for m in want
                        ]
                    else:
                        ok &= is_conversational(example)
                        messages = [
                            {"role": m["role"], "content": m["content"]} for m in example["messages"]
                        ]
                        text = apply_chat_template({"messages": messages}, tok)["text"]
                        ok &= in_order(text, [m["content"] for m in messages])
                        # assistant_only_loss: which assistant replies the mask would train
                        rendered = tok.apply_chat_template(
                            messages, tokenize=True, return_dict=True,
                            return_assistant_tokens_mask=True,
                        )
                        ok &= any(rendered["assistant_masks"])
                        for i, m in enumerate(example["messages"]):
                            if m["role"] == "assistant" and m["weight"] == 0:
                                counts["rejected_replies"] += 1
                                alone = tok.apply_chat_template(
                                    messages[: i + 1], tokenize=True, return_dict=True,
                                    return_assistant_tokens_mask=True,
                                )
                                before = tok.apply_chat_template(
                                    messages[:i], tokenize=True, return_dict=True,
                                    return_assistant_tokens_mask=True,
                                ) if i else {"assistant_masks": []}
                                tail = alone["assistant_masks"][len(before["assistant_masks"]):]
                                counts["rejected_in_assistant_mask"] += any(tail)
                    counts["passed"] += bool(ok)
                    if not ok:
                        failures += 1
                        print(f"FAILED {config} {example['key']}")
            record[config] = counts
            print(config, counts)
    GOLDEN.write_text(
        json.dumps(
            {
                "$comment": (
                    f"trl=={metadata.version('trl')} transformers=={metadata.version('transformers')} "
                    f"datasets=={metadata.version('datasets')} over write_export(tests.export."
                    "samples.suite()), recorded by scripts/record_trl_format.py; do not edit by hand"
                ),
                "files_sha256": hashes,
                "configs": record,
            },
            indent=2,
            sort_keys=True,
        )
        + "\n",
        encoding="utf-8",
    )
    print(f"wrote {GOLDEN.relative_to(REPO)}; {failures} failure(s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
