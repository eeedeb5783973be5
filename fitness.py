"""fitness — critical regressions and penalties from per-dimension scores, as paired-round statistics.

Scores are oriented so that lower is better on every dimension; a round's statistic is the per-seed
paired difference (candidate − champion) over seeds scored in both arms. The code lives in
`sil/stats/fitness.py`.
"""

from sil.stats.fitness import NoiseEstimate, RoundStat, interval, paired_round, score_matrix

__all__ = ["NoiseEstimate", "RoundStat", "interval", "paired_round", "score_matrix"]
