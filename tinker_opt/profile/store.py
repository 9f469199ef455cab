"""The profiled-data folder: reading and writing `blocks.csv`, `comm.csv` and `meta.json`.

Format (README, "Output folders"): one `blocks.csv` row per (block, tp, sp, cp,
ep, etp, mbs) shape with integer microseconds and bytes, units in the column names; one
`comm.csv` row per measured collective; `meta.json` (profile/meta.py, a typed ProfileMeta).
This module needs no torch: `search` and `simulate` read profiles through it. A Tinker
`profiled_data.csv` folder is read by `tinker_compat` into the same tables.
"""

from __future__ import annotations

from io import StringIO
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from tinker_opt.columns import Columns, CsvError, is_missing, read_csv
from tinker_opt.comm_cost import COMM_OPS
from tinker_opt.errors import ProfileDataError
from tinker_opt.io_utils import write_text_atomic
from tinker_opt.profile.meta import META_FILE, read_meta, write_meta
from tinker_opt.profile.tables import (
    BLOCK_COLUMNS,
    BLOCK_KEY,
    BLOCK_MEASURES,
    BLOCK_NAMES,
    BLOCKS_FILE,
    COMM_COLUMNS,
    COMM_FILE,
    COMM_SCOPES,
    DEFAULT_PROFILE_ROOT,
    LOG_FILE,
    OPTIONAL_BLOCK_COLUMNS,
    ProfiledData,
    empty_comm,
    empty_comm_columns,
)
from tinker_opt.profile.tinker_compat import read_tinker_folder

if TYPE_CHECKING:
    import pandas as pd

__all__ = [  # the tables' names are re-exported: callers use `store` for the whole folder format
    "BLOCKS_FILE",
    "COMM_FILE",
    "META_FILE",
    "LOG_FILE",
    "DEFAULT_PROFILE_ROOT",
    "BLOCK_NAMES",
    "BLOCK_KEY",
    "BLOCK_MEASURES",
    "BLOCK_COLUMNS",
    "OPTIONAL_BLOCK_COLUMNS",
    "COMM_OPS",
    "COMM_SCOPES",
    "COMM_COLUMNS",
    "ProfiledData",
    "empty_comm",
    "resolve_profiled_data_path",
    "load_profiled_data",
    "read_blocks_csv",
    "read_comm_csv",
    "read_block_columns",
    "read_comm_columns",
    "empty_comm_columns",
    "read_meta",
    "frame_to_csv_text",
    "write_blocks_csv",
    "write_comm_csv",
    "write_meta",
]


def resolve_profiled_data_path(path: str | Path, root: Path = DEFAULT_PROFILE_ROOT) -> Path:
    """A bare folder name that does not exist here is looked up under ./profiled_data (as Tinker does)."""
    candidate = Path(path)
    if candidate.exists():
        return candidate
    if len(candidate.parts) == 1 and (root / candidate).exists():
        return root / candidate
    raise ProfileDataError(
        f"profiled-data path '{path}' does not exist (also looked in {root}/); "
        "run `tinker-opt profile SCRIPT` first or pass an existing folder"
    )


def load_profiled_data(path: str | Path) -> ProfiledData:
    """Read our folder format, or a Tinker `profiled_data.csv` folder."""
    folder = resolve_profiled_data_path(path)
    if not folder.is_dir():
        raise ProfileDataError(
            f"profiled-data path '{folder}' is not a folder; pass the profile folder"
        )
    if not (folder / BLOCKS_FILE).exists() and (folder / "profiled_data.csv").exists():
        return read_tinker_folder(folder)
    blocks = read_block_columns(folder / BLOCKS_FILE)
    comm = (
        read_comm_columns(folder / COMM_FILE)
        if (folder / COMM_FILE).exists()
        else empty_comm_columns()
    )
    meta = read_meta(folder)
    return ProfiledData(path=folder, blocks=blocks, comm=comm, meta=meta)


def _read_csv(path: Path, required: tuple[str, ...], what: str) -> Columns:
    if not path.exists():
        raise ProfileDataError(
            f"{path} is missing: the profile folder lacks its {what} table; re-run `tinker-opt profile`"
        )
    try:
        table = read_csv(path)
    except CsvError as exc:
        raise ProfileDataError(
            f"{path} is not a readable CSV ({str(exc).splitlines()[0]}); re-run `tinker-opt profile`"
        ) from None
    missing = [c for c in required if c not in table]
    if missing:
        raise ProfileDataError(
            f"{path} lacks column(s) {missing}; it is not a {what} table of this tool"
        )
    return table


def _numeric(values: np.ndarray) -> np.ndarray:
    """A column as numbers, NaN where a cell is not one (pandas' `to_numeric(errors="coerce")`):
    int64 when every value is an integer, else float64; bool and number columns as they are."""
    if values.dtype != object:
        return values
    numbers = []
    for value in values.tolist():
        if isinstance(value, str):
            try:
                value = int(value) if value.strip().lstrip("+-").isdecimal() else float(value)
            except ValueError:
                value = np.nan
        numbers.append(np.nan if value is None else value)
    if all(isinstance(v, int) and not isinstance(v, bool) for v in numbers):
        return np.array(numbers, dtype=np.int64)
    return np.array(numbers, dtype=np.float64)


def _filled(values: np.ndarray, fallback: np.ndarray) -> np.ndarray:
    """`values` with its missing cells (None, NaN) taken from `fallback` (pandas' `where(notna)`)."""
    missing = np.array([is_missing(v) for v in values.tolist()])
    if not missing.any():
        return values
    out = values.astype(object) if values.dtype != np.float64 else values.copy()
    out[missing] = fallback[missing]
    return out


def read_block_columns(path: Path) -> Columns:
    """Read and check blocks.csv; returns the `ok` rows with every BLOCK_COLUMNS column."""
    required = tuple(c for c in BLOCK_COLUMNS if c not in OPTIONAL_BLOCK_COLUMNS)
    table = _read_csv(path, required, "blocks")
    for column, default in OPTIONAL_BLOCK_COLUMNS.items():
        if column not in table:
            table = table.with_column(column, default)
    status = np.array(["ok" if is_missing(v) else str(v) for v in table["status"].tolist()])
    lines = np.flatnonzero(status == "ok") + 2  # the file's line of each row kept
    table = table.with_column("status", status.astype(object)).take(status == "ok")
    ep, tp = _numeric(table["ep"]), _numeric(table["tp"])
    table = table.with_column("etp", _filled(table["etp"], np.where(ep > 1, tp, 1)))
    table = table.with_column(
        "selective_activation_bytes",
        _filled(table["selective_activation_bytes"], table["activation_bytes"]),
    )
    for column in (c for c in BLOCK_COLUMNS if c not in ("block", "status")):
        values = _numeric(table[column])
        if values.dtype == np.float64 and np.isnan(values).any():
            row = int(lines[int(np.argmax(np.isnan(values)))])
            raise ProfileDataError(
                f"{path} line {row}: column '{column}' is not a number; "
                "the file is corrupt, re-run `tinker-opt profile`"
            )
        table = table.with_column(column, values)
    table = table.with_column("sp", table["sp"].astype(np.int64))
    unknown = sorted(set(table["block"].tolist()) - set(BLOCK_NAMES))
    if unknown:
        raise ProfileDataError(
            f"{path}: unknown block name(s) {unknown}; expected {list(BLOCK_NAMES)}"
        )
    if table.empty:
        raise ProfileDataError(
            f"{path} has no successfully measured rows; re-run `tinker-opt profile`"
        )
    return table.select(BLOCK_COLUMNS)


def read_blocks_csv(path: Path) -> pd.DataFrame:
    """read_block_columns as a DataFrame."""
    return read_block_columns(path).frame()


def read_comm_columns(path: Path) -> Columns:
    """Read and check comm.csv (the collectives and scopes this tool knows, numbers)."""
    table = _read_csv(path, COMM_COLUMNS, "communication")
    bad_ops = sorted(set(table["op"].tolist()) - set(COMM_OPS), key=str)
    if bad_ops:
        raise ProfileDataError(
            f"{path}: unknown collective(s) {bad_ops}; expected {list(COMM_OPS)}"
        )
    bad_scopes = sorted(set(table["scope"].tolist()) - set(COMM_SCOPES), key=str)
    if bad_scopes:
        raise ProfileDataError(
            f"{path}: unknown scope(s) {bad_scopes}; expected {list(COMM_SCOPES)}"
        )
    for column in ("group_size", "bytes", "time_us"):
        values = _numeric(table[column])
        if values.dtype == np.float64 and np.isnan(values).any():
            raise ProfileDataError(
                f"{path}: column '{column}' holds a non-number; the file is corrupt"
            )
        table = table.with_column(column, values)
    return table.select(COMM_COLUMNS)


def read_comm_csv(path: Path) -> pd.DataFrame:
    """read_comm_columns as a DataFrame."""
    return read_comm_columns(path).frame()


def frame_to_csv_text(frame: pd.DataFrame, columns: tuple[str, ...]) -> str:
    buffer = StringIO()
    frame.loc[:, list(columns)].to_csv(buffer, index=False, lineterminator="\n")
    return buffer.getvalue()


def write_blocks_csv(folder: Path, blocks: pd.DataFrame) -> Path:
    """Write blocks.csv atomically, rows sorted by shape."""
    ordered = blocks.sort_values(list(BLOCK_KEY), kind="stable")
    return write_text_atomic(folder / BLOCKS_FILE, frame_to_csv_text(ordered, BLOCK_COLUMNS))


def write_comm_csv(folder: Path, comm: pd.DataFrame) -> Path:
    ordered = comm.sort_values(["op", "scope", "group_size", "bytes"], kind="stable")
    return write_text_atomic(folder / COMM_FILE, frame_to_csv_text(ordered, COMM_COLUMNS))
