"""Datasets: task directories found recursively, list files, or several of these.

A malformed task does not sink the dataset: it is recorded in ``Dataset.errors`` (with
the task and file) and every other task still loads.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import msgspec

from ..errors import TaskError
from ..schema import Task
from .loader import is_task_dir, load_task

__all__ = ["BUNDLED_SUITE", "Dataset", "find_task_dirs", "load_dataset"]

BUNDLED_SUITE: Path = Path(__file__).resolve().parent / "bundled"
"""The suite shipped with the package: the main job's default dataset."""

# Folders a task directory never lives under; skipping them keeps a walk over a repo fast.
_SKIP = {".git", "__pycache__", ".venv", "node_modules", ".mypy_cache", ".ruff_cache"}


class Dataset(msgspec.Struct, kw_only=True):
    """Tasks sorted by name, and the errors met while loading them."""

    tasks: list[Task] = msgspec.field(default_factory=list)
    errors: list[TaskError] = msgspec.field(default_factory=list)

    def __len__(self) -> int:
        return len(self.tasks)

    def __iter__(self) -> Iterator[Task]:
        return iter(self.tasks)

    def by_name(self, name: str) -> Task:
        """The task called ``name``; KeyError when absent."""
        for task in self.tasks:
            if task.name == name:
                return task
        raise KeyError(name)


def find_task_dirs(root: Path) -> list[Path]:
    """Every task directory at or under ``root``; a task's own subfolders are not searched."""
    if is_task_dir(root):
        return [root]
    found: list[Path] = []
    for current, dirs, _files in os.walk(root):
        here = Path(current)
        if here != root and is_task_dir(here):
            found.append(here)
            dirs[:] = []
            continue
        dirs[:] = sorted(d for d in dirs if d not in _SKIP and not d.startswith("."))
    return found


def _list_file_entries(file: Path) -> tuple[list[Path], list[TaskError]]:
    """One path per line, relative to the list file; blank lines and ``#`` comments skipped."""
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return [], [TaskError(f"cannot read task list: {exc}", path=str(file))]
    entries: list[Path] = []
    errors: list[TaskError] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        given = Path(os.path.expanduser(line))
        entry = given if given.is_absolute() else file.parent / given
        if entry.exists():
            entries.append(entry)
        elif given.is_absolute():
            errors.append(TaskError(f"line {number}: {line!r} does not exist", path=str(file)))
        else:
            # The usual surprise: a relative line is read against the list file's folder,
            # not the current directory. Say so, with the path that was looked for.
            errors.append(TaskError(
                f"line {number}: {line!r} does not exist (a relative path is resolved against "
                f"the list file's folder: looked for {os.path.abspath(entry)})",
                path=str(file),
            ))
    return entries, errors


def _expand(source: Path, seen_lists: set[Path]) -> tuple[list[Path], list[TaskError]]:
    if source.is_dir():
        dirs = find_task_dirs(source)
        if not dirs:
            return [], [TaskError("no task directories found (no task.toml or task.yaml)", path=str(source))]
        return dirs, []
    if source.is_file():
        resolved = source.resolve()
        if resolved in seen_lists:
            return [], []  # a list that includes itself, directly or not
        seen_lists.add(resolved)
        entries, errors = _list_file_entries(source)
        listed: list[Path] = []
        for entry in entries:
            more, more_errors = _expand(entry, seen_lists)
            listed.extend(more)
            errors.extend(more_errors)
        return listed, errors
    return [], [TaskError("dataset source does not exist", path=str(source))]


def load_dataset(sources: Sequence[str | Path]) -> Dataset:
    """Load every task named by ``sources`` (directories, searched recursively, or list files).

    An empty ``sources`` means the bundled suite. Broken tasks and duplicate names go to
    ``Dataset.errors``; the first of two same-named tasks (in source order) is kept.
    """
    if isinstance(sources, str | Path):
        sources = [sources]
    if not sources:
        sources = [BUNDLED_SUITE]
    dirs: list[Path] = []
    errors: list[TaskError] = []
    seen_lists: set[Path] = set()
    for source in sources:
        more, more_errors = _expand(Path(source), seen_lists)
        dirs.extend(more)
        errors.extend(more_errors)

    tasks: dict[str, Task] = {}
    seen_dirs: set[Path] = set()
    for directory in dirs:
        resolved = directory.resolve()
        if resolved in seen_dirs:
            continue  # the same directory named twice is not a duplicate task
        seen_dirs.add(resolved)
        try:
            task = load_task(resolved)
        except TaskError as exc:
            errors.append(exc)
            continue
        if task.name in tasks:
            first = tasks[task.name]
            # "acme/x" and "other/x" share the short name that job keys and images use
            both = (f" ({first.qualified_name} and {task.qualified_name})"
                    if first.qualified_name != task.qualified_name else "")
            errors.append(
                TaskError(
                    f"duplicate task name{both}; already loaded from {first.path}",
                    task=task.name,
                    path=task.path,
                )
            )
            continue
        tasks[task.name] = task
    return Dataset(tasks=sorted(tasks.values(), key=lambda t: t.name), errors=errors)
