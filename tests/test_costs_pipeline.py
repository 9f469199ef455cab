"""costs/pipeline.py: the one pipeline objective on integers, numpy arrays, CP-SAT and PuLP."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pulp
from ortools.sat.python import cp_model

from tinker_opt.costs.pipeline import pipeline_bound_x_v, pipeline_x_v


@dataclass(frozen=True)
class Shape:
    num_microbatches: int
    vpp: int


def test_integers_follow_the_1f1b_and_interleaved_formula():
    """v*T = sum + (m*v - 1) max + v tail; v = 1 is sum + (m - 1) max + tail."""
    assert pipeline_x_v(Shape(8, 1), 100, 30, 5) == 100 + 7 * 30 + 5
    assert pipeline_x_v(Shape(8, 2), 100, 30, 5) == 100 + 15 * 30 + 2 * 5


def test_numpy_arrays_are_priced_element_wise():
    """Rows of candidate splits: one objective per row, the same as the integers."""
    times = np.array([[10, 20, 30], [20, 20, 20]])
    tails = np.array([[1, 2, 3], [2, 2, 2]])
    shape = Shape(4, 1)
    got = pipeline_x_v(shape, times.sum(axis=1), times.max(axis=1), tails.max(axis=1))
    want = [
        pipeline_x_v(shape, int(t.sum()), int(t.max()), int(q.max()))
        for t, q in zip(times, tails, strict=True)
    ]
    assert got.tolist() == want


def test_cpsat_expression_reaches_the_integer_value():
    """A CP-SAT model minimising the expression lands on the integers' value."""
    model = cp_model.CpModel()
    total = model.new_int_var(100, 200, "total")
    bottleneck = model.new_int_var(30, 60, "max")
    tail = model.new_int_var(5, 9, "tail")
    model.minimize(pipeline_x_v(Shape(8, 2), total, bottleneck, tail))
    solver = cp_model.CpSolver()
    assert solver.solve(model) == cp_model.OPTIMAL
    assert solver.objective_value == pipeline_x_v(Shape(8, 2), 100, 30, 5)


def test_pulp_expression_reaches_the_integer_value():
    """A PuLP model minimising the expression lands on the integers' value."""
    problem = pulp.LpProblem("pipeline", pulp.LpMinimize)
    total = problem.add_variable("total", 100, 200)
    bottleneck = problem.add_variable("max", 30, 60)
    tail = problem.add_variable("tail", 5, 9)
    problem.setObjective(pipeline_x_v(Shape(8, 1), pulp.lpSum([total]), bottleneck, tail))
    problem.solve(pulp.HiGHS(msg=False))
    assert pulp.value(problem.objective) == pipeline_x_v(Shape(8, 1), 100, 30, 5)


def test_bound_of_lower_bounds_is_below_every_value():
    """Lower bounds of the three terms give a lower bound of the objective."""
    shape = Shape(6, 2)
    rng = np.random.default_rng(0)
    for _ in range(50):
        terms = rng.integers(0, 1000, size=3)
        slack = rng.integers(0, 100, size=3)
        assert pipeline_bound_x_v(shape, *terms) <= pipeline_x_v(shape, *(terms + slack))
