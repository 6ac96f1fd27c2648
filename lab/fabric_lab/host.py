"""Host-side checks and plumbing: preflight, Debian packages, the network namespace, KVM probe."""

from __future__ import annotations

import os
import stat
import subprocess
import time
from pathlib import Path

from .errors import LabError
from .topology import BRIDGE, CONTROLLER_ADDR, SUBNET

# Debian packages the host needs to run the lab (names as in Debian 12).
HOST_PACKAGES = (
    "qemu-system-x86", "qemu-utils", "debootstrap", "iproute2", "e2fsprogs",
    "openssh-client", "netcat-openbsd", "util-linux",
)

GIB = 1024 ** 3
# Free space needed: building an image (rootfs tree + ext4 image) vs. only running VMs.
NEED_FREE_BUILD = 12 * GIB
NEED_FREE_RUN = 4 * GIB
RUN_DIR = Path("/run/fabric-lab")


def run(argv: list[str], *, check: bool = True, capture: bool = True, **kw) -> subprocess.CompletedProcess:
    """Run a host command. Its stdin is a fresh /dev/null: ssh and QEMU must not inherit (and set
    O_NONBLOCK on) the caller's terminal or CI's shared /dev/null."""
    proc = subprocess.run(argv, text=True, capture_output=capture, stdin=subprocess.DEVNULL, **kw)
    if check and proc.returncode != 0:
        detail = (proc.stderr or proc.stdout or "").strip() if capture else ""
        raise LabError(f"command failed (exit {proc.returncode}): {' '.join(argv)}\n  {detail}")
    return proc


def owner_marker(netns: str) -> Path:
    return RUN_DIR / f"{netns}.owner"


def netns_exists(netns: str) -> bool:
    return Path("/run/netns", netns).exists()


def free_bytes(path: Path) -> int:
    """Free bytes on the filesystem that holds path (or its nearest existing parent)."""
    probe = path
    while not probe.exists():
        probe = probe.parent
    st = os.statvfs(probe)
    return st.f_bavail * st.f_frsize


def available_memory_mib() -> int:
    """MemAvailable of the host, in MiB (0 if it cannot be read)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def preflight(*, state_dir: Path, cache_dir: Path, image_cached: bool, netns: str, memory_needed=None,
              euid: int | None = None, tun: Path = Path("/dev/net/tun"),
              free=free_bytes, memory=available_memory_mib, netns_present=None, owner_of=None) -> None:
    """Refuse to start when the host cannot run the lab. Changes nothing.

    Every argument after the paths is injectable so the unit tests can walk each refusal.
    memory_needed: a callable giving the MiB the VMs still to start need; called only after the
    root check (it reads the state directory, which a non-root user may not be able to read).
    """
    euid = os.geteuid() if euid is None else euid
    if euid != 0:
        raise LabError("the lab must run as root (it creates a network namespace, taps and VMs)",
                       "run it as root, for example `sudo make lab-up`")
    try:
        mode = tun.stat().st_mode
    except FileNotFoundError:
        mode = 0
    if not stat.S_ISCHR(mode):
        raise LabError(f"{tun} is missing: the lab's VMs need tap devices",
                       "load the tun driver (`modprobe tun`) or, in a container, pass --device /dev/net/tun")
    need = NEED_FREE_RUN if image_cached else NEED_FREE_BUILD
    for path in {cache_dir, state_dir}:
        have = free(path)
        if have < need:
            raise LabError(
                f"not enough free disk space at {path}: {have / GIB:.1f} GiB free, "
                f"the lab needs {need / GIB:.0f} GiB{'' if image_cached else ' to build its image'}",
                "free some space, or point FABRIC_LAB_CACHE / FABRIC_LAB_STATE at a larger filesystem")
    if (netns_present or netns_exists)(netns):
        owner = (owner_of or read_owner)(netns)
        if owner != str(state_dir):
            who = f"the lab at {owner}" if owner else "something that is not this lab"
            raise LabError(
                f"network namespace {netns!r} already exists and belongs to {who}",
                f"stop that lab (`make lab-down` in its checkout), name another namespace with "
                f"FABRIC_LAB_NETNS, or, if it is stale, remove it with `ip netns delete {netns}`")
    need_memory_mib = memory_needed() if memory_needed else 0
    if need_memory_mib:
        have = memory()
        if have and have < need_memory_mib:
            raise LabError(
                f"not enough free memory: the lab's VMs need {need_memory_mib} MiB, "
                f"the host has {have} MiB available",
                "stop what else is using memory (another checkout's lab? `ip netns list` shows every "
                "lab namespace) or free memory, then run it again")


def read_owner(netns: str) -> str | None:
    try:
        return owner_marker(netns).read_text().strip() or None
    except FileNotFoundError:
        return None


def missing_packages(packages=HOST_PACKAGES) -> list[str]:
    missing = []
    for pkg in packages:
        proc = subprocess.run(["dpkg-query", "-W", "-f=${Status}", pkg], capture_output=True, text=True)
        if proc.returncode != 0 or "install ok installed" not in proc.stdout:
            missing.append(pkg)
    return missing


def ensure_packages(log) -> None:
    missing = missing_packages()
    if not missing:
        return
    log(f"installing host packages: {' '.join(missing)}")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    # `make test` starts the image build beside the virtualenv's set-up, whose test tools may run apt-get too:
    # wait for apt's locks instead of failing on them
    wait = ["-o", "DPkg::Lock::Timeout=600"]
    for attempt in range(3):
        try:
            run(["apt-get", *wait, "update", "-q"], env=env)
            break
        except LabError:
            if attempt == 2:
                raise
            time.sleep(10)
    run(["apt-get", *wait, "install", "-y", "-q", "--no-install-recommends", *missing], env=env)


def ensure_netns(netns: str, state_dir: Path, log) -> None:
    """Create the namespace and its bridge (idempotent) and record this lab as its owner."""
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    if not netns_exists(netns):
        log(f"creating network namespace {netns} with bridge {BRIDGE} ({SUBNET})")
        run(["ip", "netns", "add", netns])
    owner_marker(netns).write_text(f"{state_dir}\n")
    ns = ["ip", "-n", netns]
    run([*ns, "link", "set", "lo", "up"])
    if run([*ns, "link", "show", BRIDGE], check=False).returncode != 0:
        run([*ns, "link", "add", BRIDGE, "type", "bridge"])
    addrs = run([*ns, "-o", "addr", "show", "dev", BRIDGE]).stdout
    if f"{CONTROLLER_ADDR}/" not in addrs:
        run([*ns, "addr", "add", f"{CONTROLLER_ADDR}/{SUBNET.prefixlen}", "dev", BRIDGE])
    run([*ns, "link", "set", BRIDGE, "up"])


def ensure_tap(netns: str, tap: str) -> None:
    ns = ["ip", "-n", netns]
    if run([*ns, "link", "show", tap], check=False).returncode != 0:
        run([*ns, "tuntap", "add", "dev", tap, "mode", "tap"])
    run([*ns, "link", "set", tap, "master", BRIDGE])
    run([*ns, "link", "set", tap, "up"])


def delete_netns(netns: str, log) -> None:
    if netns_exists(netns):
        pids = run(["ip", "netns", "pids", netns], check=False).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), 15)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 10
        while pids and time.monotonic() < deadline:
            pids = run(["ip", "netns", "pids", netns], check=False).stdout.split()
            time.sleep(0.2)
        for pid in pids:
            try:
                os.kill(int(pid), 9)
            except ProcessLookupError:
                pass
        log(f"deleting network namespace {netns}")
        run(["ip", "netns", "delete", netns])
    owner_marker(netns).unlink(missing_ok=True)


def probe_kvm(image_dir: Path, cache_dir: Path, log, timeout: float = 25.0) -> str:
    """Return "kvm" if a KVM guest boots its kernel here, else "tcg". Cached per image and host kernel.

    The probe boots the guest kernel with no root disk and waits for the kernel's own panic
    message on the serial console: a working accelerator gets there in seconds. On the machines
    this project was built on, KVM guests hang right after the real-mode stub, so the probe
    exists to detect that, not to assume it.
    """
    forced = os.environ.get("FABRIC_LAB_ACCEL", "auto")
    if forced in ("tcg", "kvm"):
        return forced
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return "tcg"
    key = cache_dir / f"accel-{image_dir.name}-{os.uname().release}"
    if key.is_file():
        return key.read_text().strip()
    log("probing KVM with a short guest kernel boot")
    console = cache_dir / "kvm-probe.log"
    console.unlink(missing_ok=True)
    proc = subprocess.Popen([
        "qemu-system-x86_64", "-accel", "kvm", "-cpu", "host", "-m", "256", "-nodefaults",
        "-display", "none", "-no-reboot", "-serial", f"file:{console}",
        "-kernel", str(image_dir / "vmlinuz"), "-append", "console=ttyS0 panic=-1",
    ], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    result = "tcg"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if console.exists() and "Kernel panic" in console.read_text(errors="replace"):
            result = "kvm"
            break
        time.sleep(0.5)
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    if console.exists() and "Kernel panic" in console.read_text(errors="replace"):
        result = "kvm"
    if result == "tcg":
        log("KVM guests do not boot here: using software emulation (TCG)")
    key.write_text(result + "\n")
    return result

