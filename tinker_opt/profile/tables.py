"""The profiled-data tables: file names, column names and the `ProfiledData` container.

Kept apart from `store` (which reads and writes the folder) so that the Tinker-folder reader
(`tinker_compat`) and `store` can both use them without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from tinker_opt.profile.meta import ProfileMeta
from tinker_opt.specs import ModelSpec

BLOCKS_FILE = "blocks.csv"
COMM_FILE = "comm.csv"
LOG_FILE = "profile.log"
DEFAULT_PROFILE_ROOT = Path("profiled_data")

BLOCK_NAMES = ("embedding", "layer", "layer.dense", "layer.moe", "final_norm", "head")
BLOCK_KEY = ("block", "tp", "sp", "cp", "ep", "etp", "mbs")
"""A shape: the block and the per-rank shard it was measured at. Dense blocks have ep = etp = 1."""
BLOCK_MEASURES = (
    "fwd_us",
    "bwd_us",
    "fwd_us_spread",
    "bwd_us_spread",
    "param_count",
    "expert_param_count",
    "weight_bytes",
    "input_bytes",
    "output_bytes",
    "activation_bytes",
    "transient_bytes",
    "selective_activation_bytes",
    "selective_recompute_us",
    "fwd_host_ops",
    "bwd_host_ops",
)
"""Per micro-batch on one rank. `expert_param_count` is the part of `param_count` in routed
experts (sharded by ep x etp, optimizer states by the expert-data-parallel group).
`selective_*`: activation bytes kept and extra forward time with Megatron's selective (core
attention) recompute. `*_host_ops`: operators the host issues per pass (the analytic trace's
aten ops; 0 where unknown: measured and Tinker rows), for the host-time term costs/fixed_costs.py."""
BLOCK_COLUMNS = BLOCK_KEY + BLOCK_MEASURES + ("status",)
"""`status` is `ok`, `oom` or the error that stopped the row; only `ok` rows are used."""
OPTIONAL_BLOCK_COLUMNS = {
    "etp": None,
    "expert_param_count": 0,
    "selective_activation_bytes": None,
    "selective_recompute_us": 0,
    "fwd_us_spread": 0,
    "bwd_us_spread": 0,
    "transient_bytes": 0,
    "fwd_host_ops": 0,
    "bwd_host_ops": 0,
    "status": "ok",
}
"""Columns a reader fills in when a (hand-made or converted) file lacks them; etp defaults to tp
for MoE rows and 1 otherwise, selective activation bytes to activation_bytes."""

COMM_SCOPES = ("intra_node", "inter_node")
COMM_COLUMNS = ("op", "group_size", "scope", "bytes", "time_us")


@dataclass(frozen=True)
class ProfiledData:
    """A loaded profiled-data folder: the two tables and the metadata."""

    path: Path
    blocks: pd.DataFrame
    """Columns BLOCK_COLUMNS; only rows with status `ok` are kept."""
    comm: pd.DataFrame
    """Columns COMM_COLUMNS (may be empty when only a hardware file gives bandwidths)."""
    meta: ProfileMeta = field(default_factory=ProfileMeta)

    @property
    def model(self) -> ModelSpec:
        return self.meta.model_spec(self.path)


def empty_comm() -> pd.DataFrame:
    return pd.DataFrame(
        {c: pd.Series(dtype="object" if c in ("op", "scope") else "float64") for c in COMM_COLUMNS}
    )
