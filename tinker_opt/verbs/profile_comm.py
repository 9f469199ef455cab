"""`profile-comm`: time the collectives of the user's cluster, under torchrun or on this node.

Under torchrun (its environment names the rank) every rank measures (profile/comm_dist.py) and
rank 0 writes the folder; without torchrun the local node's devices are measured by processes of
our own (profile/comm.py measure_comm), as `profile` does. The folder holds `comm.csv` (intra- and
inter-node rows, the curves the cost model reads; a profiled-data folder given as --output-dir
has its comm.csv replaced, and search then prices the cluster's own links), `comm_world.csv`
(the whole-world group, several ranks a node: checked by `calibrate --comm`), `meta.json`
(written through profile/meta.py: `comm_source` and the `comm_profile` entry, with the topology
the ranks saw) and `profile-comm.log`.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from tinker_opt.config import CommSettings
from tinker_opt.errors import ConfigError

MIB = 1024 * 1024
WORLD_FILE = "comm_world.csv"
LOG_NAME = "profile-comm.log"


@dataclass(frozen=True)
class CommProfileOutcome:
    """What one process of the run reports: rank 0 the folder, every rank a failure it must say."""

    folder: Path | None = None
    """The folder written (rank 0 of a run that succeeded), else None."""
    rows: int = 0
    notes: tuple[str, ...] = ()
    error: str | None = None
    """Why the run stopped, naming the rank that failed first."""
    say_error: bool = False
    """This process prints `error` (the failed rank, or rank 0 when it found no other's)."""


def _plan(settings: CommSettings, device):
    from tinker_opt.profile.comm import CommPlan, comm_sizes

    if settings.warmup < 0:
        raise ConfigError(f"profile-comm: --warmup must be >= 0, got {settings.warmup}")
    default_max = 16 * MIB if device.kind == "cpu" else 256 * MIB
    return CommPlan(
        backend=device.comm_backend,
        device_kind=device.kind,
        sizes=comm_sizes(settings.max_bytes or default_max),
        warmup=settings.warmup,
        repeats=settings.repeats,
        timeout_s=settings.timeout,
    )


def run_profile_comm(settings: CommSettings) -> CommProfileOutcome:
    """Measure as torchrun's rank (RANK set) or with this node's own processes."""
    from tinker_opt.profile.device import detect_device

    if settings.device == "analytic":
        raise ConfigError("profile-comm measures devices: --device npu | cuda | cpu | auto")
    device = detect_device(settings.device)
    plan = _plan(settings, device)
    folder = Path(settings.output_dir)
    started = time.perf_counter()
    if "RANK" not in os.environ:
        return _single_node(settings, plan, device, folder, started)
    from tinker_opt.profile.comm_dist import RankEnv, RankFailure, run_rank

    env = RankEnv.from_env()
    try:
        result = run_rank(plan, env)
    except RankFailure as exc:
        if env.rank == 0:
            _write_log(folder, [f"profile-comm stopped: {exc}"])
        return CommProfileOutcome(error=str(exc), say_error=exc.own)
    if result is None:
        return CommProfileOutcome()
    return _write(folder, plan, result.rows, result.missing, result.topology.to_dict(), started)


def _single_node(settings: CommSettings, plan, device, folder: Path, started: float):
    """Without torchrun: `--devices` processes on this node (default every device, 2 on the CPU)."""
    from tinker_opt.profile.comm import measure_comm

    procs = settings.devices or (device.count if device.kind != "cpu" else 2)
    frame, notes = measure_comm(
        backend=plan.backend,
        device_kind=plan.device_kind,
        num_procs=procs,
        max_bytes=max(plan.sizes),
        warmup=plan.warmup,
        repeats=plan.repeats,
        timeout_s=plan.timeout_s,
    )
    failed = [note for note in notes if note.startswith("communication measurement")]
    if frame.empty:
        return CommProfileOutcome(error=(failed or notes or ["no rows"])[0], say_error=True)
    rows = [(r.scope, r.op, r.group_size, r.bytes, r.time_us, 0) for r in frame.itertuples()]
    topology: dict[str, Any] = {"num_nodes": 1, "devices_per_node": procs, "world_size": procs}
    topology["hostnames"] = [socket.gethostname()]
    return _write(folder, plan, rows, notes, topology, started)


def _write(folder: Path, plan, rows, missing, topology: dict[str, Any], started: float):
    """Rank 0: comm.csv, comm_world.csv, meta.json (through ProfileMeta) and the log."""
    from tinker_opt.io_utils import write_text_atomic
    from tinker_opt.profile.comm import rows_frame
    from tinker_opt.profile.comm_groups import WORLD_SCOPE
    from tinker_opt.profile.store import COMM_COLUMNS, frame_to_csv_text, write_comm_csv

    folder.mkdir(parents=True, exist_ok=True)
    comm = rows_frame([r for r in rows if r[0] != WORLD_SCOPE])
    world = rows_frame(rows, scope=WORLD_SCOPE)
    write_comm_csv(folder, comm)
    if not world.empty:
        write_text_atomic(folder / WORLD_FILE, frame_to_csv_text(world, COMM_COLUMNS))
    seconds = round(time.perf_counter() - started, 1)
    entry = {
        "topology": topology,
        "backend": plan.backend,
        "device": plan.device_kind,
        "sizes_bytes": list(plan.sizes),
        "warmup": plan.warmup,
        "repeats": plan.repeats,
        "missing": list(missing),
        "seconds": seconds,
    }
    _write_meta(folder, entry)
    lines = [
        f"profile-comm: {topology['num_nodes']} node(s) x {topology['devices_per_node']} "
        f"device(s), {plan.backend}, hosts {topology['hostnames']}",
        f"comm.csv: {len(comm)} rows ({', '.join(sorted(set(comm['scope'])))}); "
        f"{WORLD_FILE}: {len(world)} rows; {seconds} s",
        *(f"not measured: {note}" for note in missing),
    ]
    _write_log(folder, lines)
    return CommProfileOutcome(folder=folder, rows=len(comm) + len(world), notes=tuple(missing))


def _write_meta(folder: Path, entry: dict[str, Any]) -> None:
    """meta.json: a profile folder's own, with the communication entry; else a new one."""
    from tinker_opt.profile.meta import META_FILE, ProfileMeta, read_meta, write_meta

    meta = read_meta(folder) if (folder / META_FILE).exists() else ProfileMeta(tool="tinker-opt")
    topology = entry["topology"]
    source = (
        f"measured by profile-comm ({entry['backend']}, {topology['num_nodes']} node(s) x "
        f"{topology['devices_per_node']} devices)"
    )
    extra = {**meta.extra, "comm_profile": entry}
    write_meta(folder, dataclasses.replace(meta, comm_source=source, extra=extra))


def _write_log(folder: Path, lines: list[str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now().isoformat(timespec="seconds")
    with open(folder / LOG_NAME, "a", encoding="utf-8") as log:
        log.writelines(f"{stamp} {line}\n" for line in lines)
