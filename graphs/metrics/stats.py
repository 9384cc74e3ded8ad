"""Estimates with 95% intervals, and paired comparisons of two versions on the same tasks.

Every figure sparring prints is an ``Estimate``: a value, the sample it came from and a 95%
interval. Pass rates use the Wilson score interval (sound at the 0% and 100% ends, unlike the
normal approximation); means of other outcomes use a seeded percentile bootstrap. A
comparison of two versions is paired by task: the difference of their means with a paired
bootstrap interval, and for pass/fail outcomes McNemar's exact test on the discordant tasks
(the ones only one version solved), which is what a paired pass-rate comparison needs. A
mean of two proportions (a balanced accuracy) gets the MOVER interval built from theirs.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

Z95 = 1.959963984540054
BOOTSTRAP_SAMPLES = 2000
BOOTSTRAP_SEED = 0


@dataclass(frozen=True)
class Estimate:
    """A figure with its sample size and 95% interval (None when there is no sample)."""

    value: float | None
    n: int
    low: float | None = None
    high: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Estimate:
        return cls(data.get("value"), int(data.get("n", 0)), data.get("low"), data.get("high"))

    def format(self, percent: bool = True, digits: int = 1, with_n: bool = True) -> str:
        """``12.5% [8.6, 17.8] n=200`` (or plain numbers with ``percent=False``)."""
        if self.value is None:
            return f"- n={self.n}" if with_n else "-"
        scale, unit = (100.0, "%") if percent else (1.0, "")
        text = f"{self.value * scale:.{digits}f}{unit}"
        if self.low is not None and self.high is not None:
            text += f" [{self.low * scale:.{digits}f}, {self.high * scale:.{digits}f}]"
        return f"{text} n={self.n}" if with_n else text

    def signed(self, percent: bool = True, with_n: bool = True, with_unit: bool = True) -> str:
        """A difference: ``+3.0 pts [-1.5, +7.5] n=200`` (percentage points, or plain numbers)."""
        if self.value is None:
            return "-"
        scale, unit = (100.0, " pts" if with_unit else "") if percent else (1.0, "")
        text = f"{self.value * scale:+.1f}{unit}"
        if self.low is not None and self.high is not None:
            text += f" [{self.low * scale:+.1f}, {self.high * scale:+.1f}]"
        return f"{text} n={self.n}" if with_n else text


@dataclass(frozen=True)
class PairedComparison:
    """Candidate minus baseline on the tasks both were measured on."""

    difference: Estimate
    """mean(candidate) - mean(baseline), with a paired bootstrap 95% interval"""
    candidate: Estimate
    baseline: Estimate
    better: int
    """tasks where the candidate scored higher (for pass/fail: baseline wrong, candidate right)"""
    worse: int
    """tasks where the candidate scored lower"""
    p_value: float | None
    """two-sided McNemar exact test for 0/1 outcomes; otherwise a paired bootstrap p-value (twice the
    share of resampled mean differences on the far side of zero): per-task contributions to a
    ratio (a balanced accuracy) differ in scale from task to task, so counting signs means nothing"""

    def to_dict(self) -> dict[str, Any]:
        return {
            "difference": self.difference.to_dict(), "candidate": self.candidate.to_dict(),
            "baseline": self.baseline.to_dict(), "better": self.better, "worse": self.worse,
            "p_value": self.p_value,
        }

    def p_text(self, digits: int = 3) -> str:
        """The p-value to print: a bootstrap's 0 is "<0.001" (no resample fell beyond zero: the
        smallest p-value it can tell apart is 2 / BOOTSTRAP_SAMPLES), never "0"."""
        if self.p_value is None:
            return "-"
        if self.p_value == 0:
            return f"<{2 / BOOTSTRAP_SAMPLES:g}"
        return f"{self.p_value:.{digits}g}"

    def describe(self, percent: bool = True) -> str:
        """One line a person reads: the difference, its interval, the flips and the p-value."""
        return (f"{self.difference.signed(percent)} (candidate {self.candidate.format(percent)}, "
                f"baseline {self.baseline.format(percent)}; {self.better} better, {self.worse} worse, "
                f"p={self.p_text()})")


def wilson(successes: float, n: int) -> Estimate:
    """A pass rate with its Wilson score 95% interval. The interval always holds the rate; in
    floating point its ends at 0 of n and n of n round past it (2.8e-17 above 0, 1 - 1.1e-16),
    so they are pinned to the rate there."""
    if n <= 0:
        return Estimate(None, 0)
    p = successes / n
    denominator = 1 + Z95**2 / n
    centre = (p + Z95**2 / (2 * n)) / denominator
    half = Z95 * math.sqrt(p * (1 - p) / n + Z95**2 / (4 * n * n)) / denominator
    return Estimate(p, n, min(p, max(0.0, centre - half)), max(p, min(1.0, centre + half)))


def _is_binary(values: Sequence[float]) -> bool:
    return all(v in (0.0, 1.0) for v in values)


def mean_estimate(values: Sequence[float]) -> Estimate:
    """Mean of per-task outcomes: Wilson for 0/1 outcomes, a seeded percentile bootstrap otherwise."""
    values = [float(v) for v in values]
    if not values:
        return Estimate(None, 0)
    if _is_binary(values):
        return wilson(sum(values), len(values))
    low, high = _bootstrap(values, lambda sample: sum(sample) / len(sample))
    return Estimate(sum(values) / len(values), len(values), low, high)


def ratio_estimate(hits: int, total: int) -> Estimate:
    """A proportion of counted events (precision, a recall, an unparsed rate)."""
    return wilson(hits, total)


def mean_of_proportions(first: Estimate, second: Estimate) -> Estimate:
    """The mean of two independent proportions (a balanced accuracy: the mean of two recalls),
    with the MOVER interval built from their own intervals (Zou & Donner 2008), which stays
    sound where a recall is 0 or 1 and a bootstrap's interval would collapse to a point.
    None unless both are measured; n is both samples together."""
    if first.value is None or second.value is None or None in (first.low, first.high, second.low, second.high):
        return Estimate(None, first.n + second.n)
    value = (first.value + second.value) / 2
    low = value - math.hypot(first.value - first.low, second.value - second.low) / 2
    high = value + math.hypot(first.high - first.value, second.high - second.value) / 2
    return Estimate(value, first.n + second.n, max(0.0, low), min(1.0, high))


def _bootstrap(values: Sequence[float], statistic, samples: int = BOOTSTRAP_SAMPLES) -> tuple[float, float]:
    return _percentiles(_bootstrap_draws(values, statistic, samples))


def _bootstrap_draws(values: Sequence[float], statistic, samples: int = BOOTSTRAP_SAMPLES) -> list[float]:
    """The statistic of ``samples`` seeded resamples of ``values``, sorted."""
    rng = random.Random(BOOTSTRAP_SEED)
    n = len(values)
    return sorted(statistic([values[rng.randrange(n)] for _ in range(n)]) for _ in range(samples))


def _percentiles(draws: list[float]) -> tuple[float, float]:
    """The 2.5th and 97.5th percentiles of sorted ``draws``."""
    return draws[int(0.025 * len(draws))], draws[min(len(draws) - 1, int(0.975 * len(draws)))]


def mcnemar_exact(better: int, worse: int) -> float:
    """Two-sided exact McNemar p-value: a binomial(better + worse, 1/2) test on the discordant pairs."""
    n = better + worse
    if n == 0:
        return 1.0
    k = min(better, worse)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2 * tail)


def paired(candidate: Mapping[str, float], baseline: Mapping[str, float]) -> PairedComparison:
    """Compare two versions' per-task outcomes on the tasks both have (keys are task ids).

    Raises ValueError when they share no task: such figures cannot be compared.
    """
    shared = sorted(set(candidate) & set(baseline))
    if not shared:
        raise ValueError("the two evaluations share no task: a paired comparison needs the same tasks")
    a = [float(candidate[t]) for t in shared]
    b = [float(baseline[t]) for t in shared]
    deltas = [x - y for x, y in zip(a, b, strict=True)]
    better = sum(d > 0 for d in deltas)
    worse = sum(d < 0 for d in deltas)
    draws = _bootstrap_draws(deltas, lambda sample: sum(sample) / len(sample))
    low, high = _percentiles(draws)
    difference = Estimate(sum(deltas) / len(deltas), len(deltas), low, high)
    if _is_binary(a) and _is_binary(b):
        p_value = mcnemar_exact(better, worse)
    else:
        far = min(sum(d <= 0 for d in draws), sum(d >= 0 for d in draws))
        p_value = min(1.0, 2 * far / len(draws))
    return PairedComparison(difference, mean_estimate(a), mean_estimate(b), better, worse, p_value)
