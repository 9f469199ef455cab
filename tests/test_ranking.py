"""benchmarks/ranking.py: the ranking figures of one job (regret, pairs ordered as measured with
ties left out, Spearman's rho) and vTrain's rows read as runs grouped into jobs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from ranking import jobs_of, score_job, vtrain_runs  # noqa: E402


def test_perfect_ranking_scores_zero_regret_all_pairs_rho_one():
    """A model that orders every strategy as measured: no regret, every pair right, rho 1."""
    score = score_job("job", ["a", "b", "c"], [1.0, 2.0, 3.0], [0.5, 0.9, 1.7])
    assert score.regret == 0.0
    assert (score.pairs_right, score.pairs_counted) == (3, 3)
    assert score.rho == pytest.approx(1.0)
    assert score.mean_abs_error == pytest.approx((0.5 + 0.55 + 1.3 / 3) / 3)


def test_regret_is_measured_time_of_the_models_pick_over_the_best():
    """The model picks b (measured 1.5) where a (1.0) is fastest: regret 50 %."""
    score = score_job("job", ["a", "b", "c"], [1.0, 1.5, 3.0], [2.0, 1.0, 3.0])
    assert score.regret == pytest.approx(0.5)
    assert (score.fastest, score.picked) == ("a", "b")
    assert (score.pairs_right, score.pairs_counted) == (2, 3)


def test_pairs_within_three_percent_are_ties_and_not_counted():
    """1.00 and 1.02 are a tie: only the two pairs with 2.0 are counted."""
    score = score_job("job", ["a", "b", "c"], [1.0, 1.02, 2.0], [1.1, 1.0, 2.0])
    assert score.pairs_counted == 2
    assert score.pairs_right == 2


def test_reversed_ranking_has_rho_minus_one():
    score = score_job("job", ["a", "b", "c"], [1.0, 2.0, 3.0], [3.0, 2.0, 1.0])
    assert score.rho == pytest.approx(-1.0)
    assert score.pairs_right == 0


def test_vtrain_rows_group_into_jobs_of_one_model_devices_and_batch():
    """1,440 rows, 144 jobs; each job shares model, GPUs and global batch, strategies differ."""
    runs = vtrain_runs()
    assert len(runs) == 1440
    jobs = jobs_of(runs)
    assert len(jobs) == 144
    for group in jobs:
        assert len({(r.n_devices, r.strategy["gbs"], str(r.model)) for r in group}) == 1
        layouts = {(r.strategy["tp"], r.strategy["pp"], r.strategy["mbs"]) for r in group}
        assert len(layouts) == len(group)
    assert all(r.strategy["recompute"] == "full" for r in runs)
