"""The resume policy over the real config: which settings a resume may change."""

from __future__ import annotations

from rsr_async.config import Config
from rsr_async.resume import (
    OPERATIONAL_KEYS,
    STAGE_SCOPED,
    config_changes,
    config_hash,
    resume_view,
)


def _flat_keys(data: dict[str, object], prefix: str = "") -> set[str]:
    out = set()
    for key, value in data.items():
        out.add(prefix + key)
        if isinstance(value, dict):
            out |= _flat_keys(value, f"{prefix}{key}.")
    return out


def test_every_listed_setting_exists_in_the_config() -> None:
    # A renamed setting left here would silently become one that must match on resume.
    keys = _flat_keys(Config().to_dict())
    assert not sorted(OPERATIONAL_KEYS - keys)
    assert STAGE_SCOPED <= keys


def test_operational_and_stage_scoped_settings_leave_the_view_unchanged() -> None:
    base = Config().to_dict()
    view = resume_view(base)
    assert view and all("." in key for key in view)
    assert not [k for k in view if k.split(".")[0] in {"engine", "cluster", "sim", *STAGE_SCOPED}]
    changed = {**base, "run": {**base["run"], "concurrency": 999}, "rsr": {**base["rsr"], "runbooks_per_source": 99},
               "llm": {**base["llm"], "urls": ["http://elsewhere:1"]}}
    assert resume_view(changed) == view and config_hash(changed) == config_hash(base)
    attempts = base["run"]["attempts"]
    computed = {**base, "run": {**base["run"], "attempts": attempts + 1}}
    assert config_hash(computed) != config_hash(base)
    assert config_changes(view, resume_view(computed)) == [f"run.attempts: {attempts!r} -> {attempts + 1!r}"]
    assert config_changes({"a": 1}, {"b": 2}) == ["a: 1 -> '<unset>'", "b: '<unset>' -> 2"]
