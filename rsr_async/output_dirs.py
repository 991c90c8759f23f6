"""Which ``--out`` directories a command may replace: only its own earlier output.

``export`` and ``analyze`` write a whole directory at once (staged beside it, then
renamed into place), which removes whatever the directory held before. That is right for
an earlier export or analysis, and data loss for anything else: ``export RUN --out RUN``
would delete the run's database, ``analyze --results D/f.jsonl --out D`` its own input.
So before anything is written, :func:`check_output_dir` lets through a directory that
does not exist, an empty one, or one that holds nothing but what the same command
writes; anything else is refused with one line naming the directory and what it holds.

What counts as ours:

- an export: a ``manifest.json`` of ours (it has ``manifest_version`` and ``files``),
  beside it only the files it lists and the ``atif/`` folder, which holds only ``.json``
  trajectory documents;
- an analysis: ``report.html`` with nothing beside it but the ``tables/`` and
  ``figures/`` folders, which hold only the table and figure files it writes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from .errors import ConfigError

__all__ = [
    "check_output_dir",
    "foreign_to_analysis",
    "foreign_to_export",
    "is_analysis_dir",
    "is_export_dir",
]

OutputKind = Literal["export", "analysis"]

_ANALYSIS_FILES = {
    "tables": {".md", ".csv", ".json"},
    "figures": {".png"},
}


def foreign_to_export(path: Path) -> list[str]:
    """What in ``path`` an export of ours did not write (relative paths; empty: ours)."""
    try:
        manifest = json.loads((path / "manifest.json").read_bytes())
        listed = set(manifest["files"]) if "manifest_version" in manifest else None
    except (OSError, ValueError, TypeError, KeyError):
        listed = None
    if listed is None:  # no manifest of ours: nothing here is ours
        return sorted(p.name for p in path.iterdir())
    foreign = []
    for entry in sorted(path.iterdir()):
        if entry.is_symlink():
            foreign.append(entry.name)
        elif entry.name == "atif" and entry.is_dir():  # our folder: trajectory documents only
            foreign += [
                f"atif/{item.name}"
                for item in sorted(entry.iterdir())
                if item.is_symlink() or not item.is_file() or item.suffix != ".json"
            ]
        elif entry.name != "manifest.json" and (entry.name not in listed or not entry.is_file()):
            foreign.append(entry.name)
    return foreign


def foreign_to_analysis(path: Path) -> list[str]:
    """What in ``path`` an analysis of ours did not write (relative paths; empty: ours)."""
    entries = sorted(path.iterdir())
    if not (path / "report.html").is_file():  # no report: nothing here is ours
        return [p.name for p in entries]
    foreign = []
    for entry in entries:
        if entry.name == "report.html":
            continue
        suffixes = _ANALYSIS_FILES.get(entry.name)
        if suffixes is None or entry.is_symlink() or not entry.is_dir():
            foreign.append(entry.name)
            continue
        foreign += [
            f"{entry.name}/{item.name}"
            for item in sorted(entry.iterdir())
            if item.is_symlink() or not item.is_file() or item.suffix not in suffixes
        ]
    return foreign


def is_export_dir(path: Path) -> bool:
    """True if ``path`` holds one export of ours and nothing else."""
    return path.is_dir() and (path / "manifest.json").is_file() and not foreign_to_export(path)


def is_analysis_dir(path: Path) -> bool:
    """True if ``path`` holds one analysis report of ours and nothing else."""
    return path.is_dir() and (path / "report.html").is_file() and not foreign_to_analysis(path)


_FOREIGN: dict[OutputKind, Callable[[Path], list[str]]] = {
    "export": foreign_to_export,
    "analysis": foreign_to_analysis,
}


def check_output_dir(out: str | Path, kind: OutputKind) -> Path:
    """``out`` made absolute, once it is safe to replace whole with a new ``kind``.

    Raises :class:`~rsr_async.errors.ConfigError` (naming ``out``) for the filesystem
    root, a path that is not a directory, or a non-empty directory that is not an
    earlier ``kind`` of ours: nothing we did not write is ever removed.
    """
    given = str(out)
    path = Path(out).expanduser().resolve()
    if path == path.parent:
        raise ConfigError(f"--out {given}: is the filesystem root; choose a new or empty directory")
    if path.exists() and not path.is_dir():
        raise ConfigError(f"--out {given}: exists and is not a directory; choose a new or empty directory")
    if not path.exists():
        return path
    try:
        foreign = _FOREIGN[kind](path)
    except OSError as exc:
        raise ConfigError(f"--out {given}: cannot be read ({exc.strerror}); choose another directory") from exc
    if foreign:
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise ConfigError(
            f"--out {given}: is not empty and is not an {kind} this command wrote (it holds {shown}); "
            f"writing the {kind} there would delete them. Nothing was written: choose a new or empty directory"
        )
    return path
