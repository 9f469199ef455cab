"""Units shared by the term modules (terms.py, stage_terms.py, data_parallel.py, zero_terms.py): fp32
gradient bytes, tokens of one micro-batch on one rank, the data-parallel group sizes, and the one
rounding of times to integer ns."""

from __future__ import annotations

import numpy as np

from tinker_opt.choices import Schedule
from tinker_opt.strategy import Strategy


def to_ns(us: float) -> int:
    """Microseconds to integer nanoseconds: the one rounding of every time coefficient."""
    return round(us * 1000.0)


def ns_array(us: np.ndarray) -> np.ndarray:
    """`to_ns` of each element (numpy's round-half-even, as Python's round)."""
    return np.rint(np.asarray(us, dtype=float) * 1000.0).astype(np.int64)


def m_tokens(model, s: Strategy) -> int:
    """Tokens of one micro-batch on one context-parallel rank: s*b/cp."""
    return model.seq_length // s.cp * s.mbs


def data_groups(s: Strategy, is_moe: bool) -> tuple[int, int]:
    """(dense data-parallel group dp*cp, expert data-parallel group tp*cp*dp/(ep*etp))."""
    edp = s.tp * s.cp * s.dp // (s.ep * s.expert_tp) if is_moe else 1
    return s.dp * s.cp, max(edp, 1)


def chunks_per_rank(s: Strategy) -> int:
    """Model chunks each pipeline rank holds: vpp, or DualPipeV's two (its V: rank r holds chunks
    r and 2p - 1 - r; Ascend/MindSpeed docs/features/dualpipev.md)."""
    return 2 if s.schedule == Schedule.DUALPIPEV else s.vpp


def head_stage(s: Strategy) -> int:
    """The pipeline rank of the final norm, output layer and loss: the last, or DualPipeV's first
    (the V ends where it starts; dualpipev.md: "output head会被分配到PP rank0")."""
    return 0 if s.schedule == Schedule.DUALPIPEV else s.pp - 1
