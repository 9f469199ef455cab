"""The command line as a user meets it: verbs, outputs, Tinker spellings and bad input."""

import json
import subprocess

import pandas as pd
import pytest
from cli_support import (
    EXAMPLE,
    EXAMPLE_CONFIG,
    assert_one_line_error,
    invoke_cli,
    read_json,
    run_cli,
    write_synthetic_profile,
)

from tinker_opt.emit.script_writer import HEADER_PREFIX


@pytest.fixture(scope="module")
def profile_dir(tmp_path_factory):
    return write_synthetic_profile(
        tmp_path_factory.mktemp("prof") / "profiled-data-llama-tiny-test"
    )


@pytest.fixture(scope="module")
def search_run(profile_dir, tmp_path_factory):
    """One search over the synthetic profile of the example, Tinker spellings for the options."""
    out = tmp_path_factory.mktemp("results")
    result = run_cli(
        "search",
        "--profiled_data_path",
        str(profile_dir),
        "--global_batch_size",
        "64",
        "--num_nodes",
        "2",
        "--num_npus_per_node",
        "8",
        "--memory_limit",
        "60000",
        "--output_dir",
        str(out),
        "--quiet",
    )
    assert result.returncode == 0, result.stderr
    folders = list(out.iterdir())
    assert len(folders) == 1
    return folders[0]


def test_search_writes_results_folder(search_run):
    """results.csv reads back, summary.json has the interface keys, every config passes bash -n."""
    frame = pd.read_csv(search_run / "results.csv")
    assert len(frame) == 10 and list(frame["rank"]) == list(range(1, 11))
    summary = read_json(search_run / "summary.json")
    assert summary["status"] == "optimal" and summary["solver"] == "cpsat"
    assert summary["best"] == summary["top"][0]
    assert {
        "strategy",
        "iteration_time_ms",
        "peak_memory_mb",
        "tokens_per_s_per_device",
        "stages",
    } <= set(summary["best"])
    configs = sorted((search_run / "configs").glob("*.sh"))
    assert len(configs) == 10 + len(summary["picks"])
    for config in configs:
        assert subprocess.run(["bash", "-n", str(config)]).returncode == 0, config
    assert (search_run / "search.log").read_text().strip()
    for picture in (
        "best_stages.svg",
        "best_schedule.svg",
        "candidates_time_vs_memory.svg",
        "report.html",
    ):
        assert (search_run / picture).stat().st_size > 0, picture


def test_search_compares_with_the_script_and_offers_real_alternatives(search_run):
    """current / speedup_vs_current / picks / pareto; no ranked row is dominated by a higher-ranked
    one of the same parallel layout."""
    summary = read_json(search_run / "summary.json")
    current = summary["current"]
    assert (current["strategy"]["tp"], current["strategy"]["pp"]) == (
        2,
        2,
    )  # the example script's own
    assert summary["speedup_vs_current"] == pytest.approx(
        current["iteration_time_ms"] / summary["best"]["iteration_time_ms"]
    )
    assert summary["picks"]["fastest"] == summary["best"]
    assert {"headroom", "no_pipeline"} <= set(summary["picks"])
    assert summary["picks"]["no_pipeline"]["strategy"]["pp"] == 1
    assert summary["picks"]["headroom"]["peak_memory_mb"] <= 0.9 * 60000
    assert summary["pareto"][0]["iteration_time_ms"] == summary["best"]["iteration_time_ms"]
    layout = ("tp", "pp", "dp", "cp", "ep", "vpp")
    top = summary["top"]
    for i, lower in enumerate(top):
        for higher in top[:i]:
            same = all(lower["strategy"][k] == higher["strategy"][k] for k in layout)
            assert not (same and lower["peak_memory_mb"] >= higher["peak_memory_mb"]), (
                higher,
                lower,
            )


def test_tuned_script_holds_best_strategy(search_run):
    """The rank-1 script, read back, carries the best strategy and the target cluster."""
    from tinker_opt.script.reader import read_script
    from tinker_opt.strategy import OVERLAP_KEYS, Strategy

    best = Strategy.from_dict(read_json(search_run / "summary.json"))
    rank1 = next((search_run / "configs").glob("*-rank1_*.sh"))
    info = read_script(rank1)
    # overlap knobs the search left open (None) keep the script's setting
    kept = {
        key: getattr(info.train.strategy, key) for key in OVERLAP_KEYS if getattr(best, key) is None
    }
    assert info.train.strategy == best.replace(**kept)
    assert (info.train.nnodes, info.train.nproc_per_node) == (2, 8)


def test_simulate_json_matches_search(profile_dir, search_run):
    """simulate --strategy summary.json --json reproduces the search's best evaluation."""
    result = run_cli(
        "simulate",
        "--profiled-data-path",
        str(profile_dir),
        "--strategy",
        str(search_run / "summary.json"),
        "--global-batch-size",
        "64",
        "--num-nodes",
        "2",
        "--memory-limit",
        "60000",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    evaluation = json.loads(result.stdout)
    best = read_json(search_run / "summary.json")["best"]
    assert evaluation["strategy"] == best["strategy"]
    assert evaluation["iteration_time_ms"] == pytest.approx(best["iteration_time_ms"])


def test_simulate_of_the_script_prices_its_own_strategy(profile_dir, search_run):
    """simulate SCRIPT with no strategy flag or file is the search's `current` (summary.json), and
    says so; one strategy flag brings back the flags' defaults for the rest."""
    args = ("simulate", str(EXAMPLE), "--profiled-data-path", str(profile_dir))
    args += ("--global-batch-size", "64", "--memory-limit", "60000", "--json")
    result = invoke_cli(*args)
    assert result.returncode == 0, result.stderr
    current = read_json(search_run / "summary.json")["current"]
    assert "error" not in current and current["strategy"]["tp"] == 2
    assert json.loads(result.stdout) == current
    assert "priced the script's own strategy tp2-pp2-dp4" in " ".join(result.stderr.split())
    flagged = json.loads(invoke_cli(*args, "--simu-pp", "2").stdout)
    assert (flagged["strategy"]["tp"], flagged["strategy"]["pp"]) == (1, 2)


def test_simulate_tinker_flags(profile_dir):
    """Tinker's --simu_* flags give a per-stage table."""
    result = run_cli(
        "simulate",
        "--profiled_data_path",
        str(profile_dir),
        "--global_batch_size",
        "64",
        "--num_nodes",
        "2",
        "--simu_tp",
        "2",
        "--simu_pp",
        "2",
        "--simu_sp",
        "1",
        "--micro_batch_size",
        "1",
        "--num_layer_list",
        "5,3",
        "--detail",
    )
    assert result.returncode == 0, result.stderr
    assert "per-stage breakdown" in result.stdout and "tp2-pp2-dp4" in result.stdout
    assert "grads MB" in result.stdout and "iteration " in result.stdout


def test_search_and_simulate_run_without_torch(profile_dir, tmp_path):
    """search and simulate never import torch."""
    sim = run_cli(
        "simulate",
        "--profiled-data-path",
        str(profile_dir),
        "--global-batch-size",
        "64",
        "--num-nodes",
        "1",
        "--simu-tp",
        "2",
        "--json",
        block_torch=True,
    )
    assert sim.returncode == 0, sim.stderr
    found = run_cli(
        "search",
        "--profiled-data-path",
        str(profile_dir),
        "--global-batch-size",
        "64",
        "--num-nodes",
        "1",
        "--output-dir",
        str(tmp_path),
        "--top-k",
        "2",
        "--quiet",
        block_torch=True,
    )
    assert found.returncode == 0, found.stderr
    inspected = run_cli("inspect", str(EXAMPLE), "--json", block_torch=True)
    assert inspected.returncode == 0 and json.loads(inspected.stdout)["model"]["num_layers"] == 8


def test_apply_never_overwrites_input(tmp_path, search_run):
    """apply refuses the input as output and an existing file without --force."""
    script = tmp_path / "s.sh"
    script.write_text(EXAMPLE.read_text())
    same = run_cli("apply", str(script), str(search_run / "summary.json"), "-o", str(script))
    assert_one_line_error(same, "input script")
    out = tmp_path / "tuned.sh"
    assert (
        run_cli("apply", str(script), str(search_run / "summary.json"), "-o", str(out)).returncode
        == 0
    )
    assert subprocess.run(["bash", "-n", str(out)]).returncode == 0
    assert_one_line_error(
        run_cli("apply", str(script), str(search_run / "summary.json"), "-o", str(out)), "exists"
    )
    assert script.read_text() == EXAMPLE.read_text()


@pytest.mark.parametrize("verb", ["profile", "search", "simulate", "all"])
def test_help_shows_the_tables_defaults_and_tinker_spellings(verb):
    """--help of a settings verb shows each default of config.TABLE (with its unit) and the snake_case flags."""
    from tinker_opt import config

    result = run_cli(verb, "--help")
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.replace("│", " ").split())
    for item in config.verb_options(verb):
        if item.default is not None:
            assert item.help_text.split("(default: ")[-1] in text, (item.key, item.help_text)
    assert ("--memory_limit" in text) == (verb != "profile") and ("--max_npu" in text) == (
        verb in ("profile", "all")
    )


# ---- bad input: one line naming the problem and the fix, exit 2, nothing half-written ----


def test_missing_script(tmp_path):
    assert_one_line_error(run_cli("all", str(tmp_path / "nope.sh")), "nope.sh")


def test_script_without_launch_line(tmp_path):
    script = tmp_path / "pretrain_x_1b.sh"
    script.write_text("#!/bin/bash\nTP=1\necho hello\n")
    assert_one_line_error(run_cli("inspect", str(script)), "launch")


def test_config_not_json(tmp_path):
    bad = tmp_path / "cfg.json"
    bad.write_text("{not json")
    assert_one_line_error(run_cli("all", str(EXAMPLE), "--config-path", str(bad)), "not valid JSON")


def test_unknown_config_key(tmp_path):
    bad = tmp_path / "cfg.json"
    bad.write_text(json.dumps({"search": {"gbs": 8}}))
    assert_one_line_error(run_cli("search", "--config-path", str(bad)), "search.gbs")


def test_negative_size(profile_dir):
    assert_one_line_error(
        run_cli("search", "--profiled-data-path", str(profile_dir), "--global-batch-size", "-8"),
        "global_batch_size",
        "positive",
    )


def test_global_batch_not_divisible(profile_dir):
    result = run_cli(
        "simulate",
        "--profiled-data-path",
        str(profile_dir),
        "--global-batch-size",
        "63",
        "--num-nodes",
        "1",
        "--simu-tp",
        "1",
    )
    assert_one_line_error(result, "63")


def test_memory_limit_nothing_fits(profile_dir, tmp_path):
    result = run_cli(
        "search",
        "--profiled-data-path",
        str(profile_dir),
        "--global-batch-size",
        "64",
        "--num-nodes",
        "2",
        "--memory-limit",
        "1",
        "--output-dir",
        str(tmp_path / "out"),
        "--quiet",
    )
    assert_one_line_error(result, "MB")
    # The results folder is still written: summary.json says infeasible and why (README, Results).
    (folder,) = list((tmp_path / "out").iterdir())
    summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    assert summary["status"] == "infeasible" and summary["message"].startswith(
        "no strategy fits in 1 MB"
    )
    assert not list((folder / "configs").iterdir())


def test_profiled_data_path_missing(tmp_path):
    assert_one_line_error(
        run_cli(
            "search",
            "--profiled-data-path",
            str(tmp_path / "absent"),
            "--global-batch-size",
            "8",
            "--num-nodes",
            "1",
        ),
        "does not exist",
    )


def test_profiled_data_lacks_table(tmp_path, profile_dir):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "meta.json").write_text((profile_dir / "meta.json").read_text())
    assert_one_line_error(
        run_cli(
            "search",
            "--profiled-data-path",
            str(broken),
            "--global-batch-size",
            "8",
            "--num-nodes",
            "1",
        ),
        "blocks.csv",
    )


def test_corrupt_csv(tmp_path, profile_dir):
    broken = write_synthetic_profile(tmp_path / "corrupt")
    text = (broken / "blocks.csv").read_text().splitlines()
    text[3] = text[3].replace(",", ",abc,", 1)
    (broken / "blocks.csv").write_text("\n".join(text) + "\n")
    result = run_cli(
        "search",
        "--profiled-data-path",
        str(broken),
        "--global-batch-size",
        "8",
        "--num-nodes",
        "1",
    )
    assert_one_line_error(result, "blocks.csv")


def test_output_folder_not_writable(tmp_path, profile_dir):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    result = run_cli(
        "search",
        "--profiled-data-path",
        str(profile_dir),
        "--global-batch-size",
        "64",
        "--num-nodes",
        "1",
        "--output-dir",
        str(blocker),
    )
    assert_one_line_error(result, "cannot be written")


def test_all_end_to_end_on_cpu(tmp_path):
    """`all` on the example with a real (restricted) CPU profile writes profile and results folders."""
    result = run_cli(
        "all",
        str(EXAMPLE),
        "--config-path",
        str(EXAMPLE_CONFIG),
        "--prof-tp",
        "1,2",
        "--max-mbs",
        "1",
        "--device",
        "cpu",
        "--save-path",
        str(tmp_path / "prof"),
        "--output-dir",
        str(tmp_path / "results"),
        "--memory-limit",
        "60000",
        "--top-k",
        "3",
        "--quiet",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    profile = next((tmp_path / "prof").iterdir())
    assert {"blocks.csv", "comm.csv", "meta.json", "profile.log"} <= {
        p.name for p in profile.iterdir()
    }
    results = next((tmp_path / "results").iterdir())
    assert len(list((results / "configs").glob("*-rank*.sh"))) == 3
    summary = read_json(results / "summary.json")
    assert summary["best"]["strategy"]["tp"] in (1, 2)
    assert {"current", "speedup_vs_current", "picks", "pareto"} <= set(summary)
    assert len(list((results / "configs").glob("*-pick_*.sh"))) == len(summary["picks"])
    # the fastest pick is rank 1: the same script (written once, emit/search_folder.py), its own header
    rank1, fastest = (
        next((results / "configs").glob(f"*-{tag}_*.sh")).read_text().splitlines()
        for tag in ("rank1", "pick_fastest")
    )
    assert rank1 != fastest
    assert [line for line in rank1 if not line.startswith(HEADER_PREFIX)] == [
        line for line in fastest if not line.startswith(HEADER_PREFIX)
    ]
    for name in (
        "best_stages.svg",
        "best_schedule.svg",
        "candidates_time_vs_memory.svg",
        "report.html",
    ):
        assert (results / name).stat().st_size > 0, name


def test_analytic_profile_then_calibrate(tmp_path):
    """profile --device analytic writes a loadable folder; calibrate fits a loadable hardware file."""
    result = run_cli(
        "profile",
        str(EXAMPLE),
        "--device",
        "analytic",
        "--hardware",
        "a100-80gb",
        "--prof-tp",
        "1,2",
        "--max-mbs",
        "2",
        "--save-path",
        str(tmp_path),
        "--quiet",
    )
    assert result.returncode == 0, result.stderr
    folder = next(tmp_path.iterdir())
    assert read_json(folder / "meta.json")["script_path"].endswith("pretrain_llama_tiny_ptd.sh")
    fitted = tmp_path / "fitted.json"
    result = run_cli("calibrate", str(folder), "--hardware", "a100-80gb", "-o", str(fitted))
    assert result.returncode == 0, result.stderr
    from tinker_opt.hardware import load_hardware

    assert load_hardware(fitted).name.endswith("(calibrated)")


def test_analytic_needs_hardware(tmp_path):
    """The analytic device without --hardware is a one-line error naming the flag."""
    result = run_cli("profile", str(EXAMPLE), "--device", "analytic", "--save-path", str(tmp_path))
    assert_one_line_error(result, "--hardware")


TINKER_ROWS = (
    "config,block_name,forward-compute,backward_compute,input_size,output_size,weights,"
    "activations,fwd_reserved,bwd_reserved\n"
    """{g},embedding,120.5,300,0.0078,16,250,0.5,2,3
{g},transformer_block,4000,8000,16,16,386,300.25,40,60
{g},final_norm,50,90,16,16,0.0078,16,1,1
{g},post_process,3000,5000,16,0,250,500,100,200
"""
)


def test_search_on_tinker_profile_with_script(tmp_path):
    """A Tinker profiled_data.csv folder plus the user's script is enough for search."""
    folder = tmp_path / "profiled-data-llama2-7b-240101-120000"
    folder.mkdir()
    (folder / "profiled_data.csv").write_text(
        TINKER_ROWS.format(g="llama2_7b_tp1_sp0_ep1_mbs1_algo0")
    )
    (folder / "model_info_seq4096.json").write_text(
        json.dumps({"seq_length": 4096, "bf16": True, "num_layers": 32})
    )
    script = EXAMPLE.parent.parent / "tests" / "fixtures" / "scripts" / "pretrain_llama2_7b_ptd.sh"
    without = run_cli(
        "search",
        "--profiled-data-path",
        str(folder),
        "--global-batch-size",
        "8",
        "--num-nodes",
        "1",
        "--output-dir",
        str(tmp_path / "out"),
    )
    assert_one_line_error(without, "--pretrain-script-path-search")
    result = run_cli(
        "search",
        str(script),
        "--profiled-data-path",
        str(folder),
        "--global-batch-size",
        "8",
        "--num-nodes",
        "1",
        "--num-npus-per-node",
        "8",
        "--memory-limit",
        "1000000",
        "--output-dir",
        str(tmp_path / "out"),
        "--quiet",
    )
    assert result.returncode == 0, result.stderr
    summary = read_json(next((tmp_path / "out").iterdir()) / "summary.json")
    assert summary["best"]["strategy"]["tp"] == 1 and summary["inputs"]["model"]["num_layers"] == 32


def _tinker_folder(tmp_path):
    folder = tmp_path / "profiled-data-llama2-7b-240101-120000"
    folder.mkdir()
    (folder / "profiled_data.csv").write_text(
        TINKER_ROWS.format(g="llama2_7b_tp1_sp0_ep1_mbs1_algo0")
    )
    (folder / "model_info_seq4096.json").write_text(
        json.dumps({"seq_length": 4096, "bf16": True, "num_layers": 32})
    )
    return folder


TINKER_SCRIPT = (
    EXAMPLE.parent.parent / "tests" / "fixtures" / "scripts" / "pretrain_llama2_7b_ptd.sh"
)


def test_search_records_the_positional_script(tmp_path):
    """summary.json inputs.script_path is the script given positionally (a Tinker folder names none)."""
    result = run_cli(
        "search",
        str(TINKER_SCRIPT),
        "--profiled-data-path",
        str(_tinker_folder(tmp_path)),
        "--num-nodes",
        "1",
        "--memory-limit",
        "1000000",
        "--output-dir",
        str(tmp_path / "out"),
        "--top-k",
        "1",
        "--quiet",
    )
    assert result.returncode == 0, result.stderr
    summary = read_json(next((tmp_path / "out").iterdir()) / "summary.json")
    assert summary["inputs"]["script_path"] == str(TINKER_SCRIPT.resolve())


def test_simulate_on_a_tinker_folder_takes_the_script_positionally(tmp_path):
    """simulate SCRIPT on a Tinker folder reads model and global batch size from the script."""
    folder = _tinker_folder(tmp_path)
    args = ("simulate", str(TINKER_SCRIPT), "--profiled-data-path", str(folder), "--num-nodes", "1")
    args += ("--simu-tp", "1", "--memory-limit", "1000000", "--json")
    result = run_cli(*args)
    assert result.returncode == 0, result.stderr
    from tinker_opt.script.reader import read_script

    gbs = str(read_script(TINKER_SCRIPT).train.global_batch_size)
    explicit = run_cli(*args, "--global-batch-size", gbs)
    assert json.loads(result.stdout) == json.loads(explicit.stdout)
    assert json.loads(result.stdout)["strategy"]["dp"] == 8


def test_simulate_without_script_names_the_tinker_folder(tmp_path):
    """Without a script, a Tinker folder is named as such (not 'meta.json has no model entry')."""
    result = run_cli(
        "simulate",
        "--profiled-data-path",
        str(_tinker_folder(tmp_path)),
        "--global-batch-size",
        "8",
        "--num-nodes",
        "1",
    )
    assert_one_line_error(result, "Tinker folder", "launch script")
    assert "meta.json" not in result.stderr


def test_simulate_takes_the_global_batch_from_the_profile(tmp_path):
    """With no script known, simulate's global batch size is the profiled script's (meta.json `train`)."""
    from tinker_opt.profile.meta import ProfileMeta, read_meta, write_meta

    folder = write_synthetic_profile(tmp_path / "prof")
    meta = read_meta(folder)
    write_meta(
        folder,
        ProfileMeta(model=meta.model, train={"micro_batch_size": 1, "global_batch_size": 32}),
    )
    result = run_cli("simulate", "--profiled-data-path", str(folder), "--num-nodes", "1", "--json")
    assert result.returncode == 0, result.stderr
    explicit = run_cli(
        "simulate",
        "--profiled-data-path",
        str(folder),
        "--num-nodes",
        "1",
        "--json",
        "--global-batch-size",
        "32",
    )
    other = run_cli(
        "simulate",
        "--profiled-data-path",
        str(folder),
        "--num-nodes",
        "1",
        "--json",
        "--global-batch-size",
        "64",
    )
    assert json.loads(result.stdout) == json.loads(explicit.stdout) != json.loads(other.stdout)


def test_unpriced_flags_reach_summary_and_log(search_run):
    """The example's flags the model does not price are named in summary.json warnings and search.log."""
    summary = read_json(search_run / "summary.json")
    named = [w for w in summary["warnings"] if w.startswith("the prediction does not include")]
    assert named and "--no-masked-softmax-fusion" in named[0]
    assert "the prediction does not include" in (search_run / "search.log").read_text()
