"""playbooks/site.yml on the lab: each site behaviour proven once, by the one sequence of site runs the
`converged` fixture makes per lab through Molecule (check mode on the fresh fabric, converge, an
idempotent re-run, check mode on the converged fabric, verify), read from its recorded runs;
verification through separate read paths; negative cases that must fail before any change.

The lab inventory's group_vars (inventory/lab/group_vars/) declare the reference fabric: pool
`tank` (raidz2 of six HDDs, 3-way special mirror of NVMe, L2ARC on the fourth, SLOG mirror of the
two SSDs), the dataset tree, a small volume `tank/exports/welcome` exported read-only to both GPU
nodes, and the GPU nodes' read-only mounts at /datasets/welcome.
"""

from __future__ import annotations

import difflib
import json

import pytest
from conftest import Site, ansible_playbook

FREE_HDD = "/dev/disk/by-id/ata-LAB_HDD_8TB_7200_HDD1006"  # one of the two HDDs the reference layout leaves free
WELCOME = "tank/exports/welcome"


# The hosts of the lab the site record starts with (storage2, when a test boots it, joins afterwards).
BASE = ("storage1", "gpu1", "gpu2")


def test_the_first_run_converges_every_host(converged: Site):
    run = converged.converge
    assert set(BASE) <= set(run.changed())
    assert all(n == 0 for n in run.failures().values()), run.summary["recap"]
    assert all(run.changed()[h] > 0 for h in BASE), f"a host was already converged: {run.summary['recap']}"


def test_a_second_run_changes_nothing(converged: Site):
    run = converged.rerun
    assert set(BASE) <= set(run.changed()) and set(run.changed().values()) == {0}, run.changes()
    assert all(n == 0 for n in run.failures().values())


def test_check_mode_on_the_converged_fabric_reports_no_change(converged: Site):
    run = converged.check_converged
    assert run.summary["check_mode"] is True
    assert set(BASE) <= set(run.changed()) and set(run.changed().values()) == {0}, run.changes()


def test_a_default_run_uses_ansible_cores_own_strategies_and_prints_no_deprecation_warning(lab, converged: Site):
    """Issue 32 item 1: a site that did not opt in to Mitogen runs site.yml with ansible.builtin's strategies (its
    free plays included), without ansible-core's warning that other strategy plugins are deprecated."""
    run = ansible_playbook(lab, "playbooks/site.yml", "--check", "--limit", "gpu2", "--tags", "initiator",
                           default_strategy=True)
    assert run.rc == 0, run.output[-4000:]
    assert "DEPRECATION WARNING" not in run.output, run.output[-4000:]
    assert run.changed() == {"gpu2": 0}, run.output[-4000:]


def test_check_mode_on_the_fresh_fabric_plans_changes_on_every_host(converged: Site):
    if converged.check_fresh is None:
        pytest.skip("this lab was converged before the site record began (make demo?): "
                    "its fresh check was not seen; a fresh lab (`make lab-down`) records it")
    run = converged.check_fresh
    assert run.summary["check_mode"] is True
    assert all(n == 0 for n in run.failures().values()), run.summary["recap"]
    assert all(run.changed()[h] > 0 for h in BASE), run.summary["recap"]


def test_check_mode_on_the_fresh_fabric_foresees_every_change_of_the_first_run(converged: Site):
    """Issue 18: the change list of check mode on fresh nodes equals the real run's, task by task and host by
    host (a task that cannot act in check mode says so through a stand-in of the same name)."""
    if converged.check_fresh is None:
        pytest.skip("this lab was converged before the site record began: its fresh check was not seen")
    foreseen, made = set(converged.check_fresh.changes()), set(converged.converge.changes())
    assert foreseen == made, (f"the real run made changes check mode did not report: {sorted(made - foreseen)}; "
                              f"check mode reported changes the real run did not make: {sorted(foreseen - made)}")


def test_check_mode_on_fresh_nodes_changes_nothing(converged: Site):
    """Issue 18: no kernel module loaded, no configfs object, no open-iscsi record, no service state changed
    by the fresh check (read on every host before and after it)."""
    if converged.fresh_check_before is None:
        pytest.skip("this lab was converged before the site record began: its fresh check was not seen")
    for host, before in converged.fresh_check_before.items():
        after = converged.fresh_check_after[host]
        assert after == before, f"{host} changed under check mode:\n" + "\n".join(
            line for line in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm=""))


def test_molecule_ran_syntax_and_verify(converged: Site):
    if not converged.molecule_output:
        pytest.skip("the site runs on this lab were made by ansible-playbook, not Molecule (converged before)")
    out = converged.molecule_output.lower()
    for action in ("syntax", "verify"):  # molecule/default/molecule.yml
        assert f"{action}" in out, f"molecule output does not mention {action}"


# --- verification through separate read paths ---------------------------------------------------


def test_pool_topology_matches_the_plan(hosts, converged):
    status = hosts["storage1"].check_output("zpool status -P tank")
    sections = {"data": [], "special": [], "logs": [], "cache": []}
    current = "data"
    for line in status.splitlines():
        word = line.strip().split(" ")[0]
        if word in ("special", "logs", "cache", "spares"):
            current = word
        elif word.startswith("/dev/"):
            sections.setdefault(current, []).append(word)
    assert "raidz2-0" in status
    assert len(sections["data"]) == 6 and all("_HDD" in d for d in sections["data"])
    assert FREE_HDD not in status and "HDD1007" not in status
    assert len(sections["special"]) == 3 and all("nvme-" in d for d in sections["special"])
    assert len(sections["logs"]) == 2 and all("_SSD" in d for d in sections["logs"])
    assert len(sections["cache"]) == 1 and "nvme-" in sections["cache"][0]
    assert all(d.startswith("/dev/disk/by-id/") for s in sections.values() for d in s)
    assert hosts["storage1"].check_output("zpool list -H -o health tank") == "ONLINE"


def test_pool_and_datasets_are_marked_and_have_their_properties(hosts, converged):
    storage = hosts["storage1"]
    props = {}
    for line in storage.check_output(
            "zfs get -H -p -o name,property,value -r "
            "fabric:managed,compression,recordsize,special_small_blocks,quota,atime tank").splitlines():
        name, prop, value = line.split("\t")
        props.setdefault(name, {})[prop] = value
    assert props["tank"]["fabric:managed"] == "true"
    assert props["tank"]["atime"] == "off"
    assert props["tank/datasets"]["compression"] == "zstd"
    assert props["tank/datasets"]["recordsize"] == str(1024 * 1024)
    assert props["tank/datasets"]["special_small_blocks"] == str(64 * 1024)
    assert props["tank/checkpoints"]["quota"] == str(16 * 1024 ** 3)
    assert storage.run(f"blkid -p -o value -s TYPE /dev/zvol/{WELCOME}").stdout.strip() == "ext4"


def test_zfs_tunables_are_persistent_and_live(hosts, converged):
    storage = hosts["storage1"]
    assert "zfs_arc_max=536870912" in storage.file("/etc/modprobe.d/zfs-fabric.conf").content_string
    assert storage.file("/sys/module/zfs/parameters/zfs_arc_max").content_string.strip() == "536870912"
    assert storage.file("/sys/module/zfs/parameters/l2arc_noprefetch").content_string.strip() == "0"


def test_lio_acls_and_write_protection_in_configfs(hosts, lab, converged):
    storage = hosts["storage1"]
    acls = storage.check_output("ls -d /sys/kernel/config/target/iscsi/*/tpgt_*/acls/*").split()
    initiators = {path.rsplit("/", 1)[1] for path in acls}
    assert {f"iqn.2026-11.io.fabric.lab:{gpu}" for gpu in lab.names("gpu")} <= initiators
    protect = storage.check_output(
        "cat /sys/kernel/config/target/iscsi/*/tpgt_*/acls/*/lun_*/write_protect").split()
    assert protect and set(protect) == {"1"}
    # the block backstore of the welcome volume is read-only itself, below the ACL's write protection
    infos = storage.check_output("grep -H 'UDEV PATH' /sys/kernel/config/target/core/iblock_*/*/info")
    welcome = [line for line in infos.splitlines() if f"/dev/zvol/{WELCOME}" in line]
    assert welcome and all("readonly: 1" in line for line in welcome), infos


@pytest.mark.parametrize("gpu", ["gpu1", "gpu2"])
def test_gpu_nodes_have_sessions_and_read_only_mounts(hosts, gpu, converged):
    host = hosts[gpu]
    sessions = host.check_output("iscsiadm -m session")
    assert "10.77.0.11:3260" in sessions
    mount = json.loads(host.check_output("findmnt -J -o TARGET,FSTYPE,OPTIONS /datasets/welcome"))["filesystems"][0]
    assert mount["fstype"] == "ext4"
    assert "ro" in mount["options"].split(",")
    assert "norecovery" in mount["options"].split(",")  # the kernel shows ext4 noload as norecovery


def test_write_from_a_gpu_node_fails_and_the_volume_is_unchanged(hosts, converged):
    before = hosts["storage1"].check_output(f"sha256sum /dev/zvol/{WELCOME}").split()[0]
    gpu = hosts["gpu1"]
    assert gpu.run("touch /datasets/welcome/should-fail").rc != 0
    dev = gpu.check_output("findmnt -n -o SOURCE /datasets/welcome")
    assert gpu.check_output(f"blockdev --getro {dev}") == "1"
    assert gpu.run(f"dd if=/dev/zero of={dev} bs=4k count=1 oflag=direct conv=notrunc status=none").rc != 0
    after = hosts["storage1"].check_output(f"sha256sum /dev/zvol/{WELCOME}").split()[0]
    assert before == after


# --- negative cases: each fails with a clear message before any change ----------------------------


def pool_state(storage) -> str:
    return storage.check_output("zpool list -H -o name,size,health; zfs list -H -o name -t all")


NEGATIVE_POOLS = {
    "disk that does not exist": (
        {"name": "neg", "spec": {"vdevs": [{"role": "data", "type": "disk",
                                            "disks": ["/dev/disk/by-id/ata-NO_SUCH_DISK_X"]}],
                                 "allow_nonredundant_data": True}},
        "NO_SUCH_DISK_X"),
    "raidz2 with too few disks": (
        {"name": "neg", "spec": {"vdevs": [{"role": "data", "type": "raidz2", "disks": [FREE_HDD]}]}},
        "raidz2"),
    "special vdev without redundancy": (
        {"name": "neg", "spec": {"data": {"type": "disk", "width": 1, "class": "hdd"}, "allow_nonredundant_data": True,
                                 "special": {"type": "disk", "width": 1, "class": "nvme"}}},
        "special"),
    "invalid pool name": (
        {"name": "mirror-bad", "spec": {"vdevs": [{"role": "data", "type": "disk", "disks": [FREE_HDD]}],
                                        "allow_nonredundant_data": True}},
        "invalid pool name 'mirror-bad'"),
}


@pytest.mark.parametrize("case", sorted(NEGATIVE_POOLS))
def test_bad_pool_input_is_refused_before_any_change(lab, hosts, converged, case):
    pool, message = NEGATIVE_POOLS[case]
    storage = hosts["storage1"]
    before = pool_state(storage)
    run = ansible_playbook(lab, "playbooks/storage.yml", "--tags", "pools", "--limit", "storage1",
                           extra_vars={"zfs_pool_pools": [pool]}, gather_facts=False)
    assert run.rc != 0, f"{case}: the run succeeded:\n{run.stdout[-3000:]}"
    assert message.lower() in run.output.lower(), f"{case}: message {message!r} not in:\n{run.output[-3000:]}"
    assert run.recap["storage1"]["changed"] == 0
    assert pool_state(storage) == before


def test_disk_with_a_filesystem_is_refused_and_left_untouched(lab, hosts, converged):
    storage = hosts["storage1"]
    storage.run_expect([0], f"mkfs.ext4 -q -F -L keepme {FREE_HDD}")
    try:
        digest = storage.check_output(f"dd if={FREE_HDD} bs=1M count=4 status=none | sha256sum")
        before = pool_state(storage)
        pool = {"name": "neg", "spec": {"vdevs": [{"role": "data", "type": "disk", "disks": [FREE_HDD]}],
                                        "allow_nonredundant_data": True}}
        run = ansible_playbook(lab, "playbooks/storage.yml", "--tags", "pools", "--limit", "storage1",
                               extra_vars={"zfs_pool_pools": [pool]}, gather_facts=False)
        assert run.rc != 0
        assert "ext4" in run.output and "in use" in run.output.lower(), run.output[-3000:]
        assert storage.check_output(f"dd if={FREE_HDD} bs=1M count=4 status=none | sha256sum") == digest
        assert storage.check_output(f"blkid -p -o value -s LABEL {FREE_HDD}") == "keepme"
        assert pool_state(storage) == before
        # naming it in `wipe` is not enough while safe mode is on
        pool["wipe"] = [FREE_HDD]
        run = ansible_playbook(lab, "playbooks/storage.yml", "--tags", "pools", "--limit", "storage1",
                               extra_vars={"zfs_pool_pools": [pool]}, gather_facts=False)
        assert run.rc != 0 and "safe_mode" in run.output, run.output[-3000:]
        assert storage.check_output(f"blkid -p -o value -s LABEL {FREE_HDD}") == "keepme"
    finally:
        storage.run(f"wipefs -a {FREE_HDD}")


def test_invalid_dataset_name_is_refused(lab, hosts, converged):
    storage = hosts["storage1"]
    before = pool_state(storage)
    run = ansible_playbook(lab, "playbooks/storage.yml", "--tags", "datasets", "--limit", "storage1",
                           extra_vars={"zfs_datasets_list": [{"name": "tank/bad name@x"}]}, gather_facts=False)
    assert run.rc != 0 and "zfs_datasets_list: names must be" in run.output
    assert pool_state(storage) == before
