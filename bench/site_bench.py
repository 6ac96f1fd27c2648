#!/usr/bin/env python3
"""Benchmark of issue 3 on the lab, measured in one run, written to docs/benchmarks.md.

1. A freshly booted lab; `ansible-playbook playbooks/site.yml` timed on the bare VMs, then the
   idempotent re-run (changed=0) timed.
2. Read throughput of a 1 GiB zvol of random data exported read-only: `dd iflag=direct` on gpu1
   over iSCSI against the same `dd` on storage1 locally. The volume has primarycache=metadata, so
   neither read is served from the ARC; both read the raidz2 pool.

Absolute figures depend on the emulated lab (TCG); the ratios are what to compare.
Run as root: `make bench-site` (it boots the lab fresh and leaves it up).
"""

from __future__ import annotations

import datetime
import os
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import RESULTS, write_section  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
LABCTL = [sys.executable, str(REPO / "lab" / "labctl.py")]
SSH_CONFIG = REPO / ".lab" / "ssh_config"
SECTION = "site"


def sh(*argv, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), cwd=REPO, text=True, capture_output=True, stdin=subprocess.DEVNULL, **kw)


def ssh(host: str, command: str) -> str:
    proc = sh("ssh", "-F", str(SSH_CONFIG), host, command)
    if proc.returncode != 0:
        raise SystemExit(f"{host}: {command}: {proc.stderr}")
    return proc.stdout.strip()


def playbook(*args: str) -> tuple[float, str]:
    started = time.monotonic()
    proc = sh(str(VENV_BIN / "ansible-playbook"), "playbooks/site.yml", *args,
              env={**os.environ, "ANSIBLE_NOCOLOR": "1"})
    elapsed = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"site.yml failed:\n{proc.stdout[-4000:]}")
    changed = sum(int(m) for m in re.findall(r"changed=(\d+)", proc.stdout.split("PLAY RECAP")[-1]))
    return elapsed, str(changed)


def dd_read(host: str, device: str) -> float:
    """MB/s of a direct-I/O read of the whole device (dd's own figure)."""
    out = ssh(host, f"dd if={device} of=/dev/null bs=1M iflag=direct 2>&1 | tail -n 1")
    seconds = float(re.search(r"([\d.]+) s,", out).group(1))
    size = int(ssh(host, f"blockdev --getsize64 {device}"))
    return size / seconds / 1e6


def main() -> int:
    subprocess.run([*LABCTL, "down"], check=True, stdin=subprocess.DEVNULL)
    subprocess.run([*LABCTL, "up"], check=True, stdin=subprocess.DEVNULL)
    first, first_changed = playbook()
    second, second_changed = playbook()
    if second_changed != "0":
        raise SystemExit(f"the second site.yml run changed {second_changed} things")
    # the bench volume: a second LUN on storage1's target, filled with random data
    playbook("--tags", "datasets,iscsi", "-e", "@bench/bench-vars.yml")
    ssh("storage1", "dd if=/dev/urandom of=/dev/zvol/tank/exports/bench bs=1M count=1024 oflag=direct status=none")
    ssh("gpu1", "iscsiadm -m session --rescan >/dev/null; udevadm settle")
    remote = ssh("gpu1", "ls /dev/disk/by-path/*storage1-exports-lun-1")
    assert ssh("gpu1", f"blockdev --getro {remote}") == "1"
    local_mbs = dd_read("storage1", "/dev/zvol/tank/exports/bench")
    remote_mbs = dd_read("gpu1", remote)
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    write_section(SECTION, [
        "## Issue 3: site.yml and read-only iSCSI reads (lab, TCG)",
        "",
        f"Measured in one run by `make bench-site` on {when}: a freshly booted lab (storage1, gpu1, gpu2).",
        "",
        "| measurement | value | baseline | ratio |",
        "|---|---|---|---|",
        f"| `site.yml` first run on bare VMs | {first:.0f} s (changed={first_changed}) | - | - |",
        f"| `site.yml` idempotent re-run | {second:.0f} s (changed={second_changed}) | first run {first:.0f} s "
        f"| {second / first:.2f} |",
        f"| 1 GiB read of a published zvol on gpu1 over iSCSI (`dd iflag=direct`) | {remote_mbs:.0f} MB/s "
        f"| same read on storage1 locally: {local_mbs:.0f} MB/s | {remote_mbs / local_mbs:.2f} |",
        "",
        "The bench volume has primarycache=metadata (no ARC data caching), so both reads come from the",
        "raidz2 pool; the iSCSI read adds the target, the emulated network (about 1.4 Gbit/s between",
        "lab VMs) and the initiator. Absolute numbers are bound by software emulation; compare ratios.",
    ])
    print(RESULTS.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
