"""Reading a Tinker profile folder (`profiled_data.csv`) into this tool's tables, with Tinker's conventions.

Tinker's layout (reference/tinker-compat.md; Ascend mstt `profiler/tinker`, profiler 1.3.3):

* `profiled_data.csv`, header `config,block_name,forward-compute,backward_compute,input_size,
  output_size,weights,activations,fwd_reserved,bwd_reserved`; `config` =
  `<name>_<size>_tp<T>_sp<0|1>_ep<E>_mbs<B>_algo<k>` (`ProfileArgs.file_name` in
  `tinker/profiler/profile_classes.py`); blocks `embedding, transformer_block, final_norm,
  post_process`; times in microseconds per micro-batch, sizes in MiB per rank (`byte_to_mb`,
  2^20); `weights` = parameters x params_dtype bytes; groups separated by empty rows; a block that
  ran out of memory holds Tinker's EXCEPTIONAL_VALUE 1e9 (`tinker/profiler/block_profiler.py`).
* `model_info_seq<S>.json` (`seq_length, fp16, bf16, num_layers`; num_layers 1 means "profiled
  with a shrunk script", which Tinker's `load_infos` ignores as well).
* `VERSION_TinkerProfiler-<v>.json` (`dump_task_info` in `tinker/version.py`): `version_profiler`,
  `task_time` and the profile arguments (`model_name`, `model_size`, `pretrain_script_path`,
  `version` = the framework); older files hold only `version` (the profiler).
* `p2p_intra_node.csv` (row 1 sizes in MB, row 2 bandwidths in GB/s).

Conventions applied (each one also written to `meta.notes`, profile.log style, so that a
search can record them):

* Tinker runs every block on real tp (x ep) ranks with the framework's own layers, so a block's
  forward / backward time already includes its TP / SP collectives (and, with ep > 1, the expert
  all-to-all). `meta.times_include_tp_comm` (and `times_include_ep_comm`) is True: the cost model
  must not add those collectives again (`tinker_opt.costs.inputs.ProfileConventions`).
* The p2p table is written by Tinker's p2p step without measuring anything: it is kept in
  `meta.extra["tinker_p2p_table"]` for reference but never becomes comm.csv rows, so links come from the
  hardware description or CommModel's documented defaults (which warn).
* The attention mask: Tinker's search adds seq^2 bytes (a bool mask) to every transformer block
  (`TinkerCostModel.init_blocks`, `BlockArgs.block_mem`); it is one tensor shared by the layers,
  recorded once as `meta.attention_mask_bytes`.
* Labels (`model_name`, `model_size`) come from the VERSION file; its framework version is kept
  as `tinker_framework_version` (informational: the script given to search decides the flags).
No torch here: `search` reads these folders.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from tinker_opt.columns import Columns, CsvError, is_missing, read_csv
from tinker_opt.errors import ConfigError, ProfileDataError
from tinker_opt.profile.meta import ProfileMeta
from tinker_opt.profile.tables import BLOCK_COLUMNS, ProfiledData, empty_comm_columns

TINKER_FILE = "profiled_data.csv"
P2P_FILE = "p2p_intra_node.csv"
MIB = 2**20
TINKER_COLUMNS = (
    "config",
    "block_name",
    "forward-compute",
    "backward_compute",
    "input_size",
    "output_size",
    "weights",
    "activations",
    "fwd_reserved",
    "bwd_reserved",
)
BLOCK_NAMES = {
    "embedding": "embedding",
    "transformer_block": "layer",
    "final_norm": "final_norm",
    "post_process": "head",
}
CONFIG_PATTERN = re.compile(
    r"^(?P<prefix>.+)_tp(?P<tp>\d+)_sp(?P<sp>[01])_ep(?P<ep>\d+)_mbs(?P<mbs>\d+)_algo(?P<algo>\d+)$"
)
EXCEPTIONAL_US = 1e9
"""Tinker's EXCEPTIONAL_VALUE: the time it writes for a block that failed (out of memory)."""
MASK_BYTES_PER_ELEMENT = 1
"""The causal mask is a bool tensor [seq, seq] (Tinker: seq^2 / 2^20 MB)."""


def parse_config(config: str) -> dict[str, Any]:
    """`llama2_7b_tp2_sp1_ep1_mbs4_algo0` -> prefix, tp, sp, ep, mbs."""
    match = CONFIG_PATTERN.match(config.strip())
    if match is None:
        raise ProfileDataError(
            f"Tinker config '{config}' is not <name>_<size>_tp<T>_sp<0|1>_ep<E>_mbs<B>_algo<k>"
        )
    parsed = {k: int(v) for k, v in match.groupdict().items() if k != "prefix"}
    return {"prefix": match["prefix"], **parsed}


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ProfileDataError(
            f"{path} is not valid JSON ({exc.msg} at line {exc.lineno})"
        ) from None
    if not isinstance(data, dict):
        raise ProfileDataError(f"{path} must hold a JSON object")
    return data


def read_model_info(folder: Path) -> dict[str, Any]:
    """The first model_info_seq<S>.json, {} when there is none."""
    paths = sorted(folder.glob("model_info_seq*.json"))
    return _read_json(paths[0]) if paths else {}


def read_version_info(folder: Path) -> tuple[str | None, dict[str, Any]]:
    """(file name, contents) of the first VERSION_*.json, (None, {}) when there is none."""
    paths = sorted(folder.glob("VERSION_*.json"))
    return (paths[0].name, _read_json(paths[0])) if paths else (None, {})


def bytes_per_weight(model_info: dict[str, Any]) -> int:
    return 2 if model_info.get("bf16") or model_info.get("fp16") or not model_info else 4


def _mib(value: float) -> int:
    return round(float(value) * MIB)


def _block_row(record: dict[str, Any], weight_size: int, path: Path) -> dict[str, Any]:
    config = parse_config(str(record["config"]))
    if record["block_name"] not in BLOCK_NAMES:
        raise ProfileDataError(
            f"{path}: unknown Tinker block '{record['block_name']}'; expected {list(BLOCK_NAMES)}"
        )
    fwd_us, bwd_us = float(record["forward-compute"]), float(record["backward_compute"])
    failed = max(fwd_us, bwd_us) >= EXCEPTIONAL_US
    weight_bytes = _mib(record["weights"])
    tp, ep = config["tp"], config["ep"]
    return {
        "block": BLOCK_NAMES[record["block_name"]],
        "tp": tp,
        "sp": config["sp"],
        "cp": 1,
        "ep": ep,
        "etp": tp if ep > 1 else 1,
        "mbs": config["mbs"],
        "fwd_us": fwd_us,
        "bwd_us": bwd_us,
        "fwd_us_spread": 0,
        "bwd_us_spread": 0,
        "param_count": weight_bytes // weight_size,
        "expert_param_count": 0,
        "weight_bytes": weight_bytes,
        "input_bytes": _mib(record["input_size"]),
        "output_bytes": _mib(record["output_size"]),
        "activation_bytes": 0 if failed else _mib(record["activations"]),
        # Tinker's reserved memory of the forward and of the backward: the larger one is the transient peak.
        "transient_bytes": 0
        if failed
        else max(_mib(record["fwd_reserved"]), _mib(record["bwd_reserved"])),
        "selective_activation_bytes": 0 if failed else _mib(record["activations"]),
        "selective_recompute_us": 0,
        "status": "oom" if failed else "ok",
    }


def read_tinker_rows(path: Path, weight_size: int = 2) -> tuple[Columns, str]:
    """Every row of profiled_data.csv as blocks.csv columns, failed (1e9) rows with status `oom`,
    and the `<name>_<size>` prefix of the first config."""
    try:
        frame = read_csv(path, skip_blank_lines=True)
    except CsvError as exc:
        raise ProfileDataError(
            f"{path} is not a readable Tinker CSV ({str(exc).splitlines()[0]})"
        ) from None
    missing = [c for c in TINKER_COLUMNS if c not in frame]
    if missing:
        raise ProfileDataError(f"{path} lacks Tinker column(s) {missing}")
    names = frame.names
    records = [
        dict(zip(names, values, strict=True))
        for values in zip(*(frame[name].tolist() for name in names), strict=True)
    ]
    records = [r for r in records if not (is_missing(r["config"]) or is_missing(r["block_name"]))]
    try:
        rows = [_block_row(r, weight_size, path) for r in records]
    except (TypeError, ValueError) as exc:
        raise ProfileDataError(f"{path}: a Tinker row holds a non-number ({exc})") from None
    if not rows:
        raise ProfileDataError(f"{path} has no profiled rows")
    key = ("block", "tp", "sp", "cp", "ep", "etp", "mbs")
    last = {tuple(row[k] for k in key): i for i, row in enumerate(rows)}  # the last row of a shape
    kept = [row for i, row in enumerate(rows) if last[tuple(row[k] for k in key)] == i]
    # Tinker's block times ran on the device: the host's issue time is in them (no op counts).
    for row in kept:
        row["fwd_host_ops"] = row["bwd_host_ops"] = 0
    table = Columns.from_rows([[row[c] for c in BLOCK_COLUMNS] for row in kept], BLOCK_COLUMNS)
    return table, parse_config(str(records[0]["config"]))["prefix"]


def _measured(rows: Columns, path: Path) -> Columns:
    """Only the measured (`ok`) rows, as store.read_block_columns keeps them."""
    ok = rows.take(rows["status"] == "ok")
    if ok.empty:
        raise ProfileDataError(
            f"{path}: every Tinker row failed (time {EXCEPTIONAL_US:g} us = out of memory)"
        )
    return ok


def read_p2p(path: Path) -> dict[str, list[float]]:
    """p2p_intra_node.csv as {"sizes_mb": row 1, "bandwidths_gbs": row 2}; kept for reference only."""
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if len(lines) < 2:
        raise ProfileDataError(
            f"{path}: expected a row of sizes (MB) and a row of bandwidths (GB/s)"
        )
    try:
        sizes_mb = [float(v) for v in lines[0].split(",") if v.strip()]
        bandwidths_gbs = [float(v) for v in lines[1].split(",") if v.strip()]
    except ValueError:
        raise ProfileDataError(f"{path}: sizes and bandwidths must be numbers") from None
    return {"sizes_mb": sizes_mb, "bandwidths_gbs": bandwidths_gbs}


def _labels(version: dict[str, Any], prefix: str) -> tuple[str | None, str | None, str]:
    """(model_name, model_size, where from): the VERSION file's, else split from the config prefix."""
    name, size = version.get("model_name"), version.get("model_size")
    if name and size:
        return str(name), str(size), "the VERSION file"
    head, _, tail = prefix.rpartition("_")
    if head and tail:
        return str(name or head), str(size or tail), "the config prefix of profiled_data.csv"
    return (str(name) if name else None), (str(size) if size else None), "nowhere"


def _framework_version(version: dict[str, Any]) -> str | None:
    """The framework version of a 1.3 VERSION file (`version` next to `version_profiler`), if valid."""
    from tinker_opt.script.versions import MINDSPEED, parse_version

    value = version.get("version")
    if "version_profiler" not in version or value is None:
        return None
    try:
        parse_version(str(value), MINDSPEED)
    except ConfigError:
        return None
    return str(value)


def _version_meta(
    folder: Path, version_name: str | None, version: dict[str, Any], prefix: str, notes: list[str]
) -> dict[str, Any]:
    """Labels, framework version and script path from the VERSION file, each with a note."""
    name, size, source = _labels(version, prefix)
    meta: dict[str, Any] = {"model_name": name, "model_size": size}
    if version_name is None:
        notes.append(f"no VERSION_*.json in {folder}: labels taken from {source}")
    else:
        profiler = version.get("version_profiler") or version.get("version")
        notes.append(f"{version_name}: profiled by {profiler}; labels {name}-{size} from {source}")
    framework = _framework_version(version)
    if framework is not None:
        # Informational only: the launch script given to search may be another framework's
        # (Megatron-LM), whose flags the script itself tells apart; `--version` sets it for the writer.
        meta["tinker_framework_version"] = framework
        notes.append(
            f"{version_name} was profiled on MindSpeed-LLM / ModelLink version {framework}; scripts are "
            "written for the version the launch script shows (pass --version to fix it)"
        )
    script = version.get("pretrain_script_path")
    if script and Path(script).is_file():
        meta["script_path"] = str(Path(script).resolve())
        notes.append(
            f"launch script {script} from {version_name} (the script given on the command line wins)"
        )
    elif script:
        notes.append(
            f"{version_name} names the launch script {script}, which is not here: pass the script"
        )
    return meta


def _model_info_meta(model_info: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    """seq_length, num_layers (None when Tinker profiled a shrunk 1-layer script) and the mask bytes."""
    seq = model_info.get("seq_length")
    layers = model_info.get("num_layers")
    if layers == 1:
        notes.append(
            "model_info num_layers 1 is the shrunk profiling script's, not the model's: ignored"
        )
        layers = None
    if seq is None:
        notes.append(
            "no model_info_seq*.json: sequence length and layer count come from the launch script"
        )
        return {"seq_length": None, "num_layers": layers, "attention_mask_bytes": None}
    mask = MASK_BYTES_PER_ELEMENT * int(seq) ** 2
    notes.append(
        f"attention mask {mask / MIB:.1f} MiB (seq {seq}^2 x 1 B): Tinker adds it to every layer; "
        "it is one tensor per stage, recorded once as attention_mask_bytes"
    )
    return {"seq_length": int(seq), "num_layers": layers, "attention_mask_bytes": mask}


def _p2p_meta(folder: Path, notes: list[str]) -> dict[str, Any]:
    if not (folder / P2P_FILE).exists():
        return {}
    table = read_p2p(folder / P2P_FILE)
    notes.append(
        f"{P2P_FILE} is the fixed table Tinker's p2p step writes without measuring: not used as a "
        "link; communication from --hardware or the documented default links"
    )
    return {"tinker_p2p_table": table}


def read_tinker_folder(folder: str | Path) -> ProfiledData:
    """A Tinker profile folder as ProfiledData with Tinker's conventions (module docstring).

    Tinker does not record the model's shape, so the meta has no 'model' entry: the caller takes it
    from the launch script. `meta.notes` lists, one line each, what was assumed about the folder.
    """
    folder = Path(folder)
    if not (folder / TINKER_FILE).exists():
        raise ProfileDataError(f"{folder} has no {TINKER_FILE}; it is not a Tinker profile folder")
    model_info = read_model_info(folder)
    version_name, version = read_version_info(folder)
    rows, prefix = read_tinker_rows(folder / TINKER_FILE, bytes_per_weight(model_info))
    blocks = _measured(rows, folder / TINKER_FILE)
    notes = [
        f"Tinker profile folder {folder}: {len(blocks)} measured block rows in {TINKER_FILE}",
        "block times include the TP/SP collectives (and the expert all-to-all with ep > 1): Tinker "
        "measures each block on real tp x ep ranks, so these are not added again",
    ]
    failed = np.flatnonzero(rows["status"] != "ok")
    if failed.size:
        shapes = sorted(
            {
                f"tp{rows['tp'][i]}_sp{rows['sp'][i]}_ep{rows['ep'][i]}_mbs{rows['mbs'][i]}"
                for i in failed
            }
        )
        notes.append(
            f"{len(failed)} rows failed in Tinker's profiling (time {EXCEPTIONAL_US:g} us, out of memory), "
            f"left out: {', '.join(shapes)}"
        )
    meta = {
        "source": "tinker",
        "tinker_config_prefix": prefix,
        "model_info": model_info,
        "times_include_tp_comm": True,
        "times_include_ep_comm": True,
        "comm_source": "none in the folder (Tinker's p2p table is not a measurement)",
        "version_file": version_name,
        "version_info": version,
    }
    meta.update(_model_info_meta(model_info, notes))
    meta.update(_version_meta(folder, version_name, version, prefix, notes))
    meta.update(_p2p_meta(folder, notes))
    meta["notes"] = notes
    return ProfiledData(
        path=folder, blocks=blocks, comm=empty_comm_columns(), meta=ProfileMeta.from_dict(meta)
    )
