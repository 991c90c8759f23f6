"""Tasks: Harbor and legacy terminal-bench loaders, datasets, the verifier and the oracle.

```
load_task(path) -> Task                 one directory (task.toml or task.yaml)
load_dataset(sources) -> Dataset        directories (recursive), list files, several
BUNDLED_SUITE                           the suite shipped in rsr_async/tasks/bundled
verify(sandbox, task) -> Verification   hidden tests after the agent is done, out of its reach
grade(sandbox, task, pool=, key=)       verify by the task's verifier mode (shared | separate)
run_oracle(sandbox, task) -> ExecResult the reference solution in place of a model
validate(tasks, pool, concurrency=)     oracle passes, untouched environment fails
```
"""

from __future__ import annotations

from .dataset import BUNDLED_SUITE, Dataset, find_task_dirs, load_dataset
from .loader import detect_format, is_task_dir, load_task
from .oracle import SandboxProvider, ValidationRow, run_oracle, validate, validate_task
from .verifier import (
    Verification,
    VerificationError,
    grade,
    main_reward,
    parse_pytest_summary,
    parse_reward_json,
    parse_reward_txt,
    try_grade,
    try_verify,
    verify,
)

__all__ = [
    "BUNDLED_SUITE",
    "Dataset",
    "SandboxProvider",
    "ValidationRow",
    "Verification",
    "VerificationError",
    "detect_format",
    "find_task_dirs",
    "grade",
    "is_task_dir",
    "load_dataset",
    "load_task",
    "main_reward",
    "parse_pytest_summary",
    "parse_reward_json",
    "parse_reward_txt",
    "run_oracle",
    "try_grade",
    "try_verify",
    "validate",
    "validate_task",
    "verify",
]
