"""`inspect`, `apply` and `calibrate`: read a script, write a strategy into it, fit a hardware file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tinker_opt.errors import ConfigError
from tinker_opt.script.knob_report import knob_cell as inspect_cell
from tinker_opt.strategy import Strategy
from tinker_opt.verbs.common import num_nodes_for, read_json_object

__all__ = ["inspect_cell", "run_apply", "run_calibrate", "run_inspect"]


def run_inspect(
    script: Path, *, model_config: Path | None = None
) -> tuple[dict[str, Any], list[str]]:
    """What the reader takes from a launch script (inspect --json's object, with the device the
    script's environment names: script/device_hint.py) and its warnings."""
    from tinker_opt.script.device_hint import device_hint
    from tinker_opt.script.reader import inspect_dict, read_script

    info = read_script(script, model_config=model_config)
    data = inspect_dict(info)
    data["device"] = device_hint(info.text).to_dict()
    return data, list(info.warnings)


def run_apply(
    script: Path,
    strategy_file: Path,
    output: Path,
    *,
    num_nodes: int | None,
    num_npus_per_node: int | None,
    version: str | None,
    force: bool,
    model_config: Path | None = None,
) -> tuple[list[str], list[Path]]:
    """Write `script` with the strategy of `strategy_file` to `output` (an FSDP2 launch: and its tuned
    YAML copy `output` with suffix .yaml); returns the writer's warnings and the files written."""
    from tinker_opt.emit.precision_edit import precision_to_write
    from tinker_opt.emit.script_writer import apply_strategy, write_script
    from tinker_opt.script.noop_layers import strategy_to_write
    from tinker_opt.script.reader import read_script

    info = read_script(script, model_config=model_config)
    if output.exists() and not force and output.resolve() != script.resolve():
        raise ConfigError(f"output '{output}' exists; choose another -o path or pass --force")
    data = read_json_object(strategy_file)
    strategy = strategy_to_write(data, info)
    per_node = num_npus_per_node or info.train.nproc_per_node
    nodes = num_nodes or num_nodes_for(strategy, per_node)
    header = [f"tinker-opt apply: strategy {json.dumps(strategy.to_dict())}"]
    if info.fsdp2 is not None:
        return _apply_fsdp2(info, strategy, output, nodes, per_node, header)
    applied = apply_strategy(
        info.text,
        strategy,
        nnodes=nodes,
        nproc_per_node=per_node,
        version=version,
        header=header,
        precision=precision_to_write(data),
    )
    write_script(output, applied.text, source=script)
    return list(applied.warnings), [output]


def _apply_fsdp2(
    info, strategy: Strategy, output: Path, nodes: int, per_node: int, header: list[str]
) -> tuple[list[str], list[Path]]:
    """apply for an FSDP2 launch: the tuned script and its tuned YAML copy beside it."""
    from tinker_opt.emit.fsdp2_writer import apply_fsdp2, write_fsdp2_yaml
    from tinker_opt.emit.script_writer import write_script

    yaml_path = output.with_suffix(".yaml")
    applied = apply_fsdp2(
        info,
        strategy,
        nnodes=nodes,
        nproc_per_node=per_node,
        yaml_reference=yaml_path,
        header=header,
    )
    write_fsdp2_yaml(yaml_path, applied.yaml_text, original=info.fsdp2.yaml_path)
    write_script(output, applied.text, source=info.path)
    return list(applied.warnings), [output, yaml_path]


def run_calibrate(profile_dir: Path, hardware: str, output: Path) -> Path:
    """Fit a hardware description to a measured profile and write it as JSON to `output`."""
    from tinker_opt.hardware import load_hardware, write_hardware_json
    from tinker_opt.profile.calibrate import calibrate
    from tinker_opt.profile.store import load_profiled_data

    write_hardware_json(calibrate(load_profiled_data(profile_dir), load_hardware(hardware)), output)
    return output
