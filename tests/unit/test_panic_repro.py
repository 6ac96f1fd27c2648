"""lab/panic_repro.py's pure parts: profiles, the workload it sends, the docs table from its runs."""

import argparse

import panic_repro
import pytest
from fabric_lab import topology


def test_profiles_parse_and_refuse():
    assert panic_repro.parse_profile("single:1") == {"tcg_thread": "single", "storage_cpus": 1}
    for bad in ("multi", "multi:3", "fast:2", ":2"):
        with pytest.raises(argparse.ArgumentTypeError, match="TCG_THREAD:CPUS"):
            panic_repro.parse_profile(bad)


def test_workload_uses_the_lab_disks_and_destroys_one_at_a_time():
    vm = topology.plan()[0]
    script = panic_repro.workload(vm, 1000, 900)
    assert "raidz2 " + " ".join(f"$D/ata-LAB_HDD_8TB_7200_HDD1{i:03d}" for i in range(6)) in script
    assert "special mirror $D/nvme-QEMU_NVMe_Ctrl_NVME1000" in script
    assert "cache $D/nvme-QEMU_NVMe_Ctrl_NVME1003" in script
    assert "for i in $(seq 1 900); do zfs destroy rp/ck@s$i; done" in script
    # one snapshot per command, one per transaction group (`zfs snapshot` refuses two snapshots of one volume in one
    # call; a channel program's second snapshot of a dataset in its txg fails with EAGAIN)
    assert "for i in $(seq 1 1000); do zfs snapshot rp/ck@s$i; done" in script
    assert "bs=1M count=4 conv=fsync status=none; sleep 1" in script  # a writer that lets each txg complete


def test_render_counts_runs_per_profile():
    runs = [
        {"tcg_thread": "multi", "storage_cpus": 2, "release": "trixie", "workload": "guest panicked",
         "panicked": True, "boot_panics": 1, "boot_s": 60, "workload_s": 240},
        {"tcg_thread": "multi", "storage_cpus": 2, "release": "trixie", "workload": "completed",
         "panicked": False, "boot_panics": 0, "boot_s": 60, "workload_s": 540, "destroy_s": 450},
        {"tcg_thread": "multi", "storage_cpus": 1, "release": "trixie", "workload": "completed",
         "panicked": False, "boot_panics": 0, "boot_s": 60, "workload_s": 480, "destroy_s": 410, "destroyed": 270},
        {"tcg_thread": "single", "storage_cpus": 2, "tcg_cpu": "max,-cx16", "release": "trixie",
         "workload": "completed", "panicked": False, "boot_panics": 0, "boot_s": 60, "workload_s": 480,
         "destroy_s": 400},
    ]
    table = panic_repro.render(runs).splitlines()
    assert "snapshots destroyed one at a time, in s" in table[0]  # how many: a run may destroy fewer than 900
    # runs recorded before the CPU model was (all under max) count as max
    assert table[2] == "| thread=multi, 1 vCPU, max, trixie | 1 | 1 | 0 | 0 | 270 in 410 | 9 |"
    assert table[3] == "| thread=multi, 2 vCPU, max, trixie | 2 | 1 | 1 | 1 | 900 in 450 | 15 |"
    assert table[4] == "| thread=single, 2 vCPU, max,-cx16, trixie | 1 | 1 | 0 | 0 | 900 in 400 | 9 |"


def test_panic_lines_pick_the_fault():
    text = "boot ok\n[  9.1] traps: PANIC: double fault, error_code: 0x0\n[ 9.2] Kernel panic - not syncing: x\n"
    assert panic_repro.panic_lines(text) == ["[  9.1] traps: PANIC: double fault, error_code: 0x0",
                                             "[ 9.2] Kernel panic - not syncing: x"]
