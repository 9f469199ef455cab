"""Test support for the CLI tests: running the tool in a subprocess, a profile folder on disk."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tinker_opt.profile.meta import ProfileMeta, write_meta
from tinker_opt.profile.store import write_blocks_csv, write_comm_csv

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "pretrain_llama_tiny_ptd.sh"
EXAMPLE_CONFIG = ROOT / "examples" / "config.json"


def run_cli(
    *args: str, cwd: Path | None = None, block_torch: bool = False
) -> subprocess.CompletedProcess:
    """Run `tinker-opt ARGS`: in this process (`invoke_cli`), or in a fresh interpreter where the
    process itself is under test (another working directory, torch made unimportable)."""
    if cwd is None and not block_torch:
        return invoke_cli(*args)
    prelude = "import sys; sys.modules['torch'] = None; " if block_torch else ""
    code = (
        prelude
        + "import sys; from tinker_opt.cli import main; sys.argv = ['tinker-opt'] + sys.argv[1:]; main()"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="200")
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def invoke_cli(*args: str) -> subprocess.CompletedProcess:
    """Run `tinker-opt ARGS` in this process (typer's CliRunner), as `main` would: a TinkerError
    is exit code 2 and one `error:` line on stderr. For tests a fresh interpreter adds nothing to."""
    from typer.testing import CliRunner

    from tinker_opt import cli
    from tinker_opt.errors import TinkerError

    for console in (cli.console, cli.err_console):
        console.width = 200  # as run_cli's COLUMNS=200, whatever COLUMNS was when cli was imported
    result = CliRunner().invoke(cli.app, list(args), env={"COLUMNS": "200"})
    code, stderr = result.exit_code, result.stderr
    if isinstance(result.exception, TinkerError):
        code, stderr = 2, stderr + "error: " + " ".join(str(result.exception).split()) + "\n"
    elif result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return subprocess.CompletedProcess(list(args), code, result.stdout, stderr)


def run_all(script: Path, tmp_path: Path, *options: str) -> tuple[dict, Path]:
    """`tinker-opt all SCRIPT` (profile under tmp_path/prof, results under tmp_path/results, one
    CPU, quiet) plus `options`; asserts it succeeds and returns (summary.json, the results folder)."""
    proc = run_cli(
        "all",
        str(script),
        "--save-path",
        str(tmp_path / "prof"),
        "--output-dir",
        str(tmp_path / "results"),
        "--cpus",
        "1",
        "--quiet",
        *options,
    )
    assert proc.returncode == 0, proc.stderr
    folder = results_folder(tmp_path / "results")
    return json.loads((folder / "summary.json").read_text()), folder


def results_folder(output_dir: Path) -> Path:
    """The results folder under --output-dir (beside it: calibrated/ of --log, fp8/ of --allow-fp8)."""
    return next(p for p in output_dir.iterdir() if (p / "summary.json").exists())


def run_all_analytic(script: Path, tmp_path: Path, *options: str) -> tuple[dict, Path]:
    """`run_all` on the analytic 910B (16 NPUs per node, 57,000 MB) plus `options`; returns
    (summary.json, the rank-1 tuned script)."""
    summary, folder = run_all(
        script, tmp_path, "--device", "analytic", "--hardware", "910b",
        "--num-npus-per-node", "16", "--memory-limit", "57000", *options,
    )  # fmt: skip
    return summary, next((folder / "configs").glob("*-rank1_*.sh"))


def write_synthetic_profile(folder: Path, script: Path = EXAMPLE) -> Path:
    """A profiled-data folder for the example model from the formula-based test profile."""
    from model_support import synthetic_profile

    from tinker_opt.script.reader import read_script

    model = read_script(script).model
    profiled = synthetic_profile(model, tps=(1, 2, 4), cps=(1,), eps=(1,), mbss=(1, 2, 4))
    folder.mkdir(parents=True, exist_ok=True)
    write_blocks_csv(folder, profiled.blocks)
    write_comm_csv(folder, profiled.comm)
    write_meta(
        folder,
        ProfileMeta(
            model=model.to_dict(),
            device="synthetic",
            script_path=str(script),
            model_name="llama",
            model_size="tiny",
        ),
    )
    return folder


def assert_one_line_error(result: subprocess.CompletedProcess, *fragments: str) -> None:
    """Exit code 2, no traceback, one final stderr line 'error: ...' holding the fragments.

    Progress lines may precede it (they are not part of the error); the error itself is one line.
    """
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 1 and lines[-1] == errors[0], result.stderr
    for fragment in fragments:
        assert fragment in errors[0], (fragment, errors[0])


def read_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))
