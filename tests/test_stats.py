"""Intervals and paired tests of graphs/metrics/stats.py against values computed by hand."""

import pytest

from graphs.metrics.stats import Estimate, mcnemar_exact, mean_estimate, mean_of_proportions, paired, wilson


def test_wilson_matches_the_textbook_values():
    half = wilson(5, 10)
    assert half.value == 0.5 and half.n == 10
    assert half.low == pytest.approx(0.2366, abs=1e-4) and half.high == pytest.approx(0.7634, abs=1e-4)
    none = wilson(0, 10)
    assert none.low == 0.0 and none.high == pytest.approx(0.2775, abs=1e-4)
    assert wilson(0, 0) == Estimate(None, 0)


def test_wilson_holds_its_rate_at_every_count_even_at_none_and_all():
    """Rounding put 0 of 6 below its interval's low end (2.8e-17) and 10 of 10 above its high end."""
    outside = [(k, n) for n in range(1, 301) for k in range(n + 1)
               if not wilson(k, n).low <= k / n <= wilson(k, n).high]
    assert outside == []
    assert (wilson(0, 6).low, wilson(10, 10).high) == (0.0, 1.0)


def test_mean_of_non_binary_outcomes_gets_a_bootstrap_interval_around_it():
    estimate = mean_estimate([0.5, 1.0, 0.0, 0.25, 0.75] * 8)
    assert estimate.value == pytest.approx(0.5)
    assert estimate.low < 0.5 < estimate.high
    assert estimate.high - estimate.low < 0.5


def test_mcnemar_exact_counts_only_discordant_tasks():
    assert mcnemar_exact(0, 6) == pytest.approx(2 / 64)
    assert mcnemar_exact(3, 3) == 1.0
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(10, 0) == pytest.approx(2 / 1024)


def test_paired_comparison_pairs_by_task_and_reports_flips():
    baseline = {f"t{i}": 0.0 for i in range(40)}
    candidate = {f"t{i}": 1.0 if i < 12 else 0.0 for i in range(40)}
    candidate["t39"] = 0.0
    baseline["t39"] = 1.0  # one task only the baseline solved
    candidate["extra"] = 1.0  # not in the baseline: not compared
    result = paired(candidate, baseline)
    assert result.better == 12 and result.worse == 1
    assert result.difference.n == 40
    assert result.difference.value == pytest.approx(11 / 40)
    assert 0 < result.difference.low < result.difference.value < result.difference.high
    assert result.p_value == pytest.approx(mcnemar_exact(12, 1))
    assert "+27.5 pts" in result.describe()


def test_paired_comparison_refuses_disjoint_task_sets():
    with pytest.raises(ValueError, match="share no task"):
        paired({"a": 1.0}, {"b": 0.0})


def test_estimate_round_trips_and_formats():
    estimate = wilson(25, 200)
    assert Estimate.from_dict(estimate.to_dict()) == estimate
    assert estimate.format() == "12.5% [8.6, 17.8] n=200"


def test_mean_of_two_proportions_has_a_mover_interval_that_stays_open_at_the_ends():
    perfect = mean_of_proportions(wilson(4, 4), wilson(4, 4))
    assert perfect.value == 1.0 and perfect.n == 8 and perfect.high == 1.0
    # MOVER by hand: 1 - sqrt(2 * (1 - 0.5101)^2) / 2, where 0.5101 is the Wilson low of 4/4
    assert perfect.low == pytest.approx(1 - (2 * (1 - 0.5101) ** 2) ** 0.5 / 2, abs=1e-3)
    half = mean_of_proportions(wilson(0, 4), wilson(4, 4))  # "incorrect" to everything
    assert half.value == 0.5 and half.low < 0.5 < half.high
    assert mean_of_proportions(wilson(0, 0), wilson(3, 4)) == Estimate(None, 4)


def test_paired_comparison_of_non_binary_outcomes_uses_a_bootstrap_p_value():
    """Per-task contributions of a ratio differ in scale: many small losses and a few large gains
    can leave the mean unchanged, which a sign test would call a highly significant loss."""
    baseline = {f"t{i}": 0.0 for i in range(100)}
    candidate = {f"t{i}": (0.9 if i < 10 else -0.1) for i in range(100)}
    result = paired(candidate, baseline)
    assert result.better == 10 and result.worse == 90
    assert result.difference.value == pytest.approx(0.0, abs=1e-12)
    assert result.p_value > 0.5  # no evidence either way; McNemar on the signs would give ~1e-16


def test_a_bootstrap_p_value_of_zero_prints_as_below_its_resolution():
    baseline = {f"t{i}": 0.0 for i in range(60)}
    candidate = {f"t{i}": 0.3 + 0.01 * (i % 7) for i in range(60)}  # every task gains: no resample near zero
    result = paired(candidate, baseline)
    assert result.p_value == 0.0
    assert result.p_text() == "<0.001" and "p=<0.001" in result.describe()
    binary = paired({"a": 1.0, "b": 1.0, "c": 0.0}, {"a": 0.0, "b": 0.0, "c": 0.0})
    assert binary.p_text() == "0.5"  # McNemar exact, 2 discordant tasks
