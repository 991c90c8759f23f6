"""Hot pure functions, compiled with Cython, each with a pure-Python twin.

- ``compress``: ``compress_trajectory`` (what the planner and the direct-SFT export read)
  and ``clean_observation``;
- ``similarity``: command Jaccard and order similarity (normalised LCS), pairwise and
  all-pairs;
- ``leakscan``: literals in model actions that the model never saw (``LeakScanner``,
  ``scan_leaks``, ``scan_trajectory``); its second pass clears what the sandbox holds or
  the model could derive (``SandboxKnowledge``): ``leakjudge_py.Judge`` in the pure twin,
  ``leakjudge.Judge`` (the same source compiled, kernels in C) in the compiled scanner.
  The rules' docs, constants and ``SandboxKnowledge`` live in ``leakrules``.

The compiled modules are used when they were built; ``RSR_NO_EXTENSIONS=1`` selects the
pure-Python twins at run time. ``NATIVE`` says which one is active. Both give the same
answers: the test suite runs against each. The compiled kernels are fast enough to call
inline for one trajectory; an all-pairs matrix over hundreds of trajectories belongs on
a worker thread (the similarity kernels release the GIL).
"""

from __future__ import annotations

import os

from ..schema import Leak, Trajectory
from .leakrules import SandboxKnowledge
from .records import CompressionReport

__all__ = [
    "NATIVE",
    "CompressionReport",
    "LeakScanner",
    "SandboxKnowledge",
    "clean_observation",
    "command_jaccard",
    "command_order_similarity",
    "compress_trajectory",
    "normalize_command",
    "pairwise_jaccard",
    "pairwise_order_similarity",
    "scan_leaks",
    "scan_trajectory",
]

NATIVE: bool

if os.environ.get("RSR_NO_EXTENSIONS"):
    from .compress_py import clean_observation, compress_trajectory
    from .leakscan_py import LeakScanner, scan_leaks
    from .similarity_py import (
        command_jaccard,
        command_order_similarity,
        normalize_command,
        pairwise_jaccard,
        pairwise_order_similarity,
    )

    NATIVE = False
else:
    try:
        from .compress import clean_observation, compress_trajectory
        from .leakscan import LeakScanner, scan_leaks  # type: ignore[assignment]  # twin class
        from .similarity import (
            command_jaccard,
            command_order_similarity,
            normalize_command,
            pairwise_jaccard,
            pairwise_order_similarity,
        )
    except ImportError:  # not built: the twins give the same answers, only slower
        from .compress_py import clean_observation, compress_trajectory
        from .leakscan_py import LeakScanner, scan_leaks
        from .similarity_py import (
            command_jaccard,
            command_order_similarity,
            normalize_command,
            pairwise_jaccard,
            pairwise_order_similarity,
        )

        NATIVE = False
    else:
        NATIVE = True


def scan_trajectory(trajectory: Trajectory) -> list[Leak]:
    """Leaks of a recorded episode.

    ``task`` and ``env`` messages are what the model saw (observed in order); each
    ``model`` message's action is its commands' keystrokes joined by ``\\n``, scanned with
    the message's ``turn``. ``harness`` and ``private`` text never counts as seen: guidance
    the deployed model would not get is exactly what a leak comes from.
    """
    if not isinstance(trajectory, Trajectory):
        raise TypeError(f"scan_trajectory: expected a Trajectory, got {type(trajectory).__name__}")
    scanner = LeakScanner()
    out: list[Leak] = []
    for message in trajectory.messages:
        if message.origin == "task" or message.origin == "env":
            scanner.observe(message.content)
        elif message.origin == "model":
            action = "\n".join(command.keystrokes for command in message.commands)
            out.extend(scanner.scan(action, message.turn))
    return out
