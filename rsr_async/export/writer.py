"""Write an export directory: SFT JSONL, ShareGPT, the direct-SFT baseline, ATIF, a manifest.

Layout of ``out_dir`` (see :func:`write_export`)::

    sft.jsonl          the paper's SFT set (rewrite + direct), chat ``messages`` form
    sharegpt.jsonl     the same rows in ShareGPT ``conversations`` form
    direct_sft.jsonl   the direct-SFT baseline (discover successes of every harness)
    <stem>-train.jsonl, <stem>-validation.jsonl
                       the same rows again, one file per side of the split (what the
                       dataset card points at: a split is a file, not only a column)
    README.md          a Hugging Face dataset card: one config per stem (sft, the default;
                       direct_sft; sharegpt), its splits and features, so
                       ``datasets.load_dataset(out_dir[, "direct_sft"])`` needs no arguments
    dataset_info.json  LLaMA-Factory's dataset registry for this folder (``dataset_dir``)
    atif/<id>.json     one ATIF document per exported trajectory
    manifest.json      counts, the split, duplicates dropped, sha256 of every file

Assistant messages carry OpenAI fine-tuning's ``weight``: 0 for a reply Terminus 2
rejected (unparseable, or cut by the output limit: it ran nothing and said so), 1
otherwise; ``rejected="drop"`` leaves such replies and Terminus 2's answers to them out
instead (:func:`.public.drop_rejected`).

Everything is a pure function of the records, ``validation_share``, ``seed``, ``rejected``
and ``counts``: keys are sorted, rows are sorted by key, nothing holds a wall-clock time,
so two exports of the same input are byte-identical. The directory is written under a
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
from typing import Any, Literal

import msgspec
import yaml

from ..output_dirs import check_output_dir
from ..schema import encode
from .atif import atif_document
from .public import (
    PublicMessage,
    check_conversation,
    drop_rejected,
    public_conversation,
    rejected_replies,
)
from .records import ExportRecord, ExportSet

__all__ = [
    "FILES",
    "REJECTED_MODES",
    "RejectedMode",
    "split_tasks",
    "write_export",
    "written_counts",
    "written_keys",
]

MANIFEST_VERSION = 1
FILES: dict[str, tuple[ExportSet, ...]] = {
    "sft": ("rewrite", "direct"),
    "direct_sft": ("baseline",),
}
"""Export file stem -> the record sets it holds. ``sharegpt.jsonl`` mirrors ``sft``."""
SHAREGPT_ROLES = {"system": "system", "user": "human", "assistant": "gpt"}
SPLITS = ("train", "validation")
RejectedMode = Literal["weight", "drop"]
REJECTED_MODES: tuple[RejectedMode, ...] = ("weight", "drop")
"""What to do with a reply Terminus 2 rejected: keep it with ``weight`` 0, or drop it."""
SPLIT_METHOD = (
    "by task: a task is in validation when int(sha256(f'{seed}:{task}')[:16], 16) / 2**64 "
    "< validation_share; with validation_share > 0 and two or more tasks, at least one "
    "task is on each side (the lowest-scoring task moves to validation, or the highest to "
    "train)"
)
DEDUPE_METHOD = (
    "per file, by sha256 of the public messages ({role, content}) as canonical JSON; of rows "
    "with the same hash the one with the smallest (key, set) is kept"
)
WEIGHT_METHOD = (
    "assistant messages carry weight 0 when Terminus 2 rejected the reply (the next message "
    "is its parse-error or output-limit message: it ran nothing of it), else 1"
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

    def __init__(
        self, record: ExportRecord, conversation: list[PublicMessage], rejected: RejectedMode
    ) -> None:
        self.record = record
        self.rejected = rejected_replies(conversation)
        self.dropped = 0
        if rejected == "drop" and self.rejected:
            self.dropped = len(self.rejected)
            conversation = drop_rejected(conversation)
            self.rejected = {}
        self.conversation = conversation
        plain = [{"role": m.role, "content": m.content} for m in conversation]
        self.sha256 = hashlib.sha256(_json_bytes(plain)).hexdigest()
        self.messages: list[dict[str, Any]] = [
            {**m, "weight": 0 if i in self.rejected else 1} if m["role"] == "assistant" else m
            for i, m in enumerate(plain)
        ]
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
            "rejected_turns": len(self.rejected) + self.dropped,
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


class _Plan:
    """What an export writes, before any byte: rows per file after dedupe, and the split."""

    def __init__(
        self,
        records: Iterable[ExportRecord],
        *,
        validation_share: float,
        seed: int,
        rejected: RejectedMode,
    ) -> None:
        if not 0.0 <= validation_share < 1.0:
            raise ValueError(f"validation_share must be in [0, 1), got {validation_share!r}")
        if rejected not in REJECTED_MODES:
            raise ValueError(
                f"rejected must be one of {', '.join(REJECTED_MODES)}, got {rejected!r}"
            )
        self.collected = _collect(records)
        rows: dict[tuple[str, ExportSet], _Row] = {}
        self.empty: dict[str, list[str]] = defaultdict(list)
        self.filtered: dict[str, Counter[str]] = defaultdict(Counter)
        for (key, set_name), record in sorted(self.collected.items()):
            stats: Counter[str] = Counter()
            conversation = public_conversation(record.trajectory, stats)
            self.filtered[set_name].update(stats)
            if not conversation:
                self.empty[set_name].append(key)
                continue
            row = _Row(record, conversation, rejected)
            check_conversation(row.messages)  # our own rules guarantee it; a bug must not ship
            rows[(key, set_name)] = row

        # Dedupe per file, then split by task over everything that is written.
        self.files: dict[str, list[_Row]] = {}
        self.duplicates: dict[str, list[dict[str, str]]] = {}
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
            self.files[stem] = sorted(seen.values(), key=lambda r: (r.record.key, r.record.set))
            self.duplicates[stem] = dropped
        self.written = [row for stem_rows in self.files.values() for row in stem_rows]
        self.split = split_tasks(
            (row.record.task for row in self.written), validation_share=validation_share, seed=seed
        )

    def atif(self) -> dict[str, bytes]:
        """One ATIF document per written key (a key in two files is one trajectory)."""
        by_key: dict[str, list[_Row]] = defaultdict(list)
        for row in self.written:
            by_key[row.record.key].append(row)
        return {
            key_rows[0].atif: _atif_bytes(key_rows, self.split)
            for _, key_rows in sorted(by_key.items())
        }


def _atif_bytes(key_rows: list[_Row], split: Mapping[str, str]) -> bytes:
    row = key_rows[0]
    r = row.record
    document = atif_document(
        row.conversation,
        session_id=r.key,
        harness=r.harness,
        model=r.model,
        extra={
            "key": r.key,
            "sets": sorted({k.record.set for k in key_rows}),
            "task": r.task,
            "split": split[r.task],
            "source_key": r.source_key,
            "runbook": r.runbook,
            "reward": r.reward,
            "content_sha256": row.sha256,
        },
        rejected=row.rejected,
    )
    return _json_bytes(document, indent=2) + b"\n"


def written_counts(records: Iterable[ExportRecord]) -> dict[str, dict[str, int]]:
    """Per record set: rows an export of ``records`` writes (``written``, after dedupe) and
    the byte-identical rows it drops (``duplicates``), counted as :func:`write_export`
    counts them, so every figure of "kept" agrees with the files."""
    keys = written_keys(records)
    return {
        "written": {s: len(k) for s, k in keys["written"].items()},
        "duplicates": {s: len(k) for s, k in keys["duplicates"].items()},
    }


def written_keys(records: Iterable[ExportRecord]) -> dict[str, dict[str, list[str]]]:
    """Like :func:`written_counts`, with the keys: ``written`` and ``duplicates``, per set."""
    plan = _Plan(records, validation_share=0.0, seed=0, rejected="weight")
    written: dict[str, list[str]] = defaultdict(list)
    for row in plan.written:
        written[row.record.set].append(row.record.key)
    dups: dict[str, list[str]] = defaultdict(list)
    for dropped in plan.duplicates.values():
        for d in dropped:
            dups[d["set"]].append(d["key"])
    return {"written": dict(written), "duplicates": dict(dups)}


def write_export(
    records: Iterable[ExportRecord],
    out_dir: Path,
    *,
    validation_share: float = 0.1,
    seed: int = 0,
    counts: Mapping[str, Any] | None = None,
    rejected: RejectedMode = "weight",
) -> dict[str, Any]:
    """Write the export of ``records`` to ``out_dir`` (replacing it whole: only an empty
    directory or an earlier export, see :func:`check_output_dir`) and return the manifest.

    ``counts`` (per pipeline stage, from the caller) is stored in the manifest as is; it
    must be JSON-serialisable. Records without a public conversation (no model reply
    left) are listed under ``empty`` and not written. ``rejected``: ``weight`` keeps the
    replies Terminus 2 rejected with weight 0, ``drop`` leaves them out. Blocking file
    I/O: call it from a worker thread inside an event loop.
    """
    plan = _Plan(records, validation_share=validation_share, seed=seed, rejected=rejected)
    out_dir = check_output_dir(out_dir, "export")
    files, split = plan.files, plan.split
    outputs: dict[str, bytes] = {}
    tables: dict[str, list[tuple[str, bytes]]] = {}
    for stem, stem_rows in files.items():
        tables[stem] = [
            (
                split[row.record.task],
                _json_bytes({"messages": row.messages, **row.meta(split[row.record.task])}),
            )
            for row in stem_rows
        ]
    tables["sharegpt"] = [
        (
            split[row.record.task],
            _json_bytes(
                {
                    "conversations": [_sharegpt(m) for m in row.messages],
                    **row.meta(split[row.record.task]),
                }
            ),
        )
        for row in files["sft"]
    ]
    split_files: dict[str, dict[str, str]] = {}
    for stem, lines in tables.items():
        outputs[f"{stem}.jsonl"] = b"".join(line + b"\n" for _, line in lines)
        split_files[stem] = {}
        for side in SPLITS:
            side_lines = [line for s, line in lines if s == side]
            if side_lines:  # an empty split is left out of the card: datasets refuses one
                name = f"{stem}-{side}.jsonl"
                outputs[name] = b"".join(line + b"\n" for line in side_lines)
                split_files[stem][side] = name
    outputs["README.md"] = _dataset_card(split_files, rejected)
    outputs["dataset_info.json"] = _json_bytes(_llamafactory_info(split_files), indent=2) + b"\n"
    outputs.update(plan.atif())

    manifest = _manifest(
        plan.collected,
        files,
        outputs,
        split,
        plan.duplicates,
        plan.empty,
        plan.filtered,
        validation_share=validation_share,
        seed=seed,
        counts=counts,
        rejected=rejected,
    )
    outputs["manifest.json"] = _json_bytes(manifest, indent=2) + b"\n"
    _write_atomically(out_dir, outputs)
    return manifest


def _sharegpt(message: Mapping[str, Any]) -> dict[str, Any]:
    out = {"from": SHAREGPT_ROLES[message["role"]], "value": message["content"]}
    if "weight" in message:
        out["weight"] = message["weight"]
    return out


_STRING = {"dtype": "string"}
_ROW_FEATURES: list[dict[str, Any]] = [
    {"name": name, **dtype}
    for name, dtype in (
        ("key", _STRING),
        ("set", _STRING),
        ("task", _STRING),
        ("harness", _STRING),
        ("model", _STRING),
        ("source_key", _STRING),
        ("runbook", _STRING),
        ("reward", {"dtype": "float64"}),
        ("split", _STRING),
        ("content_sha256", _STRING),
        ("atif", _STRING),
        ("rejected_turns", {"dtype": "int64"}),
    )
]


def _message_features(column: str, role: str, content: str) -> dict[str, Any]:
    return {
        "name": column,
        "list": [
            {"name": role, "dtype": "string"},
            {"name": content, "dtype": "string"},
            {"name": "weight", "dtype": "int64"},
        ],
    }


CARD_CONFIGS = {
    "sft": ("the paper's SFT set: kept rewrites and direct Terminus 2 successes", "messages"),
    "direct_sft": ("the direct-SFT baseline: discover successes of every harness", "messages"),
    "sharegpt": ("the SFT set in ShareGPT form", "conversations"),
}


class _PlainDumper(yaml.SafeDumper):
    """Writes repeated values out in full (no ``&id001`` anchors): the card is read by people."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _dataset_card(split_files: Mapping[str, Mapping[str, str]], rejected: RejectedMode) -> bytes:
    """A Hugging Face dataset card: configs with one data file per split, and features.

    The features are declared, not inferred, so every file of a config loads with the same
    types (a file whose rewards are all null would otherwise infer another type).
    """
    configs: list[dict[str, Any]] = []
    infos: list[dict[str, Any]] = []
    for stem, (_, column) in CARD_CONFIGS.items():
        sides = split_files.get(stem, {})
        if not sides:
            continue
        config: dict[str, Any] = {"config_name": stem}
        if stem == "sft":
            config["default"] = True
        config["data_files"] = [{"split": side, "path": path} for side, path in sides.items()]
        configs.append(config)
        tags = ("role", "content") if column == "messages" else ("from", "value")
        infos.append(
            {"config_name": stem, "features": [_message_features(column, *tags), *_ROW_FEATURES]}
        )
    front = yaml.dump(
        {"configs": configs, "dataset_info": infos},
        Dumper=_PlainDumper,
        sort_keys=False,
        allow_unicode=True,
    )
    lines = [
        "---",
        front.rstrip("\n"),
        "---",
        "",
        "# rsr_async export",
        "",
        "Terminal-agent trajectories exported by `rsr_async` (public conversation only: the "
        "task prompt, the model's raw replies, the observations and Terminus 2's own "
        "protocol text).",
        "",
        "| config | holds | files |",
        "|---|---|---|",
    ]
    for config in configs:
        what = CARD_CONFIGS[config["config_name"]][0]
        paths = ", ".join(f"`{f['path']}` ({f['split']})" for f in config["data_files"])
        lines.append(f"| `{config['config_name']}` | {what} | {paths} |")
    lines += [
        "",
        "```python",
        "from datasets import load_dataset",
        'sft = load_dataset("PATH")                 # config sft: train and validation',
        'baseline = load_dataset("PATH", "direct_sft")',
        "```",
        "",
        "The split is by task (no task on both sides); `manifest.json` holds its rule and "
        "seed. " + (
            "Assistant messages carry `weight` (OpenAI fine-tuning's per-message weight): 0 "
            "for a reply Terminus 2 rejected (unparseable, or cut by the output limit), 1 "
            "otherwise; `rejected_turns` counts them per row."
            if rejected == "weight"
            else "Replies Terminus 2 rejected were left out with its answers to them "
            "(`rejected_turns` counts them per row); every assistant message has weight 1."
        ),
        "`dataset_info.json` registers the same files for LLaMA-Factory (`dataset_dir` = "
        "this folder).",
        "",
    ]
    return "\n".join(lines).encode("utf-8")


def _llamafactory_info(split_files: Mapping[str, Mapping[str, str]]) -> dict[str, Any]:
    """LLaMA-Factory's ``dataset_info.json``: each split file as a ``sharegpt``-formatted set.

    The chat-``messages`` files use LLaMA-Factory's OpenAI-style tags (role/content,
    user/assistant/system) under its ``sharegpt`` formatting, as its own docs describe.
    """
    openai_tags = {
        "role_tag": "role",
        "content_tag": "content",
        "user_tag": "user",
        "assistant_tag": "assistant",
        "system_tag": "system",
    }
    sharegpt_tags = {
        "role_tag": "from",
        "content_tag": "value",
        "user_tag": "human",
        "assistant_tag": "gpt",
        "system_tag": "system",
    }
    info: dict[str, Any] = {}
    for stem, sides in split_files.items():
        column, tags = ("conversations", sharegpt_tags) if stem == "sharegpt" else ("messages", openai_tags)
        for side, path in sides.items():
            name = stem if side == "train" else f"{stem}_{side}"
            info[name] = {
                "file_name": path,
                "formatting": "sharegpt",
                "columns": {"messages": column},
                "tags": tags,
            }
    return info


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
    rejected: RejectedMode,
) -> dict[str, Any]:
    per_set: dict[str, int] = Counter()
    rejected_turns: dict[str, Counter[str]] = defaultdict(Counter)
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
            turns = len(row.rejected) + row.dropped
            rejected_turns[stem]["turns"] += turns
            rejected_turns[stem]["rows"] += turns > 0
    split_rows["sharegpt.jsonl"] = split_rows["sft.jsonl"]
    received: Counter[str] = Counter(set_name for _, set_name in collected)
    duplicate_sets: Counter[str] = Counter(d["set"] for ds in duplicates.values() for d in ds)
    return {
        "manifest_version": MANIFEST_VERSION,
        "records": {
            "received": dict(received),
            "written": dict(per_set),
            "duplicates": dict(duplicate_sets),
        },
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
        "rejected_turns": {
            "method": WEIGHT_METHOD,
            "mode": rejected,
            "per_file": {f"{stem}.jsonl": dict(c) for stem, c in sorted(rejected_turns.items())},
        },
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
        for folder in sorted({(tmp / name).parent for name in outputs}):
            folder.mkdir(parents=True, exist_ok=True)
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
