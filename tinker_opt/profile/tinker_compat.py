"""Reading a Tinker profile folder (`profiled_data.csv`) into this tool's tables.

Tinker's layout (Ascend mstt repository, `profiler/tinker`, profiler 1.3.3): `profiled_data.csv` with the header
`config,block_name,forward-compute,backward_compute,input_size,output_size,weights,activations,
fwd_reserved,bwd_reserved`, `config` = `<name>_<size>_tp<T>_sp<0|1>_ep<E>_mbs<B>_algo<k>`, block
names `embedding, transformer_block, final_norm, post_process`, times in microseconds, sizes in
MiB per rank, groups separated by empty rows; `model_info_seq<S>.json` (seq_length, fp16, bf16,
num_layers); `VERSION_*.json` (the profile arguments); `p2p_intra_node.csv` (row 1: sizes in MB,
row 2: bandwidth in GB/s). No torch here: `search` reads these folders.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pandas as pd

from tinker_opt.errors import ProfileDataError
from tinker_opt.profile.meta import ProfileMeta
from tinker_opt.profile.tables import BLOCK_COLUMNS, COMM_COLUMNS, ProfiledData, empty_comm

TINKER_FILE = "profiled_data.csv"
P2P_FILE = "p2p_intra_node.csv"
MIB = 2**20
TINKER_COLUMNS = ("config", "block_name", "forward-compute", "backward_compute", "input_size", "output_size",
                  "weights", "activations", "fwd_reserved", "bwd_reserved")
BLOCK_NAMES = {"embedding": "embedding", "transformer_block": "layer", "final_norm": "final_norm",
               "post_process": "head"}
CONFIG_PATTERN = re.compile(r"^(?P<prefix>.+)_tp(?P<tp>\d+)_sp(?P<sp>[01])_ep(?P<ep>\d+)_mbs(?P<mbs>\d+)_algo(?P<algo>\d+)$")


def parse_config(config: str) -> dict[str, Any]:
    """`llama2_7b_tp2_sp1_ep1_mbs4_algo0` -> prefix, tp, sp, ep, mbs."""
    match = CONFIG_PATTERN.match(config.strip())
    if match is None:
        raise ProfileDataError(f"Tinker config '{config}' is not <name>_<size>_tp<T>_sp<0|1>_ep<E>_mbs<B>_algo<k>")
    parsed = {k: int(v) for k, v in match.groupdict().items() if k != "prefix"}
    return {"prefix": match["prefix"], **parsed}


def read_model_info(folder: Path) -> dict[str, Any]:
    """The first model_info_seq<S>.json, {} when there is none."""
    for path in sorted(folder.glob("model_info_seq*.json")):
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ProfileDataError(f"{path} is not valid JSON ({exc.msg} at line {exc.lineno})") from None
    return {}


def bytes_per_weight(model_info: dict[str, Any]) -> int:
    return 2 if model_info.get("bf16") or model_info.get("fp16") or not model_info else 4


def _mib(value: float) -> int:
    return int(round(float(value) * MIB))


def _block_row(record: dict[str, Any], weight_size: int, path: Path) -> dict[str, Any]:
    config = parse_config(str(record["config"]))
    if record["block_name"] not in BLOCK_NAMES:
        raise ProfileDataError(f"{path}: unknown Tinker block '{record['block_name']}'; expected {list(BLOCK_NAMES)}")
    weight_bytes = _mib(record["weights"])
    tp, ep = config["tp"], config["ep"]
    return {
        "block": BLOCK_NAMES[record["block_name"]], "tp": tp, "sp": config["sp"], "cp": 1, "ep": ep,
        "etp": tp if ep > 1 else 1, "mbs": config["mbs"],
        "fwd_us": float(record["forward-compute"]), "bwd_us": float(record["backward_compute"]),
        "fwd_us_spread": 0, "bwd_us_spread": 0,
        "param_count": weight_bytes // weight_size, "expert_param_count": 0, "weight_bytes": weight_bytes,
        "input_bytes": _mib(record["input_size"]), "output_bytes": _mib(record["output_size"]),
        "activation_bytes": _mib(record["activations"]),
        # Tinker's reserved memory of the forward and of the backward: the larger one is the transient peak.
        "transient_bytes": max(_mib(record["fwd_reserved"]), _mib(record["bwd_reserved"])),
        "selective_activation_bytes": _mib(record["activations"]), "selective_recompute_us": 0, "status": "ok",
    }


def read_tinker_blocks(path: Path, weight_size: int = 2) -> pd.DataFrame:
    """profiled_data.csv as blocks.csv rows (MiB -> bytes; one layer per config is `layer`)."""
    try:
        frame = pd.read_csv(path, skip_blank_lines=True)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise ProfileDataError(f"{path} is not a readable Tinker CSV ({str(exc).splitlines()[0]})") from None
    missing = [c for c in TINKER_COLUMNS if c not in frame.columns]
    if missing:
        raise ProfileDataError(f"{path} lacks Tinker column(s) {missing}")
    frame = frame.dropna(subset=["config", "block_name"])
    try:
        rows = [_block_row(r, weight_size, path) for r in frame.to_dict("records")]
    except (TypeError, ValueError) as exc:
        raise ProfileDataError(f"{path}: a Tinker row holds a non-number ({exc})") from None
    if not rows:
        raise ProfileDataError(f"{path} has no profiled rows")
    blocks = pd.DataFrame(rows, columns=list(BLOCK_COLUMNS))
    return blocks.drop_duplicates(subset=["block", "tp", "sp", "cp", "ep", "etp", "mbs"], keep="last").reset_index(drop=True)


def read_p2p(path: Path) -> pd.DataFrame:
    """p2p_intra_node.csv (sizes in MB = MiB, bandwidths in GB/s) as send_recv comm rows."""
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if len(lines) < 2:
        raise ProfileDataError(f"{path}: expected a row of sizes (MB) and a row of bandwidths (GB/s)")
    try:
        sizes_mb = [float(v) for v in lines[0].split(",") if v.strip()]
        bandwidths_gbs = [float(v) for v in lines[1].split(",") if v.strip()]
    except ValueError:
        raise ProfileDataError(f"{path}: sizes and bandwidths must be numbers") from None
    rows = [("send_recv", 2, "intra_node", int(mb * MIB), round(mb * MIB / (gbs * 1e3), 3))  # bytes / (GB/s) in us
            for mb, gbs in zip(sizes_mb, bandwidths_gbs) if gbs > 0]
    return pd.DataFrame(rows, columns=list(COMM_COLUMNS)) if rows else empty_comm()


def _version_files(folder: Path) -> dict[str, Any]:
    out = {}
    for path in sorted(folder.glob("VERSION_*.json")):
        try:
            out[path.name] = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            out[path.name] = None
    return out


def read_tinker_folder(folder: str | Path) -> ProfiledData:
    """A Tinker profile folder as ProfiledData. Tinker does not record the model's shape, so the
    meta has no 'model' entry: the caller takes it from the launch script."""
    folder = Path(folder)
    if not (folder / TINKER_FILE).exists():
        raise ProfileDataError(f"{folder} has no {TINKER_FILE}; it is not a Tinker profile folder")
    model_info = read_model_info(folder)
    blocks = read_tinker_blocks(folder / TINKER_FILE, bytes_per_weight(model_info))
    comm = read_p2p(folder / P2P_FILE) if (folder / P2P_FILE).exists() else empty_comm()
    first_config = parse_config(pd.read_csv(folder / TINKER_FILE).dropna(subset=["config"])["config"].iloc[0])
    meta = ProfileMeta(source="tinker", extra={
        "tinker_config_prefix": first_config["prefix"], "model_info": model_info,
        "seq_length": model_info.get("seq_length"), "num_layers": model_info.get("num_layers"),
        "version_files": _version_files(folder)})
    return ProfiledData(path=folder, blocks=blocks, comm=comm, meta=meta)
