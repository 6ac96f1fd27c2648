"""bench/read_loader.py (the reader of `make bench-read`): its pure statistics (nearest-rank percentiles,
latency summaries, rates with MB = 10^6), the seeded order and the batches, and a real run on a small
temporary directory with 2 workers: every file read exactly once per epoch. Timings are never asserted.

The script is standalone (it is copied to a GPU node), so it is imported by path."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from support import load_bench

REPO = Path(__file__).resolve().parents[2]


def _load():
    return load_bench("read_loader")  # registered: worker processes pickle its functions by this name


rl = _load()


# --- pure -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("p, value", [(0, 15), (5, 15), (20, 15), (30, 20), (40, 20), (50, 35), (80, 40),
                                      (90, 50), (100, 50)])
def test_percentile_is_the_nearest_rank(p, value):
    assert rl.percentile([35, 20, 15, 50, 40], p) == value  # the textbook example, given unsorted


def test_percentile_of_one_value_and_of_many():
    assert rl.percentile([7.0], 99) == 7.0
    values = list(range(1, 101))
    assert [rl.percentile(values, p) for p in (50, 90, 99, 100)] == [50, 90, 99, 100]
    assert rl.percentile(list(range(1, 1001)), 99.9) == 999


@pytest.mark.parametrize("values, p", [([], 50), ([1.0], -1), ([1.0], 100.1)])
def test_percentile_refuses_what_has_none(values, p):
    with pytest.raises(ValueError):
        rl.percentile(values, p)


def test_summary_is_in_milliseconds():
    lat = [0.001 * i for i in range(1, 101)]  # 1..100 ms
    s = rl.summary(lat)
    assert s == {"p50": 50.0, "p90": 90.0, "p99": 99.0, "max": 100.0, "mean": 50.5}
    assert rl.summary([]) == {"p50": None, "p90": None, "p99": None, "max": None, "mean": None}


def test_rates_use_decimal_megabytes():
    assert rl.MB == 1e6
    assert rl.rate(250e6, 2.0, rl.MB) == 125.0
    assert rl.rate(10, 4.0) == 2.5
    assert rl.rate(10, 0.0) is None


def test_the_order_is_seeded_per_epoch_and_a_permutation():
    a = rl.epoch_order(1000, seed=1, epoch=1)
    assert sorted(a) == list(range(1000)) and a != list(range(1000))
    assert a == rl.epoch_order(1000, seed=1, epoch=1)
    assert a != rl.epoch_order(1000, seed=1, epoch=2)
    assert a != rl.epoch_order(1000, seed=2, epoch=1)


def test_batches_cover_the_order_in_order():
    assert rl.batches([5, 3, 1, 4, 2], 2) == [[5, 3], [1, 4], [2]]
    assert rl.batches([], 4) == []
    with pytest.raises(ValueError):
        rl.batches([1], 0)


def test_an_epoch_report_counts_reads_per_file():
    results = [(11, [0, 2], 300, [0.001, 0.003]), (12, [1, 2], 500, [0.002, 0.004])]
    r = rl.epoch_report(1, results, 4, 2.0, False)
    assert r["files"] == 4 and r["bytes"] == 800 and r["mb_s"] == 0.0 and r["files_s"] == 2.0
    assert r["reads_per_file"] == {"min": 0, "max": 2}  # file 3 missed, file 2 read twice
    assert r["workers_used"] == 2 and r["latency_ms"]["max"] == 4.0


# --- a real run -----------------------------------------------------------------------------------------

@pytest.fixture
def tree(tmp_path) -> tuple[Path, dict[str, int]]:
    root = tmp_path / "data"
    sizes = {}
    for i in range(23):
        path = root / f"shard{i % 3}" / f"sample{i:03d}.bin"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(1000 * i + 1))  # sizes around and above the block size below
        sizes[str(path)] = 1000 * i + 1
    (root / "empty").mkdir()
    (root / "link").symlink_to(root / "shard0" / "sample000.bin")  # not followed: read once, as its target
    return root, sizes


def test_every_file_is_read_exactly_once_per_epoch(tree):
    root, sizes = tree
    assert rl.list_files(str(root)) == sorted(sizes)
    doc = rl.run(str(root), workers=2, epochs=3, seed=7, block_size=4096, batch_size=3)
    assert doc["parameters"] == {"root": str(root), "workers": 2, "epochs": 3, "seed": 7, "block_size": 4096,
                                 "batch_size": 3, "drop_caches": False, "files": 23, "bytes": sum(sizes.values())}
    assert [e["epoch"] for e in doc["epochs"]] == [1, 2, 3]
    for e in doc["epochs"]:
        assert e["files"] == 23 and e["bytes"] == sum(sizes.values())
        assert e["reads_per_file"] == {"min": 1, "max": 1}
        assert 1 <= e["workers_used"] <= 2 and e["caches_dropped"] is False
        assert set(e["latency_ms"]) == {"p50", "p90", "p99", "max", "mean"}
        assert e["latency_ms"]["p50"] <= e["latency_ms"]["p90"] <= e["latency_ms"]["p99"] <= e["latency_ms"]["max"]
    assert doc["units"] == {"mb": 1e6, "latency": "ms", "percentiles": "nearest-rank"}


def test_main_prints_one_document_and_writes_json_out(tree, tmp_path, capsys):
    root, sizes = tree
    out = tmp_path / "result.json"
    assert rl.main([str(root), "--workers", "2", "--epochs", "1", "--json-out", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(out.read_text())
    assert printed["epochs"][0]["files"] == len(sizes)


def test_dropping_caches_needs_root_and_stops_before_reading(tree, monkeypatch, capsys):
    root, _ = tree
    monkeypatch.setattr(rl.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(rl, "run", lambda *a, **k: pytest.fail("read although not root"))
    with pytest.raises(SystemExit) as exc:
        rl.main([str(root), "--drop-caches-between-epochs"])
    assert exc.value.code == 2
    assert "only root may" in capsys.readouterr().err


def test_bad_arguments_are_usage_errors(tmp_path, capsys):
    for argv in ([str(tmp_path / "missing")], [str(tmp_path), "--workers", "0"]):
        with pytest.raises(SystemExit) as exc:
            rl.main(argv)
        assert exc.value.code == 2
    with pytest.raises(SystemExit, match="no files under"):
        rl.main([str(tmp_path)])
