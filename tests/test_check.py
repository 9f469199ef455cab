"""`check` and `calibrate --log` on the shared training logs (tests/fixtures/logs)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

LOGS = Path(__file__).parent / "fixtures" / "logs"
MS = LOGS / "ms-ci-llama2-l8-tp8-coc-910b"
KISTI = LOGS / "kisti-v100x4-gpt345m-tp4-main202409"
MLM = LOGS / "mlm-ci-gpt7b-tp1pp4vpp-gb200"
MLM_TP4 = LOGS / "mlm-ci-gpt7b-tp4pp1-gb200"
KISTI_CORE050 = LOGS / "kisti-v100x4-gpt345m-tp4-core050"
H100 = LOGS / "mlm-ci-gpt7b-tp1pp4vpp-h100"
H100_TP4 = LOGS / "mlm-ci-gpt7b-tp4pp1-h100"


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tinker_opt.cli", *args], capture_output=True, text=True, check=False
    )


def _check_json(*args: str) -> dict:
    run = _cli("check", *args, "--json")
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


@pytest.fixture(scope="module")
def mindspeed() -> dict:
    return _check_json(
        str(MS / "log.txt"), str(MS / "script.sh"), "--device", "analytic", "--hardware", "910b"
    )


def test_check_measured_is_the_log(mindspeed):
    """The measured side of the MindSpeed CI log: its own numbers, iterations 2..15 used."""
    assert mindspeed["measured"]["iteration_time_ms"] == pytest.approx(1029.45)
    assert mindspeed["measured"]["peak_allocated_mb"] == 4080.50390625
    assert mindspeed["measured"]["peak_reserved_mb"] is None
    assert mindspeed["iterations_used"] == list(range(2, 16))
    assert mindspeed["predicted"]["iteration_time_ms"] > 0
    assert set(mindspeed["predicted"]["time_breakdown_ms"]) >= {
        "compute_ms",
        "comm_ms",
        "bubble_ms",
        "optimizer_ms",
    }


def test_check_peak_allocated_within_ten_percent(mindspeed):
    """The 8-rank memory report (after iteration 1) is predicted within 10 %."""
    assert mindspeed["predicted"]["memory_peak_of"] == "iteration 1"
    assert abs(mindspeed["error"]["peak_allocated_mb"]) < 0.10


def test_check_from_the_argument_dump():
    """Without a script the V100 log's argument dump is the job; reserved memory is read too."""
    result = _check_json(str(KISTI / "log.txt"), "--device", "analytic", "--hardware", "v100-32gb")
    assert result["job"]["source"].startswith("argument dump")
    assert result["job"]["strategy"]["tp"] == 4
    assert result["measured"]["peak_reserved_mb"] == 2608.0
    assert result["predicted"]["peak_reserved_mb"] > result["predicted"]["peak_allocated_mb"]
    assert result["measured"]["iteration_time_ms"] == pytest.approx(447.7)
    # By hand, GPT-345M on tp 4: 24 x (3h^2 + 7.75h) + 50688/4 x h + 1024 x h + 2h = 89,714,688
    # parameters per rank; fp16 weights and (no --accumulate-allreduce-grads-in-fp32) fp16 grads.
    stage = result["evaluation"]["stages"][0]
    assert stage["weights_mb"] == stage["gradients_mb"] == 89_714_688 * 2 / 2**20
    # + 12 B of fp32 master weights and Adam moments: 16 B per parameter held all along.
    states = stage["weights_mb"] + stage["gradients_mb"] + stage["optimizer_mb"]
    assert states == pytest.approx(89_714_688 * 16 / 2**20)
    assert [(r["rank"], r["stage"]) for r in result["measured"]["per_rank"]] == [
        (2, 0),
        (3, 0),
        (1, 0),
        (0, 0),
    ]


def test_check_megatron_ci_with_script():
    """The GB200 CI metrics with its rebuilt script on gb200-nvl72: measured time and the last
    rank's peak within 10 %: TE's fused attention keeps no 8192 x 8192 scores (+591 % when it
    did), the head's activations are held for one micro-batch (not 29/8), the fp32 logits once."""
    result = _check_json(
        str(MLM / "log.txt"),
        str(MLM / "script.sh"),
        "--device",
        "analytic",
        "--hardware",
        "gb200-nvl72",
    )
    assert abs(result["error"]["peak_allocated_mb"]) < 0.10
    assert result["measured"]["iteration_time_ms"] == pytest.approx(787.13)
    assert result["measured"]["peak_allocated_mb"] == pytest.approx(60519342080.0 / 2**20)
    assert [s["stage"] for s in result["predicted"]["stages"]] == [0, 1, 2, 3]


def test_check_without_device_is_one_line_error():
    """No profile and no analytic device: exit 2 and one line naming both ways."""
    run = _cli("check", str(MS / "log.txt"), str(MS / "script.sh"))
    assert run.returncode == 2
    assert run.stderr.count("\n") == 1 and "--device analytic" in run.stderr


def test_check_ci_log_without_script_is_one_line_error():
    """A CI metrics file holds no argument dump: the error asks for the script."""
    run = _cli("check", str(MS / "log.txt"), "--device", "analytic", "--hardware", "910b")
    assert run.returncode == 2 and "no argument dump" in run.stderr


def test_calibrate_log_then_check(tmp_path):
    """calibrate --log fits the 910B description to the run; checking it again is within 1 %."""
    out = tmp_path / "fitted.json"
    run = _cli(
        "calibrate",
        str(MS / "script.sh"),
        "--log",
        str(MS / "log.txt"),
        "--hardware",
        "910b",
        "-o",
        str(out),
    )
    assert run.returncode == 0, run.stderr
    fitted = json.loads(out.read_text(encoding="utf-8"))
    assert fitted["calibration"]["time_scale"] != 1.0
    result = _check_json(
        str(MS / "log.txt"), str(MS / "script.sh"), "--device", "analytic", "--hardware", str(out)
    )
    assert abs(result["error"]["iteration_time_ms"]) < 0.01


def test_search_log_calibrates_then_replans(tmp_path):
    """search --log: the script's own strategy is then priced within 1 % of the run it came from."""
    prof = tmp_path / "prof"
    run = _cli(
        "profile",
        str(MS / "script.sh"),
        "--device",
        "analytic",
        "--hardware",
        "910b",
        "--max-mbs",
        "1",
        "--prof-tp",
        "8",
        "--prof-path",
        str(prof),
        "-q",
    )
    assert run.returncode == 0, run.stderr
    out = tmp_path / "results"
    run = _cli(
        "search",
        str(MS / "script.sh"),
        "--profiled-data-path",
        str(prof),
        "--hardware",
        "910b",
        "--log",
        str(MS / "log.txt"),
        "--output-dir",
        str(out),
        "--time-limit",
        "10",
        "--cpus",
        "1",
        "-q",
    )
    assert run.returncode == 0, run.stderr
    (folder,) = [p for p in out.iterdir() if p.name != "calibrated"]
    summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    assert summary["current"]["iteration_time_ms"] == pytest.approx(1029.45, rel=0.01)
    assert "calibrated 910b on" in (folder / "search.log").read_text(encoding="utf-8")


def test_script_that_is_not_the_logged_run_is_warned(tmp_path):
    """A script whose strategy differs from the log's argument dump: priced, with a warning."""
    from tinker_opt.logs import read_log
    from tinker_opt.logs.arguments import launch_text

    text = launch_text(read_log(KISTI / "log.txt").arguments)
    script = tmp_path / "other.sh"
    script.write_text(
        text.replace("--micro-batch-size 4", "--micro-batch-size 2"), encoding="utf-8"
    )
    run = _cli(
        "check",
        str(KISTI / "log.txt"),
        str(script),
        "--device",
        "analytic",
        "--hardware",
        "v100-32gb",
        "--json",
    )
    assert run.returncode == 0, run.stderr
    assert "mbs 2 vs 4" in run.stderr
    assert json.loads(run.stdout)["job"]["strategy"]["mbs"] == 2


def test_calibrated_description_slows_the_fp8_curve_too():
    """`calibrate --log` divides every efficiency curve by the fitted factor, FP8 included; with
    no communication factor of their own the links follow it (half the bandwidth)."""
    from types import SimpleNamespace

    from tinker_opt.hardware import load_hardware
    from tinker_opt.verbs.calibrate_log import _fitted_description

    h100 = load_hardware("h100-80gb")
    fit = SimpleNamespace(num_samples=1, mean_abs_rel_error=0.0, max_abs_rel_error=0.0)
    data, capped = _fitted_description(h100, 2.0, None, fit, ["log.txt"])
    fitted = data["efficiency"]
    assert not capped
    for curve in ("matmul", "matmul_fp8"):
        before = getattr(h100.efficiency, curve).max_efficiency
        assert fitted[curve]["max_efficiency"] == pytest.approx(before / 2)
    assert data["intra_node"]["bandwidth_gbs"] == pytest.approx(h100.intra_node.bandwidth_gbs / 2)


def test_communication_factor_slows_every_link():
    """A fitted communication factor c divides every link's bandwidth and multiplies its latency,
    so each alpha-beta collective time (steps x latency + traffic / bandwidth) is c times
    longer: on gb200-nvl72 (585 GB/s, 5 us within the tray and the domain; 45 GB/s, 10 us across)
    c = 2 gives 292.5 GB/s, 10 us and 22.5 GB/s, 20 us."""
    from types import SimpleNamespace

    from tinker_opt.hardware import load_hardware
    from tinker_opt.verbs.calibrate_log import _fitted_description

    gb200 = load_hardware("gb200-nvl72")
    fit = SimpleNamespace(num_samples=2, mean_abs_rel_error=0.0, max_abs_rel_error=0.0)
    data, _ = _fitted_description(gb200, 1.0, 2.0, fit, ["a.txt", "b.txt"])
    assert (data["intra_node"]["bandwidth_gbs"], data["intra_node"]["latency_us"]) == (292.5, 10)
    assert (data["domain"]["bandwidth_gbs"], data["domain"]["latency_us"]) == (292.5, 10)
    assert (data["inter_node"]["bandwidth_gbs"], data["inter_node"]["latency_us"]) == (22.5, 20)
    assert data["calibration"]["comm_scale"] == 2.0


def test_fit_logs_fits_what_the_logs_determine():
    """One log: the device factor only, the links with it ((100 + 10) a = 210). Two logs of
    different communication shares: both, exactly (by hand: 100 a + 0 c = 200, 80 a + 50 c = 260
    -> a = 2, c = 2). Two logs of one structure (the same job twice): the device factor only,
    links with it, never more parameters than the logs fix."""
    from tinker_opt.verbs.log_factors import LogSplit, fit_logs

    def fit(device, comm, measured):
        splits = [
            LogSplit(device_ms=d, comm_ms=c, fixed_ms=0.0, measured_ms=m, size="one job")
            for d, c, m in zip(device, comm, measured, strict=True)
        ]
        return fit_logs(splits, [f"log{i}" for i in range(len(splits))], None)

    one = fit([100.0], [10.0], [210.0])
    assert (one.scale, one.comm, one.fit.values) == (
        pytest.approx(210 / 110),
        None,
        (pytest.approx(210 / 110),),
    )
    assert one.links_follow_device
    two = fit([100.0, 80.0], [0.0, 50.0], [200.0, 260.0])
    assert (two.scale, two.comm) == (pytest.approx(2.0), pytest.approx(2.0))
    assert not two.links_follow_device
    assert two.fit.max_abs_rel_error == pytest.approx(0.0, abs=1e-9)
    alike = fit([100.0, 200.0], [10.0, 20.0], [210.0, 420.0])
    assert (alike.scale, alike.comm) == (pytest.approx(210 / 110), None)


def test_calibrate_log_needs_one_script_or_one_per_log(tmp_path):
    """Three logs and two scripts is a one-line error naming the fix."""
    run = _cli(
        "calibrate",
        *("--log", str(MLM / "log.txt"), "--log", str(MLM_TP4 / "log.txt")),
        *("--log", str(H100 / "log.txt"), str(MLM / "script.sh"), str(MLM_TP4 / "script.sh")),
        *("--hardware", "gb200-nvl72", "-o", str(tmp_path / "x.json")),
    )
    assert run.returncode != 0
    assert "one script for all the logs or one per log" in run.stderr
    assert "Traceback" not in run.stderr


def test_calibration_carried_between_the_two_v100_runs(tmp_path):
    """Calibrate on the core_r0.5.0 V100 run, check the Megatron-Core + TE run of the same job on
    the same allocation: the fitted device speed carries (the error shrinks), but not to 5 %:
    the runs differ in software (legacy local transformer vs Transformer Engine), which the model
    prices alike, and their measured times differ by 16 % (385.1 vs 447.7 ms)."""
    out = tmp_path / "v100-core050.json"
    run = _cli(
        "calibrate",
        "--log",
        str(KISTI_CORE050 / "log.txt"),
        "--hardware",
        "v100-32gb",
        "-o",
        str(out),
    )
    assert run.returncode == 0, run.stderr
    before = _check_json(str(KISTI / "log.txt"), "--device", "analytic", "--hardware", "v100-32gb")
    after = _check_json(str(KISTI / "log.txt"), "--device", "analytic", "--hardware", str(out))
    assert before["measured"] == after["measured"]
    error_before = before["error"]["iteration_time_ms"]
    error_after = after["error"]["iteration_time_ms"]
    assert abs(error_after) < abs(error_before) / 2
    # Both runs are priced as the same job: the carried prediction is the core_r0.5.0 time, to
    # within the host term's nonlinearity (costs/fixed_costs.py: the host's time above the GPU's
    # shrinks as the fitted device runs slower, which the one linear factor does not follow).
    assert after["predicted"]["iteration_time_ms"] == pytest.approx(385.1, rel=0.04)


def test_unfused_gradient_accumulation_adds_one_add_per_weight(tmp_path, mindspeed):
    """`--no-gradient-accumulation-fusion` (the 910B script has it) prices
    `main_grad.add_(grad)` per weight and micro-batch (costs/grad_accumulation.py): pp 1, so the
    iteration grows by 16 micro-batches x 8 layers x one layer's add, and nothing else changes."""
    from tinker_opt.costs.grad_accumulation import unfused_accumulation_us
    from tinker_opt.hardware import load_hardware

    script = (MS / "script.sh").read_text(encoding="utf-8")
    assert "--no-gradient-accumulation-fusion" in script
    fused = tmp_path / "fused.sh"
    fused.write_text(script.replace("--no-gradient-accumulation-fusion \\\n", ""), encoding="utf-8")
    other = _check_json(
        str(MS / "log.txt"), str(fused), "--device", "analytic", "--hardware", "910b"
    )
    # LLaMA-2 layer on tp 8 without biases: (4 h^2 + 3 h ffn) / 8 + two replicated norms.
    h, ffn = 4096, 11008
    layer_params = (4 * h * h + 3 * h * ffn) // 8 + 2 * h
    per_layer_us = unfused_accumulation_us(
        layer_params, 2, 4, load_hardware("910b").memory_bandwidth_gbs
    )
    extra_ms = mindspeed["predicted"]["iteration_time_ms"] - other["predicted"]["iteration_time_ms"]
    assert extra_ms == pytest.approx(16 * 8 * per_layer_us / 1e3, rel=1e-3)
    assert mindspeed["predicted"]["peak_allocated_mb"] == other["predicted"]["peak_allocated_mb"]


def test_calibration_carried_between_the_two_gb200_ci_jobs(tmp_path):
    """Calibrate gb200-nvl72 on the tp 1 pp 4 vpp Megatron CI job, check its sibling (same 7B
    model, batch, deterministic settings and 2 x 4 GB200 machines; tp 4 pp 1): the parsed
    figures are the golden values', and the carried prediction moves from -47 % to within 5 %:
    one log fits one factor, and the links follow it (verbs/log_factors.py), so the tp 4 job's
    97 ms of tensor-parallel collectives, which the pipeline-only job has none of, slow with the
    device (with links as described it carried to -13 %)."""
    out = tmp_path / "gb200-ci.json"
    run = _cli(
        "calibrate",
        "--log",
        str(MLM / "log.txt"),
        str(MLM / "script.sh"),
        "--hardware",
        "gb200-nvl72",
        "-o",
        str(out),
    )
    assert run.returncode == 0, run.stderr
    args = (str(MLM_TP4 / "log.txt"), str(MLM_TP4 / "script.sh"), "--device", "analytic")
    before = _check_json(*args, "--hardware", "gb200-nvl72")
    after = _check_json(*args, "--hardware", str(out))
    # Median of iterations 4..24 of the golden values' iteration-time (seconds).
    assert after["measured"]["iteration_time_ms"] == pytest.approx(879.85)
    assert after["measured"]["peak_allocated_mb"] == pytest.approx(58217476096.0 / 2**20)
    assert after["job"]["strategy"]["tp"] == 4 and after["job"]["strategy"]["pp"] == 1
    calibration = json.loads(out.read_text())["calibration"]
    assert calibration["comm_scale"] is None
    assert calibration["links_scale"] == pytest.approx(calibration["time_scale"])
    assert before["error"]["iteration_time_ms"] < -0.4
    assert abs(after["error"]["iteration_time_ms"]) < 0.05
    assert abs(after["error"]["peak_allocated_mb"]) < 0.10


def test_two_gb200_layouts_determine_a_communication_factor(tmp_path):
    """Both GB200 CI jobs (one script per log): their communication shares differ (0 ms of tp
    all-reduce at tp 1 pp 4, 97 ms at tp 4), so they fix a device factor and a communication
    factor; both logs are then within 5 % (measured on the written description, not derived).
    The links come out about twice as slow as described (585 GB/s NVLink), the device about 1.9
    times (2.35 before the BF16 asymptote 0.63 and the attention curves of gb200-nvl72.json)."""
    out = tmp_path / "gb200-two.json"
    run = _cli(
        "calibrate",
        *("--log", str(MLM / "log.txt"), "--log", str(MLM_TP4 / "log.txt")),
        *(str(MLM / "script.sh"), str(MLM_TP4 / "script.sh")),
        *("--hardware", "gb200-nvl72", "-o", str(out)),
    )
    assert run.returncode == 0, run.stderr
    assert "communication x" in run.stdout
    calibration = json.loads(out.read_text())["calibration"]
    assert 1.5 < calibration["comm_scale"] < 3.0
    assert 1.6 < calibration["time_scale"] < 2.2
    for log, script in ((MLM, MLM), (MLM_TP4, MLM_TP4)):
        after = _check_json(
            str(log / "log.txt"),
            str(script / "script.sh"),
            "--device",
            "analytic",
            "--hardware",
            str(out),
        )
        assert abs(after["error"]["iteration_time_ms"]) < 0.05


def test_calibration_carried_between_the_two_h100_ci_jobs(tmp_path):
    """The same two CI test cases on one DGX H100 node (h100-80gb, fitted on published runs):
    uncalibrated within -15 % (the CI configuration's cost beyond the model), and calibrating
    on the tp 1 pp 4 vpp job carries to the tp 4 pp 1 job within 5 %."""
    out = tmp_path / "h100-ci.json"
    run = _cli(
        "calibrate",
        *("--log", str(H100 / "log.txt"), str(H100 / "script.sh")),
        *("--hardware", "h100-80gb", "-o", str(out)),
    )
    assert run.returncode == 0, run.stderr
    args = (str(H100_TP4 / "log.txt"), str(H100_TP4 / "script.sh"), "--device", "analytic")
    before = _check_json(*args, "--hardware", "h100-80gb")
    after = _check_json(*args, "--hardware", str(out))
    # Median of iterations 4..24 of the golden values' iteration-time; one rank's peak.
    assert after["measured"]["iteration_time_ms"] == pytest.approx(1096.98)
    assert after["measured"]["peak_allocated_mb"] == pytest.approx(57143791616.0 / 2**20)
    assert -0.2 < before["error"]["iteration_time_ms"] < -0.05
    assert abs(after["error"]["iteration_time_ms"]) < 0.05
    assert abs(after["error"]["peak_allocated_mb"]) < 0.10


def test_check_h100_ci_log_with_its_steps_only():
    """The tp 1 pp 4 H100 golden values list iteration-time for the logged steps only (start 2,
    step_interval 2): the median of steps 4..24 is its 1.0605608 s, the peak one rank's bytes."""
    result = _check_json(
        str(H100 / "log.txt"),
        str(H100 / "script.sh"),
        "--device",
        "analytic",
        "--hardware",
        "h100-80gb",
    )
    assert result["iterations_used"] == list(range(4, 25, 2))
    assert result["measured"]["iteration_time_ms"] == pytest.approx(1060.5608224868774)
    assert result["measured"]["peak_allocated_mb"] == pytest.approx(60518293504.0 / 2**20)
    assert abs(result["error"]["peak_allocated_mb"]) < 0.10
