"""The export folder is a dataset: Hugging Face ``datasets`` and LLaMA-Factory read it as is.

``load_dataset(EXPORT_DIR)`` and ``load_dataset(EXPORT_DIR, "direct_sft")`` with no other
argument, the real library; the per-message training weights; ``rejected="drop"``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from rsr_async.export import check_conversation, write_export
from tests.export import samples

datasets = pytest.importorskip("datasets")


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _load(path: Path, *args: str, cache: Path) -> Any:
    return datasets.load_dataset(str(path), *args, cache_dir=str(cache))


@pytest.fixture(scope="module")
def export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("run") / "export"
    write_export(samples.suite(), out)
    return out


def test_load_dataset_reads_every_config_with_its_splits(export: Path, tmp_path: Path) -> None:
    default = _load(export, cache=tmp_path)
    assert sorted(default) == ["train", "validation"]
    sft = {r["key"]: r for r in _jsonl(export / "sft.jsonl")}
    seen = []
    for side, split in default.items():
        for row in split:
            seen.append(row["key"])
            assert row["split"] == side
            want = sft[row["key"]]
            # datasets fills the struct's missing field (user messages carry no weight) with None
            assert [{k: v for k, v in m.items() if v is not None} for m in row["messages"]] == (
                want["messages"]
            )
            assert row["atif"] == want["atif"] and (export / row["atif"]).is_file()
    assert sorted(seen) == sorted(sft)
    baseline = _load(export, "direct_sft", cache=tmp_path)
    assert sum(len(s) for s in baseline.values()) == len(_jsonl(export / "direct_sft.jsonl"))
    sharegpt = _load(export, "sharegpt", cache=tmp_path)
    assert sum(len(s) for s in sharegpt.values()) == len(sft)
    assert {m["from"] for m in sharegpt["train"][0]["conversations"]} <= {"human", "gpt", "system"}


def test_declared_features_hold_when_a_split_has_only_nulls(tmp_path: Path) -> None:
    # The train file alone would infer a null type for `reward` (all null) that the
    # validation file's floats cannot be cast to (DatasetGenerationError, checked by hand
    # with the card's dataset_info removed): the card declares the features.
    validation = set(write_export(samples.suite(), tmp_path / "probe")["split"]["validation"])
    records = [
        r if r.task in validation else msgspec.structs.replace(r, reward=None)
        for r in samples.suite()
    ]
    out = tmp_path / "export"
    write_export(records, out)
    loaded = _load(out, cache=tmp_path / "cache")
    assert set(loaded["train"]["reward"]) == {None}
    assert set(loaded["validation"]["reward"]) == {1.0}
    for split in loaded.values():
        assert split.features["reward"].dtype == "float64"


def test_no_validation_rows_means_no_validation_split(tmp_path: Path) -> None:
    out = tmp_path / "export"
    write_export(samples.suite(), out, validation_share=0.0)
    assert not (out / "sft-validation.jsonl").exists()
    assert list(_load(out, cache=tmp_path / "cache")) == ["train"]


def test_llamafactory_dataset_info_names_each_split_file(export: Path) -> None:
    info = json.loads((export / "dataset_info.json").read_text())
    assert {"sft", "sft_validation", "direct_sft", "sharegpt"} <= set(info)
    for name, entry in info.items():
        rows = _jsonl(export / entry["file_name"])
        assert rows, name
        assert entry["formatting"] == "sharegpt"
        tags = entry["tags"]
        odd = (tags["user_tag"],)
        even = (tags["assistant_tag"],)
        for row in rows:
            messages = row[entry["columns"]["messages"]]
            # LLaMA-Factory's sharegpt converter: an optional system message first, then
            # user/assistant alternating; an even count, the last one the assistant's
            if messages[0][tags["role_tag"]] == tags["system_tag"]:
                messages = messages[1:]
            roles = [m[tags["role_tag"]] for m in messages]
            assert all(r in (odd, even)[i % 2] for i, r in enumerate(roles)), name
            assert len(roles) % 2 == 0
            assert all(isinstance(m[tags["content_tag"]], str) for m in messages)


def test_rejected_replies_weigh_zero_or_are_dropped(tmp_path: Path) -> None:
    weighted = write_export(samples.suite(), tmp_path / "w")
    dropped = write_export(samples.suite(), tmp_path / "d", rejected="drop")
    w = {r["key"]: r for r in _jsonl(tmp_path / "w" / "sft.jsonl")}
    d = {r["key"]: r for r in _jsonl(tmp_path / "d" / "sft.jsonl")}
    assert sorted(w) == sorted(d)
    for key, row in w.items():
        messages = row["messages"]
        zero = [i for i, m in enumerate(messages) if m.get("weight") == 0]
        assert row["rejected_turns"] == len(zero) == d[key]["rejected_turns"] > 0
        for i in zero:  # each is answered by Terminus 2's rejection
            assert messages[i + 1]["content"].startswith(
                ("Previous response had parsing errors:", "ERROR!! NONE of the actions")
            )
        kept = [m for i, m in enumerate(messages) if i not in zero and i - 1 not in zero]
        assert d[key]["messages"] == kept
        check_conversation(d[key]["messages"])
        assert all(m.get("weight", 1) == 1 for m in d[key]["messages"])
    assert weighted["rejected_turns"]["per_file"]["sft.jsonl"] == {"turns": 7, "rows": 7}
    assert dropped["rejected_turns"]["mode"] == "drop"
    sharegpt = _jsonl(tmp_path / "w" / "sharegpt.jsonl")
    assert sum(m.get("weight") == 0 for r in sharegpt for m in r["conversations"]) == 7
    atif = json.loads((tmp_path / "d" / next(iter(d.values()))["atif"]).read_text())
    assert all("extra" not in s for s in atif["steps"])
    with pytest.raises(ValueError, match="rejected must be one of"):
        write_export(samples.suite(), tmp_path / "x", rejected="keep")  # type: ignore[arg-type]


def test_dataset_card_is_stable_and_listed(export: Path) -> None:
    card = (export / "README.md").read_text()
    assert card.startswith("---\nconfigs:\n") and "&id" not in card
    manifest = json.loads((export / "manifest.json").read_text())
    for name in ("README.md", "dataset_info.json", "sft-train.jsonl", "sharegpt-validation.jsonl"):
        assert name in manifest["files"]
    train = _jsonl(export / "sft-train.jsonl")
    validation = _jsonl(export / "sft-validation.jsonl")
    assert sorted(train + validation, key=lambda r: r["key"]) == _jsonl(export / "sft.jsonl")
