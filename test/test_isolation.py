"""The test processes' isolation (test/isolation.py): each xdist worker draws its DDS domain from a slice
of the run's range that no other worker of the run, and no run given a disjoint range, can draw."""
from __future__ import annotations

from pathlib import Path

import pytest
from isolation import TEST_GROUPS, domain_id_for

KILTED, JAZZY = {"SIM2REAL_TEST_DOMAIN_RANGE": "1-116"}, {"SIM2REAL_TEST_DOMAIN_RANGE": "117-232"}


def _reachable(environ: dict[str, str], index: int, count: int) -> set[int]:
    """Every domain the worker can draw, over pids and random draws."""
    return {domain_id_for(environ, (index, count), pid, draw) for pid in range(300) for draw in range(232)}


def test_two_workers_of_a_run_draw_from_disjoint_slices_of_its_range():
    first, second = _reachable(KILTED, 0, 2), _reachable(KILTED, 1, 2)
    assert first == set(range(1, 59)) and second == set(range(59, 117))
    jazzy = _reachable(JAZZY, 0, 2) | _reachable(JAZZY, 1, 2)
    assert jazzy == set(range(117, 233)) and not jazzy & (first | second)


def test_a_single_process_draws_from_the_whole_range_and_a_fixed_domain_moves_per_worker():
    assert _reachable({}, 0, 1) == set(range(1, 233))
    assert domain_id_for({"SIM2REAL_TEST_DOMAIN_ID": "40"}, (0, 1), 1, 1) == 40
    assert [domain_id_for({"SIM2REAL_TEST_DOMAIN_ID": "40"}, (i, 2), 1, 1) for i in (0, 1)] == [40, 41]


def test_more_workers_than_domains_is_refused_naming_the_range():
    with pytest.raises(ValueError, match="SIM2REAL_TEST_DOMAIN_RANGE=5-6: fewer domains than the 3"):
        domain_id_for({"SIM2REAL_TEST_DOMAIN_RANGE": "5-6"}, (0, 3), 1, 1)


def test_every_grouped_module_exists():
    """A renamed module would silently leave its group (and run beside the tests it must not meet)."""
    here = Path(__file__).parent
    missing = [m for modules in TEST_GROUPS.values() for m in modules if not (here / m).is_file()]
    assert not missing, missing
