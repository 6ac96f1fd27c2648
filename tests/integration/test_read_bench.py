"""The NFS baseline of `make bench-read` (issue 14): the benchmark exports a published snapshot by the kernel NFS
server to compare against. On a storage network shared with other hosts, that export must be read-only, for the
one GPU node it measures, and gone once the benchmark ends. Run with the benchmark's own functions
(bench/read_bench.py) on the shared version, each property an attack that must fail, read back through the
kernel's export table and the hosts' mount tables.
"""

from __future__ import annotations

import sys

import pytest
from conftest import REPO, step

sys.path.insert(0, str(REPO / "bench"))
import read_bench as rb  # noqa: E402


@pytest.fixture(scope="module")
def nfs(hosts, converged, published):
    lab = rb.preflight_nfs()
    name, version = published.split("@")
    dev = f"/dev/zvol/{lab['dataset_root']}/{name}@{version}"
    rb.nfs_withdraw(lab, dev)  # a run killed earlier
    step(f"{published}: exported read-only over NFS to {rb.GPU} alone, as bench-read does")
    try:
        yield {"lab": lab, "dev": dev, "published": published, **rb.nfs_export(lab, dev)}
    finally:
        rb.nfs_withdraw(lab, dev)


def test_the_nfs_baseline_is_read_only_for_one_host_and_removed_afterwards(hosts, nfs):
    lab, s1, g1, g2 = nfs["lab"], hosts["storage1"], hosts["gpu1"], hosts["gpu2"]
    table = s1.check_output("cat /proc/fs/nfsd/exports")  # the kernel's own export table
    line = next((x for x in table.splitlines() if x.startswith(rb.NFS_EXPORT)), "")
    assert line, f"{rb.NFS_EXPORT} is not in the kernel's export table:\n{table}"
    assert f"{lab['hosts'][rb.GPU]}(" in line and "ro," in line and "root_squash" in line, line
    assert lab["hosts"]["gpu2"] not in table and "*(" not in line, line
    over_nfs = g1.check_output(f"cd {rb.NFS_MOUNT} && find . | sort")
    assert over_nfs == g1.check_output(f"cd /datasets/{nfs['published'].replace('@', '/')} && find . | sort"), \
        "the NFS export does not show the version's tree"

    # gpu1, the host it is exported to, mounts it read-write and writes: the server refuses
    g1.check_output(f"mkdir -p /var/tmp/nfs-rw && mount -t nfs4 -o rw,vers=4.2 "
                    f"{lab['portal_ip']}:{rb.NFS_EXPORT} /var/tmp/nfs-rw")
    try:
        write = g1.run("echo x > /var/tmp/nfs-rw/written-over-nfs")
        as_root = g1.run("rm -rf /var/tmp/nfs-rw/a")
    finally:
        g1.run("umount /var/tmp/nfs-rw; rmdir /var/tmp/nfs-rw")
    assert write.rc != 0 and "Read-only file system" in write.stderr, (write.rc, write.stderr)
    assert as_root.rc != 0, "root on gpu1 removed files over NFS"
    assert not s1.file(f"{rb.NFS_EXPORT}/written-over-nfs").exists

    # gpu2, on the same network but not the host measured, is refused
    g2.run("mkdir -p /var/tmp/nfs-try")
    try:
        other = g2.run(f"timeout 60 mount -t nfs4 -o ro,vers=4.2 {lab['portal_ip']}:{rb.NFS_EXPORT} /var/tmp/nfs-try")
        mounted = g2.run("findmnt -n /var/tmp/nfs-try").rc == 0
    finally:
        g2.run("umount /var/tmp/nfs-try 2>/dev/null; rmdir /var/tmp/nfs-try")
    assert other.rc != 0 and not mounted, f"gpu2 mounted the export: {other.stdout} {other.stderr}"

    # and when the benchmark ends, nothing of it is left: mounts, export table, server, loop devices
    rb.nfs_withdraw(lab, nfs["dev"])
    assert rb.nfs_left(lab, nfs["dev"]) == []
    assert rb.NFS_EXPORT not in s1.run("cat /proc/fs/nfsd/exports 2>/dev/null").stdout
    assert s1.run("exportfs -v").stdout.strip() == ""
    assert g1.run(f"findmnt -n -t nfs4 {rb.NFS_MOUNT}").rc != 0
