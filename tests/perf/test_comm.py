import pytest

from workbench.hardware import get_gpu
from workbench.perf.comm import Link, collective_time, group_link
from workbench.perf.efficiency import default_constants

LINK = Link(bandwidth_bytes_s=100e9, latency_s=10e-6, name="test")


def test_ring_all_reduce_moves_twice_the_buffer():
    t = collective_time("all_reduce", 1e9, 8, LINK)
    assert t == pytest.approx(14 * 10e-6 + 2 * 7 / 8 * 1e9 / 100e9)


def test_all_gather_and_reduce_scatter_are_half_an_all_reduce_in_bytes():
    ag = collective_time("all_gather", 1e9, 8, LINK)
    assert ag == pytest.approx(7 * 10e-6 + 7 / 8 * 1e9 / 100e9)
    assert collective_time("reduce_scatter", 1e9, 8, LINK) == ag


def test_group_of_one_is_free_and_unknown_collective_fails():
    assert collective_time("all_reduce", 1e9, 1, LINK) == 0
    with pytest.raises(ValueError, match="all_reduce"):
        collective_time("broadcast", 1e9, 4, LINK)


def test_scale_out_is_slower_than_scale_up():
    gpu = get_gpu("h200")
    c = default_constants(gpu)
    assert group_link(gpu, c, True).bandwidth_bytes_s < group_link(gpu, c, False).bandwidth_bytes_s
