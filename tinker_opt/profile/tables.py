"""The profiled-data tables: file names, column names and the `ProfiledData` container.

Kept apart from `store` (which reads and writes the folder) so that the Tinker-folder reader
(`tinker_compat`) and `store` can both use them without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from tinker_opt.columns import Columns
from tinker_opt.profile.meta import ProfileMeta
from tinker_opt.specs import ModelSpec

if TYPE_CHECKING:
    import pandas as pd

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


class _Table:
    """A ProfiledData table (a dataclass field): kept as it was given (Columns from the folder's
    readers, a DataFrame from the profiler or a test), read as a DataFrame, converted (and pandas
    imported) on the first such read; `ProfiledData.columns` reads it as Columns."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.slot = f"_{name}"

    def __get__(self, obj: ProfiledData | None, owner: type | None = None) -> pd.DataFrame:
        if obj is None:
            raise AttributeError(self.slot)  # the dataclass field has no default
        table = obj.__dict__[self.slot]
        if isinstance(table, Columns):
            table = obj.__dict__[self.slot] = table.frame()
        return table

    def __set__(self, obj: ProfiledData, value: Columns | pd.DataFrame) -> None:
        obj.__dict__[self.slot] = value


@dataclass(frozen=True)
class ProfiledData:
    """A loaded profiled-data folder: the two tables and the metadata. The search reads the
    tables as Columns (`columns`) and never imports pandas (issue 30); `blocks` and `comm` are
    the DataFrames the profile, calibrate and report verbs use (`_Table`)."""

    path: Path
    blocks: _Table = _Table()
    """Columns BLOCK_COLUMNS; only rows with status `ok` are kept."""
    comm: _Table = _Table()
    """Columns COMM_COLUMNS (may be empty when only a hardware file gives bandwidths)."""
    meta: ProfileMeta = field(default_factory=ProfileMeta)

    def columns(self, name: str) -> Columns:
        """The table `name` (blocks, comm) as Columns, as it was given or from its DataFrame."""
        return Columns.of(self.__dict__[f"_{name}"])

    def with_comm(self, comm: Columns | pd.DataFrame) -> ProfiledData:
        """This folder with another comm table (one computed from a hardware description); the
        blocks as they are (`dataclasses.replace` would read them as a DataFrame)."""
        return ProfiledData(self.path, self.__dict__["_blocks"], comm, self.meta)

    @property
    def model(self) -> ModelSpec:
        return self.meta.model_spec(self.path)


def empty_comm_columns() -> Columns:
    """A comm table without rows, typed as `empty_comm`'s."""
    return Columns(
        {
            c: np.array([], dtype=object if c in ("op", "scope") else np.float64)
            for c in COMM_COLUMNS
        }
    )


def empty_comm() -> pd.DataFrame:
    return empty_comm_columns().frame()
