"""Where the top-level ``configs/`` and ``bench/`` folders are, checked out or installed.

The design card keeps ``configs/`` and ``bench/`` beside the package, at the top of the
repository. A wheel has no such place: ``setup.py``'s ``build_py`` copies both into
``rsr_async/_shipped/`` inside the package, and this module prefers that copy when it
exists (an installed package), else the checkout's folder (a clone, an editable install).
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["shipped_dir"]

PACKAGE_DIR = Path(__file__).resolve().parent


def shipped_dir(name: str) -> Path:
    """``configs`` or ``bench``: the installed copy, or the source checkout's folder."""
    installed = PACKAGE_DIR / "_shipped" / name
    if installed.is_dir():
        return installed
    return PACKAGE_DIR.parent / name
