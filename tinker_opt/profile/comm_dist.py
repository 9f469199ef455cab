"""One rank of a communication measurement, under torchrun or the single-node launcher.

Each rank reads torchrun's environment (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`,
`GROUP_RANK`, `MASTER_ADDR`, `MASTER_PORT`; profile/comm.py `measure_comm` sets the same for
its own processes on one node), joins the process group with a timeout on every wait
(rendezvous, collectives, barriers), exchanges its node and host name, creates the group kinds of
profile/comm_groups.py `plan_groups` and times them (profile/comm.py `measure_group`); rank 0
gathers the rows. A rank that fails writes its message into the job's key-value store (the one
torchrun's agent keeps, or rank 0's) and exits; every other rank, once its next wait fails (a
peer gone, or the timeout), reads the store and names the rank that failed first, so the run
ends with one line, no hang.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from tinker_opt.errors import ConfigError
from tinker_opt.profile.comm import CommPlan, measure_group, setup_device, sync_fn
from tinker_opt.profile.comm_groups import CommGroup, Topology, plan_groups

ENV_KEYS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK")
"""torchrun's worker environment (torch.distributed.run, 'Environment Variables')."""
FAIL_RANK_ENV = "TINKER_OPT_COMM_FAIL_RANK"
"""Tests only: the rank named here fails on purpose after the topology exchange."""
FAILED_PREFIX = "tinker-opt-comm-failed/"


class RankFailure(Exception):
    """The run stopped: `message` names the rank that failed; `own` when it is this rank."""

    def __init__(self, message: str, *, own: bool) -> None:
        super().__init__(message)
        self.own = own


@dataclass(frozen=True)
class RankEnv:
    """Where this process sits: its global rank, its node (GROUP_RANK) and local rank."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node: int

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> RankEnv:
        env = os.environ if environ is None else environ
        missing = [key for key in ENV_KEYS if key not in env]
        if missing:
            raise ConfigError(
                f"profile-comm: {missing[0]} is not set; launch it with torchrun (--no-python "
                "tinker-opt profile-comm ...), or without torchrun for the local node only"
            )
        try:
            values = [int(env[key]) for key in ENV_KEYS]
        except ValueError:
            raise ConfigError(f"profile-comm: torchrun's {ENV_KEYS} must be integers") from None
        return cls(*values)

    def where(self, host: str | None = None) -> str:
        return f"rank {self.rank} (node {self.node}, host {host or socket.gethostname()})"


@dataclass(frozen=True)
class RankResult:
    """What rank 0 holds after the run: every rank's rows, the notes and the topology."""

    rows: list[tuple]
    """(scope, op, group_size, bytes, time_us, rank) of every rank that timed a group."""
    missing: list[str]
    topology: Topology


def _connect(plan: CommPlan, env: RankEnv):
    """Join the job: the store and the default process group, every wait bounded by the timeout."""
    import torch.distributed as dist

    timeout = timedelta(seconds=plan.timeout_s)
    store, _, _ = next(dist.rendezvous("env://", env.rank, env.world_size, timeout=timeout))
    store.set_timeout(timeout)
    dist.init_process_group(
        plan.backend,
        store=dist.PrefixStore("tinker-opt-comm-pg/", store),
        rank=env.rank,
        world_size=env.world_size,
        timeout=timeout,
    )
    return dist.PrefixStore(FAILED_PREFIX, store)


def _topology(env: RankEnv) -> Topology:
    """Every rank's (node, local rank, host): torchrun's contiguous rank order is checked."""
    import torch.distributed as dist

    seen: list[Any] = [None] * env.world_size
    dist.all_gather_object(seen, (env.node, env.local_rank, socket.gethostname()))
    per_node = env.local_world_size
    for rank, (node, local, _) in enumerate(seen):
        if rank != node * per_node + local:
            raise ConfigError(
                f"profile-comm: rank {rank} is local rank {local} of node {node}, not in "
                f"torchrun's order (RANK = GROUP_RANK x {per_node} + LOCAL_RANK); give every "
                "node the same --nproc-per-node"
            )
    hosts = {node: host for node, _, host in seen}
    return Topology(len(hosts), per_node, tuple(hosts[n] for n in sorted(hosts)))


def _measure_kind(plan: CommPlan, env: RankEnv, kind: CommGroup, device, dtype) -> tuple:
    """Create the kind's groups (every rank, in order), time this rank's group, then a barrier."""
    import torch.distributed as dist

    handles = [dist.new_group(list(members)) for members in kind.members]
    rows: list[tuple] = []
    missing: list[str] = []
    mine = kind.group_of(env.rank)
    if mine is not None:
        group = handles[kind.members.index(mine)]
        sync = sync_fn(plan.device_kind)
        got, missing = measure_group(plan, mine, env.rank, group, device, dtype, sync)
        rows = [(kind.scope, *row, env.rank) for row in got]
    dist.barrier()
    return rows, missing


def _measure(plan: CommPlan, env: RankEnv) -> RankResult | None:
    import torch.distributed as dist

    device, dtype = setup_device(plan.device_kind, env.local_rank)
    topology = _topology(env)
    if os.environ.get(FAIL_RANK_ENV) == str(env.rank):
        raise RuntimeError(f"failure injected by {FAIL_RANK_ENV}={env.rank} (tests)")
    rows: list[tuple] = []
    missing: list[str] = []
    for kind in plan_groups(topology):
        got, lacks = _measure_kind(plan, env, kind, device, dtype)
        rows, missing = rows + got, missing + [m for m in lacks if m not in missing]
    gathered: list[Any] = [None] * env.world_size if env.rank == 0 else []
    dist.gather_object((rows, missing), gathered if env.rank == 0 else None, dst=0)
    if env.rank != 0:
        return None
    every_row = [row for part, _ in gathered for row in part]
    notes = sorted({note for _, part in gathered for note in part})
    return RankResult(every_row, notes, topology)


def _failure_report(store, env: RankEnv, exc: BaseException) -> RankFailure:
    """Record this rank's failure in the store and name the rank that failed first."""
    text = " ".join(str(exc).split())[:300] or type(exc).__name__
    own = f"{time.time():.6f}|{env.where()}: {type(exc).__name__}: {text}"
    try:
        store.set(str(env.rank), own)
        keys = [str(r) for r in range(env.world_size)]
        recorded = [store.get(k).decode() for k in keys if store.check([k])]
    except Exception:  # the store went with a failed rank: only this rank's view is left
        recorded = [own]
    first = min(recorded, key=lambda line: float(line.split("|", 1)[0]))
    return RankFailure(first.split("|", 1)[1], own=first == own)


def run_rank(plan: CommPlan, env: RankEnv) -> RankResult | None:
    """Measure as one rank of the job; rank 0 gets the result, the others None. A failure
    anywhere is a RankFailure naming the rank that failed first."""
    import torch.distributed as dist

    try:
        store = _connect(plan, env)
    except Exception as exc:
        raise RankFailure(
            f"{env.where()}: could not join the {env.world_size} ranks within "
            f"{plan.timeout_s:g} s ({' '.join(str(exc).split())[:200]}); a rank exited before "
            "joining or the rendezvous address is unreachable: see each node's output",
            own=True,
        ) from None
    _stop_on_sigterm()
    try:
        result = _measure(plan, env)
    except Exception as exc:
        raise _failure_report(store, env, exc) from None
    dist.destroy_process_group()
    return result


class _Terminated(RuntimeError):
    """torchrun's agent stopped this rank (SIGTERM) because a rank of the job failed."""


def _stop_on_sigterm() -> None:
    """When a worker fails, torchrun's agents stop the others with SIGTERM and wait before
    SIGKILL (torch.distributed.elastic `PContext.close`). Turn it into an exception, so a
    rank stopped before its own wait failed still reads the store and, on rank 0, writes the
    failing rank into the log."""
    if threading.current_thread() is not threading.main_thread():
        return

    def _raise(signum, frame):
        raise _Terminated("stopped by torchrun's agent (SIGTERM) after a rank failed")

    signal.signal(signal.SIGTERM, _raise)


def _main(plan_json: str, out_file: str) -> int:
    """A spawned rank: measure, rank 0 writes every rank's rows as JSON; 1 on a failure."""
    data = json.loads(plan_json)
    plan = CommPlan(**{**data, "sizes": tuple(data["sizes"])})
    try:
        result = run_rank(plan, RankEnv.from_env())
    except RankFailure as exc:
        sys.stderr.write(f"{exc}\n")
        return 1
    if result is not None:
        payload = {"rows": result.rows, "missing": result.missing}
        Path(out_file).write_text(json.dumps(payload), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1], sys.argv[2]))
