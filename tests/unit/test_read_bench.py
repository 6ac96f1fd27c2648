"""make bench-read's pure parts (issue 14): the tree's file sizes (bench/make_tree.py, copied to the storage node
and so imported by path) and the cache hit ratios from two arcstats readings (bench/read_bench.py)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _load(name: str):
    sys.path.insert(0, str(REPO / "bench"))
    spec = importlib.util.spec_from_file_location(name, REPO / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


make_tree = _load("make_tree")
read_bench = _load("read_bench")


def test_tree_sizes_are_seeded_bounded_and_reach_the_total():
    sizes = make_tree.sizes(64 << 20, 16 << 10, 1 << 20, seed=1)
    assert sizes == make_tree.sizes(64 << 20, 16 << 10, 1 << 20, seed=1)  # the same tree on every run
    assert sizes != make_tree.sizes(64 << 20, 16 << 10, 1 << 20, seed=2)
    assert all(16 << 10 <= n <= 1 << 20 for n in sizes)
    assert sum(sizes) >= 64 << 20 > sum(sizes[:-1])
    small = sum(1 for n in sizes if n < 128 << 10)
    assert small > len(sizes) / 3  # log-uniform: as many files in 16-128 KiB as in 128 KiB-1 MiB, roughly


@pytest.mark.parametrize(("text", "value"), [("1G", 1 << 30), ("16K", 16 << 10), ("1.5M", 3 << 19), ("4096", 4096)])
def test_sizes_parse(text, value):
    assert make_tree.size(text) == value


def test_hit_ratios_from_two_arcstats_readings():
    before = {"hits": 100, "misses": 50, "l2_hits": 10, "l2_misses": 40, "size": 1, "l2_size": 2}
    after = {"hits": 1000, "misses": 150, "l2_hits": 90, "l2_misses": 60, "size": 1, "l2_size": 2}
    r = read_bench.ratios_of(before, after)
    assert (r["hits"], r["misses"], r["l2_hits"], r["l2_misses"]) == (900, 100, 80, 20)
    assert (r["arc_hit_ratio"], r["l2arc_hit_ratio"], r["cache_hit_ratio"]) == (0.9, 0.8, 0.98)
    idle = read_bench.ratios_of(before, before)
    assert idle["arc_hit_ratio"] is None and idle["cache_hit_ratio"] is None and idle["l2arc_hit_ratio"] is None


def test_the_checkpoint_benchmark_states_the_writers_bandwidth_for_the_planner():
    """bench/results/checkpoint.json carries the writer-alone MB/s that `fabricctl plan checkpoint` reads."""
    checkpoint_bench = _load("checkpoint_bench")
    from fabric_core import ckplan
    run = {"freeze": [{"step": None, "mb_s": 13.6}, {"step": 11000, "mb_s": 14.5}], "list_ours": [16.5, 16.8, 20.2],
           "list_base": [7.4, 8.25, 8.65], "ours_s": 98.2, "base_s": 473.0, "ours_plan_s": 25.4, "base_plan_s": 218.3}
    doc = checkpoint_bench.results(run)
    assert {"date", "commit", "lab", "figures", "ratios"} <= set(doc)
    assert doc["ratios"] == {"rotate_over_sanoid": 0.208, "rotate_plan_over_sanoid_readonly": 0.116,
                             "list_over_zfs_list": 2.036}
    assert ckplan.write_mb_s(doc) == (13.6, "figures.write_mb_s")
