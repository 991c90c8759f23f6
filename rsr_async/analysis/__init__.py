"""The paper's analyses, from a run directory or another tool's results.

:mod:`.rollouts` is what every analysis reads (one record per agent attempt, from
:mod:`.runs`, :mod:`.harbor` or :mod:`.checkpoints`); :mod:`.tables` computes the
paper's tables (coverage per harness, union and exclusive, equal rollouts, per domain,
style, rewrite pass rates, similarity, outcomes) and :mod:`.outcomes` pass@k, mean of k
and process reward (:mod:`.passk`, the unbiased estimator); :mod:`.report` and
:mod:`.plots` write them; :mod:`.commands` is ``analyze``.
"""

from .passk import mean_pass_at_k, pass_at_k

__all__ = ["mean_pass_at_k", "pass_at_k"]
