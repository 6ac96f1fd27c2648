"""Mounts through systemd .mount units: read-only dataset mounts that come back after a reboot.

Used by fabricctl on GPU nodes (over SSH) and on storage nodes; every command goes through a
``Runner`` so that a dry run plans the changes and still reads the real state.
"""

from __future__ import annotations

from .errors import Busy, UserError

UNIT_DIR = "/etc/systemd/system"
FSTYPES = ("ext4", "xfs")
# A read-only mount must never replay a journal: that would write to a read-only export and fail.
READONLY_OPTIONS = {"ext4": "ro,noload,nodev,nosuid", "xfs": "ro,norecovery,nodev,nosuid"}
WRITABLE_OPTIONS = {"ext4": "rw,nodev,nosuid", "xfs": "rw,nodev,nosuid"}


def options(fstype: str, readonly: bool = True) -> str:
    if fstype not in FSTYPES:
        raise UserError(f"unsupported file system {fstype!r}", f"use one of {', '.join(FSTYPES)}")
    return (READONLY_OPTIONS if readonly else WRITABLE_OPTIONS)[fstype]


def unit_name(runner, mountpoint: str) -> str:
    return runner.run(["systemd-escape", "--path", "--suffix=mount", mountpoint]).stdout.strip()


def unit_text(*, device: str, mountpoint: str, fstype: str, readonly: bool, description: str,
              device_unit: str = "") -> str:
    after = " ".join(x for x in (device_unit, "iscsid.service", "open-iscsi.service", "network-online.target") if x)
    lines = [
        "# Written by fabricctl: do not edit (fabricctl unpublish removes it)",
        "[Unit]",
        f"Description={description}",
        f"After={after}",
        "Wants=iscsid.service open-iscsi.service network-online.target",
    ]
    if device_unit:
        lines.append(f"Requires={device_unit}")
    lines += ["", "[Mount]", f"What={device}", f"Where={mountpoint}", f"Type={fstype}",
              f"Options={options(fstype, readonly)}", "DirectoryMode=0755", "", "[Install]",
              "WantedBy=remote-fs.target", ""]
    return "\n".join(lines)


def current_mount(runner, mountpoint: str) -> dict | None:
    """{source, fstype, options} of what is mounted at mountpoint, or None."""
    res = runner.run(["findmnt", "-n", "-r", "-o", "SOURCE,FSTYPE,OPTIONS", "--mountpoint", mountpoint], check=False)
    if res.rc != 0 or not res.stdout.strip():
        return None
    source, fstype, opts = (res.stdout.strip().splitlines()[0].split(" ") + ["", ""])[:3]
    return {"source": source, "fstype": fstype, "options": opts.split(",")}


def ensure_mount(runner, *, device: str, mountpoint: str, fstype: str, readonly: bool = True,
                 description: str = "fabric dataset") -> dict:
    """Write, enable and start the .mount unit; return {changed, unit, commands}."""
    unit = unit_name(runner, mountpoint)
    dev_unit = runner.run(["systemd-escape", "--path", "--suffix=device", device]).stdout.strip()
    text = unit_text(device=device, mountpoint=mountpoint, fstype=fstype, readonly=readonly,
                     description=description, device_unit=dev_unit)
    path = f"{UNIT_DIR}/{unit}"
    old = runner.run(["cat", path], check=False)
    commands = []
    if old.rc != 0 or old.stdout != text:
        runner.run(["install", "-D", "-m", "0644", "/dev/stdin", path], data=text, mutating=True)
        runner.run(["systemctl", "daemon-reload"], mutating=True)
        commands.append(f"write {path}")
    enabled = runner.run(["systemctl", "is-enabled", unit], check=False).stdout.strip()
    if enabled != "enabled":
        runner.run(["systemctl", "enable", unit], mutating=True)
        commands.append(f"systemctl enable {unit}")
    mounted = current_mount(runner, mountpoint)
    if mounted and commands and old.rc == 0:
        runner.run(["systemctl", "restart", unit], mutating=True)
        commands.append(f"systemctl restart {unit}")
    elif not mounted:
        runner.run(["mkdir", "-p", mountpoint], mutating=True)
        runner.run(["systemctl", "start", unit], mutating=True)
        commands.append(f"systemctl start {unit}")
    if not runner.dry_run:
        now = current_mount(runner, mountpoint)
        if not now or (readonly and "ro" not in now["options"]):
            raise UserError(f"{mountpoint} is not mounted {'read-only ' if readonly else ''}after starting {unit}",
                            f"see `journalctl -u {unit}` on the host")
    return {"changed": bool(commands), "unit": unit, "commands": commands}


def users(runner, mountpoint: str) -> list[str]:
    """Processes using a mount ("PID COMMAND"); [] when nothing is mounted there.

    `fuser -m` prints the PIDs on stdout (access letters and "kernel" go elsewhere or are words),
    then `ps` names them.
    """
    if current_mount(runner, mountpoint) is None:
        return []
    res = runner.run(["fuser", "-m", mountpoint], check=False)
    pids = sorted({tok for tok in res.stdout.split() if tok.isdigit()}, key=int)
    if not pids:
        return []
    ps = runner.run(["ps", "-o", "pid=,comm=", "-p", ",".join(pids)], check=False)
    found = [" ".join(line.split(None, 1)) for line in ps.stdout.splitlines() if line.strip()]
    return found or [f"{pid} ?" for pid in pids]


def remove_mount(runner, mountpoint: str, *, force: bool = False) -> dict:
    """Stop, disable and delete the unit; refuse while processes use it unless force."""
    unit = unit_name(runner, mountpoint)
    path = f"{UNIT_DIR}/{unit}"
    busy = users(runner, mountpoint)
    if busy and not force:
        raise Busy(f"{mountpoint} is in use by {', '.join(busy)}",
                   "stop those processes, or pass --force (they will get I/O errors)")
    commands = []
    if current_mount(runner, mountpoint) is not None:
        if busy:
            runner.run(["umount", "-l", mountpoint], mutating=True)
            commands.append(f"umount -l {mountpoint}")
        runner.run(["systemctl", "stop", unit], mutating=True, check=False)
        commands.append(f"systemctl stop {unit}")
    if runner.run(["test", "-e", path], check=False).rc == 0:
        runner.run(["systemctl", "disable", unit], mutating=True, check=False)
        runner.run(["rm", "-f", path], mutating=True)
        runner.run(["systemctl", "daemon-reload"], mutating=True)
        commands.append(f"remove {path}")
    if runner.run(["test", "-d", mountpoint], check=False).rc == 0:
        runner.run(["rmdir", mountpoint], mutating=True, check=False)
    return {"changed": bool(commands), "unit": unit, "commands": commands, "users": busy}

