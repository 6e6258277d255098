"""`sim2real bench --repeat N`: rounds of the selected areas, each figure as its median over the runs."""
from __future__ import annotations

import argparse
import json
import math

import pytest

from sim2real_ros.benchmarking import median_over_runs
from sim2real_ros.cli import bench_cmd


def test_numbers_become_median_min_max_and_every_run():
    combined = median_over_runs([{"p99": 9.0, "n": 10}, {"p99": 3.0, "n": 12}, {"p99": 5.0, "n": 11}])
    assert combined["p99"] == {"median": 5.0, "min": 3.0, "max": 9.0, "runs": [9.0, 3.0, 5.0]}
    assert combined["n"]["median"] == 11.0


def test_keys_some_run_lacks_are_left_out_and_other_values_kept_as_lists():
    runs = [{"a": 1.0, "only_first": 2.0, "note": "x", "flag": True, "nested": {"b": 1.0}},
            {"a": 3.0, "note": "y", "flag": False, "nested": {"b": 2.0}}]
    combined = median_over_runs(runs)
    assert set(combined) == {"a", "note", "flag", "nested"}
    assert combined["note"] == ["x", "y"] and combined["flag"] == [True, False]
    assert combined["nested"]["b"]["median"] == 1.5


def test_a_run_without_samples_is_kept_but_not_counted():
    combined = median_over_runs([float("nan"), 2.0, 4.0])
    assert combined["median"] == 3.0 and (combined["min"], combined["max"]) == (2.0, 4.0)
    assert math.isnan(combined["runs"][0])
    assert math.isnan(median_over_runs([float("nan")])["median"])


@pytest.fixture()
def counting_benchmark(tmp_path, monkeypatch):
    """A benchmarks/bench_count.py whose figure is the number of times it ran (1, 2, 3...), and one
    that fails on its second run."""
    counter = tmp_path / "count.txt"
    (tmp_path / "bench_count.py").write_text(
        "from pathlib import Path\n"
        f"COUNTER = Path({str(counter)!r})\n"
        "def run(quick):\n"
        "    n = int(COUNTER.read_text()) + 1 if COUNTER.exists() else 1\n"
        "    COUNTER.write_text(str(n))\n"
        "    return {'e2e_latency_ms': {'p99': float(n * 10), 'n': 5}, 'quick': quick}\n")
    (tmp_path / "bench_flaky.py").write_text(
        "from pathlib import Path\n"
        f"MARK = Path({str(tmp_path / 'ran_once')!r})\n"
        "def run(quick):\n"
        "    if MARK.exists():\n"
        "        raise RuntimeError('second run broke')\n"
        "    MARK.write_text('1')\n"
        "    return {'x': 1.0}\n")
    monkeypatch.setattr(bench_cmd, "benchmark_files",
                        lambda: {"e2e": tmp_path / "bench_count.py", "flaky": tmp_path / "bench_flaky.py"})
    return tmp_path


def test_repeat_runs_rounds_and_reports_the_headline_median(counting_benchmark, tmp_path, capsys):
    out = tmp_path / "bench.json"
    code = bench_cmd.run(argparse.Namespace(only=["e2e"], quick=True, json=out, repeat=3))
    assert code == 0
    result = json.loads(out.read_text())
    assert result["e2e_latency_ms"]["p99"] == {"median": 20.0, "min": 10.0, "max": 30.0, "runs": [10.0, 20.0, 30.0]}
    assert [r["e2e"]["e2e_latency_ms"]["p99"] for r in result["rounds"]] == [10.0, 20.0, 30.0]
    assert result["repeat"] == 3
    assert "(round 3/3)" in capsys.readouterr().out


def test_an_area_failing_in_any_round_is_reported_by_its_error_and_the_exit_code(counting_benchmark, tmp_path):
    out = tmp_path / "bench.json"
    code = bench_cmd.run(argparse.Namespace(only=["flaky", "e2e"], quick=True, json=out, repeat=2))
    assert code == 1
    result = json.loads(out.read_text())
    assert result["areas"]["flaky"] == {"errors": ["RuntimeError: second run broke"]}
    assert result["e2e_latency_ms"]["p99"]["runs"] == [10.0, 20.0]


def test_repeat_below_one_is_refused_naming_the_value(counting_benchmark, capsys):
    assert bench_cmd.run(argparse.Namespace(only=["e2e"], quick=True, json=None, repeat=0)) == 2
    assert "--repeat 0" in capsys.readouterr().out


def test_one_run_keeps_the_single_run_layout(counting_benchmark, tmp_path):
    out = tmp_path / "bench.json"
    assert bench_cmd.run(argparse.Namespace(only=["e2e"], quick=False, json=out, repeat=1)) == 0
    result = json.loads(out.read_text())
    assert result["e2e_latency_ms"] == {"p99": 10.0, "n": 5} and "rounds" not in result
