"""Search speed before and after, side by side in one run: the cases of issue 20 on two trees.

Usage: python benchmarks/search_speed.py --base /work/wt/base [--after .] [--only NAME] [--profile-only]
       [--trees before,after]

Each case runs in a fresh subprocess per tree (PYTHONPATH set to that tree, so the same code path
the CLI takes: `verbs.run_search` with `--solver cpsat --cpus 1`). A row gives the status, the
objective, the search's own time (`solve_time_s`, the space through the ranking), the time of the
whole search verb without writing the results folder (`search_wall_s`: ranking, deeper rankings
and the picks' restricted searches; the results folder's plots and scripts are timed apart as
`folder_s`) and the CPU seconds of that part (`search_cpu_s`, which a loaded machine inflates
less than the wall). The analytic profile of DeepSeek-V3 is timed the same way (`profile`; its CPU
seconds include its worker processes'). Both
trees read the same inputs: a Tinker 1.3 folder of LLaMA-2-70B (tests/tinker_folder.py) and
analytic profiles of fixture scripts written once by each tree (the profile's format is shared).

Cases (issue 20): LLaMA-2-70B Tinker folder on 128 x 8, gbs 4096; GPT-3-175B (Megatron-LM
script, analytic A100) on 512 x 8, gbs 2048; DeepSeek-V3-671B (MindSpeed-LLM script, analytic
910B) on 32 x 16 (its A3 layout), the script's gbs; GPT-3-175B on 2048 x 8 = 16,384 devices, gbs
8192. Lane dsspeed: DeepSeek-V3-671B (the Megatron-MoE-ModelZoo script, analytic H100) on its own
128 x 8 = 1,024 H100s and gbs 8192, with Megatron-LM's first/last layer form and uneven virtual
stages in the space (the first release cannot read this script: compare with a later commit).
Writes benchmarks/results/search_speed.{md,csv}.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"
SCRIPTS = "tests/fixtures/scripts"
CASES = [
    # name, profile kind, script, hardware, nodes, devices per node, gbs (None: the script's)
    ("llama2-70b-tinker-1024", "tinker", "pretrain_llama2_70b_4k_ptd.sh", None, 128, 8, 4096),
    ("gpt3-175b-a100-4096", "analytic", "train_gpt3_175b_distributed.sh", "a100-80gb", 512, 8, 2048),
    ("deepseek3-671b-910b-512", "analytic", "pretrain_deepseek3_671b_4k_ptd.sh", "910b", 32, 16, None),
    ("gpt3-175b-a100-16384", "analytic", "train_gpt3_175b_distributed.sh", "a100-80gb", 2048, 8, 8192),
    ("deepseek3-671b-h100-1024", "analytic", "train_deepseek_v3_h100_modelzoo.sh", "h100-80gb", 128, 8, None),
]  # fmt: skip
COLUMNS = (
    "case",
    "tree",
    "status",
    "objective_ms",
    "solve_s",
    "search_wall_s",
    "search_cpu_s",
    "folder_s",
    "best",
    "picks_ms",
)

RUNNER = r"""
import json, sys, time
from pathlib import Path
args = json.loads(sys.argv[1])
from tinker_opt import config
import tinker_opt.emit.search_folder as search_folder
from tinker_opt.strategy import Strategy
from tinker_opt.verbs.search import RunLog, run_search

spent = {"folder_wall": 0.0, "folder_cpu": 0.0}
write = search_folder.write_search_folder

def timed_write(*a, **k):
    wall, cpu = time.perf_counter(), time.process_time()
    try:
        return write(*a, **k)
    finally:
        spent["folder_wall"] += time.perf_counter() - wall
        spent["folder_cpu"] += time.process_time() - cpu

search_folder.write_search_folder = timed_write
settings = config.resolve("search", args["settings"], {})
wall, cpu = time.perf_counter(), time.process_time()
outcome = run_search(settings, log=RunLog())
wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
best = outcome.top[0]
print(json.dumps({
    "status": outcome.status,
    "objective_ms": round(best["iteration_time_ms"], 3),
    "solve_s": round(outcome.solve_time_s, 3),
    "search_wall_s": round(wall - spent["folder_wall"], 3),
    "search_cpu_s": round(cpu - spent["folder_cpu"], 3),
    "folder_s": round(spent["folder_wall"], 3),
    "best": Strategy.from_dict(best["strategy"]).label(),
    "picks_ms": " ".join(f"{k}={v['iteration_time_ms']:.3f}" for k, v in outcome.picks.items()),
}))
"""

PROFILER = r"""
import json, os, sys, time
args = json.loads(sys.argv[1])
from tinker_opt import config
from tinker_opt.verbs.profile import run_profile
settings = config.resolve("profile", args["settings"], {})
def cpu_s():  # this process and its finished children (the analytic profile's tracing workers)
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system
wall, cpu = time.perf_counter(), cpu_s()
folder = run_profile(settings)
print(json.dumps({"folder": str(folder), "wall": time.perf_counter() - wall, "cpu": cpu_s() - cpu}))
"""


def _python(tree: Path, code: str, payload: dict, timeout_s: float) -> dict:
    """Run `code` in a fresh interpreter on `tree`; its last stdout line as JSON."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    try:
        done = subprocess.run(
            [sys.executable, "-c", code, json.dumps(payload)],
            cwd=tree,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"stopped at the {timeout_s:g} s timeout"}
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:]
        return {"error": tail[0] if tail else f"exit {done.returncode}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _tinker_folder(work: Path) -> str:
    """A Tinker 1.3 folder of LLaMA-2-70B (tests/tinker_folder.py), written once."""
    sys.path.insert(0, str(ROOT / "tests"))
    from tinker_folder import LLAMA2_70B, write_tinker_folder

    return str(write_tinker_folder(work / "tinker", LLAMA2_70B))


def _profile(tree: Path, script: str, hardware: str, work: Path, timeout_s: float) -> dict:
    settings = {
        "pretrain_script_path": f"{SCRIPTS}/{script}",
        "device": "analytic",
        "hardware": hardware,
        "save_path": str(work / tree.name),
    }
    return _python(tree, PROFILER, {"settings": settings}, timeout_s)


def _search(tree: Path, case, folder: str, work: Path, timeout_s: float) -> dict:
    _, _, script, hardware, nodes, per_node, gbs = case
    settings = {
        "profiled_data_path": folder,
        "pretrain_script_path_search": f"{SCRIPTS}/{script}",
        "num_nodes": nodes,
        "num_npus_per_node": per_node,
        "global_batch_size": gbs,
        "hardware": hardware,
        "solver": "cpsat",
        "cpus": 1,
        "output_dir": str(work / "results" / tree.name),
    }
    return _python(tree, RUNNER, {"settings": settings}, timeout_s)


def _row(case: str, tree: str, found: dict) -> dict:
    row = {key: found.get(key, "") for key in COLUMNS}
    row.update(case=case, tree=tree)
    if "error" in found:
        row["status"] = f"error: {found['error'][:80]}"
    return row


def run(
    trees: dict[str, Path],
    only: set[str],
    timeout_s: float,
    work: Path,
    reuse: dict[str, str],
    profile_only: bool = False,
) -> list[dict]:
    """Every case on every tree, the profiles first (each tree profiles with its own code, unless
    `reuse` names a profiled-data folder for the script's stem: then both trees read it); with
    `profile_only`, only the analytic profiles' rows."""
    rows, profiles = [], {}
    tinker = _tinker_folder(work)
    for case in CASES:
        name, kind, script, hardware = case[:4]
        if only and name not in only:
            continue
        for label, tree in trees.items():
            folder = tinker
            if kind == "analytic":
                key = (label, script, hardware)
                if Path(script).stem in reuse:
                    profiles[key] = {"folder": reuse[Path(script).stem]}
                if key not in profiles:
                    profiles[key] = _profile(tree, script, hardware, work, timeout_s)
                    prof = profiles[key]
                    rows.append(_profile_row(f"{Path(script).stem} profile", label, prof))
                    print(rows[-1], flush=True)
                folder = profiles[key].get("folder", "")
            if not profile_only:
                rows.append(_row(name, label, _search(tree, case, folder, work, timeout_s)))
                print(rows[-1], flush=True)
    return rows


def _profile_row(case: str, tree: str, prof: dict) -> dict:
    row = dict.fromkeys(COLUMNS, "")
    row.update(case=case, tree=tree, status="error" if "error" in prof else "profiled")
    row.update(
        search_wall_s=round(prof.get("wall", 0), 3), search_cpu_s=round(prof.get("cpu", 0), 3)
    )
    return row


def write_tables(rows: list[dict], stem: str, note: str) -> None:
    RESULTS.mkdir(exist_ok=True)
    with open(RESULTS / f"{stem}.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    lines = ["# Search speed, before and after (issue 20)", "", note, ""]
    lines.append("| " + " | ".join(COLUMNS) + " |")
    lines.append("|" + "---|" * len(COLUMNS))
    lines += ["| " + " | ".join(str(r[c]) for c in COLUMNS) + " |" for r in rows]
    (RESULTS / f"{stem}.md").write_text("\n".join(lines) + "\n")


def _commit(tree: Path) -> str:
    """The short commit a tree has checked out (with `+` when it has uncommitted changes)."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(tree), *args], capture_output=True, text=True)
        return done.stdout.strip()

    dirty = git("status", "--porcelain", "--untracked-files=no")
    return git("rev-parse", "--short", "HEAD") + ("+" if dirty else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="worktree of the starting commit")
    parser.add_argument("--after", default=str(ROOT), help="worktree with the change")
    parser.add_argument("--only", default="", help="comma-separated case names")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per subprocess")
    parser.add_argument("--note", default="", help="a line for the table header (e.g. the load)")
    parser.add_argument(
        "--reuse-profile",
        action="append",
        default=[],
        help="SCRIPT_STEM=FOLDER: both trees search this analytic profile (no profile rows)",
    )
    parser.add_argument("--out", default="search_speed", help="file stem under benchmarks/results/")
    parser.add_argument(
        "--profile-only", action="store_true", help="time the analytic profiles, not the searches"
    )
    parser.add_argument(
        "--trees", default="before,after", help="which trees to run: before, after or both"
    )
    args = parser.parse_args()
    both = {"before": Path(args.base).resolve(), "after": Path(args.after).resolve()}
    trees = {label: both[label] for label in args.trees.split(",")}
    only = {name for name in args.only.split(",") if name}
    with tempfile.TemporaryDirectory(prefix="tinker-speed-") as tmp:
        reuse = dict(item.split("=", 1) for item in args.reuse_profile)
        rows = run(trees, only, args.timeout, Path(tmp), reuse, args.profile_only)
    load = os.getloadavg()
    commits = ", ".join(f"{label} = {_commit(tree)}" for label, tree in trees.items())
    note = (
        f"`--solver cpsat --cpus 1`, {os.cpu_count()} CPUs, load average {load[0]:.1f} at the end "
        f"(a shared machine: compare the before/after ratios, and CPU seconds); {commits}. "
        f"{args.note}"
    )
    write_tables(rows, args.out, note)


if __name__ == "__main__":
    main()
