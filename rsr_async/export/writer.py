"""Write an export directory: SFT JSONL, ShareGPT, the direct-SFT baseline, ATIF, a manifest.

Layout of ``out_dir`` (see :func:`write_export`)::

    sft.jsonl          the paper's SFT set (rewrite + direct), chat ``messages`` form
    sharegpt.jsonl     the same rows in ShareGPT ``conversations`` form
    direct_sft.jsonl   the direct-SFT baseline (discover successes of every harness)
    atif/<id>.json     one ATIF document per exported trajectory
    manifest.json      counts, the split, duplicates dropped, sha256 of every file

Everything is a pure function of the records, ``validation_share``, ``seed`` and
``counts``: keys are sorted, rows are sorted by key, nothing holds a wall-clock time, so
two exports of the same input are byte-identical. The directory is written under a
temporary name beside ``out_dir`` and renamed into place at the end, so a crash leaves
either the previous export or none, never a half one.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import secrets
import shutil
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import msgspec

from ..output_dirs import check_output_dir
from ..schema import encode
from .atif import atif_document
from .public import PublicMessage, check_conversation, public_conversation
from .records import ExportRecord, ExportSet

__all__ = ["FILES", "split_tasks", "write_export"]

MANIFEST_VERSION = 1
FILES: dict[str, tuple[ExportSet, ...]] = {
    "sft": ("rewrite", "direct"),
    "direct_sft": ("baseline",),
}
"""Export file stem -> the record sets it holds. ``sharegpt.jsonl`` mirrors ``sft``."""
SHAREGPT_ROLES = {"system": "system", "user": "human", "assistant": "gpt"}
SPLIT_METHOD = (
    "by task: a task is in validation when int(sha256(f'{seed}:{task}')[:16], 16) / 2**64 "
    "< validation_share; with validation_share > 0 and two or more tasks, at least one "
    "task is on each side (the lowest-scoring task moves to validation, or the highest to "
    "train)"
)
DEDUPE_METHOD = (
    "per file, by sha256 of the public messages as canonical JSON; of rows with the same "
    "hash the one with the smallest (key, set) is kept"
)


def _task_score(seed: int, task: str) -> float:
    digest = hashlib.sha256(f"{seed}:{task}".encode()).hexdigest()
    return int(digest[:16], 16) / 2**64


def split_tasks(tasks: Iterable[str], *, validation_share: float, seed: int) -> dict[str, str]:
    """Task -> ``"train"`` or ``"validation"`` (rule in :data:`SPLIT_METHOD`)."""
    scores = {task: _task_score(seed, task) for task in set(tasks)}
    split = {t: "validation" if s < validation_share else "train" for t, s in scores.items()}
    if validation_share > 0 and len(scores) >= 2:
        sides = Counter(split.values())
        if not sides["validation"]:
            split[min(scores, key=lambda t: (scores[t], t))] = "validation"
        elif not sides["train"]:
            split[max(scores, key=lambda t: (scores[t], t))] = "train"
    return split


def _builtin(obj: Any) -> Any:
    # Caller counts may hold msgspec records (stage summaries): store their fields.
    return msgspec.to_builtins(obj)


def _json_bytes(obj: Any, *, indent: int | None = None) -> bytes:
    separators = (",", ": ") if indent else (",", ":")
    options: dict[str, Any] = {
        "sort_keys": True,
        "indent": indent,
        "separators": separators,
        "default": _builtin,
    }
    try:
        return json.dumps(obj, ensure_ascii=False, **options).encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate in model text: JSON can escape it
        return json.dumps(obj, ensure_ascii=True, **options).encode("ascii")


def _safe_id(key: str) -> str:
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", key).strip("._-")[:120]
    return f"{readable}-{hashlib.sha256(key.encode()).hexdigest()[:10]}"


class _Row:
    """One record with its public conversation, ready to write."""

    def __init__(self, record: ExportRecord, conversation: list[PublicMessage]) -> None:
        self.record = record
        self.conversation = conversation
        self.messages = [{"role": m.role, "content": m.content} for m in conversation]
        self.sha256 = hashlib.sha256(_json_bytes(self.messages)).hexdigest()
        self.atif = f"atif/{_safe_id(record.key)}.json"

    def meta(self, split: str) -> dict[str, Any]:
        r = self.record
        return {
            "key": r.key,
            "set": r.set,
            "task": r.task,
            "harness": r.harness,
            "model": r.model,
            "source_key": r.source_key,
            "runbook": r.runbook,
            "reward": r.reward,
            "split": split,
            "content_sha256": self.sha256,
            "atif": self.atif,
        }


def _collect(records: Iterable[ExportRecord]) -> dict[tuple[str, ExportSet], ExportRecord]:
    by_set_key: dict[tuple[str, ExportSet], ExportRecord] = {}
    first_by_key: dict[str, ExportRecord] = {}
    for record in records:
        if not isinstance(record, ExportRecord):
            raise TypeError(f"write_export: expected ExportRecord, got {type(record).__name__}")
        if record.harness != record.trajectory.harness:
            raise ValueError(
                f"export record {record.key!r}: harness {record.harness!r} but its trajectory "
                f"says {record.trajectory.harness!r}; which control text to strip depends on it"
            )
        if (record.key, record.set) in by_set_key:
            raise ValueError(f"export record {record.key!r} appears twice in set {record.set!r}")
        other = first_by_key.setdefault(record.key, record)
        if other is not record and (
            encode(other.trajectory) != encode(record.trajectory) or other.task != record.task
        ):
            raise ValueError(
                f"export key {record.key!r} names two different trajectories "
                f"(sets {other.set!r} and {record.set!r}); a key is one trajectory"
            )
        by_set_key[(record.key, record.set)] = record
    return by_set_key


def write_export(
    records: Iterable[ExportRecord],
    out_dir: Path,
    *,
    validation_share: float = 0.1,
    seed: int = 0,
    counts: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Write the export of ``records`` to ``out_dir`` (replacing it whole: only an empty
    directory or an earlier export, see :func:`check_output_dir`) and return the manifest.

    ``counts`` (per pipeline stage, from the caller) is stored in the manifest as is; it
    must be JSON-serialisable. Records without a public conversation (no model reply
    left) are listed under ``empty`` and not written. Blocking file I/O: call it from a
    worker thread inside an event loop.
    """
    if not 0.0 <= validation_share < 1.0:
        raise ValueError(f"validation_share must be in [0, 1), got {validation_share!r}")
    out_dir = check_output_dir(out_dir, "export")
    collected = _collect(records)
    rows: dict[tuple[str, ExportSet], _Row] = {}
    empty: dict[str, list[str]] = defaultdict(list)
    filtered: dict[str, Counter[str]] = defaultdict(Counter)
    for (key, set_name), record in sorted(collected.items()):
        stats: Counter[str] = Counter()
        conversation = public_conversation(record.trajectory, stats)
        filtered[set_name].update(stats)
        if not conversation:
            empty[set_name].append(key)
            continue
        row = _Row(record, conversation)
        check_conversation(row.messages)  # our own rules guarantee it; a bug must not ship
        rows[(key, set_name)] = row

    # Dedupe per file, then split by task over everything that is written.
    files: dict[str, list[_Row]] = {}
    duplicates: dict[str, list[dict[str, str]]] = {}
    for stem, sets in FILES.items():
        seen: dict[str, _Row] = {}
        dropped: list[dict[str, str]] = []
        for (key, set_name), row in sorted(rows.items()):
            if set_name not in sets:
                continue
            kept = seen.setdefault(row.sha256, row)
            if kept is not row:
                dropped.append(
                    {
                        "key": key,
                        "set": set_name,
                        "duplicate_of": kept.record.key,
                        "sha256": row.sha256,
                    }
                )
        files[stem] = sorted(seen.values(), key=lambda r: (r.record.key, r.record.set))
        duplicates[stem] = dropped
    written = [row for stem_rows in files.values() for row in stem_rows]
    split = split_tasks(
        (row.record.task for row in written), validation_share=validation_share, seed=seed
    )

    outputs: dict[str, bytes] = {}
    for stem, stem_rows in files.items():
        outputs[f"{stem}.jsonl"] = b"".join(
            _json_bytes({"messages": row.messages, **row.meta(split[row.record.task])}) + b"\n"
            for row in stem_rows
        )
    outputs["sharegpt.jsonl"] = b"".join(
        _json_bytes(
            {
                "conversations": [
                    {"from": SHAREGPT_ROLES[m["role"]], "value": m["content"]} for m in row.messages
                ],
                **row.meta(split[row.record.task]),
            }
        )
        + b"\n"
        for row in files["sft"]
    )
    by_key: dict[str, list[_Row]] = defaultdict(list)
    for row in written:
        by_key[row.record.key].append(row)
    for key, key_rows in sorted(by_key.items()):
        row = key_rows[0]
        r = row.record
        outputs[row.atif] = (
            _json_bytes(
                atif_document(
                    row.conversation,
                    session_id=key,
                    harness=r.harness,
                    model=r.model,
                    extra={
                        "key": key,
                        "sets": sorted({k.record.set for k in key_rows}),
                        "task": r.task,
                        "split": split[r.task],
                        "source_key": r.source_key,
                        "runbook": r.runbook,
                        "reward": r.reward,
                        "content_sha256": row.sha256,
                    },
                ),
                indent=2,
            )
            + b"\n"
        )

    manifest = _manifest(
        collected,
        files,
        outputs,
        split,
        duplicates,
        empty,
        filtered,
        validation_share=validation_share,
        seed=seed,
        counts=counts,
    )
    outputs["manifest.json"] = _json_bytes(manifest, indent=2) + b"\n"
    _write_atomically(out_dir, outputs)
    return manifest


def _manifest(
    collected: Mapping[tuple[str, ExportSet], ExportRecord],
    files: Mapping[str, list[_Row]],
    outputs: Mapping[str, bytes],
    split: Mapping[str, str],
    duplicates: Mapping[str, list[dict[str, str]]],
    empty: Mapping[str, list[str]],
    filtered: Mapping[str, Counter[str]],
    *,
    validation_share: float,
    seed: int,
    counts: Mapping[str, Any] | None,
) -> dict[str, Any]:
    per_set: dict[str, int] = Counter()
    per_harness: dict[str, Counter[str]] = defaultdict(Counter)
    per_task: dict[str, dict[str, Any]] = {}
    split_rows: dict[str, Counter[str]] = defaultdict(Counter)
    for stem, stem_rows in files.items():
        for row in stem_rows:
            r = row.record
            per_set[r.set] += 1
            per_harness[r.set][r.harness] += 1
            task = per_task.setdefault(r.task, {"split": split[r.task]})
            task[r.set] = task.get(r.set, 0) + 1
            split_rows[f"{stem}.jsonl"][split[r.task]] += 1
    split_rows["sharegpt.jsonl"] = split_rows["sft.jsonl"]
    received: Counter[str] = Counter(set_name for _, set_name in collected)
    return {
        "manifest_version": MANIFEST_VERSION,
        "records": {"received": dict(received), "written": dict(per_set)},
        "per_harness": {s: dict(c) for s, c in per_harness.items()},
        "per_task": per_task,
        "files": {
            name: {
                "sha256": hashlib.sha256(data).hexdigest(),
                "bytes": len(data),
                **({"rows": data.count(b"\n")} if name.endswith(".jsonl") else {}),
            }
            for name, data in outputs.items()
        },
        "split": {
            "method": SPLIT_METHOD,
            "seed": seed,
            "validation_share": validation_share,
            "train": sorted(t for t, s in split.items() if s == "train"),
            "validation": sorted(t for t, s in split.items() if s == "validation"),
            "rows": {name: dict(c) for name, c in split_rows.items()},
        },
        "dedupe": {"method": DEDUPE_METHOD, "dropped": dict(duplicates)},
        "empty": {s: sorted(keys) for s, keys in empty.items()},
        "public_filter": {s: dict(c) for s, c in filtered.items()},
        "counts": msgspec.to_builtins(dict(counts)) if counts is not None else {},
    }


_LEFTOVER = re.compile(r"\.(?P<name>.+)\.(?:tmp|old)-(?P<pid>\d+)-[0-9a-f]{8}")


def _remove_leftovers(out_dir: Path) -> None:
    """Remove temporary directories of earlier exports to ``out_dir`` whose process is gone.

    A crash (SIGKILL) between the write and the rename leaves them; a live process's are
    left alone, and so is anything that does not carry our name.
    """
    for path in out_dir.parent.glob(f".{glob.escape(out_dir.name)}.*-*-*"):
        match = _LEFTOVER.fullmatch(path.name)
        if match is None or match["name"] != out_dir.name or not path.is_dir():
            continue
        pid = int(match["pid"])
        if pid == os.getpid():
            continue
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
        except PermissionError:  # alive, someone else's
            continue


def _write_atomically(out_dir: Path, outputs: Mapping[str, bytes]) -> None:
    parent = out_dir.parent
    parent.mkdir(parents=True, exist_ok=True)
    _remove_leftovers(out_dir)
    tag = f"{os.getpid()}-{secrets.token_hex(4)}"
    tmp = parent / f".{out_dir.name}.tmp-{tag}"
    old = parent / f".{out_dir.name}.old-{tag}"
    tmp.mkdir()
    try:
        (tmp / "atif").mkdir()
        for name, data in sorted(outputs.items()):
            if name != "manifest.json":
                (tmp / name).write_bytes(data)
        (tmp / "manifest.json").write_bytes(outputs["manifest.json"])  # last: marks it complete
        if out_dir.exists():
            out_dir.rename(old)
        tmp.rename(out_dir)
    except BaseException:
        if old.exists() and not out_dir.exists():
            old.rename(out_dir)  # the previous export, back in place
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(old, ignore_errors=True)
