"""What the commands print besides their tables: the two consoles (results on stdout, progress,
warnings and the log on stderr), the profiling progress bar, the run log's echo and the search
summary. cli.py's commands call these."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from tinker_opt import verbs

console = Console()
err_console = Console(stderr=True, soft_wrap=True)


def progress_bar(quiet: bool) -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err_console,
        disable=quiet,
        transient=False,
    )


def bar_callback(bar: Progress) -> verbs.Progress:
    task = bar.add_task("profiling blocks", total=None)

    def progress(done: int, total: int, label: str) -> None:
        bar.update(task, completed=done, total=total, description=f"profiling {label}")

    return progress


def print_profile_warnings(folder: Path) -> None:
    """The profile's warnings (fused kernels the device lacks) on the terminal, as in profile.log."""
    from tinker_opt.profile.meta import read_meta

    for warning in (read_meta(folder).kernels or {}).get("warnings", []):
        err_console.print(f"[bold yellow]WARNING[/bold yellow] {warning}", highlight=False)


def run_log(quiet: bool) -> verbs.RunLog:
    return verbs.RunLog(
        echo=None if quiet else lambda line: err_console.print(line, markup=False, highlight=False)
    )


def print_search(outcome: verbs.SearchOutcome, quiet: bool) -> None:
    from tinker_opt.emit.tables import search_summary

    if quiet:  # the log was not echoed: still show the warnings, then only the path
        for warning in outcome.warnings:
            err_console.print(warning, markup=False, highlight=False)
        console.print(str(outcome.folder))
        return
    gap = "" if outcome.gap is None else f", gap {outcome.gap:.2%}"
    console.print(
        search_summary(
            outcome,
            f"top strategies ({outcome.solver}: {outcome.status}{gap}, "
            f"{outcome.solve_time_s:.2f} s)",
        )
    )
    console.print(f"results: [bold]{outcome.folder}[/bold]")
