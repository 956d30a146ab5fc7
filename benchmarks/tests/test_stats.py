import math

import pytest

from bench import stats


def test_quantile_matches_numpy_linear_method():
    values = [4.0, 1.0, 3.0, 2.0]
    assert stats.quantile(values, 0.0) == 1.0
    assert stats.quantile(values, 1.0) == 4.0
    assert stats.quantile(values, 0.5) == 2.5
    assert stats.quantile(values, 0.25) == pytest.approx(1.75)


def test_quantile_rejects_empty_and_out_of_range():
    with pytest.raises(ValueError):
        stats.quantile([], 0.5)
    with pytest.raises(ValueError):
        stats.quantile([1.0], 1.5)


def test_summarize_fields():
    s = stats.summarize([1.0, 2.0, 3.0, 4.0, 5.0])
    assert s["n"] == 5
    assert s["median"] == 3.0
    assert s["iqr"] == pytest.approx(2.0)
    assert s["rel_iqr"] == pytest.approx(2.0 / 3.0)
    assert (s["min"], s["max"], s["mean"]) == (1.0, 5.0, 3.0)


def test_ratio_of_identical_samples_is_one_and_not_a_verdict():
    a = [1.0, 1.1, 0.9, 1.05, 0.95] * 4
    r = stats.ratio(a, list(a))
    assert r["ratio"] == 1.0
    lo, hi = r["ci95"]
    assert lo <= 1.0 <= hi
    assert r["verdict"] == "same within spread"


def test_ratio_detects_a_clear_slowdown_and_speedup():
    base = [1.0 + 0.01 * (i % 5) for i in range(40)]
    slow = [2.0 * x for x in base]
    assert stats.ratio(slow, base)["verdict"] == "slower"
    assert stats.ratio(base, slow)["verdict"] == "faster"


def test_ratio_is_deterministic_and_reports_rounds():
    a_rounds = [[1.0, 1.2, 1.1], [1.3, 1.4, 1.2]]
    b_rounds = [[1.0, 1.0, 1.0], [1.2, 1.2, 1.2]]
    a = [x for r in a_rounds for x in r]
    b = [x for r in b_rounds for x in r]
    r1 = stats.ratio(a, b, rounds_a=a_rounds, rounds_b=b_rounds)
    r2 = stats.ratio(a, b, rounds_a=a_rounds, rounds_b=b_rounds)
    assert r1 == r2
    assert r1["per_round"] == pytest.approx([1.1, 1.3 / 1.2])
    assert r1["round_range"][0] <= r1["round_range"][1]


def test_fmt_ratio():
    assert stats.fmt_ratio({"ratio": 1.0, "ci95": [0.9, 1.1]}) == "1.000 [0.900, 1.100]"
    assert not math.isnan(stats.median([1.0, 2.0]))


def test_rounds_that_disagree_veto_a_verdict():
    base = [1.0 + 0.01 * (i % 5) for i in range(30)]
    slow = [1.5 * x for x in base]
    # pooled, a is clearly slower; but one round says the opposite
    rounds_a = [slow[:10], slow[10:20], [0.5 * x for x in base[:10]]]
    rounds_b = [base[:10], base[10:20], base[20:]]
    r = stats.ratio(slow, base, rounds_a=rounds_a, rounds_b=rounds_b)
    assert r["verdict"] == "same within spread (rounds disagree)"
    assert stats.ratio(slow, base, rounds_a=[slow[:10]], rounds_b=[base[:10]])["verdict"] == "slower"
    assert "p20" in r
