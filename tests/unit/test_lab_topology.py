"""The lab plan (pure): VMs, disks, addresses, QEMU command lines, ssh config, inventory."""

import os
import subprocess
from pathlib import Path

import pytest
import yaml
from fabric_lab import topology
from fabric_lab.errors import LabError
from fabric_lab.lab import to_yaml


def test_default_plan_has_storage1_and_two_gpu_nodes():
    names = [vm.name for vm in topology.plan()]
    assert names == ["storage1", "gpu1", "gpu2"]
    assert [vm.name for vm in topology.plan(with_storage2=True)] == ["storage1", "storage2", "gpu1", "gpu2"]


@pytest.mark.parametrize("storage2", [False, True])
def test_memory_budget(storage2):
    total = sum(vm.memory_mib for vm in topology.plan(with_storage2=storage2))
    assert total <= 8192


def test_storage_disk_set():
    vm = topology.plan()[0]
    kinds = [d.kind for d in vm.disks]
    assert kinds.count("hdd") == 8 and kinds.count("ssd") == 2 and kinds.count("nvme") == 4
    assert all(d.rotational for d in vm.disks if d.kind == "hdd")
    assert not any(d.rotational for d in vm.disks if d.kind != "hdd")
    assert vm.disks[0].by_id == "ata-LAB_HDD_8TB_7200_HDD1000"
    assert vm.disks[-1].by_id == "nvme-QEMU_NVMe_Ctrl_NVME1003"


def test_serials_macs_and_addresses_are_unique():
    vms = topology.plan(with_storage2=True)
    serials = [d.serial for vm in vms for d in vm.disks]
    wwns = [d.wwn for vm in vms for d in vm.disks if d.wwn]
    assert len(serials) == len(set(serials)) and len(wwns) == len(set(wwns))
    assert all(len(w) == 18 for w in wwns)  # 0x + 16 hex digits, as QEMU's wwn property wants
    assert len({vm.mac for vm in vms}) == len(vms)
    assert len({vm.addr for vm in vms}) == len(vms)
    assert all(vm.addr in topology.SUBNET for vm in vms)
    assert all(len(vm.tap) <= 15 for vm in vms)


def test_gpu_nodes_have_only_a_scratch_nvme():
    gpus = [vm for vm in topology.plan() if vm.role == "gpu"]
    assert [[(d.kind, d.serial) for d in vm.disks] for vm in gpus] == [[("nvme", "SCRATCH1")], [("nvme", "SCRATCH2")]]


def test_qemu_argv_storage_node():
    vm = topology.plan()[0]
    argv = topology.qemu_argv(vm, vmdir=Path("/s/vms/storage1"), image_dir=Path("/c/img"),
                              ssh_pubkey="ssh-ed25519 AAAAC3 fabric-lab")
    line = " ".join(argv)
    assert argv[0] == "qemu-system-x86_64"
    assert "-accel tcg,thread=single -cpu max" in line  # the default profile (docs/lab.md)
    assert "-kernel /c/img/vmlinuz" in line and "-initrd /c/img/initrd.img" in line
    assert line.count("ide-hd,") == 10
    assert line.count("rotation_rate=7200") == 8 and line.count("rotation_rate=1") == 2
    assert line.count("-device nvme,") == 4
    assert f"ifname={vm.tap}" in line and f"mac={vm.mac}" in line
    # ten SATA disks on two six-port AHCI controllers, each port used once
    assert line.count("-device ahci,") == 2
    buses = [a.split("bus=")[1].split(",")[0] for a in argv if a.startswith("ide-hd,")]
    assert len(set(buses)) == 10 and "sata1.3" in buses and "sata1.4" not in buses
    append = argv[argv.index("-append") + 1]
    assert "root=LABEL=root" in append and "fabric.hostname=storage1" in append
    assert f"systemd.default_device_timeout_sec={topology.DEVICE_TIMEOUT_S}" in append.split()
    assert " " not in append.split("fabric.sshkey=")[1]


def test_only_gpu_stand_ins_mask_the_storage_units():
    """One image serves every VM: a GPU stand-in runs neither ZFS nor an iSCSI target (masked at boot)."""
    for vm in topology.plan(with_storage2=True):
        append = topology.kernel_cmdline(vm, "k")
        masked = {w.split("=", 1)[1] for w in append.split() if w.startswith("systemd.mask=")}
        if vm.role == "gpu":
            assert masked == set(topology.STORAGE_ONLY_UNITS)
            assert {"zfs-load-module.service", "rtslib-fb-targetctl.service"} <= masked
        else:
            assert masked == set(), vm.name


def test_qemu_argv_kvm_when_probe_says_so():
    vm = topology.plan()[1]
    argv = topology.qemu_argv(vm, vmdir=Path("/v"), image_dir=Path("/i"), ssh_pubkey="k", accel="kvm")
    assert "kvm" in argv and "tcg,thread=multi" not in argv


def test_ssh_config_goes_through_the_namespace():
    text = topology.ssh_config(topology.plan(), key=Path("/s/id"), known_hosts=Path("/s/kh"),
                               control_dir=Path("/run/x"), netns="fabriclab-1234abcd")
    assert "Host storage1 10.77.0.11" in text
    assert "ProxyCommand ip netns exec fabriclab-1234abcd nc %h %p" in text
    assert "StrictHostKeyChecking yes" in text


def test_inventory_groups_and_yaml():
    inv = topology.inventory(topology.plan(with_storage2=True), ssh_config_path=Path("/s/ssh_config"))
    parsed = yaml.safe_load(to_yaml(inv))
    assert parsed == inv
    children = parsed["all"]["children"]
    assert set(children["storage_nodes"]["hosts"]) == {"storage1", "storage2"}
    assert set(children["gpu_nodes"]["hosts"]) == {"gpu1", "gpu2"}
    assert parsed["all"]["vars"]["ansible_ssh_common_args"] == "-F /s/ssh_config"
    assert "ansible_control_path_dir" not in parsed["all"]["vars"]


def test_each_lab_keeps_ansibles_control_sockets_apart():
    """Ansible's ControlPath (on ssh's command line, over the ssh_config's) hashes host, port and user, the same
    in every lab: each lab's inventory names a directory of its own, under its namespace's control directory."""
    plan = topology.plan()
    a = topology.inventory(plan, ssh_config_path=Path("/a/ssh_config"), control_dir=Path("/run/fabric-lab/cm-a"))
    b = topology.inventory(plan, ssh_config_path=Path("/b/ssh_config"), control_dir=Path("/run/fabric-lab/cm-b"))
    dirs = {inv["all"]["vars"]["ansible_control_path_dir"] for inv in (a, b)}
    assert dirs == {"/run/fabric-lab/cm-a/ansible", "/run/fabric-lab/cm-b/ansible"}


def test_each_checkout_gets_its_own_namespace():
    a = topology.netns_name(Path("/work/main/.lab"))
    b = topology.netns_name(Path("/tmp/ci1/.lab"))
    assert a != b and a.startswith("fabriclab-") and len(a) == len("fabriclab-") + 8
    assert topology.netns_name(Path("/work/main/.lab")) == a  # stable
    assert topology.netns_name(Path("/x"), "mylab") == "mylab"
    with pytest.raises(LabError, match="'bad name' is not a valid network namespace name"):
        topology.netns_name(Path("/x"), "bad name")


def test_emulation_profile_storage_cpus_and_tcg_thread():
    vm = topology.plan(storage_cpus=1)[0]
    assert vm.cpus == 1 and all(v.cpus == 1 for v in topology.plan(with_storage2=True, storage_cpus=1))
    line = " ".join(topology.qemu_argv(vm, vmdir=Path("/s"), image_dir=Path("/c"), ssh_pubkey="k",
                                       tcg_thread="single"))
    assert "-accel tcg,thread=single -cpu max" in line and "-smp 1 " in line
    with pytest.raises(ValueError):
        topology.plan(storage_cpus=3)
    with pytest.raises(ValueError):
        topology.qemu_argv(vm, vmdir=Path("/s"), image_dir=Path("/c"), ssh_pubkey="k", tcg_thread="many")
    line = " ".join(topology.qemu_argv(vm, vmdir=Path("/s"), image_dir=Path("/c"), ssh_pubkey="k",
                                       tcg_cpu="max,-cx16"))
    assert "-cpu max,-cx16 " in line
    for bad in ("max;reboot", "max,,x", "-cx16", "max, -cx16", ""):
        assert not topology.valid_cpu(bad), bad
        with pytest.raises(ValueError, match="CPU model"):
            topology.qemu_argv(vm, vmdir=Path("/s"), image_dir=Path("/c"), ssh_pubkey="k", tcg_cpu=bad)
    assert all(topology.valid_cpu(m) for m in ("max", "Skylake-Client-v4", "max,-cx16,+pcid", "qemu64,pmu=off"))


def test_lab_profile_from_the_environment_and_refusals(tmp_path, monkeypatch):
    from fabric_lab.lab import Lab
    for name in ("FABRIC_LAB_STATE", "FABRIC_LAB_STORAGE_CPUS", "FABRIC_LAB_TCG_THREAD", "FABRIC_LAB_TCG_CPU"):
        monkeypatch.delenv(name, raising=False)
    lab = Lab(state_dir=tmp_path, inventory_dir=tmp_path / "inv")
    assert Lab(state_dir=tmp_path).profile() == {"storage_cpus": topology.STORAGE_CPUS,
                                                 "tcg_thread": topology.TCG_THREAD, "tcg_cpu": "max"}
    monkeypatch.setenv("FABRIC_LAB_STORAGE_CPUS", "1")
    monkeypatch.setenv("FABRIC_LAB_TCG_THREAD", "single")
    monkeypatch.setenv("FABRIC_LAB_TCG_CPU", "max,-cx16")
    assert lab.profile() == {"storage_cpus": 1, "tcg_thread": "single", "tcg_cpu": "max,-cx16"}
    assert lab.vms()[0].cpus == 1
    # a running lab keeps the profile it was booted with
    (tmp_path / "lab.json").write_text('{"storage2": false, "storage_cpus": 2, "tcg_thread": "multi"}')
    assert Lab(state_dir=tmp_path).profile() == {"storage_cpus": 2, "tcg_thread": "multi", "tcg_cpu": "max,-cx16"}
    (tmp_path / "lab.json").write_text('{"storage_cpus": 2, "tcg_thread": "multi", "tcg_cpu": "qemu64"}')
    assert Lab(state_dir=tmp_path).profile()["tcg_cpu"] == "qemu64"
    (tmp_path / "lab.json").unlink()
    monkeypatch.setenv("FABRIC_LAB_STORAGE_CPUS", "4")
    with pytest.raises(LabError, match="1 or 2"):
        lab.profile()
    monkeypatch.setenv("FABRIC_LAB_STORAGE_CPUS", "1")
    monkeypatch.setenv("FABRIC_LAB_TCG_THREAD", "fast")
    with pytest.raises(LabError, match="TCG thread mode"):
        lab.profile()
    monkeypatch.setenv("FABRIC_LAB_TCG_THREAD", "single")
    monkeypatch.setenv("FABRIC_LAB_TCG_CPU", "max -cx16")
    with pytest.raises(LabError, match="not a QEMU CPU model"):
        lab.profile()


def test_the_generators_masked_on_guests_keep_what_the_lab_uses():
    """systemd.mask= on the kernel command line is applied by systemd-debug-generator, root by the fstab one,
    the NFS baseline by nfs-server/rpc-pipefs, ZFS mounts by zfs-mount-generator: none of them is masked."""
    kept = {"systemd-debug-generator", "systemd-fstab-generator", "systemd-sysv-generator", "nfs-server-generator",
            "rpc-pipefs-generator", "zfs-mount-generator"}
    assert not kept & set(topology.UNNEEDED_GENERATORS)
    script = topology.mask_generators_script()
    assert all(f"/etc/systemd/system-generators/{g}" in script for g in topology.UNNEEDED_GENERATORS)
    assert subprocess.run(["sh", "-n", "-c", script], check=False).returncode == 0  # valid shell


@pytest.mark.parametrize("script, directory, reload, names", [
    (topology.mask_generators_script, "/etc/systemd/system-generators", "systemctl daemon-reload",
     topology.UNNEEDED_GENERATORS),
    # a real GPU node has no ZFS: its udev rules (vdev_id for every disk and map) are masked on the stand-ins
    (topology.mask_udev_rules_script, "/etc/udev/rules.d", "udevadm control --reload",
     topology.STORAGE_ONLY_UDEV_RULES),
], ids=["generators", "zfs-udev-rules"])
def test_masking_is_idempotent_and_reloads_only_when_it_masked_one(tmp_path, script, directory, reload, names):
    root = tmp_path / "masked"
    text = script().replace(directory, str(root)).replace(reload, f"echo reloaded >> {tmp_path / 'log'}")
    for _ in range(2):
        subprocess.run(["sh", "-c", text], check=True)
    assert sorted(p.name for p in root.iterdir()) == sorted(names)
    assert all(os.readlink(p) == "/dev/null" for p in root.iterdir())
    assert (tmp_path / "log").read_text() == "reloaded\n"  # the second run changed nothing


def test_the_zfs_udev_rules_masked_on_gpu_stand_ins_are_zfs_own():
    assert set(topology.STORAGE_ONLY_UDEV_RULES) == {"60-zvol.rules", "69-vdev.rules", "90-zfs.rules"}
