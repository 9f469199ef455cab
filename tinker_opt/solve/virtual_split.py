"""Exact uneven split with virtual stages: the first and last virtual stage free, the rest equal.

Megatron-LM's `--pipeline-model-parallel-layout` (megatron/core/transformer/
pipeline_parallel_layer_layout.py, core_v0.13) gives each of the pp x vpp virtual stages its own
decoder-layer count, a stage may hold none; its design note (Megatron-LM MR 2795, "flexible
asymmetric VPP") was written for DeepSeek-V3, whose 61 layers no pp x vpp divides, with the
lighter dense layers and the embedding at the front and the MTP / loss at the back. The search
takes the family of layouts that Megatron's own `--decoder-first/last-pipeline-num-layers` are
for, one level down: virtual stage 0 (rank 0's first chunk) holds n_f layers, the last one (rank
p-1's last chunk) n_l, every other virtual stage q >= 1, with n_f + (p v - 2) q + n_l = L. That is
at most L / (p v - 2) values of q times L + 1 splits per configuration, the even split among them
when p v divides L (n_f = n_l = q).

Each list is priced as a row of row_split.py (the integers of `SplitCoefficients.stage_costs`,
vectorised over the lists, each at its smallest fitting recompute count), and the best list over
all is the configuration's split: like the even split, a constant that enters CP-SAT and the MILP
(cpsat.py, milp.py) and the enumeration alike. tests/test_virtual_split.py checks the tables
against stage_costs and the optimum against brute force over every list of the family.
"""

from __future__ import annotations

import functools

import numpy as np

from tinker_opt.costs.coefficients import SplitCoefficients
from tinker_opt.solve.layer_split import Split
from tinker_opt.solve.row_split import best_row_split, rows_feasible, rows_lower_bound


@functools.lru_cache(maxsize=256)
def virtual_rows(num_layers: int, num_stages: int, vpp: int) -> np.ndarray:
    """Every list of the family as rows (lists x p*v virtual stages, Megatron's order); one
    read-only array per shape, shared by every configuration of that shape."""
    L, total = num_layers, num_stages * vpp
    rows = []
    for q in range(1, L // max(total - 2, 1) + 1):
        rest = L - (total - 2) * q
        first = np.arange(rest + 1)
        block = np.full((len(first), total), q, dtype=np.int64)
        block[:, 0] = first
        block[:, -1] = rest - first
        rows.append(block)
    out = np.concatenate(rows) if rows else np.zeros((0, total), dtype=np.int64)
    out.setflags(write=False)
    return out


def in_family(chunks: tuple[int, ...]) -> bool:
    """Whether a per-virtual-stage list belongs to the family (middle virtual stages equal, >= 1)."""
    middle = set(chunks[1:-1])
    return len(middle) == 1 and min(middle) >= 1


def _rows(c: SplitCoefficients) -> np.ndarray:
    return virtual_rows(c.num_layers, c.num_stages, c.vpp)


def virtual_lower_bound(c: SplitCoefficients) -> int:
    """A lower bound on v*T over the family (row_split.rows_lower_bound)."""
    return rows_lower_bound(c, _rows(c))


def virtual_feasible(c: SplitCoefficients) -> bool:
    """Some list of the family fits with some recompute count (exact; row_split.rows_feasible)."""
    return rows_feasible(c, _rows(c))


def best_virtual_split(c: SplitCoefficients) -> Split | None:
    """The best list of the family with its smallest fitting recompute count, None if none fits."""
    return best_row_split(c, _rows(c))
