"""benchmarks/host_queue.py: the per-op launch queue (host issues, GPU runs each kernel once it is
issued and the previous one is done) and its per-layer step over identical layers."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from host_queue import periodic_steady_us, queue_finish_us  # noqa: E402


def test_alternating_stream_costs_more_than_either_total():
    """Host-heavy op then GPU-heavy op: the GPU waits 10 for the first issue, then runs 1 + 10
    while the host issues the second (1): 10 + 1 + 10 = 21, above max(11, 11)."""
    host, gpu = np.array([10.0, 1.0]), np.array([1.0, 10.0])
    assert queue_finish_us(host, gpu) == pytest.approx(21.0)
    assert queue_finish_us(host, gpu) > max(host.sum(), gpu.sum())


def test_identical_layers_step_by_the_larger_of_host_and_gpu():
    """Over repeated layers the op order only adds a one-off: each further layer costs
    max(host, GPU) of one layer (here 11), the same as the whole-pass max."""
    host, gpu = np.array([10.0, 1.0]), np.array([1.0, 10.0])
    assert periodic_steady_us(host, gpu, layers=8) == pytest.approx(11.0)
    slow_gpu = np.array([2.0, 12.0])
    assert periodic_steady_us(host, slow_gpu, layers=8) == pytest.approx(14.0)
