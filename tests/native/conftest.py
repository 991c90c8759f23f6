"""Every native test runs twice: against the compiled module and its pure-Python twin."""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest


def load_impl(module: str, kind: str) -> ModuleType:
    """``rsr_async._native.<module>`` (compiled) or ``<module>_py`` (pure twin)."""
    if kind == "pure":
        return importlib.import_module(f"rsr_async._native.{module}_py")
    try:
        return importlib.import_module(f"rsr_async._native.{module}")
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail(f"native module {module} is not built, and CI requires it")
        pytest.skip(f"native module {module} is not built")


@pytest.fixture(params=["native", "pure"])
def impl_kind(request: pytest.FixtureRequest) -> str:
    kind: str = request.param
    return kind


@pytest.fixture
def similarity(impl_kind: str) -> ModuleType:
    return load_impl("similarity", impl_kind)


@pytest.fixture
def compress(impl_kind: str) -> ModuleType:
    return load_impl("compress", impl_kind)


@pytest.fixture
def leakscan(impl_kind: str) -> ModuleType:
    return load_impl("leakscan", impl_kind)

