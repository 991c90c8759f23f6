"""Hot pure functions, compiled with Cython, each with a pure-Python twin.

The compiled module is used when it was built; ``RSR_NO_EXTENSIONS=1`` selects the
pure-Python twins at run time. ``NATIVE`` says which one is active. Both give the same
answers: the test suite runs against each.
"""

from __future__ import annotations

import os

__all__ = ["NATIVE", "command_jaccard", "normalize_command"]

NATIVE: bool

if os.environ.get("RSR_NO_EXTENSIONS"):
    from .similarity_py import command_jaccard, normalize_command

    NATIVE = False
else:
    try:
        from .similarity import command_jaccard, normalize_command
    except ImportError:  # not built: the twin gives the same answers, only slower
        from .similarity_py import command_jaccard, normalize_command

        NATIVE = False
    else:
        NATIVE = True
