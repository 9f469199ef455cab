"""What the user waits for: the whole `tinker-opt` process, before and after, side by side in one run.

Usage: python benchmarks/search_speed.py --base /tmp/base [--after .] [--only NAME,...] [--repeat 3]
       [--trees before,after] [--reuse-profile STEM=FOLDER] [--profile-only] [--out STEM]

Each case runs the CLI (`tinker_opt.cli.main`, as the `tinker-opt` console script does, with
`--solver cpsat --cpus 1`) in a fresh process per tree (PYTHONPATH set to that tree), `--repeat`
times; a row gives the best whole-process wall time (`wall_s`, from before the process starts to
after it exits), the CPU seconds of that run (`cpu_s`, this process and its children: a loaded
machine inflates them less than the wall) and its phases, named by benchmarks/phase_runner.py:
start-up (interpreter, imports, option parsing), reading (profile, script, cost model; the
`profile` verb's whole work is counted here), presolve,
solve (the ranking less the presolve), picks, writing the results folder, and exit (the printed
tables and the interpreter's teardown); `main_cpu_s`, the CPU seconds of the CLI process itself
(without its children, the picture worker), and `search_cpu_s`, those of the ranking (presolve
and solve: `verbs.search._solve`), the least of the runs: the figures a shared machine disturbs
least; `write_cpu_s`, the CPU seconds of writing the results
folder (the process's own `time.process_time`, the imports it makes included), the least of the
runs. From the run's summary.json: the status, the objective, the search's own `solve_time_s` and
the picks; `same` says whether the objective, the top 10 and the picks equal the first tree's (the
identity check of issue 30).

Each tree's bytecode is compiled once before its first run (`compileall`), as a user's process finds
it: an install compiles it, a checkout writes it on its first run. Without it a shell that sets
PYTHONDONTWRITEBYTECODE (this project's machines do) makes every timed process compile the
package's modules from source again, about 0.1-0.15 s of start-up that no user waits for.

The analytic profile of a case's script is a case of its own (`<script> profile`: the whole
`tinker-opt profile --device analytic` process, best of `--repeat`); each tree searches the
profile it wrote, unless `--reuse-profile` names a folder both read.

Cases (issues 20 and 30): LLaMA-2-70B Tinker folder on 128 x 8, gbs 4096; GPT-3-175B (Megatron-LM
script, analytic A100) on 512 x 8, gbs 2048; DeepSeek-V3-671B (MindSpeed-LLM script, analytic
910B) on 32 x 16 (its A3 layout), the script's gbs; GPT-3-175B on 2048 x 8 = 16,384 devices, gbs
8192; DeepSeek-V3-671B (the Megatron-MoE-ModelZoo script, analytic H100) on its own 128 x 8 and
gbs 8192. The first three and the DeepSeek-V3 910B profile are issue 30's table (the default).
Writes benchmarks/results/<out>.{md,csv} and <out>_answers.json (each tree's answers).
"""

from __future__ import annotations

import argparse
import csv
import functools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"
RUNNER = HERE / "phase_runner.py"
SCRIPTS = "tests/fixtures/scripts"
CASES = [
    # name, profile kind, script, hardware, nodes, devices per node, gbs (None: the script's)
    ("llama2-70b-tinker-1024", "tinker", "pretrain_llama2_70b_4k_ptd.sh", None, 128, 8, 4096),
    ("gpt3-175b-a100-4096", "analytic", "train_gpt3_175b_distributed.sh", "a100-80gb", 512, 8, 2048),
    ("deepseek3-671b-910b-512", "analytic", "pretrain_deepseek3_671b_4k_ptd.sh", "910b", 32, 16, None),
    ("gpt3-175b-a100-16384", "analytic", "train_gpt3_175b_distributed.sh", "a100-80gb", 2048, 8, 8192),
    ("deepseek3-671b-h100-1024", "analytic", "train_deepseek_v3_h100_modelzoo.sh", "h100-80gb", 128, 8, None),
]  # fmt: skip
DEFAULT_CASES = "llama2-70b-tinker-1024,gpt3-175b-a100-4096,deepseek3-671b-910b-512"
PHASES = ("startup", "read", "presolve", "solve", "picks", "write", "exit")
COLUMNS = (
    "case",
    "tree",
    "status",
    "objective_ms",
    "solve_time_s",
    "wall_s",
    "cpu_s",
    *(f"{p}_s" for p in PHASES),
    "main_cpu_s",
    "search_cpu_s",
    "write_cpu_s",
    "same",
    "picks_ms",
)

CPU_COLUMNS = {
    "main_cpu_s": "process",
    "search_cpu_s": "_solve",
    "write_cpu_s": "write_search_folder",
}
"""{column: the phase runner's stamp whose CPU seconds it reports (the least of the runs)}."""


def _phases(started: float, ended: float, stamps: dict[str, list[float]]) -> dict[str, float]:
    """The phases of one run from the process's start and end and the runner's stamps
    ({function: [first start, last end, seconds inside]})."""

    def inside(name: str) -> float:
        return stamps.get(name, [0, 0, 0.0])[2]

    verb = stamps.get("run_all") or stamps.get("run_search") or stamps.get("run_profile")
    verb_start, verb_end = (verb[0], verb[1]) if verb else (ended, ended)
    parts = {
        "read": inside("_search_run") + inside("run_profile"),
        "presolve": inside("presolve"),
        "solve": inside("_solve") - inside("presolve"),
        "picks": inside("_choices"),
        "write": inside("write_search_folder"),
    }
    parts["startup"] = verb_start - started
    parts["exit"] = ended - verb_end
    # what the verb did outside the named functions (its lazy imports): counted with start-up
    parts["startup"] += max(0.0, (verb_end - verb_start) - sum(parts[p] for p in PHASES[1:6]))
    return {f"{p}_s": round(parts[p], 3) for p in PHASES}


def _cli(tree: Path, args: list[str], work: Path, timeout_s: float) -> dict:
    """One whole CLI process on `tree`: wall and CPU seconds, phases, and its stdout."""
    stamp_file = work / "stamps.json"
    env = dict(os.environ, PYTHONPATH=str(tree))
    before = os.times()
    started = time.time()
    try:
        done = subprocess.run(
            [sys.executable, str(RUNNER), str(stamp_file), *args],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"stopped at the {timeout_s:g} s timeout"}
    ended = time.time()
    after = os.times()
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:]
        return {"error": tail[0] if tail else f"exit {done.returncode}"}
    stamps = json.loads(stamp_file.read_text())
    cpu = (after.children_user + after.children_system) - (
        before.children_user + before.children_system
    )
    found = {"wall_s": round(ended - started, 3), "cpu_s": round(cpu, 3), "stdout": done.stdout}
    for column, name in CPU_COLUMNS.items():
        found[column] = round(stamps.get(name, [0, 0, 0, 0.0])[3], 3)
    return found | _phases(started, ended, stamps)


@functools.cache
def _compiled(tree: Path) -> None:
    """The tree's `tinker_opt` bytecode written into its __pycache__ folders (module docstring)."""
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(tree / "tinker_opt")],
        check=True,
        capture_output=True,
    )


def _best(tree: Path, args, work: Path, repeat: int, timeout_s: float) -> dict:
    """The fastest of `repeat` runs of the CLI arguments `args(out)`, each writing into an
    output folder `out` of its own."""
    _compiled(tree)
    runs = []
    for i in range(repeat):
        run_dir = work / f"run{i}"
        run_dir.mkdir(parents=True, exist_ok=True)
        found = _cli(tree, args(run_dir / "out"), run_dir, timeout_s)
        if "error" in found:
            return found
        found["out"] = run_dir / "out"
        runs.append(found)
    best = min(runs, key=lambda run: run["wall_s"])
    return best | {column: min(run[column] for run in runs) for column in CPU_COLUMNS}


def _answers(out: Path) -> dict:
    """The answers the identity check compares: status, objective, top 10 and picks."""
    (folder,) = [p for p in out.iterdir() if p.is_dir()]
    summary = json.loads((folder / "summary.json").read_text())

    def answer(evaluation: dict) -> list:
        return [
            evaluation["strategy"],
            evaluation["iteration_time_ms"],
            evaluation["peak_memory_mb"],
        ]

    return {
        "status": summary["status"],
        "objective_ms": summary["objective_ms"],
        "solve_time_s": summary["solve_time_s"],
        "top": [answer(e) for e in summary["top"][:10]],
        "picks": {name: answer(e) for name, e in summary["picks"].items()},
    }


def _search_args(case, folder: str, out: Path) -> list[str]:
    _, _, script, hardware, nodes, per_node, gbs = case
    args = ["search", "--profiled-data-path", folder]
    args += ["--pretrain-script-path-search", str(ROOT / SCRIPTS / script)]
    args += ["--num-nodes", str(nodes), "--num-npus-per-node", str(per_node)]
    args += ["--global-batch-size", str(gbs)] if gbs else []
    args += ["--hardware", hardware] if hardware else []
    return [*args, "--solver", "cpsat", "--cpus", "1", "--output-dir", str(out)]


def _profile_args(script: str, hardware: str, save: Path) -> list[str]:
    args = ["profile", str(ROOT / SCRIPTS / script), "--device", "analytic"]
    return [*args, "--hardware", hardware, "--save-path", str(save)]


def _tinker_folder(work: Path) -> str:
    """A Tinker 1.3 folder of LLaMA-2-70B (tests/tinker_folder.py), written once."""
    sys.path.insert(0, str(ROOT / "tests"))
    from tinker_folder import LLAMA2_70B, write_tinker_folder

    return str(write_tinker_folder(work / "tinker", LLAMA2_70B))


class Bench:
    """The cases on the trees: rows, and the first tree's answers for the identity check."""

    def __init__(self, trees: dict[str, Path], work: Path, repeat: int, timeout_s: float):
        self.trees, self.work, self.repeat, self.timeout_s = trees, work, repeat, timeout_s
        self.rows: list[dict] = []
        self.first: dict[str, dict] = {}
        self.answers: dict[str, dict[str, dict]] = {}
        """{case: {tree: answers}}: written beside the tables (<out>_answers.json)."""

    def _row(self, case: str, label: str, found: dict) -> dict:
        row = dict.fromkeys(COLUMNS, "")
        row.update({k: v for k, v in found.items() if k in COLUMNS}, case=case, tree=label)
        if "error" in found:
            row["status"] = f"error: {found['error'][:80]}"
        self.rows.append(row)
        print({k: v for k, v in row.items() if v != ""}, flush=True)
        return row

    def profile(self, label: str, tree: Path, script: str, hardware: str) -> str:
        """Profile `script` on `tree` (best of `repeat`); the folder the last run wrote."""
        work = self.work / label / Path(script).stem
        found = _best(
            tree,
            lambda out: _profile_args(script, hardware, out),
            work,
            self.repeat,
            self.timeout_s,
        )
        out = found.pop("out", None)
        self._row(f"{Path(script).stem} profile", label, {"status": "profiled"} | found)
        return str(next(out.iterdir())) if out else ""

    def search(self, case, label: str, tree: Path, folder: str) -> None:
        work = self.work / label / case[0]
        args = functools.partial(_search_args, case, folder)
        found = _best(tree, args, work, self.repeat, self.timeout_s)
        if "error" not in found:
            answers = _answers(found.pop("out"))
            self.answers.setdefault(case[0], {})[label] = answers
            first = self.first.setdefault(case[0], answers)
            keys = ("status", "objective_ms", "top", "picks")
            found |= {k: answers[k] for k in ("status", "objective_ms", "solve_time_s")}
            found["same"] = all(answers[k] == first[k] for k in keys)
            found["picks_ms"] = " ".join(f"{k}={v[1]:.3f}" for k, v in answers["picks"].items())
        self._row(case[0], label, found)


def run(bench: Bench, only: set[str], reuse: dict[str, str], profile_only: bool) -> None:
    """Every case on every tree, trees side by side per case; analytic profiles written first
    (once per tree and script) unless `reuse` names a folder for the script's stem."""
    tinker = _tinker_folder(bench.work)
    profiles: dict[tuple, str] = {}
    for case in CASES:
        name, kind, script, hardware = case[:4]
        if name not in only:
            continue
        for label, tree in bench.trees.items():
            folder = tinker
            if kind == "analytic":
                key = (label, script, hardware)
                if key not in profiles:
                    profiles[key] = reuse.get(Path(script).stem) or bench.profile(
                        label, tree, script, hardware
                    )
                folder = profiles[key]
            if not profile_only:
                bench.search(case, label, tree, folder)


def write_tables(rows: list[dict], stem: str, note: str) -> None:
    RESULTS.mkdir(exist_ok=True)
    with open(RESULTS / f"{stem}.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    lines = ["# Whole-process time of `tinker-opt search` / `profile` (issue 30)", "", note, ""]
    lines.append("| " + " | ".join(COLUMNS) + " |")
    lines.append("|" + "---|" * len(COLUMNS))
    lines += ["| " + " | ".join(str(r[c]) for c in COLUMNS) + " |" for r in rows]
    (RESULTS / f"{stem}.md").write_text("\n".join(lines) + "\n")


def _commit(tree: Path) -> str:
    """The short commit a tree has checked out (with `+` when it has uncommitted changes)."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(tree), *args], capture_output=True, text=True)
        return done.stdout.strip()

    if not (tree / ".git").exists():
        return "(not a git tree)"
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return git("rev-parse", "--short", "HEAD") + ("+" if dirty else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="tree of the starting commit")
    parser.add_argument("--after", default=str(ROOT), help="tree with the change")
    parser.add_argument("--only", default=DEFAULT_CASES, help="comma-separated case names")
    parser.add_argument("--repeat", type=int, default=3, help="runs per case and tree (best kept)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per process")
    parser.add_argument("--note", default="", help="a line for the table header (e.g. the load)")
    parser.add_argument(
        "--reuse-profile",
        action="append",
        default=[],
        help="SCRIPT_STEM=FOLDER: both trees search this analytic profile (no profile rows)",
    )
    parser.add_argument("--out", default="search_speed", help="file stem under benchmarks/results/")
    parser.add_argument("--profile-only", action="store_true", help="time the profiles alone")
    parser.add_argument("--trees", default="before,after", help="before, after or both")
    args = parser.parse_args()
    both = {"before": Path(args.base).resolve(), "after": Path(args.after).resolve()}
    trees = {label: both[label] for label in args.trees.split(",")}
    uptime = " ".join(f"{x:.1f}" for x in os.getloadavg())
    with tempfile.TemporaryDirectory(prefix="tinker-speed-") as tmp:
        bench = Bench(trees, Path(tmp), args.repeat, args.timeout)
        reuse = dict(item.split("=", 1) for item in args.reuse_profile)
        run(bench, {n for n in args.only.split(",") if n}, reuse, args.profile_only)
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    commits = ", ".join(f"{label} = {_commit(tree)}" for label, tree in trees.items())
    note = (
        f"Whole `tinker-opt` process, `--solver cpsat --cpus 1`, best of {args.repeat}, "
        f"{os.cpu_count()} CPUs; load average (1, 5, 15 min) {uptime} at the start, {load} at "
        f"the end (a shared machine: compare before/after side by side, and the CPU seconds); "
        f"{commits}. {args.note}"
    )
    write_tables(bench.rows, args.out, note)
    answers = json.dumps(bench.answers, indent=1, sort_keys=True)
    (RESULTS / f"{args.out}_answers.json").write_text(answers + "\n")


if __name__ == "__main__":
    main()
