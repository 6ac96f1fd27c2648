"""make bench-read's pure parts (issue 14): the tree's file sizes (bench/make_tree.py, copied to the storage node
and so imported by path) and the cache hit ratios from two arcstats readings (bench/read_bench.py)."""

from __future__ import annotations

import pytest
from support import load_bench

make_tree = load_bench("make_tree")
read_bench = load_bench("read_bench")


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
    checkpoint_bench = load_bench("checkpoint_bench")
    from fabric_core.services import ckplan
    run = {"freeze": [{"step": None, "mb_s": 13.6}, {"step": 11000, "mb_s": 14.5}], "list_ours": [16.5, 16.8, 20.2],
           "list_base": [7.4, 8.25, 8.65], "ours_s": 98.2, "base_s": 473.0, "ours_plan_s": 25.4, "base_plan_s": 218.3}
    doc = checkpoint_bench.results(run)
    assert {"date", "commit", "lab", "figures", "ratios"} <= set(doc)
    assert doc["ratios"] == {"rotate_over_sanoid": 0.208, "rotate_plan_over_sanoid_readonly": 0.116,
                             "list_over_zfs_list": 2.036}
    assert ckplan.write_mb_s(doc) == (13.6, "figures.write_mb_s")


def test_the_profile_names_each_vms_cpu_per_gib_and_the_ceiling_it_sets(tmp_path, monkeypatch):
    """bench-read-profile's arithmetic: CPU-seconds per GiB per VM are cores x seconds / GiB (medians of the
    rounds), and the ceiling is the host's cores over the CPU-seconds per GiB of both VMs of the iSCSI read."""
    monkeypatch.setattr(read_bench, "write_json", lambda name, doc: tmp_path / name)
    monkeypatch.setattr(read_bench.os, "cpu_count", lambda: 2)

    def run(mb_s, seconds, cores):
        return {"mb_s": mb_s, "seconds": seconds, "vm_cores": cores}

    res = {"tree": {"files": 10, "bytes": 2**30},
           "reads": {"iscsi-ext4": [run(50, 20, {"gpu1": 0.5, "storage1": 1.0}),
                                    run(60, 20, {"gpu1": 0.7, "storage1": 1.0})],
                     "local": [run(170, 6, {"gpu1": 1.0, "storage1": 0.0}),
                               run(180, 6, {"gpu1": 1.0, "storage1": 0.0})]}}
    lines = read_bench.profile_rows({"zfs": "2.3.2"}, res, "now")
    text = "\n".join(lines)
    assert "| iscsi-ext4 | 55.0 | 0.6 | 1.0 | 12.0 | 20.0 |" in text  # 0.6 cores x 20 s / 1 GiB = 12
    assert "| local | 175.0 | 1.0 | 0.0 | 6.0 | 0.0 |" in text
    assert "32.0 CPU-seconds" in text and f"about {2 / 32 * 2**30 / 1e6:.0f} MB/s" in text  # 2 cores / 32 s per GiB
    assert "- iscsi_over_local_mb_s: 0.314" in text and "- gpu1_cpu_per_gib_iscsi_over_local: 2.0" in text
