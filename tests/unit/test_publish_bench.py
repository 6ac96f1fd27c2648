"""make bench-publish's results file (issue 29): bench/results/publish.json from run_size's results, one a size,
with each figure named with its size, the two ratios, and a ratio whose inputs were not measured null with the
reason, never invented."""

from __future__ import annotations

import json

from support import load_bench

pb = load_bench("publish_bench")

REQUIRED = {"date", "commit", "lab", "figures", "ratios"}  # what report.write_json requires of every results file
SKIP = "gpu1 has 3.2 GiB free in /var/tmp/pubbench-scratch; the copy needs 4.4 GiB (with a 256 MiB reserve)"


def run(gib: int, *, extras: bool, rsync: bool = True, **seconds) -> dict:
    """One size's dict with the keys run_size gives it, in the cases it has (extras: the floor copy and the first
    read; rsync: the copy was made, or skipped with its reason)."""
    r = {"gib": gib, "vol_gib": -(-gib * 13 // 10), "floor_s": None, "read_pub_s": None,
         "files": 7693 * gib, "bytes": gib * 2**30, "generate_s": 48.5 * gib, "create_s": 3.9, "ingest_s": 111.5 * gib,
         "seal_s": 43.3 * gib, "sealed_files": 7693 * gib, "publish_s": 18.9, "publish_wall": 19.2}
    if extras:
        r["floor_s"] = 83.4 * gib
    r["gpu_free"] = {"gpu1": 9 * 2**30, "gpu2": 10 * 2**30}
    if rsync:
        r["rsync_s"] = 108.0 * gib
    else:
        r["rsync_s"], r["rsync_skip"] = None, SKIP
    if extras:
        r["read_pub_s"], r["read_pub_bytes"] = 155.2 * gib, gib * 2**30 + 10240
    if extras and rsync:
        r["read_copy_s"], r["read_copy_bytes"] = 34.6 * gib, gib * 2**30 + 10240
    r["unpublish_s"] = 20.2
    r.update(seconds)
    return r


def test_sizes_1_and_4_give_both_ratios_and_every_figure_named_with_its_size():
    done = [run(1, extras=True), run(4, extras=False, publish_s=20.6, publish_wall=20.8, rsync_s=656.7)]
    doc = pb.document(done)
    assert REQUIRED <= set(doc)
    assert doc["ratios"] == {"publish_over_rsync_4g": 0.031, "publish_4g_over_1g": 1.09}  # 20.6/656.7, 20.6/18.9
    f = doc["figures"]
    assert (f["publish_s_1g"], f["publish_wall_1g"], f["rsync_s_1g"], f["floor_s_1g"]) == (18.9, 19.2, 108.0, 83.4)
    assert (f["publish_s_4g"], f["publish_wall_4g"], f["rsync_s_4g"]) == (20.6, 20.8, 656.7)
    for gib in (1, 4):
        for key in ("create_s", "ingest_s", "seal_s", "unpublish_s", "generate_s", "files", "bytes", "vol_gib",
                    "sealed_files", "gpu_free_gpu1", "gpu_free_gpu2"):
            assert f"{key}_{gib}g" in f, f"{key}_{gib}g"
    assert f["files_4g"] == 4 * 7693 and f["bytes_4g"] == 4 * 2**30
    assert (f["read_pub_s_1g"], f["read_copy_s_1g"], f["read_copy_bytes_1g"]) == (155.2, 34.6, 2**30 + 10240)
    # 4 GiB without --extras-sizes: no floor copy nor first read there, and the file says so instead of a figure
    assert not {"floor_s_4g", "read_pub_s_4g", "read_copy_s_4g"} & set(f)
    assert set(doc["not_measured"]) == {"floor_s_4g", "read_pub_s_4g", "read_copy_s_4g"}
    assert "--extras-sizes" in doc["not_measured"]["floor_s_4g"]
    assert not [k for k in f if k.startswith("gib")] and None not in f.values()
    assert doc["sizes_gib"] == [1, 4]
    json.dumps(doc)  # as write_json will


def test_size_1_only_leaves_both_ratios_null_with_the_reason():
    doc = pb.document([run(1, extras=True)])
    assert doc["ratios"] == {"publish_over_rsync_4g": None, "publish_4g_over_1g": None}
    why = doc["not_measured"]
    assert why["publish_over_rsync_4g"] == ("publish_s_4g: not measured: no run of that size (--sizes 1); "
                                            "rsync_s_4g: not measured: no run of that size (--sizes 1)")
    assert why["publish_4g_over_1g"] == "publish_s_4g: not measured: no run of that size (--sizes 1)"
    assert not [k for k in doc["figures"] if k.endswith("_4g")]
    assert doc["figures"]["publish_s_1g"] == 18.9


def test_a_skipped_rsync_leaves_its_ratio_null_with_the_skip_reason_and_the_growth_ratio_measured():
    done = [run(1, extras=True), run(4, extras=False, rsync=False, publish_s=20.6)]
    doc = pb.document(done)
    assert doc["ratios"] == {"publish_over_rsync_4g": None, "publish_4g_over_1g": 1.09}
    assert doc["not_measured"]["publish_over_rsync_4g"] == f"rsync_s_4g: the rsync was not run: {SKIP}"
    assert doc["not_measured"]["rsync_s_4g"] == f"the rsync was not run: {SKIP}"
    assert "rsync_s_4g" not in doc["figures"] and "publish_4g_over_1g" not in doc["not_measured"]


def test_a_skipped_rsync_with_the_first_read_measured_says_there_was_no_copy_to_read():
    doc = pb.document([run(1, extras=True, rsync=False)])
    assert doc["figures"]["read_pub_s_1g"] == 155.2 and "read_copy_s_1g" not in doc["figures"]
    assert doc["not_measured"]["read_copy_s_1g"] == f"no rsync'ed copy: the rsync was not run: {SKIP}"


def test_the_report_writes_publish_json_and_states_the_targets_in_the_section(monkeypatch):
    written = {}
    monkeypatch.setattr(pb, "write_json", lambda name, doc: written.update({name: doc}))
    done = [run(1, extras=True), run(4, extras=False, rsync=False, publish_s=20.6)]
    text = "\n".join(pb.report(done, "2026-11-29 10:00 UTC"))
    assert set(written) == {"publish"} and REQUIRED <= set(written["publish"])
    assert "`bench/results/publish.json`" in text and f"at commit {written['publish']['commit']}" in text
    assert "- publish_4g_over_1g: **1.09** (target <= 1.1)" in text
    assert f"- publish_over_rsync_4g: - (target <= 0.02; not measured: rsync_s_4g: the rsync was not run: {SKIP})" \
        in text
    done[1] = run(4, extras=False, publish_s=20.6, rsync_s=656.7)
    text = "\n".join(pb.report(done, "2026-11-29 10:00 UTC"))
    assert "- publish_over_rsync_4g: **0.031** (target <= 0.02, not met)" in text
