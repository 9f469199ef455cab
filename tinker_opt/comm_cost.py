"""Standard cost formulas of the collectives (alpha-beta model, ring algorithms).

The one place these formulas live: the hardware-file comm table, the default inter-node figures
of the cost model and the analytic device all call `collective_time_us`.
Sources: Thakur, Rabenseifner & Gropp, "Optimization of Collective Communication Operations in
MPICH" (2005); NCCL's bus-bandwidth convention (nccl-tests PERFORMANCE.md): a ring all-reduce
moves 2(n-1)/n of the buffer over each link, all-gather / reduce-scatter / all-to-all (n-1)/n.
`nbytes` is always the full buffer of one rank (the gathered size for all-gather, the input of
reduce-scatter), as torch.distributed and comm.csv count it.
"""

from __future__ import annotations

COMM_OPS = ("send_recv", "all_reduce", "all_gather", "reduce_scatter", "all_to_all")


def traffic_factor(op: str, group_size: int) -> float:
    """Bytes each rank sends per byte of buffer (the bus-bandwidth factor)."""
    n = group_size
    if op == "send_recv":
        return 1.0
    if n <= 1:
        return 0.0
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    raise ValueError(f"unknown collective {op!r}; expected one of {COMM_OPS}")


def latency_steps(op: str, group_size: int) -> int:
    """Sequential message steps of the ring algorithm (each costs one latency)."""
    n = group_size
    if op == "send_recv":
        return 1
    if n <= 1:
        return 0
    return 2 * (n - 1) if op == "all_reduce" else n - 1


def collective_time_us(
    op: str, group_size: int, nbytes: float, bandwidth_gbs: float, latency_us: float
) -> float:
    """Time of one collective: latency steps x latency + traffic / link bandwidth (GB/s = 1e9 B/s)."""
    if group_size <= 1 and op != "send_recv":
        return 0.0
    transfer_us = traffic_factor(op, group_size) * nbytes / (bandwidth_gbs * 1e3)
    return latency_steps(op, group_size) * latency_us + transfer_us
