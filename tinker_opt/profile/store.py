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

import pandas as pd

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
)
from tinker_opt.profile.tinker_compat import read_tinker_folder

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
    blocks = read_blocks_csv(folder / BLOCKS_FILE)
    comm = read_comm_csv(folder / COMM_FILE) if (folder / COMM_FILE).exists() else empty_comm()
    meta = read_meta(folder)
    return ProfiledData(path=folder, blocks=blocks, comm=comm, meta=meta)


def _read_csv(path: Path, required: tuple[str, ...], what: str) -> pd.DataFrame:
    if not path.exists():
        raise ProfileDataError(
            f"{path} is missing: the profile folder lacks its {what} table; re-run `tinker-opt profile`"
        )
    try:
        frame = pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise ProfileDataError(
            f"{path} is not a readable CSV ({str(exc).splitlines()[0]}); re-run `tinker-opt profile`"
        ) from None
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise ProfileDataError(
            f"{path} lacks column(s) {missing}; it is not a {what} table of this tool"
        )
    return frame


def read_blocks_csv(path: Path) -> pd.DataFrame:
    """Read and check blocks.csv; returns the `ok` rows with every BLOCK_COLUMNS column."""
    required = tuple(c for c in BLOCK_COLUMNS if c not in OPTIONAL_BLOCK_COLUMNS)
    frame = _read_csv(path, required, "blocks")
    for column, default in OPTIONAL_BLOCK_COLUMNS.items():
        if column not in frame.columns:
            frame[column] = default
    frame["status"] = frame["status"].fillna("ok").astype(str)
    frame = frame[frame["status"] == "ok"].copy()
    frame["etp"] = frame["etp"].where(frame["etp"].notna(), frame["tp"].where(frame["ep"] > 1, 1))
    frame["selective_activation_bytes"] = frame["selective_activation_bytes"].where(
        frame["selective_activation_bytes"].notna(), frame["activation_bytes"]
    )
    numeric = [c for c in BLOCK_COLUMNS if c not in ("block", "status")]
    for column in numeric:
        values = pd.to_numeric(frame[column], errors="coerce")
        if values.isna().any():
            row = int(values.isna().idxmax()) + 2
            raise ProfileDataError(
                f"{path} line {row}: column '{column}' is not a number; "
                "the file is corrupt, re-run `tinker-opt profile`"
            )
        frame[column] = values
    frame["sp"] = frame["sp"].astype(int)
    unknown = sorted(set(frame["block"]) - set(BLOCK_NAMES))
    if unknown:
        raise ProfileDataError(
            f"{path}: unknown block name(s) {unknown}; expected {list(BLOCK_NAMES)}"
        )
    if frame.empty:
        raise ProfileDataError(
            f"{path} has no successfully measured rows; re-run `tinker-opt profile`"
        )
    return frame[list(BLOCK_COLUMNS)].reset_index(drop=True)


def read_comm_csv(path: Path) -> pd.DataFrame:
    frame = _read_csv(path, COMM_COLUMNS, "communication")
    bad_ops = sorted(set(frame["op"]) - set(COMM_OPS))
    if bad_ops:
        raise ProfileDataError(
            f"{path}: unknown collective(s) {bad_ops}; expected {list(COMM_OPS)}"
        )
    bad_scopes = sorted(set(frame["scope"]) - set(COMM_SCOPES))
    if bad_scopes:
        raise ProfileDataError(
            f"{path}: unknown scope(s) {bad_scopes}; expected {list(COMM_SCOPES)}"
        )
    for column in ("group_size", "bytes", "time_us"):
        values = pd.to_numeric(frame[column], errors="coerce")
        if values.isna().any():
            raise ProfileDataError(
                f"{path}: column '{column}' holds a non-number; the file is corrupt"
            )
        frame[column] = values
    return frame[list(COMM_COLUMNS)].reset_index(drop=True)


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
