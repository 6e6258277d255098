"""The stages of `sysid fit` one by one (sysid/fit_stages.py, sysid/fit_model.py), on hand-made
inputs: a two-joint bag built here, the fast model's own recursion as the truth, made-up
identifiability figures. The whole fit on real recordings is test_sysid_fit.py's."""
from __future__ import annotations

import math

import numpy as np
import pytest

from sim2real_ros.sysid.fit import FitOptions, StageTimer
from sim2real_ros.sysid.fit_data import FitData
from sim2real_ros.sysid.fit_model import (
    FastProblem,
    Identifiability,
    flat_weights,
    identifiability,
    latency_scan_grid,
    refit_without,
    search,
    with_nominal_values,
)
from sim2real_ros.sysid.fit_options import MIN_EFFECT, ParameterResult
from sim2real_ros.sysid.fit_stages import (
    Preparation,
    errors,
    excited_joints,
    final_values,
    fit_fast_model,
    flat_partners,
    flat_reason,
    friction_parameter_results,
    friction_reason,
    model_parameter_results,
    negligible_reason,
)
from sim2real_ros.sysid.joint_model import ModelGrid, simulate_joint
from sim2real_ros.sysid.replay import Dynamics

NAMES = ("a", "b")
DT_S = 0.002  # physics step [s]
INERTIA = np.array([0.05, 0.05])  # [kg m^2]
TRUTH = Dynamics(latency_s=0.03, kp=np.array([40.0, 40.0]), kd=np.array([1.5, 1.5]), damping=np.array([0.1, 0.1]),
                 friction=np.array([0.0, 0.0]))
NOMINAL = Dynamics(latency_s=0.02, kp=np.array([30.0, 30.0]), kd=np.array([2.0, 2.0]), damping=np.array([0.1, 0.1]),
                   friction=np.array([0.01, 0.02]))


def square_wave_data(states: np.ndarray | None = None, excite_b: bool = True) -> FitData:
    """4 s at 100 Hz: joint a follows a +/-0.2 rad square wave of 0.5 s, joint b one of 0.7 s (or
    rests); the split at 3 s. states (M, 2) [rad]: the measured positions (zeros when None)."""
    command_t = np.arange(0.0, 4.0, 0.01)
    commands = np.stack([0.2 * np.sign(np.sin(2 * np.pi * command_t / 0.5) + 1e-9),
                         0.2 * np.sign(np.sin(2 * np.pi * command_t / 0.7) + 1e-9) if excite_b
                         else np.zeros_like(command_t)], axis=1)
    state_t = np.arange(0.0, 4.0, 0.01)
    return FitData(NAMES, command_t, commands, state_t, np.zeros((len(state_t), 2)) if states is None else states,
                   {}, split_t=3.0, time_source="header", time_source_reason="hand-made", origin_ns=0,
                   transport_delay_s=0.0, dropped={})


def recorded_under(dyn: Dynamics, excite_b: bool = True) -> FitData:
    """The hand-made bag with the states the fast model gives under `dyn`."""
    data = square_wave_data(excite_b=excite_b)
    grid = ModelGrid.from_data(data, DT_S)
    states = np.stack([simulate_joint(grid, j, dyn.latency_s, dyn.kp[j], dyn.kd[j] + dyn.damping[j], INERTIA[j])
                       for j in range(2)], axis=1)
    return square_wave_data(states, excite_b)


def preparation(data: FitData, kinds=("kp", "kd", "damping"), fit_latency=True) -> Preparation:
    return Preparation(NOMINAL, [0, 1], [], INERTIA, ModelGrid.from_data(data, DT_S), list(kinds), fit_latency)


# ----------------------------------------------------------------------------------------------
# 1. prepare
def test_excited_joints_counts_the_command_range_before_the_split_only():
    data = square_wave_data(excite_b=False)
    found = excited_joints(data, min_excitation_rad=0.01)
    assert found.fitted_joints == [0]
    assert found.notes == ["joint b not excited in the fit part (command range 0.0000 rad): not fitted"]
    assert excited_joints(data, min_excitation_rad=0.41).fitted_joints == []  # the range is 0.4 rad


# ----------------------------------------------------------------------------------------------
# 2. the fast model
def test_latency_scan_grid_is_every_2_ms_up_to_and_including_the_maximum():
    grid = latency_scan_grid(0.01)
    np.testing.assert_allclose(grid, [0.0, 0.002, 0.004, 0.006, 0.008, 0.01], rtol=0, atol=1e-15)


def test_search_recovers_the_dynamics_the_data_was_made_with():
    data = recorded_under(TRUTH)
    options = FitOptions(fit=("latency", "kp"), max_evaluations=600, warmup_s=0.2)
    problem = FastProblem(data, ModelGrid.from_data(data, DT_S), INERTIA, TRUTH.replace_values(
        latency_s=NOMINAL.latency_s, kp=NOMINAL.kp), [0, 1], ["kp"], True, options)
    assert problem.slots == [("latency", -1), ("kp", 0), ("kp", 1)]
    found = search(problem, options, problem.base)
    assert found.x[0] == pytest.approx(0.03, abs=1e-3)
    np.testing.assert_allclose(np.exp(found.x[1:]), [40.0, 40.0], rtol=1e-2)
    assert found.evaluations >= len(latency_scan_grid(options.max_latency_s))
    assert problem.cost(found.x) < 1e-6


def test_identifiability_finds_kd_and_damping_in_one_flat_direction():
    data = recorded_under(TRUTH)
    options = FitOptions(warmup_s=0.2)
    problem = FastProblem(data, ModelGrid.from_data(data, DT_S), INERTIA, TRUTH, [0], ["kp", "kd", "damping"],
                          False, options)
    judged = identifiability(problem, problem.x_of(TRUTH))
    assert judged.effects.shape == judged.flat_weight.shape == (3,)
    assert np.all(judged.effects[:2] > MIN_EFFECT)  # kp and kd move the trajectory
    # kd and damping act only through their sum: a flat direction, (0, kd, -damping)-ish.
    assert len(judged.flat) == 1
    assert judged.flat_weight[0] == pytest.approx(0.0, abs=1e-3)
    assert judged.flat_weight[1] + judged.flat_weight[2] == pytest.approx(1.0, abs=1e-6)


def test_flat_weights_of_two_identical_columns():
    column = np.linspace(-1.0, 1.0, 50)
    weight, flat = flat_weights(np.stack([column, column, 2 * np.flip(column) ** 2], axis=1))
    assert len(flat) == 1
    np.testing.assert_allclose(np.abs(flat[0]), [math.sqrt(0.5), math.sqrt(0.5), 0.0], atol=1e-12)
    np.testing.assert_allclose(weight, [0.5, 0.5, 0.0], atol=1e-12)


def test_negligible_parameters_go_back_to_nominal_exactly_and_the_rest_is_refitted():
    data = recorded_under(TRUTH)
    options = FitOptions(warmup_s=0.2)
    problem = FastProblem(data, ModelGrid.from_data(data, DT_S), INERTIA, TRUTH.replace_values(kp=NOMINAL.kp),
                          [0, 1], ["kp", "damping"], False, options)
    fitted_x = problem.x_of(TRUTH) + 0.05
    assert refit_without(problem, [], fitted_x, problem.base, 100) is fitted_x
    x = refit_without(problem, [1, 3], fitted_x, problem.base, 400)  # the dampings
    assert x[1] == problem.x_of(problem.base)[1] and x[3] == problem.x_of(problem.base)[3]
    np.testing.assert_allclose(np.exp(x[[0, 2]]), [40.0, 40.0], rtol=1e-2)
    kept = with_nominal_values(problem.dynamics(x), problem.slots, [1, 3], NOMINAL)
    np.testing.assert_array_equal(kept.damping, NOMINAL.damping)  # exactly, not exp(log(v))
    assert kept.latency_s == TRUTH.latency_s
    assert with_nominal_values(TRUTH, [("latency", -1)], [0], NOMINAL).latency_s == NOMINAL.latency_s


def test_reasons():
    assert negligible_reason("latency", "", 0.0042, kd_fitted=True) == (
        "a 10 ms change moves the trajectory by 0.42% of the motion (< 1%); nominal value kept")
    assert negligible_reason("damping", "a", 0.005, kd_fitted=True).startswith(
        "a 20 % change moves the trajectory by 0.50% of the motion (< 1%); nominal value kept; kd.a and damping.a act")
    assert negligible_reason("damping", "a", 0.005, kd_fitted=False).endswith("nominal value kept")
    assert flat_reason(0.93, ["kd.a"]) == (
        "lies in a flat direction of the cost (93%) with kd.a: only their combination is determined; "
        "the fitted value, which reproduces it, is written")
    assert "with other parameters:" in flat_reason(0.5, [])
    assert friction_reason(MIN_EFFECT) == ""
    assert friction_reason(0.001) == "a 20 % change moves the trajectory by 0.10% of the motion (< 1%) in PyBullet"


def test_flat_partners_share_a_direction_with_more_than_0_3_each():
    flat = [np.array([0.0, 0.8, -0.6]), np.array([0.25, 0.0, 0.97])]
    assert flat_partners(["x", "y", "z"], flat, 1) == ["z"]
    assert flat_partners(["x", "y", "z"], flat, 2) == ["y"]  # x weighs 0.25 in the second: no partner
    assert flat_partners(["x", "y", "z"], flat, 0) == []


def test_model_parameter_results_from_made_up_figures():
    slots = [("latency", -1), ("kp", 0), ("kd", 0), ("damping", 0)]
    fitted_x = np.array([0.031, math.log(41.0), math.log(1.6), math.log(0.2)])
    kept = NOMINAL.replace_values(latency_s=0.031, kp=np.array([41.0, 30.0]), kd=np.array([1.6, 2.0]))
    judged = Identifiability(effects=np.array([0.5, 0.2, 0.1, 0.004]), flat_weight=np.array([0.0, 0.1, 0.6, 0.4]),
                             flat=[np.array([0.0, 0.0, 0.77, -0.63])])
    results = model_parameter_results(slots, fitted_x, kept, judged, NOMINAL, NAMES, ["kp", "kd", "damping"])
    assert [(r.kind, r.joint, r.identifiable) for r in results] == [
        ("latency", "", True), ("kp", "a", True), ("kd", "a", False), ("damping", "a", False)]
    latency, kp, kd, damping = results
    assert (latency.nominal, latency.fitted, latency.value, latency.reason) == (0.02, 0.031, 0.031, "")
    assert (kp.nominal, kp.value) == (30.0, 41.0) and kp.fitted == pytest.approx(41.0, rel=1e-15)
    assert kd.reason == flat_reason(0.6, ["damping.a"]) and kd.value == 1.6
    assert damping.reason == negligible_reason("damping", "a", 0.004, kd_fitted=True)
    assert damping.value == NOMINAL.damping[0] and damping.fitted == pytest.approx(0.2, rel=1e-15)


def test_fit_fast_model_with_nothing_to_search_keeps_the_nominal_dynamics():
    data = recorded_under(TRUTH)
    model = fit_fast_model(data, preparation(data, kinds=(), fit_latency=False), FitOptions(fit=("friction",)))
    assert (model.dynamics, model.parameters, model.evaluations) == (NOMINAL, [], 0)


def test_fit_fast_model_reports_one_result_per_search_parameter():
    data = recorded_under(TRUTH)
    options = FitOptions(fit=("latency", "kp", "kd", "damping"), max_evaluations=300, warmup_s=0.2)
    model = fit_fast_model(data, preparation(data), options)
    assert [(p.kind, p.joint) for p in model.parameters] == [
        ("latency", ""), ("kp", "a"), ("kd", "a"), ("damping", "a"), ("kp", "b"), ("kd", "b"), ("damping", "b")]
    assert model.dynamics.latency_s == pytest.approx(0.03, abs=2e-3)
    for p in model.parameters:
        if p.kind == "damping":
            assert not p.identifiable and p.value == p.nominal  # only kd + damping is in the data
    assert model.evaluations > 0


# ----------------------------------------------------------------------------------------------
# 3. friction, 5. validate
def test_friction_results_keep_nominal_when_not_identifiable():
    results = friction_parameter_results({0: (0.5, 0.03), 1: (0.002, 0.09)}, NOMINAL, NAMES)
    assert results == [
        ParameterResult("friction", "a", 0.01, 0.03, 0.03, True, 0.5, 0.0, ""),
        ParameterResult("friction", "b", 0.02, 0.09, 0.02, False, 0.002, 0.0, friction_reason(0.002)),
    ]


def test_final_values_read_identifiable_parameters_from_the_final_dynamics():
    parameters = [ParameterResult("latency", "", 0.02, 0.03, 0.03, True, 0.5, 0.0),
                  ParameterResult("kp", "b", 30.0, 41.0, 41.0, True, 0.2, 0.0),
                  ParameterResult("damping", "a", 0.1, 0.3, 0.1, False, 0.001, 0.0, "negligible")]
    polished = NOMINAL.replace_values(latency_s=0.032, kp=np.array([30.0, 42.5]), damping=np.array([0.7, 0.7]))
    assert [p.value for p in final_values(polished, parameters, NAMES)] == [0.032, 42.5, 0.1]


def test_errors_on_the_fit_and_held_out_parts():
    states = np.zeros((400, 2))
    states[:, 0] = 0.1 * np.sin(np.arange(400) * 0.1)  # scale: the std of the fit part after the warm-up
    data = square_wave_data(states)
    simulated = states + np.array([0.01, 0.0])
    out = errors(data, simulated, warmup_s=0.5, fitted_joints=[0])
    assert out["train"]["samples"] == 250 and out["holdout"]["samples"] == 100
    assert out["train"]["rms_rad"] == {"a": pytest.approx(0.01, rel=1e-12), "b": 0.0}
    scale = np.std(states[50:300, 0])
    assert out["holdout"]["fitted_joints_normalized_mse"] == pytest.approx((0.01 / scale) ** 2, rel=1e-12)
    # Joint b rests: its scale is the 1 mrad floor, its error 0; the all-joint figure halves.
    assert out["holdout"]["normalized_mse"] == pytest.approx((0.01 / scale) ** 2 / 2, rel=1e-12)


def test_stage_timer_times_each_stage_and_the_total():
    timer = StageTimer()
    with timer.stage("one"):
        pass
    with pytest.raises(RuntimeError), timer.stage("failing"):
        raise RuntimeError
    timer.since_start("total")
    assert list(timer.timings) == ["one", "failing", "total"]
    assert all(v >= 0.0 for v in timer.timings.values())
    assert timer.timings["total"] >= timer.timings["one"]
