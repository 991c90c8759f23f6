"""Build the Cython extensions under ``rsr_async/_native``.

Every compiled module has a pure-Python twin (``<name>_py.py``), so a failed native
build is not fatal for a user: it falls back with a warning. Under CI (the ``CI``
environment variable is set) a failed build fails the install, so a broken extension
can never hide behind its twin.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

NATIVE_DIR = Path("rsr_async") / "_native"
STRICT = bool(os.environ.get("CI")) or bool(os.environ.get("RSR_REQUIRE_EXTENSIONS"))


def _extensions() -> list[Extension]:
    if os.environ.get("RSR_NO_EXTENSIONS"):
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        if STRICT:
            raise
        print("warning: Cython is missing; rsr_async uses its pure-Python twins", file=sys.stderr)
        return []
    modules = [
        Extension(
            f"rsr_async._native.{pyx.stem}",
            [str(pyx)],
            extra_compile_args=["-O3"],
        )
        for pyx in sorted(NATIVE_DIR.glob("*.pyx"))
    ]
    return list(
        cythonize(
            modules,
            language_level=3,
            compiler_directives={
                "boundscheck": False,
                "wraparound": False,
                "cdivision": True,
                "initializedcheck": False,
                "embedsignature": True,
            },
        )
    )


class OptionalBuildExt(build_ext):
    """Build extensions, but fall back to pure Python unless running under CI."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:
            self._fallback(exc)

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:
            self._fallback(exc, ext.name)

    def _fallback(self, exc: Exception, name: str = "native extensions") -> None:
        if STRICT:
            raise
        print(
            f"warning: building {name} failed ({exc}); rsr_async will use the pure-Python twin",
            file=sys.stderr,
        )


setup(ext_modules=_extensions(), cmdclass={"build_ext": OptionalBuildExt})
