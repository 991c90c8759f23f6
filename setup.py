"""Build the Cython extensions under ``rsr_async/_native``, and ship ``configs/`` and ``bench/``.

Every compiled module has a pure-Python twin (``<name>_py.py``), so a failed native
build is not fatal for a user: it falls back with a warning. Under CI (the ``CI``
environment variable is set) a failed build fails the install, so a broken extension
can never hide behind its twin.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

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
    # The leak scan's second pass is written once, in the pure twin ``leakjudge_py.py``;
    # compiled as its own module (typed by ``_leakjudge_rules.pxd``, Cython's pure Python
    # mode), it is the base ``leakjudge.pyx`` puts its kernels on. Being Python source, it
    # keeps Python's semantics: checked and negative indexes, Python division, and
    # annotations that are not C types.
    rules = Extension(
        "rsr_async._native._leakjudge_rules",
        [str(NATIVE_DIR / "leakjudge_py.py")],
        extra_compile_args=["-O3"],
    )
    return [
        *cythonize(
            [rules],
            language_level=3,
            compiler_directives={
                "boundscheck": True,
                "wraparound": True,
                "cdivision": False,
                "annotation_typing": False,
                "embedsignature": True,
            },
        ),
        *cythonize(
            modules,
            language_level=3,
            compiler_directives={
                "boundscheck": False,
                "wraparound": False,
                "cdivision": True,
                "initializedcheck": False,
                "embedsignature": True,
            },
        ),
    ]


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


SHIPPED = {"configs": ("*.toml",), "bench": ("*.py", "leak_corpus/*")}
"""Top-level folders a wheel carries inside the package (``rsr_async/_shipped/``), where
``rsr_async/_layout.py`` finds them: the named configs and the benchmarks."""


class BuildPyWithShipped(build_py):
    """Copy ``configs/`` and ``bench/`` into the built package, so an installed
    ``--config paper`` and ``bench NAME`` work outside a checkout."""

    def run(self) -> None:
        super().run()
        for folder, patterns in SHIPPED.items():
            target = Path(self.build_lib) / "rsr_async" / "_shipped" / folder
            if target.exists():
                shutil.rmtree(target)
            for pattern in patterns:
                for source in sorted(Path(folder).glob(pattern)):
                    copy = target / source.relative_to(folder)
                    copy.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(source, copy)


setup(
    ext_modules=_extensions(),
    cmdclass={"build_ext": OptionalBuildExt, "build_py": BuildPyWithShipped},
)
