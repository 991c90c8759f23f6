"""write_export: the files on disk, the manifest, the split, dedupe, determinism, atomicity."""

from __future__ import annotations

import hashlib
import json
import os
import random
from pathlib import Path
from typing import Any

import jsonschema
import msgspec
import pytest

from rsr_async.export import ExportRecord, write_export, written_counts
from rsr_async.schema import Message, Trajectory
from tests.export import samples
from tests.export.samples import SECRETS

GOLDEN_SCHEMA = Path(__file__).parent / "golden" / "atif_schema.json"
ROLES = ("system", "user", "assistant")


def row_rejected(row: dict[str, Any]) -> int:
    return sum(m.get("weight") == 0 for m in row["messages"])


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def _trl_conversational(messages: Any) -> None:
    """TRL's conversational format, checked without datasets or TRL."""
    assert isinstance(messages, list) and messages
    for m in messages:
        assert isinstance(m, dict) and set(m) - {"weight"} == {"role", "content"}
        assert m["role"] in ROLES and isinstance(m["content"], str)
        # OpenAI fine-tuning's per-message weight: assistant messages only, 0 or 1
        assert ("weight" in m) == (m["role"] == "assistant")
        assert m.get("weight", 0) in (0, 1)
    body = messages[1:] if messages[0]["role"] == "system" else messages
    assert [m["role"] for m in body] == ["user", "assistant"] * (len(body) // 2)
    assert len(body) % 2 == 0 and body[-1]["role"] == "assistant"


@pytest.fixture(scope="module")
def export(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    out = tmp_path_factory.mktemp("run") / "export"
    manifest = write_export(
        samples.suite(), out, counts={"discover": {"sources": 6, "episodes": 9}}
    )
    return out, manifest


def test_layout_and_sft_rows_in_trl_conversational_form(
    export: tuple[Path, dict[str, Any]],
) -> None:
    out, _ = export
    names = set(_tree(out))
    assert {"sft.jsonl", "sharegpt.jsonl", "direct_sft.jsonl", "manifest.json"} <= names
    assert sum(n.startswith("atif/") for n in names) == 9  # one per distinct exported trajectory
    sft = _jsonl(out / "sft.jsonl")
    baseline = _jsonl(out / "direct_sft.jsonl")
    assert sorted(r["set"] for r in sft) == ["direct"] * 4 + ["rewrite"] * 3
    assert sorted(r["harness"] for r in baseline) == ["rsrt", "statem"] + ["terminus2"] * 4
    for row in sft + baseline:
        _trl_conversational(row["messages"])
        assert row["split"] in ("train", "validation")
        assert (out / row["atif"]).is_file()
    assert [r["key"] for r in sft] == sorted(r["key"] for r in sft)
    rewrite = next(r for r in sft if r["set"] == "rewrite")
    assert rewrite["runbook"] == "rb0" and rewrite["source_key"].startswith("discover/")


def test_sharegpt_mirrors_sft(export: tuple[Path, dict[str, Any]]) -> None:
    out, _ = export
    sft = _jsonl(out / "sft.jsonl")
    sharegpt = _jsonl(out / "sharegpt.jsonl")
    assert len(sharegpt) == len(sft)
    names = {"user": "human", "assistant": "gpt", "system": "system"}
    for a, b in zip(sft, sharegpt, strict=True):
        assert b["conversations"] == [
            {"from": names[m["role"]], "value": m["content"]}
            | ({"weight": m["weight"]} if "weight" in m else {})
            for m in a.pop("messages")
        ]
        b.pop("conversations")
        assert a == b


def test_no_private_or_control_text_in_any_file(export: tuple[Path, dict[str, Any]]) -> None:
    out, _ = export
    for name, data in _tree(out).items():
        text = data.decode("utf-8")
        for secret in SECRETS:
            assert secret not in text, f"{secret} leaked into {name}"
        assert "You have private guidance" not in text, name
        assert "statem cur" not in text and "statem goto" not in text, name  # StateM commands


def test_direct_successes_match_the_recorded_conversation(
    export: tuple[Path, dict[str, Any]],
) -> None:
    out, _ = export
    direct = next(r for r in _jsonl(out / "sft.jsonl") if r["set"] == "direct")
    trajectory = samples.terminus2_handoff(direct["task"])
    assert [{"role": m["role"], "content": m["content"]} for m in direct["messages"]] == [
        {"role": m.role, "content": m.content} for m in trajectory.messages
    ]
    # the reply cut by the output limit is the one Terminus 2 rejected: weight 0
    weights = [m["weight"] for m in direct["messages"] if m["role"] == "assistant"]
    assert weights == [1, 0, 1, 1, 1, 1, 1, 1] and direct["rejected_turns"] == 1


def test_split_is_by_task(export: tuple[Path, dict[str, Any]]) -> None:
    out, manifest = export
    split = manifest["split"]
    assert not set(split["train"]) & set(split["validation"])
    assert split["train"] and split["validation"]
    side: dict[str, set[str]] = {}
    for name in ("sft.jsonl", "direct_sft.jsonl", "sharegpt.jsonl"):
        for row in _jsonl(out / name):
            side.setdefault(row["task"], set()).add(row["split"])
    for path in (out / "atif").iterdir():
        extra = json.loads(path.read_text())["extra"]
        side[extra["task"]].add(extra["split"])
    assert all(len(sides) == 1 for sides in side.values()), side
    assert {t for t, s in side.items() if s == {"validation"}} == set(split["validation"])
    assert sorted(side) == sorted(split["train"] + split["validation"])


def test_split_follows_the_seed_and_share(tmp_path: Path) -> None:
    records = samples.suite()
    splits = [
        write_export(records, tmp_path / f"s{seed}", seed=seed)["split"]["validation"]
        for seed in range(6)
    ]
    assert len({tuple(s) for s in splits}) > 1  # the seed moves tasks between sides
    assert write_export(records, tmp_path / "again", seed=3)["split"]["validation"] == splits[3]
    none = write_export(records, tmp_path / "none", validation_share=0.0)["split"]
    assert none["validation"] == [] and len(none["train"]) == 8
    most = write_export(records, tmp_path / "most", validation_share=0.99)["split"]
    assert len(most["train"]) == 1 and len(most["validation"]) == 7


def test_byte_identical_for_the_same_input(tmp_path: Path) -> None:
    records = samples.suite()
    first = write_export(records, tmp_path / "a" / "export", counts={"rewrite": {"kept": 3}})
    shuffled = list(records)
    random.Random(7).shuffle(shuffled)
    second = write_export(shuffled, tmp_path / "b" / "export", counts={"rewrite": {"kept": 3}})
    assert first == second
    assert _tree(tmp_path / "a" / "export") == _tree(tmp_path / "b" / "export")


def test_manifest_hashes_counts_and_caller_counts(export: tuple[Path, dict[str, Any]]) -> None:
    out, manifest = export
    assert json.loads((out / "manifest.json").read_text()) == manifest
    tree = _tree(out)
    assert set(manifest["files"]) == set(tree) - {"manifest.json"}
    for name, entry in manifest["files"].items():
        assert entry["sha256"] == hashlib.sha256(tree[name]).hexdigest()
        assert entry["bytes"] == len(tree[name])
        if name.endswith(".jsonl"):
            assert entry["rows"] == len(_jsonl(out / name))
    assert manifest["counts"] == {"discover": {"sources": 6, "episodes": 9}}
    assert manifest["records"]["written"] == {"rewrite": 3, "direct": 4, "baseline": 6}
    assert manifest["per_harness"]["baseline"] == {"rsrt": 1, "statem": 1, "terminus2": 4}
    assert manifest["per_task"]["alpha"] == {
        "rewrite": 2,
        "split": manifest["per_task"]["alpha"]["split"],
    }
    assert manifest["public_filter"]["rewrite"] == {"private": 3}
    assert sum(manifest["split"]["rows"]["sft.jsonl"].values()) == 7


def test_duplicates_are_exported_once_per_file(tmp_path: Path) -> None:
    same = samples.terminus2_rewrite("alpha")
    # Same public conversation: only the private runbook differs.
    other_runbook = msgspec.structs.replace(same, messages=list(same.messages))
    other_runbook.messages[0] = msgspec.structs.replace(same.messages[0], content="another runbook")
    records = [
        samples.record(same, "rewrite", "execute/alpha/terminus2/a0/rb1/e0", runbook="rb1"),
        samples.record(
            other_runbook, "rewrite", "execute/alpha/terminus2/a0/rb0/e3", runbook="rb0"
        ),
        samples.record(same, "baseline", "discover/alpha/terminus2/a0/-/e-1"),
        samples.record(
            samples.terminus2_rewrite("beta"), "rewrite", "execute/beta/terminus2/a0/rb0/e0"
        ),
    ]
    manifest = write_export(records, tmp_path / "export")
    sft = _jsonl(tmp_path / "export" / "sft.jsonl")
    assert [r["key"] for r in sft] == [
        "execute/alpha/terminus2/a0/rb0/e3",
        "execute/beta/terminus2/a0/rb0/e0",
    ]
    assert len({r["content_sha256"] for r in sft}) == 2
    dropped = manifest["dedupe"]["dropped"]
    assert dropped["sft"] == [
        {
            "key": "execute/alpha/terminus2/a0/rb1/e0",
            "set": "rewrite",
            "duplicate_of": "execute/alpha/terminus2/a0/rb0/e3",
            "sha256": sft[0]["content_sha256"],
        }
    ]
    assert dropped["direct_sft"] == []  # dedupe is per file: the baseline keeps its copy
    assert len(_jsonl(tmp_path / "export" / "direct_sft.jsonl")) == 1
    assert manifest["records"] == {
        "received": {"rewrite": 3, "baseline": 1},
        "written": {"rewrite": 2, "baseline": 1},
        "duplicates": {"rewrite": 1},  # counted apart: received = written + duplicates
    }
    assert written_counts(records) == {
        "written": {"rewrite": 2, "baseline": 1},
        "duplicates": {"rewrite": 1},
    }


def test_atif_validates_against_harbors_recorded_schema(
    export: tuple[Path, dict[str, Any]],
) -> None:
    out, _ = export
    schema = json.loads(GOLDEN_SCHEMA.read_text())
    assert "harbor==0.26.0" in schema["$comment"]
    validator = jsonschema.Draft202012Validator(schema)
    sft = {r["key"]: r for r in _jsonl(out / "sft.jsonl") + _jsonl(out / "direct_sft.jsonl")}
    for path in sorted((out / "atif").iterdir()):
        doc = json.loads(path.read_text())
        errors = sorted(validator.iter_errors(doc), key=str)
        assert not errors, f"{path.name}: {errors[0].message}"
        assert doc["schema_version"] == "ATIF-v1.7"
        # what Harbor's pydantic validators check beyond the JSON schema
        assert [s["step_id"] for s in doc["steps"]] == list(range(1, len(doc["steps"]) + 1))
        # raw-content mode, as Harbor's Terminus 2 writes it for SFT: the commands stay in
        # the reply, never also as tool_calls (Harbor's traces export would append them)
        assert all("tool_calls" not in step for step in doc["steps"])
        if doc["agent"]["extra"]["harness"] == "terminus2":
            assert (doc["agent"]["name"], doc["agent"]["version"]) == ("terminus-2", "2.0.0")
        rejected = [s["step_id"] for s in doc["steps"] if s.get("extra", {}).get("weight") == 0]
        assert len(rejected) == row_rejected(sft[doc["session_id"]])
        # the same public conversation as the JSONL row
        row = sft[doc["session_id"]]
        flat = [doc["steps"][0]["message"]]
        for step in doc["steps"][1:]:
            flat.append(step["message"])
            flat += [r["content"] for r in step.get("observation", {}).get("results", [])]
        assert flat == [m["content"] for m in row["messages"]]
        assert doc["final_metrics"]["total_steps"] == len(doc["steps"])


def test_a_second_export_replaces_the_first_whole(tmp_path: Path) -> None:
    out = tmp_path / "export"
    write_export(samples.suite(), out)
    (out / "atif" / "stale.json").write_text("{}")
    write_export(samples.suite()[:3], out)
    assert not (out / "atif" / "stale.json").exists()
    assert len(_jsonl(out / "sft.jsonl")) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]


def test_a_failure_midway_leaves_the_previous_export(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "export"
    write_export(samples.suite(), out)
    before = _tree(out)
    real = Path.write_bytes
    calls = 0

    def disk_full_after_three(self: Path, data: Any) -> int:  # the filesystem fills up
        nonlocal calls
        calls += 1
        if calls > 3:
            raise OSError(28, "No space left on device")
        return real(self, data)

    monkeypatch.setattr(Path, "write_bytes", disk_full_after_three)
    with pytest.raises(OSError, match="No space"):
        write_export(samples.suite()[:3], out)
    assert calls == 4
    assert _tree(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]


def test_records_without_a_public_conversation_are_listed_not_written(tmp_path: Path) -> None:
    silent = Trajectory(
        task="quiet",
        harness="terminus2",
        messages=[Message(role="user", content="task", origin="task")],
    )
    manifest = write_export(
        [
            samples.record(silent, "baseline", "discover/quiet/terminus2/a0/-/e-1"),
            *samples.suite()[:1],
        ],
        tmp_path / "export",
    )
    assert manifest["empty"] == {"baseline": ["discover/quiet/terminus2/a0/-/e-1"]}
    assert (tmp_path / "export" / "direct_sft.jsonl").read_bytes() == b""
    assert "quiet" not in manifest["per_task"]


def test_bad_input_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    rewrite = samples.suite()[0]
    out = tmp_path / "export"
    with pytest.raises(ValueError, match="twice in set"):
        write_export([rewrite, rewrite], out)
    other = msgspec.structs.replace(
        rewrite, set="baseline", trajectory=samples.terminus2_rewrite("alpha", " x")
    )
    with pytest.raises(ValueError, match="two different trajectories"):
        write_export([rewrite, other], out)
    with pytest.raises(ValueError, match="harness"):
        write_export([msgspec.structs.replace(rewrite, harness="statem")], out)
    with pytest.raises(ValueError, match="validation_share"):
        write_export([rewrite], out, validation_share=1.0)
    with pytest.raises(TypeError):
        write_export([rewrite.trajectory], out)  # type: ignore[list-item]
    assert not tmp_path.exists() or list(tmp_path.iterdir()) == []


def test_export_record_is_frozen() -> None:
    record = samples.suite()[0]
    assert isinstance(record, ExportRecord)
    with pytest.raises(AttributeError):
        record.key = "x"  # type: ignore[misc]


def test_leftovers_of_a_killed_export_are_removed(tmp_path: Path) -> None:
    import subprocess
    import sys

    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    pid = int(dead.stdout)  # that process has exited
    stale = tmp_path / f".export.tmp-{pid}-0123abcd"
    (stale / "atif").mkdir(parents=True)
    (stale / "sft.jsonl").write_text("half")
    live = tmp_path / f".export.tmp-{os.getppid()}-0123abcd"  # a live process's: not ours to touch
    live.mkdir()
    other = tmp_path / f".exports.tmp-{pid}-0123abcd"  # another export directory's
    other.mkdir()
    write_export(samples.suite()[:1], tmp_path / "export")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["export", live.name, other.name])


def test_lone_surrogates_and_msgspec_counts_still_make_valid_json(tmp_path: Path) -> None:
    b = samples.Builder("odd", "terminus2")
    b.add("task", "the task \u00e9")
    b.model("", text='{"analysis": "bad \ud800 byte"}')
    manifest = write_export(
        [samples.record(b.trajectory, "direct", "discover/odd/terminus2/a0/-/e-1")],
        tmp_path / "export",
        counts={"discover": samples.Usage(prompt_tokens=5, requests=1)},
    )
    assert manifest["counts"]["discover"]["prompt_tokens"] == 5
    for name in ("sft.jsonl", "sharegpt.jsonl", "manifest.json"):
        (tmp_path / "export" / name).read_bytes().decode("utf-8")  # valid UTF-8 throughout
    row = _jsonl(tmp_path / "export" / "sft.jsonl")[0]
    assert row["messages"][1]["content"] == '{"analysis": "bad \ud800 byte"}'
    assert row["messages"][0]["content"] == "the task \u00e9"
