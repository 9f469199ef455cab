"""Training-log readers (tinker_opt/logs): parsed values equal the logs' own numbers."""

from __future__ import annotations

from pathlib import Path

import pytest

from tinker_opt.errors import LogError
from tinker_opt.logs import read_log, steady_state
from tinker_opt.logs.arguments import launch_text
from tinker_opt.script.reader import read_script_text

LOGS = Path(__file__).parent / "fixtures" / "logs"
KISTI = LOGS / "kisti-v100x4-gpt345m-tp4-main202409" / "log.txt"
KISTI_CORE050 = LOGS / "kisti-v100x4-gpt345m-tp4-core050" / "log.txt"
MLM_CI = LOGS / "mlm-ci-gpt7b-tp1pp4vpp-gb200" / "log.txt"
MS_CI = LOGS / "ms-ci-llama2-l8-tp8-coc-910b" / "log.txt"


def test_megatron_text_iterations_memory_and_arguments():
    """The V100 log: five iteration lines, four memory lines, the whole argument dump."""
    log = read_log(KISTI)
    assert log.form == "megatron-text"
    assert [r.iteration for r in log.iterations] == [10, 20, 30, 40, 50]
    assert [r.time_ms for r in log.iterations] == [995.3, 457.6, 464.2, 437.8, 436.9]
    assert [r.skipped for r in log.iterations] == [10, 5, 0, 0, 0]
    assert sorted(m.rank for m in log.memory) == [0, 1, 2, 3]
    assert {m.max_allocated_mb for m in log.memory} == {2589.13525390625}
    assert {m.reserved_mb for m in log.memory} == {2608.0}
    assert {m.after_iterations for m in log.memory} == {20}
    assert log.arguments["tensor_model_parallel_size"] == "4"
    assert log.arguments["micro_batch_size"] == "4"
    assert log.arguments["config_logger_dir"] == ""
    assert len(log.arguments) > 300
    assert log.warnings == ()


def test_memory_reports_that_share_a_line():
    """The core_r0.5.0 V100 log prints two ranks' reports on one line (ranks 2+1, 3+0): all four
    are read, each with its own fields, and all 20 iteration lines between the checkpoints and
    validations."""
    log = read_log(KISTI_CORE050)
    assert [m.rank for m in log.memory] == [2, 1, 3, 0]
    for report in log.memory:
        assert report.after_iterations == 20
        assert report.allocated_mb == 1786.68505859375
        assert report.max_allocated_mb == 4673.77880859375
        assert report.reserved_mb == report.max_reserved_mb == 4746.0
    assert [r.iteration for r in log.iterations] == list(range(10, 201, 10))
    assert log.iterations[0].time_ms == 1011.8 and log.iterations[-1].time_ms == 384.4
    assert log.arguments["transformer_impl"] == "local"
    assert log.warnings == ()
    steady = steady_state(log)
    assert steady.dropped == (10,)
    assert steady.iteration_time_ms == 385.1  # the median of the 19 lines 20..200


def test_steady_state_drops_the_first_interval():
    """Steady state of the V100 log: iterations 20..50, median 447.7 ms."""
    steady = steady_state(read_log(KISTI))
    assert [r.iteration for r in steady.used] == [20, 30, 40, 50]
    assert steady.dropped == (10,)
    assert steady.iteration_time_ms == pytest.approx((457.6 + 437.8) / 2)


def test_megatron_ci_json():
    """Megatron CI golden values: seconds to ms, bytes to MB, nan steps left out."""
    log = read_log(MLM_CI)
    assert log.form == "megatron-ci-json"
    assert [r.iteration for r in log.iterations] == list(range(2, 25, 2))
    assert log.iterations[0].time_ms == pytest.approx(8554.3)
    assert steady_state(log).iteration_time_ms == pytest.approx(787.13)
    (memory,) = log.memory
    assert memory.max_allocated_mb == 60519342080.0 / 2**20
    assert memory.allocated_mb == 24540168192.0 / 2**20


def test_mindspeed_ci_json():
    """MindSpeed CI baseline: 15 times in ms, 8 ranks' memory."""
    log = read_log(MS_CI)
    assert log.form == "mindspeed-ci-json"
    assert len(log.iterations) == 15 and log.iterations[0].time_ms == 50723.8
    assert steady_state(log).iteration_time_ms == pytest.approx(1029.45)
    assert [m.rank for m in log.memory] == list(range(8))
    assert {m.max_allocated_mb for m in log.memory} == {4080.50390625}


def test_nemo_both_line_forms(tmp_path):
    """NeMo 2 plain lines and the progress bar both give train_step_timing per step."""
    path = tmp_path / "nemo.log"
    path.write_text(
        "Training epoch 0, iteration 120/149 | lr: 3e-05 | global_step: 120 | "
        "reduced_train_loss: 1.233 | train_step_timing in s: 0.03146\n"
        "Epoch 0: : 10/100 [00:05<00:45, reduced_train_loss=9.01, global_step=121.0, "
        "train_step_timing in s=0.0317]\r"
        "Epoch 0: : 11/100 [00:05<00:45, reduced_train_loss=9.00, global_step=122.0, "
        "train_step_timing in s=0.0315]\n",
        encoding="utf-8",
    )
    log = read_log(path)
    assert log.form == "nemo-text"
    assert [(r.iteration, r.time_ms) for r in log.iterations] == [
        (120, pytest.approx(31.46)),
        (121, pytest.approx(31.7)),
        (122, pytest.approx(31.5)),
    ]


def test_tensorboard_folder(tmp_path):
    """A TensorBoard folder with Megatron's scalars reads like the CI metrics."""
    tensorboard = pytest.importorskip("torch.utils.tensorboard")
    writer = tensorboard.SummaryWriter(str(tmp_path))
    for step, seconds in ((1, 5.0), (2, 0.5), (3, 0.52)):
        writer.add_scalar("iteration-time", seconds, step)
        writer.add_scalar("mem-max-allocated-bytes", 2**30 * step, step)
    writer.close()
    log = read_log(tmp_path)
    assert log.form == "tensorboard"
    assert [r.time_ms for r in log.iterations] == pytest.approx([5000.0, 500.0, 520.0])
    assert log.memory[0].max_allocated_mb == pytest.approx(3 * 1024)


def test_not_a_log_is_one_line_error(tmp_path):
    """A launch script is not a training log: a LogError naming the forms."""
    path = tmp_path / "run.sh"
    path.write_text("#!/bin/bash\ntorchrun pretrain_gpt.py --num-layers 2\n", encoding="utf-8")
    with pytest.raises(LogError, match="not a training log") as info:
        read_log(path)
    assert "\n" not in str(info.value)


def test_cut_json_is_one_line_error(tmp_path):
    """A CI metrics file cut while being written: a LogError, not a traceback."""
    path = tmp_path / "cut.json"
    path.write_text(MS_CI.read_text(encoding="utf-8")[:300], encoding="utf-8")
    with pytest.raises(LogError, match="does not parse"):
        read_log(path)


def test_half_written_log_keeps_what_is_complete(tmp_path):
    """A running job's log cut in the middle of an iteration line: that line is skipped, with a warning."""
    text = KISTI.read_text(encoding="utf-8")
    cut = text[: text.index("elapsed time per iteration (ms): 436.9")]
    path = tmp_path / "running.log"
    path.write_text(cut, encoding="utf-8")
    log = read_log(path)
    assert [r.iteration for r in log.iterations] == [10, 20, 30, 40]
    assert any("without a whole time skipped" in w for w in log.warnings)


def test_mixed_runs_use_the_last_with_a_warning(tmp_path):
    """Two runs in one file (a restart appending): the last run is read, and the warning says so."""
    text = KISTI.read_text(encoding="utf-8")
    second = text.replace(
        "elapsed time per iteration (ms): 437.8", "elapsed time per iteration (ms): 400.0"
    )
    path = tmp_path / "two.log"
    path.write_text(text + second, encoding="utf-8")
    log = read_log(path)
    assert [r.iteration for r in log.iterations] == [10, 20, 30, 40, 50]
    assert log.iterations[3].time_ms == 400.0
    assert any("2 runs" in w for w in log.warnings)


def test_all_warm_up_is_an_error(tmp_path):
    """One logged interval only: nothing is left after the start-up is dropped."""
    text = KISTI.read_text(encoding="utf-8")
    path = tmp_path / "short.log"
    path.write_text(text[: text.index(" [2024-09-14 19:44:24]")], encoding="utf-8")
    with pytest.raises(LogError, match="warm-up"):
        steady_state(read_log(path))


def test_argument_dump_is_the_job():
    """The dump's launch line reads into the run's model and strategy."""
    info = read_script_text(launch_text(read_log(KISTI).arguments), "dump.sh")
    strategy = info.train.strategy
    assert (strategy.tp, strategy.pp, strategy.dp, strategy.sp, strategy.mbs) == (4, 1, 1, True, 4)
    assert (info.train.global_batch_size, info.train.nnodes, info.train.nproc_per_node) == (
        16,
        1,
        4,
    )
    model = info.model
    assert (model.num_layers, model.hidden_size, model.seq_length) == (24, 1024, 1024)
    assert model.precision == "fp16" and model.vocab_size == 50257


def test_dump_without_gradient_accumulation_fusion_is_the_job():
    """`gradient_accumulation_fusion False` in a dump is Megatron's
    `--no-gradient-accumulation-fusion` (priced: costs/grad_accumulation.py); True is the default."""
    arguments = dict(read_log(KISTI).arguments)
    assert read_script_text(launch_text(arguments), "a.sh").train.gradient_accumulation_fusion
    arguments["gradient_accumulation_fusion"] = "False"
    text = launch_text(arguments)
    assert "--no-gradient-accumulation-fusion" in text
    assert not read_script_text(text, "b.sh").train.gradient_accumulation_fusion
