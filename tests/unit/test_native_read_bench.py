"""make bench-native's pure parts (issue 27): iscsi-perf's and fio's outputs as recorded on the lab
(tests/unit/data/native_read/README.md), the arithmetic of the rounds and ratios, and the command lines
(no CHAP secret in iscsi-perf's argv: libiscsi reads it from its environment)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from support import load_bench

DATA = Path(__file__).resolve().parent / "data" / "native_read"




nb = load_bench("native_read_bench")


def test_iscsi_perf_sequential_run_is_read_from_its_final_average():
    r = nb.parse_iscsi_perf((DATA / "iscsi-perf-seq1m.txt").read_text())
    assert r["request_bytes"] == 1 << 20
    assert r["block_size"] == 512
    assert r["capacity_bytes"] == 1600 << 20
    # the run's own average (the last "iops average" without "iops current"), times the request size, in 10^6 B/s
    assert r["mb_s"] == round(r["iops"] * (1 << 20) / 1e6, 1)
    assert r["iops"] == 58 and r["seconds_logged"] >= 10  # the recording's last line: "iops average 58 (58 MB/s)"
    assert r["iops_per_second"]["min"] <= r["iops"] <= r["iops_per_second"]["max"]


def test_iscsi_perf_random_run():
    r = nb.parse_iscsi_perf((DATA / "iscsi-perf-rand128k.txt").read_text())
    assert r["request_bytes"] == 128 << 10
    assert r["iops"] == 503 and r["mb_s"] == 65.9  # "iops average 503 (62 MB/s)": iscsi-perf's own MiB, truncated
    assert r["mb_s"] == round(r["iops"] * (128 << 10) / 1e6, 1)


def test_an_aborted_or_unfinished_iscsi_perf_run_is_refused():
    text = (DATA / "iscsi-perf-seq1m.txt").read_text()
    with pytest.raises(nb.BenchError, match="did not finish"):
        nb.parse_iscsi_perf(text.replace("finished.", "ABORTED!"))
    with pytest.raises(nb.BenchError, match="did not finish"):
        nb.parse_iscsi_perf(text.split("finished.")[0].rsplit("iops average", 1)[0])


def test_fio_json_gives_the_read_figures():
    r = nb.parse_fio((DATA / "fio-seq1m.json").read_text())
    assert r["bytes"] > 0 and r["seconds"] > 0
    assert r["mb_s"] == pytest.approx(r["bytes"] / r["seconds"] / 1e6, rel=0.02)
    with pytest.raises(nb.BenchError, match="no job"):
        nb.parse_fio("fio: no such file")


def test_ratios_are_the_median_of_each_rounds_pair():
    def run(mb):
        return {"mb_s": mb}
    def rnd(seq, seq_local, rand, rand_local):
        return {"seq1m": {"native": run(seq), "local": run(seq_local)},
                "rand128k": {"native": run(rand), "local": run(rand_local)}}
    rounds = [rnd(150.0, 200.0, 90.0, 100.0), rnd(160.0, 160.0, 80.0, 100.0), rnd(100.0, 125.0, 99.0, 100.0)]
    s = nb.summary(rounds)
    assert s["seq1m"]["per_round"] == [0.75, 1.0, 0.8]
    assert s["seq1m"]["ratio"] == 0.8  # the median of the rounds' ratios, not the ratio of the medians (150/160)
    assert s["seq1m"]["native_median"] == 150.0 and s["seq1m"]["local_median"] == 160.0
    assert s["rand128k"]["ratio"] == 0.9
    assert nb.ratios_of(s) == {"native_iscsi_over_local_seq1m": 0.8, "native_iscsi_over_local_rand128k": 0.9}


def test_a_lever_is_compared_round_by_round_with_its_value_as_found():
    def r(seq, rnd, local=None):
        out = {"seq1m": {"native": {"mb_s": seq}}, "rand128k": {"native": {"mb_s": rnd}}}
        if local:
            for w in out:
                out[w]["local"] = {"mb_s": local}
        return out
    runs = {"0": [r(100.0, 50.0), r(120.0, 40.0)], "2": [r(110.0, 50.0), r(120.0, 44.0)]}
    got = nb.lever_ratios(runs, "0", "2")
    assert got["over_found"] == {"seq1m": 1.05, "rand128k": 1.05}
    assert got["native_over_local"] == {}
    runs = {"0": [r(100.0, 50.0, 200.0)], "1": [r(150.0, 50.0, 150.0)]}
    assert nb.lever_ratios(runs, "0", "1")["native_over_local"]["seq1m"] == {"0": 0.5, "1": 1.0}


def test_no_chap_secret_on_iscsi_perfs_command_line():
    chap = {"userid": "gpu1", "password": "secret-one-12", "mutual_userid": "storage1",
            "mutual_password": "secret-two-34"}
    argv = nb.iscsi_perf_argv("fabriclab-x", "iqn.2026-11.io.fabric:gpu1", "10.77.0.11:3260",
                              "iqn.2026-11.io.fabric:ds.a.v1", 0, request=1 << 20, block_size=512, seconds=15,
                              random=False)
    assert argv[:5] == ["ip", "netns", "exec", "fabriclab-x", "iscsi-perf"]
    assert argv[-1] == "iscsi://10.77.0.11:3260/iqn.2026-11.io.fabric:ds.a.v1/0"
    assert "-b" in argv and argv[argv.index("-b") + 1] == "2048" and "-r" not in argv
    assert not any(s in a for a in argv for s in (chap["password"], chap["mutual_password"], "%", "@"))
    env = nb.chap_env(chap)
    assert env == {"LIBISCSI_CHAP_USERNAME": "gpu1", "LIBISCSI_CHAP_PASSWORD": "secret-one-12",
                   "LIBISCSI_CHAP_TARGET_USERNAME": "storage1", "LIBISCSI_CHAP_TARGET_PASSWORD": "secret-two-34"}
    one_way = nb.chap_env({"userid": "gpu1", "password": "secret-one-12", "mutual_userid": "", "mutual_password": ""})
    assert set(one_way) == {"LIBISCSI_CHAP_USERNAME", "LIBISCSI_CHAP_PASSWORD"}
    assert nb.chap_env(None) == {}
    rnd = nb.iscsi_perf_argv("ns", "iqn.x:y", "p:3260", "t", 1, request=128 << 10, block_size=4096, seconds=5,
                             random=True)
    assert "-r" in rnd and rnd[rnd.index("-b") + 1] == "32"
    with pytest.raises(nb.BenchError, match="whole number"):
        nb.iscsi_perf_argv("ns", "i", "p", "t", 0, request=1000, block_size=512, seconds=5, random=False)


def test_fio_reads_as_iscsi_perf_does():
    seq = nb.fio_command("/dev/zvol/tank/a@v1", request=1 << 20, block_size=512, seconds=15, random=False)
    assert "--rw=read " in seq and "--bs=1048576" in seq and "--iodepth=32" in seq and "--direct=1" in seq
    rnd = nb.fio_command("/dev/zvol/tank/a@v1", request=128 << 10, block_size=512, seconds=15, random=True)
    assert "--rw=randread" in rnd and "--blockalign=512" in rnd and "--norandommap" in rnd


def test_levers_are_parsed_before_the_lab_is_touched():
    assert nb.lever_spec("attrib.submit_type=2,zfs.zvol_request_sync=1") == [
        ("attrib", "submit_type", "2"), ("zfs", "zvol_request_sync", "1")]
    for bad in ("submit_type=2", "attrib.x=1;reboot", "core.x=1", "attrib.X=1"):
        with pytest.raises(argparse.ArgumentTypeError):
            nb.lever_spec(bad)


def test_isids_from_an_acl_info():
    info = ("InitiatorName: iqn.2026-11.io.fabric:gpu1\nInitiatorAlias: gpu1\n"
            "LIO Session ID: 3   ISID: 0x80 12 34 56 00 00  TSIH: 3  SessionType: Normal\n"
            "Session State: TARG_SESS_STATE_LOGGED_IN\n")
    assert nb.isids(info) == ["0x80 12 34 56 00 00"]
    assert nb.isids("No active iSCSI Session for Initiator Endpoint: iqn.x:y\n") == []


def test_the_section_reports_the_emulated_initiators_ratios_labelled():
    doc = {"date": "2026-11-27T05:00:00+00:00", "commit": "abc1234", "lab": "trixie lab",
           "figures": {"export": {"udev_path": "/dev/zvol/tank/a@v1"}, "tree": {"files": 6, "bytes": 1 << 30},
                       "volblocksize": "16384", "in_flight": 32, "seconds": 15,
                       "warm": {"native": {"mb_s": 150.0, "iops": 143}, "local": {"mb_s": 160.0, "iops": 152.6}},
                       "rounds": [{w: {"native": {"mb_s": 100.0, "iops": 1}, "local": {"mb_s": 100.0, "iops": 1}}
                                   for w in nb.WORKLOADS}],
                       "summary": nb.summary([{w: {"native": {"mb_s": 100.0}, "local": {"mb_s": 100.0}}
                                               for w in nb.WORKLOADS}]),
                       "native_sessions_left": []},
           "ratios": {"native_iscsi_over_local_seq1m": 1.0, "native_iscsi_over_local_rand128k": 1.0},
           "emulated_initiator": {"date": "2026-11-25T01:20:06+00:00", "commit": "d87b02a",
                                  "ratios": {"fio_128k_qd32_iscsi_over_zvol_iops": 0.297}}}
    text = "\n".join(nb.section(doc, "2026-11-27 05:00 UTC"))
    assert "- native_iscsi_over_local_seq1m: 1.0 (target ≥ 0.95)" in text
    assert "- emulated initiator: fio_128k_qd32_iscsi_over_zvol_iops: 0.297" in text
    assert "none left" in text


def test_host_cores_of_a_read_from_two_tick_readings(monkeypatch):
    monkeypatch.setattr(nb.os, "sysconf", lambda name: 100)
    before = {"storage1": 1000, "gpu1": 50, "host": 5000, "host_total": 10000}
    after = {"storage1": 2500, "gpu1": 80, "host": 6500, "host_total": 12000}
    # storage1: 1500 ticks = 15 CPU-seconds in 10 s -> 1.5 cores; the host busy 1500 of 2000 ticks
    assert nb.cores(before, after, 10.0) == {"storage1": 1.5, "gpu1": 0.03, "host_busy": 0.75}
