"""The lab's shape: which VMs exist, their disks, addresses and QEMU command lines.

Everything here is pure (no I/O), so the unit tests can check the plan without root or QEMU.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import ipaddress
import re
from pathlib import Path

from .errors import LabError

NETNS_PREFIX = "fabriclab-"
BRIDGE = "fabbr0"
SUBNET = ipaddress.ip_network("10.77.0.0/24")  # private range: used only inside the lab's namespace
CONTROLLER_ADDR = ipaddress.ip_address("10.77.0.1")  # the bridge's own address
ISCSI_PORT = 3260


def netns_name(state_dir: Path, override: str | None = None) -> str:
    """The lab's network namespace: one per checkout (state directory), so a second checkout (a CI
    clone, say) boots its own lab beside a running one instead of colliding with it. Bridge, taps
    and addresses live inside the namespace, so two labs never see each other.
    FABRIC_LAB_NETNS (passed as override) names it explicitly."""
    if override:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}", override):
            raise LabError(f"FABRIC_LAB_NETNS={override!r} is not a valid network namespace name",
                           "use up to 63 letters, digits, '.', '_' and '-', starting with a letter or digit")
        return override
    return NETNS_PREFIX + hashlib.sha256(str(state_dir).encode()).hexdigest()[:8]


AHCI_PORTS = 6  # ports of one QEMU AHCI controller

# Memory budget for the whole lab (issue: at most 8 GiB in total, storage2 included).
MAX_TOTAL_MEMORY_MIB = 8192


@dataclasses.dataclass(frozen=True)
class Disk:
    """One data disk of a VM.

    kind: "hdd" (SATA, rotational), "ssd" (SATA, non-rotational) or "nvme".
    """

    kind: str
    serial: str
    size_gib: int
    model: str = ""
    wwn: str = ""

    @property
    def by_id(self) -> str:
        """The /dev/disk/by-id name udev gives this disk inside the guest."""
        if self.kind == "nvme":
            return f"nvme-QEMU_NVMe_Ctrl_{self.serial}"
        return f"ata-{self.model.replace(' ', '_')}_{self.serial}"

    @property
    def rotational(self) -> bool:
        return self.kind == "hdd"


@dataclasses.dataclass(frozen=True)
class VM:
    name: str
    role: str  # "storage" or "gpu"
    addr: ipaddress.IPv4Address
    memory_mib: int
    cpus: int
    disks: tuple[Disk, ...] = ()

    @property
    def mac(self) -> str:
        last = int(self.addr) & 0xFF
        return f"52:54:00:77:00:{last:02x}"

    @property
    def tap(self) -> str:
        return f"fl-{self.name}"[:15]  # IFNAMSIZ - 1

    @property
    def cidr(self) -> str:
        return f"{self.addr}/{SUBNET.prefixlen}"


def storage_disks(index: int) -> tuple[Disk, ...]:
    """A realistic storage node: 8 HDD-class, 2 SSD-class and 4 NVMe disks.

    Enough for the reference layout (raidz2 of 6 HDDs, a 3-way special mirror of NVMe, L2ARC on the
    fourth NVMe, a SLOG mirror of the 2 SSDs) with two HDDs left free for tests that need a pool of
    real disks of their own beside the converged one (a mirror).

    Serials embed the node index so that disks of storage1 and storage2 never share a name.
    """
    disks: list[Disk] = []
    for i in range(8):
        disks.append(Disk(
            kind="hdd", serial=f"HDD{index}{i:03d}", size_gib=8, model="LAB HDD 8TB 7200",
            wwn=f"0x5000c5{index:02x}0077{i:04x}"))
    for i in range(2):
        disks.append(Disk(
            kind="ssd", serial=f"SSD{index}{i:03d}", size_gib=4, model="LAB SSD 960GB",
            wwn=f"0x55cd2e{index:02x}0077{i:04x}"))
    for i in range(4):
        disks.append(Disk(kind="nvme", serial=f"NVME{index}{i:03d}", size_gib=4))
    return tuple(disks)


def gpu_disks(index: int) -> tuple[Disk, ...]:
    """A GPU node's local NVMe scratch disk (real GPU nodes carry one for caches and staging).

    The fabric never touches it; the publish benchmark copies datasets there for its rsync baseline
    (the VM's root disk is too small for a 4 GiB copy). Sparse: it costs host disk only when used.
    """
    return (Disk(kind="nvme", serial=f"SCRATCH{index}", size_gib=8),)


# The emulation profile (FABRIC_LAB_STORAGE_CPUS, FABRIC_LAB_TCG_THREAD; recorded in the lab's lab.json): how many
# vCPUs a storage node has and whether TCG runs each vCPU on a host thread of its own ("multi") or all of a VM's
# vCPUs on one ("single"). docs/lab.md has the panic runs that chose the defaults: under "multi" storage1's kernel
# stopped on an "Oops: int3" in code it was patching at boot (a vCPU ran the patch's breakpoint after the patch
# was done: cross-modifying code between two host threads), at lab up and again at test_reboot's reboot.
STORAGE_CPUS = 2
TCG_THREADS = ("multi", "single")
TCG_THREAD = "single"
# The CPU model every VM gets under TCG (FABRIC_LAB_TCG_CPU): QEMU's -cpu, a model and its feature switches, e.g.
# "max,-cx16" (no CMPXCHG16B: the guest kernel's SLUB then takes its locked path; see docs/lab.md's double faults).
TCG_CPU = "max"
_CPU_MODEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*(,[+-]?[A-Za-z0-9_.-]+(=[A-Za-z0-9_.-]+)?)*")


def valid_cpu(model: str) -> bool:
    """A QEMU -cpu value: a model name, then comma-separated feature switches (+f, -f, f=value)."""
    return bool(_CPU_MODEL.fullmatch(model))


def plan(with_storage2: bool = False, storage_cpus: int = STORAGE_CPUS) -> tuple[VM, ...]:
    """The VMs of the lab, in boot order."""
    if storage_cpus not in (1, 2):
        raise ValueError(f"storage nodes take 1 or 2 vCPUs, not {storage_cpus}")
    net = SUBNET.network_address
    vms = [VM("storage1", "storage", net + 11, 2560, storage_cpus, storage_disks(1))]
    if with_storage2:
        vms.append(VM("storage2", "storage", net + 12, 2560, storage_cpus, storage_disks(2)))
    vms.append(VM("gpu1", "gpu", net + 21, 1280, 1, gpu_disks(1)))
    vms.append(VM("gpu2", "gpu", net + 22, 1280, 1, gpu_disks(2)))
    total = sum(vm.memory_mib for vm in vms)
    assert total <= MAX_TOTAL_MEMORY_MIB, f"lab plan uses {total} MiB, budget {MAX_TOTAL_MEMORY_MIB}"
    return tuple(vms)


# The lab has one guest image for every VM, so a GPU stand-in carries the storage node's packages too. A real
# GPU node has neither ZFS nor an iSCSI target: their units are masked there (systemd.mask= on the kernel
# command line, every boot including the first), which also keeps them from costing an emulated boot ~10 s
# (loading zfs.ko waits for udev to settle; the target restore loads LIO's modules).
STORAGE_ONLY_UNITS = ("zfs-load-module.service", "zfs-import-cache.service", "zfs-import-scan.service",
                      "zfs-mount.service", "zfs-share.service", "zfs-volume-wait.service", "zfs-zed.service",
                      "rtslib-fb-targetctl.service")


# systemd generators a lab guest never needs, masked once it is up (a link to /dev/null in
# /etc/systemd/system-generators): systemd runs every generator at each daemon-reload, which the fabric does at
# every mount unit it writes or removes, and on the emulated GPU nodes they took about 1.9 s of a 4.5 s reload
# (each 180-280 ms, measured one by one on gpu2). Kept: fstab, sysv, debug (it applies systemd.mask= from the
# kernel command line, above), nfs-server and rpc-pipefs (the NFS baseline of bench-read) and zfs-mount.
UNNEEDED_GENERATORS = ("systemd-getty-generator", "systemd-gpt-auto-generator", "systemd-hibernate-resume-generator",
                       "systemd-rc-local-generator", "systemd-run-generator", "systemd-ssh-generator",
                       "systemd-system-update-generator", "systemd-tpm2-generator")


def _mask_script(directory: str, names: tuple[str, ...], reload: str) -> str:
    """Shell that links each name in directory to /dev/null (idempotent), running reload only when it masked one."""
    links = " ".join(f"{directory}/{n}" for n in names)
    return (f"mkdir -p {directory} && changed=0 && "
            f"for l in {links}; do [ \"$(readlink \"$l\")\" = /dev/null ] || "
            "{ ln -sfn /dev/null \"$l\" && changed=1; }; done && "
            f"if [ $changed = 1 ]; then {reload}; fi")


def mask_generators_script() -> str:
    """Shell run on a guest once it is up: masks UNNEEDED_GENERATORS (idempotent), reloading systemd only when
    it masked one."""
    return _mask_script("/etc/systemd/system-generators", UNNEEDED_GENERATORS, "systemctl daemon-reload")


# ZFS's udev rules, masked on the GPU stand-ins (a link to /dev/null in /etc/udev/rules.d, udev's way): a real GPU
# node has no ZFS, and on the lab's they ran ZFS's vdev_id (an 800-line shell script) for every new disk, its SCSI
# generic device and every multipath map event of an attach, on the emulated CPU a job's start waits for.
STORAGE_ONLY_UDEV_RULES = ("60-zvol.rules", "69-vdev.rules", "90-zfs.rules")


def mask_udev_rules_script() -> str:
    """Shell run on a GPU stand-in once it is up: masks STORAGE_ONLY_UDEV_RULES (idempotent), reloading udev's
    rules only when it masked one."""
    return _mask_script("/etc/udev/rules.d", STORAGE_ONLY_UDEV_RULES, "udevadm control --reload")


# How long a guest's systemd waits for a device a unit needs (its DefaultDeviceTimeoutSec, 90 s by default, set on the
# kernel command line: systemd.default_device_timeout_sec=). An emulated GPU node reaches network-online.target 80 s
# or more after systemd starts under the suite's load, and its mount units' iSCSI disks come after the logins that
# follow: at 90 s a fabric mount unit gave up on its disk at boot (test_reboot.py, 2026-11-29) a few seconds before
# the disk came. Real machines boot in seconds; the lab's guests wait as long as its boot can take.
DEVICE_TIMEOUT_S = 300


def kernel_cmdline(vm: VM, ssh_pubkey: str) -> str:
    """Kernel command line; fabric.* words are read by fabric-lab-seed in the guest."""
    key = base64.b64encode(ssh_pubkey.strip().encode() + b"\n").decode()
    return " ".join([
        "root=LABEL=root", "rw", "console=ttyS0", "quiet", "loglevel=4",
        f"systemd.default_device_timeout_sec={DEVICE_TIMEOUT_S}",
        f"fabric.hostname={vm.name}", f"fabric.mac={vm.mac}", f"fabric.addr={vm.cidr}",
        f"fabric.sshkey={key}",
        *([f"systemd.mask={unit}" for unit in STORAGE_ONLY_UNITS] if vm.role == "gpu" else []),
    ])


def qemu_argv(vm: VM, *, vmdir: Path, image_dir: Path, ssh_pubkey: str, accel: str = "tcg",
              tcg_thread: str = TCG_THREAD, tcg_cpu: str = TCG_CPU) -> list[str]:
    """The full QEMU command line for one VM (the caller runs it inside the lab's namespace)."""
    if tcg_thread not in TCG_THREADS:
        raise ValueError(f"TCG thread mode {tcg_thread!r}: one of {', '.join(TCG_THREADS)}")
    if not valid_cpu(tcg_cpu):
        raise ValueError(f"CPU model {tcg_cpu!r}: a QEMU -cpu value such as max or max,-cx16")
    argv = [
        "qemu-system-x86_64",
        "-name", vm.name,
        "-machine", "q35",
        *(["-accel", f"tcg,thread={tcg_thread}", "-cpu", tcg_cpu] if accel == "tcg"
          else ["-accel", "kvm", "-cpu", "host"]),
        "-smp", str(vm.cpus),
        "-m", str(vm.memory_mib),
        "-nodefaults", "-display", "none",
        "-serial", f"file:{vmdir / 'console.log'}",
        "-monitor", f"unix:{vmdir / 'monitor.sock'},server,nowait",
        "-pidfile", str(vmdir / "qemu.pid"),
        "-daemonize",
        "-kernel", str(image_dir / "vmlinuz"),
        "-initrd", str(image_dir / "initrd.img"),
        "-append", kernel_cmdline(vm, ssh_pubkey),
        "-device", "virtio-rng-pci",
        "-drive", f"file={vmdir / 'root.qcow2'},if=none,id=root,format=qcow2,cache=unsafe,discard=unmap",
        "-device", "virtio-blk-pci,drive=root,serial=lab-root",
        "-netdev", f"tap,id=n0,ifname={vm.tap},script=no,downscript=no",
        "-device", f"virtio-net-pci,netdev=n0,mac={vm.mac}",
    ]
    sata = [d for d in vm.disks if d.kind != "nvme"]
    for controller in range((len(sata) + AHCI_PORTS - 1) // AHCI_PORTS):
        argv += ["-device", f"ahci,id=sata{controller}"]
    for n, disk in enumerate(vm.disks):
        drive = f"d{n}"
        argv += ["-drive", f"file={vmdir / disk_file(disk)},if=none,id={drive},format=qcow2,cache=unsafe,discard=unmap"]
        if disk.kind == "nvme":
            argv += ["-device", f"nvme,serial={disk.serial},drive={drive}"]
        else:
            port = sata.index(disk)
            rate = 7200 if disk.kind == "hdd" else 1
            argv += ["-device", (
                f"ide-hd,bus=sata{port // AHCI_PORTS}.{port % AHCI_PORTS},drive={drive},serial={disk.serial},"
                f"model={disk.model},wwn={disk.wwn},rotation_rate={rate}")]
    return argv


def disk_file(disk: Disk) -> str:
    return f"disk-{disk.serial}.qcow2"


def ssh_config(vms: tuple[VM, ...], *, key: Path, known_hosts: Path, control_dir: Path, netns: str) -> str:
    """An ssh_config that reaches the VMs from the host through the lab namespace."""
    blocks = []
    for vm in vms:
        blocks.append("\n".join([
            f"Host {vm.name} {vm.addr}",
            f"    HostName {vm.addr}",
            f"    HostKeyAlias {vm.name}",
        ]))
    common = "\n".join([
        "Host *",
        "    User root",
        f"    IdentityFile {key}",
        "    IdentitiesOnly yes",
        f"    UserKnownHostsFile {known_hosts}",
        "    StrictHostKeyChecking yes",
        f"    ProxyCommand ip netns exec {netns} nc %h %p",
        "    ControlMaster auto",
        f"    ControlPath {control_dir}/%C",
        "    ControlPersist 120",
        "    ConnectTimeout 30",  # a busy emulated guest can take more than 10 s to answer
        "    ServerAliveInterval 15",
        "    LogLevel ERROR",
    ])
    return "# Generated by lab/labctl.py: do not edit.\n" + "\n\n".join(blocks + [common]) + "\n"


def inventory(vms: tuple[VM, ...], *, ssh_config_path: Path, mirror: str | None = None,
              control_dir: Path | None = None) -> dict:
    """The Ansible inventory of the lab (written as YAML by the caller).

    mirror: the Debian mirror the guest image came from; the storage_base role writes it into a
    Debian 12 node's bookworm-backports source, as the image did.
    control_dir: this lab's directory of SSH control sockets. Ansible passes its own ControlPath on ssh's
    command line (``~/.ansible/cp/HASH``, the hash of host, port and user), which overrides the ssh_config's:
    every lab names its VMs alike (root@storage1), so two labs up at once (two checkouts on one machine) shared
    Ansible's master connections, and one lab's plays ran into the other's namespace or timed out. Each lab's
    sockets live in a directory of its own (short: a socket's path is limited to 107 bytes)."""
    groups: dict[str, dict] = {"storage_nodes": {"hosts": {}}, "gpu_nodes": {"hosts": {}}}
    for vm in vms:
        group = "storage_nodes" if vm.role == "storage" else "gpu_nodes"
        groups[group]["hosts"][vm.name] = {
            "ansible_host": vm.name,
            "fabric_storage_address": str(vm.addr),
        }
    variables = {
        "ansible_user": "root",
        "ansible_python_interpreter": "/usr/bin/python3",
        "ansible_ssh_common_args": f"-F {ssh_config_path}",
    }
    if control_dir is not None:
        variables["ansible_control_path_dir"] = str(control_dir / "ansible")
    if mirror:
        variables["storage_base_debian_mirror"] = mirror
    return {"all": {"vars": variables, "children": groups}}
