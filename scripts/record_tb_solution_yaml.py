"""Record how terminal-bench 0.2.18 reads and types a keystroke solution (``solution.yaml``).

Runs on demand, not in CI (terminal-bench needs Python >= 3.12, and its harness modules
need its dependencies, so it goes in whole):

    python3.12 -m venv /tmp/tb && /tmp/tb/bin/pip install terminal-bench==0.2.18
    /tmp/tb/bin/python scripts/record_tb_solution_yaml.py

No container is started. terminal-bench's own ``OracleAgent`` loads the fixture dataset
``tests/tasks/fixtures/keystrokes`` (which file it prefers, how it parses the YAML) and
types each task's solution into a recording stand-in for its ``TmuxSession``: the real
``send_keys``/``send_command`` code runs, only ``container.exec_run`` (what would reach
Docker) and ``time.sleep`` are recorded instead of done, and the clock stands still,
so every ``min_timeout_sec`` shows as the sleep it asks for.

``tests/tasks/fixtures/terminal_bench_solution_yaml.json`` gets: ``TerminalCommand``'s
fields and defaults; ``send_keys``'s defaults and constants; per fixture task the
solution file chosen and the exact exec/sleep sequence, and the same for single commands
at the edges of ``block`` (``plan:<name>``); and, for a corpus of single
entries, what ``TerminalCommand.model_validate`` makes of each (the fields, or that it
refused). ``tests/tasks/test_solution_yaml.py`` checks ours against it.
"""

from __future__ import annotations

import inspect
import json
import shutil
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path
from typing import Any

import terminal_bench.terminal.tmux_session as tmux_module
from pydantic import ValidationError
from terminal_bench.agents.oracle_agent import OracleAgent
from terminal_bench.terminal.models import TerminalCommand
from terminal_bench.terminal.tmux_session import TmuxSession

ROOT = Path(__file__).resolve().parent.parent
DATASET = ROOT / "tests" / "tasks" / "fixtures" / "keystrokes"
OUT = ROOT / "tests" / "tasks" / "fixtures" / "terminal_bench_solution_yaml.json"

ENTRIES: dict[str, Any] = {
    "minimal": {"command": "ls"},
    "all_fields": {"command": "make", "min_timeout_sec": 1.5, "max_timeout_sec": 30,
                   "block": True, "append_enter": False},
    "extra_field": {"command": "ls", "comment": "ignored?"},
    "missing_command": {"block": True},
    "command_int": {"command": 123},
    "command_bool": {"command": True},
    "command_null": {"command": None},
    "command_list": {"command": ["ls", "-l"]},
    "timeout_int": {"command": "x", "max_timeout_sec": 5},
    "timeout_str_number": {"command": "x", "min_timeout_sec": "2.5"},
    "timeout_str_padded": {"command": "x", "min_timeout_sec": " 2.5 "},
    "timeout_str_underscore": {"command": "x", "min_timeout_sec": "1_000"},
    "timeout_str_word": {"command": "x", "min_timeout_sec": "soon"},
    "timeout_str_inf": {"command": "x", "max_timeout_sec": "inf"},
    "timeout_inf": {"command": "x", "max_timeout_sec": float("inf")},
    "timeout_bool": {"command": "x", "min_timeout_sec": True},
    "timeout_null": {"command": "x", "min_timeout_sec": None},
    "timeout_negative": {"command": "x", "min_timeout_sec": -1},
    "block_int_1": {"command": "x", "block": 1},
    "block_int_0": {"command": "x", "block": 0},
    "block_int_2": {"command": "x", "block": 2},
    "block_float_1": {"command": "x", "block": 1.0},
    "block_str_yes": {"command": "x", "block": "yes"},
    "block_str_true_upper": {"command": "x", "block": "TRUE"},
    "block_str_off": {"command": "x", "block": "off"},
    "block_str_t": {"command": "x", "block": "t"},
    "block_str_n": {"command": "x", "block": "n"},
    "block_str_1": {"command": "x", "block": "1"},
    "block_str_maybe": {"command": "x", "block": "maybe"},
    "block_null": {"command": "x", "block": None},
    "append_enter_str_false": {"command": "x", "append_enter": "false"},
    "not_a_mapping": "echo hi",
}
"""Single ``solution.yaml`` entries (as ``yaml.safe_load`` gives them) to validate."""

PLANS: dict[str, dict[str, Any]] = {
    "block_text_ends_in_newline": {"command": "ls\n", "append_enter": False, "block": True},
    "block_only_a_newline": {"command": "\n", "append_enter": False, "block": True},
    "block_crlf_and_enter": {"command": "echo hi\r\n", "block": True, "max_timeout_sec": 7},
    "block_without_enter": {"command": "vim", "append_enter": False, "block": True, "min_timeout_sec": 2},
    "block_enter_key_alone": {"command": "C-m", "append_enter": False, "block": True},
    "block_ignores_min_timeout": {"command": "make", "block": True, "min_timeout_sec": 5},
    "key_with_enter": {"command": "C-c", "min_timeout_sec": 1},
    "multiline_text": {"command": "cat <<'EOF'\na\nEOF", "min_timeout_sec": 0.5},
}
"""Single commands sent through ``TmuxSession.send_command``: the edges of ``block``."""


class _Exec:
    exit_code = 0
    output = b""


class _Container:
    def __init__(self, calls: list[Any]) -> None:
        self.calls = calls

    def exec_run(self, cmd: list[str], user: str = "") -> _Exec:
        self.calls.append({"exec": cmd})
        return _Exec()


def _recording_session(calls: list[Any]) -> TmuxSession:
    """terminal-bench's TmuxSession without its constructor (which reaches Docker)."""
    session = TmuxSession.__new__(TmuxSession)
    session.container = _Container(calls)  # type: ignore[assignment]
    session._session_name = "agent"
    session._commands_path = None
    session._disable_recording = True
    session._logger = tmux_module.logger.getChild("record")
    session._asciinema_markers = []
    session._previous_buffer = None
    session._user = ""
    return session


def _oracle_runs() -> dict[str, Any]:
    calls: list[Any] = []
    tmux_module.time.time = lambda: 1000.0  # type: ignore[attr-defined]
    tmux_module.time.sleep = lambda s: calls.append({"sleep": s})  # type: ignore[attr-defined]
    runs: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as scratch:
        # A task with both files: which one the oracle takes.
        both = Path(scratch) / "dataset"
        shutil.copytree(DATASET, both)
        twin = both / "tb-keystrokes-and-sh"
        shutil.copytree(DATASET / "tb-keystrokes", twin)
        (twin / "task.yaml").write_text((twin / "task.yaml").read_text().replace("In /app:", "Twin, in /app:"))
        (twin / "solution.sh").write_text("echo from solution.sh\n")
        agent = OracleAgent(dataset_path=both)
        for task_dir in sorted(p for p in both.iterdir() if p.is_dir()):
            instruction = next(k for k in agent._solution_dict if k.startswith(
                "Twin" if task_dir == twin else "In /app:"))
            solution = agent._solution_dict[instruction]
            calls.clear()
            if solution["type"] == "sh":
                runs[task_dir.name] = {"solution_type": "sh", "file": solution["path"].name}
                continue
            agent.perform_task(instruction, _recording_session(calls))
            runs[task_dir.name] = {
                "solution_type": "yaml",
                "commands": [c.model_dump() for c in solution["commands"]],
                "calls": list(calls),
            }
    for name, entry in PLANS.items():
        calls.clear()
        command = TerminalCommand.model_validate(entry)
        _recording_session(calls).send_command(command)
        runs[f"plan:{name}"] = {"solution_type": "yaml", "commands": [command.model_dump()], "calls": list(calls)}
    return runs


def _validated(entry: Any) -> dict[str, Any]:
    try:
        return {"fields": TerminalCommand.model_validate(entry).model_dump()}
    except ValidationError as exc:
        return {"refused": sorted({".".join(map(str, e["loc"])) or "<entry>" for e in exc.errors()})}


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and value in (float("inf"), float("-inf")):
        return "inf" if value > 0 else "-inf"
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    return value


def main() -> int:
    fields = {
        name: {"annotation": str(info.annotation.__name__),
               "default": None if info.is_required() else info.default,
               "required": info.is_required()}
        for name, info in TerminalCommand.model_fields.items()
    }
    send_keys = inspect.signature(TmuxSession.send_keys).parameters
    recording = {
        "terminal_bench": version("terminal-bench"),
        "terminal_command_fields": fields,
        "terminal_command_extra": TerminalCommand.model_config.get("extra", "ignore"),
        "send_keys_defaults": {n: p.default for n, p in send_keys.items() if p.default is not p.empty},
        "enter_keys": sorted(TmuxSession._ENTER_KEYS),
        "completion_command": TmuxSession._TMUX_COMPLETION_COMMAND,
        "ends_with_newline_pattern": TmuxSession._ENDS_WITH_NEWLINE_PATTERN,
        "oracle_runs": _oracle_runs(),
        "entries": {name: {"entry": entry, **_validated(entry)} for name, entry in ENTRIES.items()},
    }
    OUT.write_text(json.dumps(_json_safe(recording), indent=1, sort_keys=True) + "\n")
    print(f"{len(recording['entries'])} entries, {len(recording['oracle_runs'])} oracle runs -> "
          f"{OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
