"""Analyses over a run's store: pass@k now; coverage, style and similarity later."""

from .passk import mean_pass_at_k, pass_at_k

__all__ = ["mean_pass_at_k", "pass_at_k"]
