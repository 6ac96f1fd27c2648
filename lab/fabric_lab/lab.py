"""Bring the lab up, down, and report its state. `up` converges: it only adds what is missing."""

from __future__ import annotations

import concurrent.futures
import contextlib
import fcntl
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from . import host, image, topology
from .errors import LabError
from .topology import VM

REPO = Path(__file__).resolve().parents[2]
# The lab's vault identity: its password is committed, so the lab's secrets are public and the lab's alone.
# ansible.cfg loads no vault secret (it serves every inventory of the checkout, production's too); every lab
# run of Ansible (the tests, the benchmarks; the Makefile for `make demo`) gets this one from the environment.
VAULT_IDENTITY = f"lab@{REPO / 'inventory' / 'lab' / 'vault-password.txt'}"


def use_lab_vault(environ=os.environ) -> None:
    """Give the Ansible runs of this process (and its children) the lab's vault identity, and it alone."""
    environ["ANSIBLE_VAULT_IDENTITY_LIST"] = VAULT_IDENTITY
BOOT_TIMEOUT = float(os.environ.get("FABRIC_LAB_BOOT_TIMEOUT", "600"))
BOOT_RETRIES = 2  # starts again of a guest whose kernel panicked while booting (a TCG flake)
LAST_CONSOLES = "last-consoles"  # in the state directory: the serial consoles of the last lab taken down


def console_panicked(console: Path) -> bool:
    """Whether the serial console of a guest (a file) says its kernel panicked."""
    return console.exists() and "Kernel panic - not syncing" in console.read_text(errors="replace")


def log(msg: str) -> None:
    print(f"[lab {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class Lab:
    def __init__(self, state_dir: Path | None = None, inventory_dir: Path | None = None):
        self.state_dir = Path(os.environ.get("FABRIC_LAB_STATE", state_dir or REPO / ".lab")).resolve()
        self.inventory_dir = inventory_dir or REPO / "inventory" / "lab"
        self.key = self.state_dir / "id_ed25519"
        self.known_hosts = self.state_dir / "known_hosts"
        self.ssh_config_path = self.state_dir / "ssh_config"
        self.netns = topology.netns_name(self.state_dir, os.environ.get("FABRIC_LAB_NETNS"))
        # ssh's ControlPath hash (%C) covers host names, not namespaces: one directory per lab,
        # or a second lab's ssh would reuse the first lab's connections.
        self.control_dir = host.RUN_DIR / f"cm-{self.netns}"
        self.settings_path = self.state_dir / "lab.json"
        # Ansible's fact cache (ansible.cfg: fact_caching_connection): a VM that starts from fresh disks
        # is a new machine, so its cached facts (host keys, addresses) go with it.
        self.facts_dir = REPO / ".ansible" / "facts"

    # --- state -------------------------------------------------------------------------------

    def settings(self) -> dict:
        """lab.json of a lab this checkout booted; nothing when there is none, or when it cannot be read
        (a non-root user: the preflight then refuses with its own message, before anything else)."""
        try:
            return json.loads(self.settings_path.read_text())
        except (FileNotFoundError, PermissionError):
            return {"storage2": False}

    def release(self, debian: str | None = None) -> str:
        """The guests' Debian release: asked for (--debian, FABRIC_LAB_DEBIAN), else the running
        lab's, else Debian 13."""
        asked = debian or os.environ.get("FABRIC_LAB_DEBIAN") or None
        if asked:
            return image.release_name(asked)
        return self.settings().get("release") or image.release_name(image.DEFAULT_DEBIAN)

    def profile(self) -> dict:
        """The emulation profile: the running lab's (lab.json), else FABRIC_LAB_STORAGE_CPUS, FABRIC_LAB_TCG_THREAD
        and FABRIC_LAB_TCG_CPU, else topology's defaults. A running lab keeps its profile."""
        saved = self.settings()
        cpus = saved.get("storage_cpus") or os.environ.get("FABRIC_LAB_STORAGE_CPUS") or topology.STORAGE_CPUS
        thread = saved.get("tcg_thread") or os.environ.get("FABRIC_LAB_TCG_THREAD") or topology.TCG_THREAD
        cpu = saved.get("tcg_cpu") or os.environ.get("FABRIC_LAB_TCG_CPU") or topology.TCG_CPU
        try:
            cpus = int(cpus)
            topology.plan(storage_cpus=cpus)
        except ValueError:
            raise LabError(f"FABRIC_LAB_STORAGE_CPUS={cpus!r}: a storage node takes 1 or 2 vCPUs",
                           "set FABRIC_LAB_STORAGE_CPUS to 1 or 2, or unset it") from None
        if thread not in topology.TCG_THREADS:
            raise LabError(f"FABRIC_LAB_TCG_THREAD={thread!r} is not a TCG thread mode",
                           f"set it to one of {', '.join(topology.TCG_THREADS)}, or unset it")
        if not topology.valid_cpu(cpu):
            raise LabError(f"FABRIC_LAB_TCG_CPU={cpu!r} is not a QEMU CPU model",
                           "set it to a model and its feature switches (e.g. max or max,-cx16), or unset it")
        return {"storage_cpus": cpus, "tcg_thread": thread, "tcg_cpu": cpu}

    def vms(self, storage2: bool | None = None) -> tuple[VM, ...]:
        if storage2 is None:
            storage2 = self.settings().get("storage2", False)
        return topology.plan(with_storage2=storage2, storage_cpus=self.profile()["storage_cpus"])

    def vmdir(self, vm: VM) -> Path:
        return self.state_dir / "vms" / vm.name

    def pid(self, vm: VM) -> int | None:
        """The QEMU pid of vm if it is running (checked against /proc, not just the pidfile)."""
        try:
            pid = int((self.vmdir(vm) / "qemu.pid").read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except (FileNotFoundError, ValueError, ProcessLookupError):
            return None
        return pid if f"-name\0{vm.name}".encode() in b"\0".join(cmdline) else None

    @contextlib.contextmanager
    def locked(self):
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with open(self.state_dir / "lock", "w") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise LabError(f"another lab command is running on {self.state_dir}",
                               "wait for it to finish") from None
            yield

    # --- up ----------------------------------------------------------------------------------

    def up(self, storage2: bool = False, debian: str | None = None) -> None:
        started = time.monotonic()
        release = self.release(debian)
        host.preflight(state_dir=self.state_dir, cache_dir=image.cache_root(),
                       image_cached=image.is_complete(image.image_dir(release)), netns=self.netns,
                       memory_needed=lambda: sum(vm.memory_mib for vm in self.vms(storage2 or None)
                                                 if not self.pid(vm)))
        with self.locked():
            running = self.settings().get("release")
            if running and running != release and any(self.pid(vm) for vm in self.vms(storage2=True)):
                raise LabError(f"the lab is up with Debian {running} guests; {release} was asked for",
                               "run `make lab-down` first, then `make lab-up` with the release you want")
            storage2 = storage2 or self.settings().get("storage2", False)
            profile = self.profile()
            vms = self.vms(storage2)
            self.settings_path.write_text(json.dumps({"storage2": storage2, "release": release, **profile}) + "\n")
            host.ensure_packages(log)
            img = image.ensure_image(log, release)
            accel = host.probe_kvm(img, image.cache_root(), log)
            self.ensure_key()
            host.ensure_netns(self.netns, self.state_dir, log)
            for vm in vms:
                if self.pid(vm):
                    log(f"{vm.name}: already running (pid {self.pid(vm)})")
                    continue
                self.start(vm, img, accel)
            self.wait_for_ssh(vms, restart=lambda vm: self.start(vm, img, accel))
            self.write_access_files(vms, mirror=image.image_mirror(img))
            self.check_identity(vms)
            for vm in vms:  # cheaper daemon-reloads (topology.UNNEEDED_GENERATORS); no ZFS on GPU nodes' udev
                script = topology.mask_generators_script()
                if vm.role == "gpu":
                    script += " && " + topology.mask_udev_rules_script()
                self.ssh(vm.name, "sh", "-c", shlex.quote(script), timeout=120)
        log(f"lab is up ({', '.join(vm.name for vm in vms)}, Debian {release}) in {time.monotonic() - started:.0f} s; "
            f"inventory: {self.inventory_dir / 'hosts.yml'}")

    def ensure_key(self) -> None:
        if not self.key.exists():
            host.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "fabric-lab", "-f", str(self.key)])

    def start(self, vm: VM, img: Path, accel: str) -> None:
        d = self.vmdir(vm)
        d.mkdir(parents=True, exist_ok=True)
        marker = d / "image"
        if not marker.exists() or marker.read_text().strip() != img.name:
            # a new VM, or one whose image changed: start from a fresh overlay and blank disks
            for old in d.glob("*.qcow2"):
                old.unlink()
            (self.facts_dir / vm.name).unlink(missing_ok=True)
            marker.write_text(img.name + "\n")
        root = d / "root.qcow2"
        if not root.exists():
            host.run(["qemu-img", "create", "-q", "-f", "qcow2", "-b", str(img / "disk.raw"), "-F", "raw", str(root)])
        for disk in vm.disks:
            path = d / topology.disk_file(disk)
            if not path.exists():
                host.run(["qemu-img", "create", "-q", "-f", "qcow2", str(path), f"{disk.size_gib}G"])
        (d / "console.log").unlink(missing_ok=True)
        (d / "qemu.pid").unlink(missing_ok=True)
        host.ensure_tap(self.netns, vm.tap)
        profile = self.profile()
        argv = topology.qemu_argv(vm, vmdir=d, image_dir=img, ssh_pubkey=self.key.with_suffix(".pub").read_text(),
                                  accel=accel, tcg_thread=profile["tcg_thread"], tcg_cpu=profile["tcg_cpu"])
        (d / "qemu.argv").write_text("\n".join(argv) + "\n")
        mode = f"tcg, thread={profile['tcg_thread']}, cpu={profile['tcg_cpu']}" if accel == "tcg" else accel
        log(f"{vm.name}: starting ({vm.addr}, {vm.memory_mib} MiB, {vm.cpus} vCPU, {len(vm.disks)} data disks, {mode})")
        host.run(["ip", "netns", "exec", self.netns, *argv])

    def keyscan(self, vm: VM) -> str:
        proc = host.run(["ip", "netns", "exec", self.netns, "ssh-keyscan", "-T", "3", "-t", "ed25519", str(vm.addr)],
                        check=False)
        return proc.stdout.strip() if proc.returncode == 0 else ""

    def panicked(self, vm: VM) -> bool:
        """Whether the guest's kernel panicked (its serial console says so). Seen under TCG with several vCPUs:
        an "Oops: int3" while the kernel patches its own code at boot, then "Kernel panic - not syncing"."""
        return console_panicked(self.vmdir(vm) / "console.log")

    def keep_consoles(self) -> None:
        """The serial consoles of the VMs being taken down, kept in LAST_CONSOLES (those of the lab before are
        replaced): a guest that crashed during a test run still has its kernel's last words after `lab down`."""
        kept = self.state_dir / LAST_CONSOLES
        shutil.rmtree(kept, ignore_errors=True)
        for vm in self.vms(storage2=True):
            console = self.vmdir(vm) / "console.log"
            if console.exists():
                kept.mkdir(parents=True, exist_ok=True)
                shutil.copy(console, kept / f"{vm.name}.log")
                if self.panicked(vm):
                    log(f"{vm.name}: its kernel had panicked; its console is kept in {kept / (vm.name + '.log')}")

    def stop(self, vm: VM) -> None:
        pid = self.pid(vm)
        if pid:
            os.kill(pid, signal.SIGKILL)
            for _ in range(50):
                if not self.pid(vm):
                    break
                time.sleep(0.2)

    def wait_for_ssh(self, vms: tuple[VM, ...], restart=None) -> None:
        """Until every VM answers on SSH. A guest whose kernel panicked while booting is started again (at most
        BOOT_RETRIES times, its console kept as console.panic-N.log) when ``restart(vm)`` is given."""
        deadline = time.monotonic() + BOOT_TIMEOUT
        pending = {vm.name: vm for vm in vms}
        retries = {vm.name: 0 for vm in vms}
        self.host_keys: dict[str, str] = {}
        t0 = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(vms)) as pool:
            while pending:
                names = list(pending)
                for name, line in zip(names, pool.map(self.keyscan, [pending[n] for n in names]), strict=True):
                    vm = pending[name]
                    if line:
                        self.host_keys[name] = line.split(None, 1)[1]
                        log(f"{name}: ssh up after {time.monotonic() - t0:.0f} s")
                        del pending[name]
                    elif restart is not None and retries[name] < BOOT_RETRIES and self.panicked(vm):
                        retries[name] += 1
                        kept = self.vmdir(vm) / f"console.panic-{retries[name]}.log"
                        shutil.copy(self.vmdir(vm) / "console.log", kept)
                        log(f"{name}: the guest kernel panicked while booting (console kept in {kept}); "
                            f"starting it again ({retries[name]} of {BOOT_RETRIES})")
                        self.stop(vm)
                        restart(vm)
                        deadline = max(deadline, time.monotonic() + BOOT_TIMEOUT / 2)
                    elif not self.pid(vm):
                        raise LabError(f"{name}: QEMU exited during boot; see {self.vmdir(vm) / 'console.log'}",
                                       "check the console log, then run `make lab-up` again")
                if pending and time.monotonic() > deadline:
                    raise LabError(f"{', '.join(pending)}: no SSH after {BOOT_TIMEOUT:.0f} s; "
                                   f"consoles in {self.state_dir / 'vms'}",
                                   "check the console logs; raise FABRIC_LAB_BOOT_TIMEOUT on a slow machine")
                if pending:
                    time.sleep(3)

    def write_access_files(self, vms: tuple[VM, ...], mirror: str | None = None) -> None:
        self.known_hosts.write_text("".join(f"{name} {key}\n" for name, key in sorted(self.host_keys.items())))
        self.control_dir.mkdir(parents=True, exist_ok=True)
        self.ssh_config_path.write_text(topology.ssh_config(
            vms, key=self.key, known_hosts=self.known_hosts, control_dir=self.control_dir, netns=self.netns))
        self.inventory_dir.mkdir(parents=True, exist_ok=True)
        inv = topology.inventory(vms, ssh_config_path=self.ssh_config_path, mirror=mirror,
                                 control_dir=self.control_dir)
        (self.inventory_dir / "hosts.yml").write_text(
            "# Generated by `make lab-up` (lab/labctl.py): do not edit, it is rewritten on every lab-up.\n"
            + to_yaml(inv))

    def ssh(self, vm_name: str, *command: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        proc = host.run(["ssh", "-F", str(self.ssh_config_path), vm_name, *command], check=False, timeout=timeout)
        if check and proc.returncode != 0:
            raise LabError(f"{vm_name}: `{' '.join(command)}` failed (exit {proc.returncode}): {proc.stderr.strip()}")
        return proc

    def check_identity(self, vms: tuple[VM, ...]) -> None:
        for vm in vms:
            name = self.ssh(vm.name, "hostname").stdout.strip()
            if name != vm.name:
                raise LabError(f"{vm.addr} answers as {name!r}, "
                               f"expected {vm.name!r}", "run `make lab-down` then `make lab-up`")

    # --- down / status -----------------------------------------------------------------------

    def down(self) -> None:
        with self.locked():
            for vm in self.vms(storage2=True):
                if self.ssh_config_path.exists():
                    host.run(["ssh", "-F", str(self.ssh_config_path), "-O", "exit", vm.name], check=False, timeout=10)
                pid = self.pid(vm)
                if pid:
                    log(f"{vm.name}: stopping (pid {pid})")
                    os.kill(pid, signal.SIGTERM)
                    for _ in range(50):
                        if not self.pid(vm):
                            break
                        time.sleep(0.2)
                    else:
                        os.kill(pid, signal.SIGKILL)
            owner = host.read_owner(self.netns)
            if owner in (None, str(self.state_dir)):
                host.delete_netns(self.netns, log)
            else:
                log(f"namespace {self.netns} belongs to another lab ({owner}): left alone")
            self.keep_consoles()
            shutil.rmtree(self.state_dir / "vms", ignore_errors=True)
            for vm in self.vms(storage2=True):
                (self.facts_dir / vm.name).unlink(missing_ok=True)
            for path in (self.ssh_config_path, self.known_hosts, self.settings_path,
                         self.inventory_dir / "hosts.yml"):
                path.unlink(missing_ok=True)
        log("lab is down")

    def status(self) -> dict:
        vms = self.vms()
        release = self.release()
        report = {"netns": self.netns, "netns_present": host.netns_exists(self.netns),
                  "owner": host.read_owner(self.netns), "state_dir": str(self.state_dir),
                  "release": release, **self.profile(), "image": image.image_key(release),
                  "image_cached": image.is_complete(image.image_dir(release)), "vms": []}
        for vm in vms:
            pid = self.pid(vm)
            reachable = False
            if pid and self.ssh_config_path.exists():
                try:
                    reachable = self.ssh(vm.name, "true", check=False, timeout=15).returncode == 0
                except subprocess.TimeoutExpired:
                    reachable = False
            report["vms"].append({"name": vm.name, "role": vm.role, "address": str(vm.addr),
                                  "pid": pid, "running": bool(pid), "ssh": reachable,
                                  "disks": [d.by_id for d in vm.disks]})
        report["up"] = bool(report["vms"]) and all(v["ssh"] for v in report["vms"])
        return report


def to_yaml(data, indent: int = 0) -> str:
    """A small YAML writer for nested dicts of scalars (the inventory); keeps the lab stdlib-only."""
    out = []
    pad = "  " * indent
    for key, value in data.items():
        if isinstance(value, dict):
            if value:
                out.append(f"{pad}{key}:\n{to_yaml(value, indent + 1)}")
            else:
                out.append(f"{pad}{key}: {{}}\n")
        else:
            out.append(f"{pad}{key}: {json.dumps(value)}\n")
    return "".join(out)
