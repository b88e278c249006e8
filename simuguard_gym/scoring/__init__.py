"""Scoring (SimuGuard 3.6): success-rate estimates with artifacts accounted for, bounds, paired tests.

Numpy only: :func:`score` for one set of episodes, :func:`score_by_task`, :func:`compare` for
two arms over shared seeds, :func:`wilson` and :func:`sign_test` underneath.
"""

from simuguard_gym.scoring.estimates import Episode, Rate, Scores, score, score_by_task, wilson
from simuguard_gym.scoring.paired import PairedComparison, compare, sign_test

__all__ = ["Episode", "PairedComparison", "Rate", "Scores", "compare", "score", "score_by_task", "sign_test", "wilson"]
