"""Calibration: fitting a hardware description's curves and links to a profile."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.profile_support import gpt_model
from tinker_opt.hardware import EfficiencyCurve, LinkSpec, load_hardware, write_hardware_json
from tinker_opt.profile.analytic import analytic_profile
from tinker_opt.profile.calibrate import calibrate
from tinker_opt.profile.runner import MeasureSettings, run_profile
from tinker_opt.profile.space import SpaceLimits
from tinker_opt.profile.store import load_profiled_data


def _model():
    return gpt_model(seq=1024, hidden=2048, heads=16, vocab=8192)


@pytest.fixture(scope="module")
def truth():
    """A description with known curves and links, different from the shipped A100 figures."""
    base = load_hardware("a100-80gb")
    efficiency = replace(
        base.efficiency, matmul=EfficiencyCurve(0.55, 3e8), memory=EfficiencyCurve(0.7, 1e6)
    )
    return replace(
        base,
        efficiency=efficiency,
        intra_node=LinkSpec(120.0, 7.0),
        inter_node=LinkSpec(12.0, 15.0),
    )


@pytest.fixture(scope="module")
def fitted(truth, tmp_path_factory):
    """calibrate() of the shipped A100 description to an analytic profile made with `truth`."""
    folder = analytic_profile(
        _model(), truth, tmp_path_factory.mktemp("truth"), limits=SpaceLimits(max_npu=4, max_mbs=2)
    )
    return calibrate(load_profiled_data(folder), load_hardware("a100-80gb"))


def test_calibration_recovers_the_curves(fitted) -> None:
    """The fitted asymptotic efficiencies are those that made the profile (within rounding to 1 us)."""
    assert fitted["efficiency"]["matmul"]["max_efficiency"] == pytest.approx(0.55, rel=0.02)
    assert fitted["efficiency"]["memory"]["max_efficiency"] == pytest.approx(0.7, rel=0.02)
    assert fitted["calibration"]["mean_abs_rel_error"] < 0.02  # rows are rounded to whole us


def test_calibration_recovers_the_links(fitted) -> None:
    """Latency and bandwidth of both network levels come back from comm.csv."""
    assert fitted["intra_node"]["bandwidth_gbs"] == pytest.approx(120.0, rel=1e-3)
    assert fitted["inter_node"]["latency_us"] == pytest.approx(15.0, rel=1e-2)


def test_calibrated_file_loads_and_keeps_the_peaks(fitted, tmp_path) -> None:
    """The written description loads back, keeps the device's peaks and notes where it came from."""
    path = write_hardware_json(fitted, tmp_path / "my-device.json")
    hardware = load_hardware(path)
    assert hardware.peak_tflops == load_hardware("a100-80gb").peak_tflops
    assert "least squares" in hardware.efficiency.notes[0]


def test_cpu_profile_is_fitted_without_fusion(tmp_path) -> None:
    """A measured CPU profile calibrates with kernel fusion off and yields a loadable description."""
    model = gpt_model(seq=32, hidden=32, heads=4, vocab=256)
    settings = MeasureSettings(device="cpu", max_npu=1, max_mbs=2, comm="skip", warmup=1, repeats=5)
    measured = load_profiled_data(run_profile(model, settings, tmp_path / "cpu"))
    data = calibrate(measured, load_hardware("a100-80gb"))
    assert data["efficiency"]["fuse_elementwise"] is False
    assert data["calibration"]["num_samples"] == 2 * len(measured.blocks)
    load_hardware(write_hardware_json(data, tmp_path / "cpu.json"))
