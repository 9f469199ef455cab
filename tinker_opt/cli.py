"""Command line: profile | search | simulate | all, plus inspect, apply and calibrate.

Options are kebab-case and also accept Tinker's snake_case spellings (`--global_batch_size`,
`--memory_limit`, `--simu_tp`, ...). Every option defaults to "not given" here so that
config.resolve can apply the precedence command line > config file > built-in defaults; the
defaults shown in --help come from config.py. A TinkerError becomes one line on stderr and exit 2.
"""

from __future__ import annotations

import json
import sys
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from tinker_opt import config
from tinker_opt.errors import ConfigError, TinkerError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  context_settings={"help_option_names": ["-h", "--help"]},
                  help="Find the fastest parallel strategy for a Megatron-LM / MindSpeed-LLM launch script.")
console = Console()
err_console = Console(stderr=True, soft_wrap=True)


def _opt(section: str, key: str, *extra: str) -> Any:
    """An option named --kebab-case and Tinker's --snake_case, help text and default from config.py."""
    kebab, snake = "--" + key.replace("_", "-"), "--" + key
    names = [kebab] + ([snake] if snake != kebab else []) + list(extra)
    return typer.Option(None, *names, help=config.setting(section, key).help_text, show_default=False)


CONFIG_OPT = typer.Option(None, "--config-path", "--config_path", "--config",
                          help="JSON config with Tinker's profile / search / simulate sections.")
QUIET_OPT = typer.Option(False, "--quiet", "-q", help="Print only the result paths (for scripts).")
SCRIPT_ARG = typer.Argument(None, help="The training launch script (.sh).", show_default=False)


def _progress(quiet: bool) -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=err_console, disable=quiet, transient=False)


def _profile(values: dict[str, Any], quiet: bool) -> Path:
    from tinker_opt.pipeline import run_profile_step

    with _progress(quiet) as bar:
        task = bar.add_task("profiling blocks", total=None)

        def progress(done: int, total: int, label: str) -> None:
            bar.update(task, completed=done, total=total, description=f"profiling {label}")

        folder = run_profile_step(values, progress=progress, log=None)
    if not quiet:
        console.print(f"profiled data: [bold]{folder}[/bold]")
    return folder


def _search(values: dict[str, Any], quiet: bool) -> Path:
    from tinker_opt.emit.tables import strategies_table
    from tinker_opt.pipeline import RunLog, run_search_step

    log = RunLog(echo=None if quiet else lambda line: err_console.print(line, markup=False, highlight=False))
    with console.status(f"solving with {values['solver']}", spinner="dots") if not quiet else nullcontext():
        outcome = run_search_step(values, log=log)
    if quiet:  # the log was not echoed: still show the warnings, then only the path
        for warning in outcome.warnings:
            err_console.print(warning, markup=False, highlight=False)
        console.print(str(outcome.folder))
        return outcome.folder
    gap = "" if outcome.gap is None else f", gap {outcome.gap:.2%}"
    console.print(strategies_table(outcome.top, f"top strategies ({outcome.solver}: {outcome.status}{gap}, "
                                                f"{outcome.solve_time_s:.2f} s)"))
    console.print(f"results: [bold]{outcome.folder}[/bold]")
    return outcome.folder


MODEL_CONFIG_HELP = ("FSDP2 launches: the model's Hugging Face config.json, when model.model_name_or_path "
                     "is not on this machine.")


def _script(positional: Optional[Path], flag: Optional[str]) -> Optional[str]:
    if positional is not None and flag is not None and str(positional) != flag:
        raise ConfigError(f"two scripts given ('{positional}' and --pretrain-script-path '{flag}'); pass one")
    return str(positional) if positional is not None else flag


@app.command()
def profile(
    script: Optional[Path] = SCRIPT_ARG,
    pretrain_script_path: Optional[str] = _opt("profile", "pretrain_script_path"),
    model_name: Optional[str] = _opt("profile", "model_name"),
    model_size: Optional[str] = _opt("profile", "model_size"),
    version: Optional[str] = _opt("profile", "version"),
    max_npu: Optional[int] = _opt("profile", "max_npu"),
    max_ep: Optional[int] = _opt("profile", "max_ep"),
    max_mbs: Optional[int] = _opt("profile", "max_mbs"),
    prof_tp: Optional[str] = _opt("profile", "prof_tp"),
    prof_sp: Optional[str] = _opt("profile", "prof_sp"),
    save_path: Optional[str] = _opt("profile", "save_path"),
    prof_path: Optional[str] = _opt("profile", "prof_path"),
    task_id: Optional[str] = _opt("profile", "task_id"),
    is_full_tune: bool = typer.Option(False, "--is-full-tune", "--is_full_tune", help="Treat the script as a full fine-tune."),
    device: Optional[str] = _opt("profile", "device"),
    hardware: Optional[str] = _opt("profile", "hardware"),
    repeats: Optional[int] = _opt("profile", "repeats"),
    warmup: Optional[int] = _opt("profile", "warmup"),
    config_path: Optional[Path] = CONFIG_OPT,
    quiet: bool = QUIET_OPT,
) -> None:
    """Measure time and memory of every block and shard shape, and the collectives (profiled-data folder)."""
    given = {k: v for k, v in locals().items() if k not in ("script", "config_path", "quiet")}
    given["pretrain_script_path"] = _script(script, pretrain_script_path)
    given["is_full_tune"] = True if is_full_tune else None
    values = config.resolve("profile", given, config.load_config_file(config_path))
    folder = _profile(values, quiet)
    if quiet:
        console.print(str(folder))


@app.command()
def search(
    script: Optional[Path] = typer.Argument(None, help="Launch script to rewrite into tuned configs (default: the profiled one).", show_default=False),
    profiled_data_path: Optional[str] = _opt("search", "profiled_data_path"),
    global_batch_size: Optional[int] = _opt("search", "global_batch_size"),
    num_nodes: Optional[int] = _opt("search", "num_nodes"),
    num_npus_per_node: Optional[int] = _opt("search", "num_npus_per_node"),
    memory_limit: Optional[float] = _opt("search", "memory_limit"),
    solver: Optional[str] = _opt("search", "solver"),
    time_limit: Optional[float] = _opt("search", "time_limit"),
    cpus: Optional[int] = _opt("search", "cpus"),
    top_k: Optional[int] = _opt("search", "top_k"),
    max_mbs: Optional[int] = _opt("search", "max_mbs"),
    output_dir: Optional[str] = _opt("search", "output_dir"),
    pretrain_script_path_search: Optional[str] = _opt("search", "pretrain_script_path_search"),
    hardware: Optional[str] = _opt("search", "hardware"),
    inter_node_bandwidth: Optional[float] = _opt("search", "inter_node_bandwidth"),
    version: Optional[str] = _opt("search", "version"),
    config_path: Optional[Path] = CONFIG_OPT,
    quiet: bool = QUIET_OPT,
) -> None:
    """Solve for the fastest strategy that fits in memory; write the results folder and tuned scripts."""
    given = {k: v for k, v in locals().items() if k not in ("script", "config_path", "quiet")}
    given["pretrain_script_path_search"] = _script(script, pretrain_script_path_search)
    values = config.resolve("search", given, config.load_config_file(config_path))
    _search(values, quiet)


@app.command(name="all")
def all_(
    script: Optional[Path] = SCRIPT_ARG,
    pretrain_script_path: Optional[str] = _opt("profile", "pretrain_script_path"),
    model_name: Optional[str] = _opt("profile", "model_name"),
    model_size: Optional[str] = _opt("profile", "model_size"),
    version: Optional[str] = _opt("profile", "version"),
    max_npu: Optional[int] = _opt("profile", "max_npu"),
    max_ep: Optional[int] = _opt("profile", "max_ep"),
    max_mbs: Optional[int] = _opt("profile", "max_mbs"),
    prof_tp: Optional[str] = _opt("profile", "prof_tp"),
    prof_sp: Optional[str] = _opt("profile", "prof_sp"),
    save_path: Optional[str] = _opt("profile", "save_path"),
    task_id: Optional[str] = _opt("profile", "task_id"),
    is_full_tune: bool = typer.Option(False, "--is-full-tune", "--is_full_tune", help="Treat the script as a full fine-tune."),
    device: Optional[str] = _opt("profile", "device"),
    hardware: Optional[str] = _opt("profile", "hardware"),
    repeats: Optional[int] = _opt("profile", "repeats"),
    warmup: Optional[int] = _opt("profile", "warmup"),
    global_batch_size: Optional[int] = _opt("search", "global_batch_size"),
    num_nodes: Optional[int] = _opt("search", "num_nodes"),
    num_npus_per_node: Optional[int] = _opt("search", "num_npus_per_node"),
    memory_limit: Optional[float] = _opt("search", "memory_limit"),
    solver: Optional[str] = _opt("search", "solver"),
    time_limit: Optional[float] = _opt("search", "time_limit"),
    cpus: Optional[int] = _opt("search", "cpus"),
    top_k: Optional[int] = _opt("search", "top_k"),
    output_dir: Optional[str] = _opt("search", "output_dir"),
    inter_node_bandwidth: Optional[float] = _opt("search", "inter_node_bandwidth"),
    config_path: Optional[Path] = CONFIG_OPT,
    quiet: bool = QUIET_OPT,
) -> None:
    """Profile the script, then search (profile + search in one go)."""
    given = {k: v for k, v in locals().items() if k not in ("script", "config_path", "quiet")}
    given["pretrain_script_path"] = _script(script, pretrain_script_path)
    given["is_full_tune"] = True if is_full_tune else None
    file_config = config.load_config_file(config_path)
    profile_keys = {s.key for s in config.PROFILE}
    search_keys = {s.key for s in config.SEARCH}
    profile_values = config.resolve("profile", {k: v for k, v in given.items() if k in profile_keys}, file_config)
    search_given = {k: v for k, v in given.items() if k in search_keys}
    search_values = config.resolve("search", search_given, file_config)
    from tinker_opt.emit.results import check_writable

    check_writable(Path(search_values["output_dir"]))
    folder = _profile(profile_values, quiet)
    search_values.update(profiled_data_path=str(folder),
                         pretrain_script_path_search=search_values.get("pretrain_script_path_search")
                         or profile_values["pretrain_script_path"])
    _search(search_values, quiet)


@app.command()
def simulate(
    profiled_data_path: Optional[str] = _opt("simulate", "profiled_data_path"),
    strategy: Optional[Path] = typer.Option(None, "--strategy", help="Strategy JSON (a bare strategy or a summary.json, whose best is taken)."),
    num_layers: Optional[int] = _opt("simulate", "num_layers"),
    global_batch_size: Optional[int] = _opt("simulate", "global_batch_size"),
    num_nodes: Optional[int] = _opt("simulate", "num_nodes"),
    num_npus_per_node: Optional[int] = _opt("simulate", "num_npus_per_node"),
    memory_limit: Optional[float] = _opt("simulate", "memory_limit"),
    simu_tp: Optional[int] = _opt("simulate", "simu_tp", "--tp"),
    simu_pp: Optional[int] = _opt("simulate", "simu_pp", "--pp"),
    simu_ep: Optional[int] = _opt("simulate", "simu_ep", "--ep"),
    simu_etp: Optional[int] = _opt("simulate", "simu_etp", "--etp"),
    simu_sp: Optional[str] = _opt("simulate", "simu_sp", "--sp"),
    simu_cp: Optional[int] = _opt("simulate", "simu_cp", "--cp"),
    cp_algo: Optional[str] = _opt("simulate", "cp_algo"),
    simu_vpp: Optional[int] = _opt("simulate", "simu_vpp", "--vpp"),
    zero: Optional[str] = _opt("simulate", "zero"),
    dist_opt: Optional[str] = _opt("simulate", "dist_opt"),
    micro_batch_size: Optional[int] = _opt("simulate", "micro_batch_size", "--mbs"),
    num_layer_list: Optional[str] = _opt("simulate", "num_layer_list"),
    recompute: Optional[str] = _opt("simulate", "recompute"),
    recompute_num_layers: Optional[int] = _opt("simulate", "recompute_num_layers"),
    hardware: Optional[str] = _opt("simulate", "hardware"),
    inter_node_bandwidth: Optional[float] = _opt("simulate", "inter_node_bandwidth"),
    detail: bool = typer.Option(False, "--detail", help="Print the per-stage table."),
    as_json: bool = typer.Option(False, "--json", help="Print the Evaluation as JSON."),
    config_path: Optional[Path] = CONFIG_OPT,
) -> None:
    """Model the time and memory of one strategy, stage by stage."""
    given = {k: v for k, v in locals().items() if k not in ("strategy", "detail", "as_json", "config_path")}
    from tinker_opt.emit.tables import breakdown_line, stages_table, strategies_table
    from tinker_opt.pipeline import run_simulate_step

    values = config.resolve("simulate", given, config.load_config_file(config_path))
    evaluation, warnings = run_simulate_step(values, strategy)
    result = evaluation.to_dict()
    for warning in warnings:
        err_console.print(f"[bold yellow]WARNING[/bold yellow] {warning}")
    if as_json:
        sys.stdout.write(json.dumps(result, indent=2) + "\n")
        return
    console.print(strategies_table([result], "simulated strategy"))
    fits = "fits" if result.get("fits", True) else f"does NOT fit in {values['memory_limit']:g} MB"
    console.print(f"iteration {result['iteration_time_ms']:.1f} ms, peak {result['peak_memory_mb']:.0f} MB ({fits})")
    if detail:
        console.print(stages_table(result))
        console.print(breakdown_line(result))


@app.command()
def inspect(
    script: Path = typer.Argument(..., help="The training launch script (.sh)."),
    as_json: bool = typer.Option(False, "--json", help="Print model, cluster, strategy and framework as JSON."),
    model_config: Optional[Path] = typer.Option(None, "--model-config", help=MODEL_CONFIG_HELP),
) -> None:
    """Show what tinker-opt reads from a launch script."""
    from rich.table import Table

    from tinker_opt.script.reader import inspect_dict, read_script

    info = read_script(script, model_config=model_config)
    data = inspect_dict(info)
    for warning in info.warnings:
        err_console.print(f"[yellow]warning[/yellow] {warning}")
    if as_json:
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
        return
    for section, values in data.items():
        table = Table(title=section, show_header=False)
        for key, value in values.items():
            table.add_row(key, "" if value is None else str(value))
        console.print(table)


@app.command()
def apply(
    script: Path = typer.Argument(..., help="The launch script to rewrite (never modified)."),
    strategy_file: Path = typer.Argument(..., help="Strategy JSON: a bare strategy or a summary.json (its best)."),
    output: Path = typer.Option(..., "--output", "-o", help="Where to write the tuned script."),
    num_nodes: Optional[int] = typer.Option(None, "--num-nodes", "--num_nodes", help="Target nodes (default: the strategy's world size / devices per node)."),
    num_npus_per_node: Optional[int] = typer.Option(None, "--num-npus-per-node", "--num_npus_per_node", help="Target devices per node (default: the script's)."),
    version: Optional[str] = typer.Option(None, "--version", help="Framework version (default: detected from the script)."),
    force: bool = typer.Option(False, "--force", help="Replace OUTPUT if it exists (never the input script)."),
    model_config: Optional[Path] = typer.Option(None, "--model-config", help=MODEL_CONFIG_HELP),
) -> None:
    """Write SCRIPT with the strategy of STRATEGY_FILE to OUTPUT (an FSDP2 launch: and OUTPUT.yaml)."""
    from tinker_opt.emit.script_writer import apply_strategy, write_script
    from tinker_opt.pipeline import read_json_object, strategy_to_write
    from tinker_opt.script.reader import read_script

    info = read_script(script, model_config=model_config)
    if output.exists() and not force and output.resolve() != script.resolve():
        raise ConfigError(f"output '{output}' exists; choose another -o path or pass --force")
    strategy = strategy_to_write(read_json_object(strategy_file), info)
    per_node = num_npus_per_node or info.train.nproc_per_node
    nodes = num_nodes or max(1, strategy.world_size // per_node)
    if info.fsdp2 is not None:
        _apply_fsdp2(info, strategy, output, nodes, per_node, script)
        return
    applied = apply_strategy(info.text, strategy, nnodes=nodes, nproc_per_node=per_node, version=version,
                             header=[f"tinker-opt apply: strategy {json.dumps(strategy.to_dict())}"])
    for warning in applied.warnings:
        err_console.print(f"[bold yellow]WARNING[/bold yellow] {warning}")
    write_script(output, applied.text, source=script)
    console.print(f"wrote {output}")


def _apply_fsdp2(info, strategy, output: Path, nodes: int, per_node: int, script: Path) -> None:
    """apply for an FSDP2 launch: the tuned script and its tuned YAML copy beside it."""
    from tinker_opt.emit.fsdp2_writer import apply_fsdp2, write_fsdp2_yaml
    from tinker_opt.emit.script_writer import write_script

    yaml_path = output.with_suffix(".yaml")
    applied = apply_fsdp2(info, strategy, nnodes=nodes, nproc_per_node=per_node, yaml_reference=yaml_path,
                          header=[f"tinker-opt apply: strategy {json.dumps(strategy.to_dict())}"])
    for warning in applied.warnings:
        err_console.print(f"[bold yellow]WARNING[/bold yellow] {warning}")
    write_fsdp2_yaml(yaml_path, applied.yaml_text, original=info.fsdp2.yaml_path)
    write_script(output, applied.text, source=script)
    console.print(f"wrote {output} and {yaml_path}")


@app.command()
def calibrate(
    profile_dir: Path = typer.Argument(..., help="A measured profiled-data folder of a real device."),
    hardware: str = typer.Option(..., "--hardware", help="The description to start from (name or JSON file)."),
    output: Path = typer.Option(..., "--output", "-o", help="Where to write the fitted hardware JSON."),
) -> None:
    """Fit a hardware description's efficiency curves and links to a measured profile."""
    from tinker_opt.hardware import load_hardware
    from tinker_opt.profile.calibrate import calibrate as fit, write_hardware_json
    from tinker_opt.profile.store import load_profiled_data

    fitted = fit(load_profiled_data(profile_dir), load_hardware(hardware))
    write_hardware_json(fitted, output)
    console.print(f"wrote {output}")


def main() -> None:
    """Console entry point: one-line errors for user mistakes, exit code 2."""
    try:
        app()
    except TinkerError as exc:
        message = " ".join(str(exc).split())
        sys.stderr.write(f"error: {message}\n")
        sys.exit(2)
    except KeyboardInterrupt:
        err_console.print("interrupted")
        sys.exit(130)


if __name__ == "__main__":
    main()
