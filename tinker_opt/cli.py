"""Command line: profile | search | simulate | all, plus inspect, apply, calibrate, check and profile-comm.

This module only parses and prints; the verbs' work is in the verbs package. The settings options of
profile, search, simulate and all come from config.TABLE (`with_settings`): kebab-case plus
Tinker's snake_case spellings (`--global_batch_size`, `--memory_limit`, `--simu_tp`, ...). Every
option defaults to "not given" here so that config.resolve can apply the precedence command line >
config file > built-in defaults; the defaults shown in --help come from config.py. A TinkerError
becomes one line on stderr and exit 2. tests/test_cli_surface.py freezes the resulting surface.
"""

from __future__ import annotations

import gc
import json
import sys
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import typer

from tinker_opt import config, verbs
from tinker_opt.cli_options import (
    CONFIG_OPT,
    MODEL_CONFIG_HELP,
    QUIET_OPT,
    SCRIPT_ARG,
    script_setting,
    with_settings,
)
from tinker_opt.cli_output import (
    bar_callback,
    console,
    err_console,
    print_profile_warnings,
    print_search,
    progress_bar,
    run_log,
)
from tinker_opt.errors import ConfigError, TinkerError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    help="Find the fastest parallel strategy for a Megatron-LM / MindSpeed-LLM launch script.",
)


@app.command()
@with_settings("profile")
def profile(
    given: dict[str, Any],
    script: Path | None = SCRIPT_ARG,
    config_path: Path | None = CONFIG_OPT,
    quiet: bool = QUIET_OPT,
) -> None:
    """Measure time and memory of every block and shard shape, and the collectives (profiled-data folder)."""
    settings = config.resolve(
        "profile",
        script_setting(given, "pretrain_script_path", script),
        config.load_config_file(config_path),
    )
    with progress_bar(quiet) as bar:
        folder = verbs.run_profile(settings, progress=bar_callback(bar))
    print_profile_warnings(folder)
    console.print(str(folder) if quiet else f"profiled data: [bold]{folder}[/bold]")


SEARCH_SCRIPT_ARG = typer.Argument(
    None,
    help="Launch script to rewrite into tuned configs (default: the profiled one).",
    show_default=False,
)


@app.command()
@with_settings("search")
def search(
    given: dict[str, Any],
    script: Path | None = SEARCH_SCRIPT_ARG,
    config_path: Path | None = CONFIG_OPT,
    quiet: bool = QUIET_OPT,
) -> None:
    """Solve for the fastest strategy that fits in memory; write the results folder and tuned scripts."""
    settings = config.resolve(
        "search",
        script_setting(given, "pretrain_script_path_search", script),
        config.load_config_file(config_path),
    )
    with (
        console.status(f"solving with {settings.solver}", spinner="dots")
        if not quiet
        else nullcontext()
    ):
        outcome = verbs.run_search(settings, log=run_log(quiet))
    print_search(outcome, quiet)


@app.command(name="all")
@with_settings("all")
def all_(
    given: dict[str, Any],
    script: Path | None = SCRIPT_ARG,
    config_path: Path | None = CONFIG_OPT,
    quiet: bool = QUIET_OPT,
) -> None:
    """Profile the script, then search (profile + search in one go; the options of both)."""
    given = script_setting(given, "pretrain_script_path", script)
    file_config = config.load_config_file(config_path)
    profile_settings = config.resolve("profile", given, file_config)
    search_settings = config.resolve("search", given, file_config)
    with progress_bar(quiet) as bar:
        folder, outcome = verbs.run_all(
            profile_settings, search_settings, progress=bar_callback(bar), log=run_log(quiet)
        )
    print_profile_warnings(folder)
    if not quiet:
        console.print(f"profiled data: [bold]{folder}[/bold]")
    print_search(outcome, quiet)


SIMULATE_SCRIPT_ARG = typer.Argument(
    None,
    help="Launch script: the model (Tinker folders), global batch size and "
    "nodes (default: the profiled one).",
    show_default=False,
)


@app.command()
@with_settings("simulate")
def simulate(
    given: dict[str, Any],
    script: Path | None = SIMULATE_SCRIPT_ARG,
    strategy: Path | None = typer.Option(
        None,
        "--strategy",
        help="Strategy JSON (a bare strategy or a summary.json, whose best is taken).",
    ),
    detail: bool = typer.Option(False, "--detail", help="Print the per-stage table."),
    as_json: bool = typer.Option(False, "--json", help="Print the Evaluation as JSON."),
    config_path: Path | None = CONFIG_OPT,
) -> None:
    """Model the time and memory of one strategy, stage by stage."""
    from tinker_opt.emit.tables import breakdown_line, stages_table, strategies_table

    settings = config.resolve(
        "simulate",
        script_setting(given, "pretrain_script_path", script),
        config.load_config_file(config_path),
    )
    evaluation, warnings = verbs.run_simulate(settings, strategy)
    result = evaluation.to_dict()
    for warning in warnings:
        err_console.print(f"[bold yellow]WARNING[/bold yellow] {warning}")
    if as_json:
        sys.stdout.write(json.dumps(result, indent=2) + "\n")
        return
    console.print(strategies_table([result], "simulated strategy"))
    limit = f"{settings.memory_limit:g} MB" if settings.memory_limit else "the device's budget"
    fits = "fits" if result.get("fits", True) else f"does NOT fit in {limit}"
    console.print(
        f"iteration {result['iteration_time_ms']:.1f} ms, peak {result['peak_memory_mb']:.0f} MB ({fits})"
    )
    if detail:
        console.print(stages_table(result))
        console.print(breakdown_line(result))


@app.command(name="inspect")
def inspect_(
    script: Path = typer.Argument(..., help="The training launch script (.sh)."),
    as_json: bool = typer.Option(
        False, "--json", help="Print model, cluster, strategy and framework as JSON."
    ),
    model_config: Path | None = typer.Option(None, "--model-config", help=MODEL_CONFIG_HELP),
) -> None:
    """Show what tinker-opt reads from a launch script."""
    from rich.table import Table

    data, warnings = verbs.run_inspect(script, model_config=model_config)
    for warning in warnings:
        err_console.print(f"[yellow]warning[/yellow] {warning}")
    if as_json:
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
        return
    for section, values in data.items():
        table = Table(title=section, show_header=False)
        for key, value in values.items():
            table.add_row(key, verbs.inspect_cell(value))
        console.print(table)


@app.command()
def apply(
    script: Path = typer.Argument(..., help="The launch script to rewrite (never modified)."),
    strategy_file: Path = typer.Argument(
        ..., help="Strategy JSON: a bare strategy or a summary.json (its best)."
    ),
    output: Path = typer.Option(..., "--output", "-o", help="Where to write the tuned script."),
    num_nodes: int | None = typer.Option(
        None,
        "--num-nodes",
        "--num_nodes",
        help="Target nodes (default: the strategy's world size / devices per node).",
    ),
    num_npus_per_node: int | None = typer.Option(
        None,
        "--num-npus-per-node",
        "--num_npus_per_node",
        help="Target devices per node (default: the script's).",
    ),
    version: str | None = typer.Option(
        None, "--version", help="Framework version (default: detected from the script)."
    ),
    force: bool = typer.Option(
        False, "--force", help="Replace OUTPUT if it exists (never the input script)."
    ),
    model_config: Path | None = typer.Option(None, "--model-config", help=MODEL_CONFIG_HELP),
) -> None:
    """Write SCRIPT with the strategy of STRATEGY_FILE to OUTPUT (an FSDP2 launch: and OUTPUT.yaml)."""
    warnings, written = verbs.run_apply(
        script,
        strategy_file,
        output,
        num_nodes=num_nodes,
        num_npus_per_node=num_npus_per_node,
        version=version,
        force=force,
        model_config=model_config,
    )
    for warning in warnings:
        err_console.print(f"[bold yellow]WARNING[/bold yellow] {warning}")
    console.print("wrote " + " and ".join(str(path) for path in written))


LOG_OPT = typer.Option(
    None, "--log", help="A training log (file or TensorBoard folder); repeat for several runs."
)
HARDWARE_OPT = typer.Option(None, "--hardware", help="Hardware description (name or JSON file).")
SKIP_FIRST_OPT = typer.Option(
    1, "--skip-first", help="Logged iteration records to drop as start-up (steady-state rule)."
)
LOG_RUN_OPT = typer.Option(
    None,
    "--log-run",
    help="Which run of a log holding several (1 = the first; default: the last complete one).",
)
NPUS_OPT = typer.Option(
    None,
    "--num-npus-per-node",
    "--num_npus_per_node",
    help="Devices per node when the job comes from the log's argument dump (default: up to 8).",
)


@app.command()
def calibrate(
    source: list[Path] | None = typer.Argument(
        None,
        help="A measured profiled-data folder; with --log: the launch script of the logs, one "
        "for all or one per --log in order (default: each log's argument dump).",
        show_default=False,
    ),
    hardware: str = typer.Option(
        ..., "--hardware", help="The description to start from (name or JSON file)."
    ),
    output: Path = typer.Option(
        ..., "--output", "-o", help="Where to write the fitted hardware JSON."
    ),
    log: list[Path] | None = LOG_OPT,
    skip_first: int = SKIP_FIRST_OPT,
    num_npus_per_node: int | None = NPUS_OPT,
    comm: Path | None = typer.Option(
        None, "--comm", help="A comm.csv of profile-comm: fit the description's links to it."
    ),
) -> None:
    """Fit a hardware description to a measured profile, (--log) to the iteration times of runs,
    or (--comm) to the collectives of profile-comm."""
    if comm is not None:
        from tinker_opt.emit.comm_tables import comm_report

        if log or source:
            raise ConfigError("calibrate --comm takes no profile folder and no --log; pass one")
        report = verbs.run_calibrate_comm(comm, hardware, output)
        for warning in report["warnings"]:
            err_console.print(f"[bold yellow]WARNING[/bold yellow] {warning}", highlight=False)
        for part in comm_report(report):
            console.print(part, highlight=False)
        console.print(f"wrote {report['output']}")
        return
    if not log:
        if not source or len(source) > 1:
            raise ConfigError("calibrate needs one profiled-data folder, or --log LOG [SCRIPT]")
        console.print(f"wrote {verbs.run_calibrate(source[0], hardware, output)}")
        return
    from tinker_opt.emit.check_tables import calibration_table

    report = verbs.run_calibrate_log(
        list(log),
        [str(path) for path in source or []],
        verbs.DeviceChoice(hardware=hardware, num_npus_per_node=num_npus_per_node),
        output,
        skip_first=skip_first,
    )
    console.print(calibration_table(report))
    if report["capped"]:
        err_console.print(
            "[bold yellow]WARNING[/bold yellow] the logs ask for an efficiency above 1 (faster "
            "than the peak): the description's peak rates or its communication are off"
        )
    console.print(f"wrote {report['output']}")


@app.command()
def check(
    log: Path = typer.Argument(..., help="Training log: a file, or a TensorBoard folder."),
    script: Path | None = typer.Argument(
        None,
        help="The launch script of the run (default: the log's argument dump).",
        show_default=False,
    ),
    profiled_data_path: str | None = typer.Option(
        None, "--profiled-data-path", "--profiled_data_path", help="Profiled-data folder."
    ),
    device: str | None = typer.Option(
        None, "--device", help="analytic: price the job from --hardware (no profile needed)."
    ),
    hardware: str | None = HARDWARE_OPT,
    skip_first: int = SKIP_FIRST_OPT,
    log_run: int | None = LOG_RUN_OPT,
    num_npus_per_node: int | None = NPUS_OPT,
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Set a training log's measured iteration time and memory beside the prediction."""
    from tinker_opt.emit.check_tables import check_table

    choice = verbs.DeviceChoice(
        profiled_data_path=profiled_data_path,
        device=device,
        hardware=hardware,
        num_npus_per_node=num_npus_per_node,
    )
    result, warnings = verbs.run_check(
        log, str(script) if script else None, choice, skip_first=skip_first, log_run=log_run
    )
    for warning in warnings:
        err_console.print(f"[bold yellow]WARNING[/bold yellow] {warning}", highlight=False)
    if as_json:
        sys.stdout.write(json.dumps(result, indent=2) + "\n")
        return
    console.print(check_table(result))
    console.print(
        f"iterations used: {result['iterations_used']} ({result['steady_state_rule']})",
        highlight=False,
    )


@app.command(name="profile-comm")
@with_settings("profile-comm")
def profile_comm(given: dict[str, Any], config_path: Path | None = CONFIG_OPT) -> None:
    """Time the collectives of the cluster: launch with torchrun on every node (--no-python
    tinker-opt profile-comm ...), or run it alone for this node's devices."""
    settings = config.resolve("comm", given, config.load_config_file(config_path))
    outcome = verbs.run_profile_comm(settings)
    if outcome.error is not None:
        if outcome.say_error:
            sys.stderr.write(f"error: profile-comm stopped: {' '.join(outcome.error.split())}\n")
        raise typer.Exit(2)
    for note in outcome.notes:
        err_console.print(f"not measured: {note}", markup=False, highlight=False)
    if outcome.folder is not None:
        console.print(f"communication profile: [bold]{outcome.folder}[/bold]")


def main() -> None:
    """Console entry point: one-line errors for user mistakes, exit code 2. Garbage collection
    (issue 30): the youngest generation every 50,000 allocations (few cycles among millions of
    small objects); off for `search` (its few hundred cycles cost 0.04 s of CPU to collect); the
    objects frozen at the end so the collection at exit does not walk them."""
    gc.set_threshold(50_000, *gc.get_threshold()[1:])
    if sys.argv[1:2] == ["search"]:
        gc.disable()
    try:
        app()
    except TinkerError as exc:
        message = " ".join(str(exc).split())
        sys.stderr.write(f"error: {message}\n")
        sys.exit(2)
    except KeyboardInterrupt:
        err_console.print("interrupted")
        sys.exit(130)
    finally:
        gc.freeze()


if __name__ == "__main__":
    main()
