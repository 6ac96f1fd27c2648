"""Mounts through systemd .mount units: read-only dataset mounts that come back after a reboot.

Used by fabricctl on GPU nodes (over SSH) and on storage nodes, and by the Ansible module
``fabric_mounts`` (role iscsi_initiator); every command goes through a ``Runner`` so that a dry run
plans the changes and still reads the real state.

Each unit names its owner in a marker line (``# fabric-owner: fabricctl``): ``reconcile`` removes
only units of its own owner that are no longer wanted, never another tool's or a hand-written one.
"""

from __future__ import annotations

import re

from ..base.errors import Busy, UserError
from ..base.rules import validate_filesystem

UNIT_DIR = "/etc/systemd/system"
OWNER_MARK = "# fabric-owner: "
OWNER_RE = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
# A read-only mount must never replay a journal: that would write to a read-only export and fail.
# _netdev: the device is on the network (ordered after it at boot, unmounted before it at shutdown).
READONLY_OPTIONS = {"ext4": "ro,noload,nodev,nosuid,_netdev", "xfs": "ro,norecovery,nodev,nosuid,_netdev"}
WRITABLE_OPTIONS = {"ext4": "rw,nodev,nosuid,_netdev", "xfs": "rw,nodev,nosuid,_netdev"}

WANTED_BY = "remote-fs.target"  # the [Install] of unit_text: a version's mount comes back at boot with the network


def options(fstype: str, readonly: bool = True) -> str:
    """The mount options of a fabric volume (rules.FILESYSTEMS)."""
    return (READONLY_OPTIONS if readonly else WRITABLE_OPTIONS)[validate_filesystem(fstype)]


# What systemd keeps as is in a unit name made from a path (unit_name_path_escape): anything else is written \xHH
_UNIT_NAME_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789:_.")


def path_unit(path: str, suffix: str) -> str:
    """The unit name systemd gives PATH (`systemd-escape --path --suffix=SUFFIX PATH`), computed here rather than
    by one command on the host per name: duplicate and trailing slashes dropped, "/" becomes "-", each byte other
    than ASCII letters, digits, ":", "_" and "." (and a leading ".") becomes \\xHH; "/" alone is "-"."""
    parts = [p for p in path.split("/") if p and p != "."]
    if not path.startswith("/") or ".." in parts:
        raise UserError(f"{path!r} is not an absolute, normalized path",
                        "name the mount point or device by its full path")
    escaped = []
    for i, byte in enumerate("/".join(parts).encode()):
        char = chr(byte)
        if char == "/":
            escaped.append("-")
        elif char in _UNIT_NAME_SAFE and not (i == 0 and char == "."):
            escaped.append(char)
        else:
            escaped.append(f"\\x{byte:02x}")
    return f"{''.join(escaped) or '-'}.{suffix}"


def unit_name(mountpoint: str) -> str:
    """The .mount unit of a mount point."""
    return path_unit(mountpoint, "mount")


def check_owner(owner: str) -> str:
    if not OWNER_RE.fullmatch(owner or ""):
        raise UserError(f"invalid mount owner {owner!r}", "use a short lower-case word such as 'fabricctl'")
    return owner


def unit_text(*, device: str, mountpoint: str, fstype: str, readonly: bool, description: str,
              device_unit: str = "", owner: str = "fabricctl") -> str:
    after = " ".join(x for x in (device_unit, "iscsid.service", "open-iscsi.service", "network-online.target") if x)
    lines = [
        f"# Written by {check_owner(owner)}: do not edit (it removes the unit when the mount is no longer wanted)",
        f"{OWNER_MARK}{owner}",
        "[Unit]",
        f"Description={description}",
        f"After={after}",
        "Wants=iscsid.service open-iscsi.service network-online.target",
    ]
    if device_unit:
        lines.append(f"Requires={device_unit}")
    lines += ["", "[Mount]", f"What={device}", f"Where={mountpoint}", f"Type={fstype}",
              f"Options={options(fstype, readonly)}", "DirectoryMode=0755", "", "[Install]",
              f"WantedBy={WANTED_BY}", ""]
    return "\n".join(lines)


UNREAD = object()  # an argument a caller did not read beforehand: the function reads it


def read_unit(runner, mountpoint: str) -> str | None:
    """The text of the persistent .mount unit of a mount point, None when there is no unit file."""
    res = runner.run(["cat", f"{UNIT_DIR}/{unit_name(mountpoint)}"], check=False)
    return res.stdout if res.rc == 0 else None


def unit_device(runner, mountpoint: str, text=UNREAD) -> str | None:
    """The device (What=) of the .mount unit of a mount point, None when there is no unit (``text``: the unit's
    text as ``read_unit`` read it)."""
    text = read_unit(runner, mountpoint) if text is UNREAD else text
    if text is None:
        return None
    return next((line[len("What="):].strip() for line in text.splitlines() if line.startswith("What=")), None)


def unit_owner(text: str | None) -> str | None:
    """The owner marked in a persistent mount unit's text (``read_unit``): None without a unit file, "" for an
    unmarked one."""
    if text is None:
        return None
    return next((line[len(OWNER_MARK):].strip() for line in text.splitlines() if line.startswith(OWNER_MARK)), "")


def current_mount(runner, mountpoint: str) -> dict | None:
    """{source, fstype, options} of what is mounted at mountpoint, or None."""
    res = runner.run(["findmnt", "-n", "-r", "-o", "SOURCE,FSTYPE,OPTIONS", "--mountpoint", mountpoint], check=False)
    if res.rc != 0 or not res.stdout.strip():
        return None
    source, fstype, opts = (res.stdout.strip().splitlines()[0].split(" ") + ["", ""])[:3]
    return {"source": source, "fstype": fstype, "options": opts.split(",")}


def ensure_mount(runner, *, device: str, mountpoint: str, fstype: str, readonly: bool = True,
                 description: str = "fabric dataset", owner: str = "fabricctl") -> dict:
    """Write, enable and start the .mount unit; return {changed, unit, commands, before, after}.

    ``before``/``after`` are the unit file's text (``before`` is "" when there was none).
    """
    unit = unit_name(mountpoint)
    dev_unit = path_unit(device, "device")
    text = unit_text(device=device, mountpoint=mountpoint, fstype=fstype, readonly=readonly,
                     description=description, device_unit=dev_unit, owner=owner)
    path = f"{UNIT_DIR}/{unit}"
    old = runner.run(["cat", path], check=False)
    if old.rc == 0 and OWNER_MARK in old.stdout and f"{OWNER_MARK}{owner}\n" not in old.stdout:
        theirs = next(line for line in old.stdout.splitlines() if line.startswith(OWNER_MARK))[len(OWNER_MARK):]
        raise UserError(f"{mountpoint} is mounted by {path}, which belongs to {theirs}, not {owner}",
                        f"choose another mount point, or remove it with {theirs} first")
    commands = []
    written = old.rc != 0 or old.stdout != text
    if written:
        runner.run(["install", "-D", "-m", "0644", "/dev/stdin", path], data=text, mutating=True)
        commands.append(f"write {path}")
    # no `systemctl enable`: it reloads the manager (3-6 s on a busy or emulated node, paid by every host of a
    # publish). Its wants link is made here; systemd loads a unit file it holds no copy of when the unit is first
    # used, so a reload is needed only when it holds an older copy (``reload_if_stale``)
    commands += want(runner, path, unit)
    if written and reload_if_stale(runner, unit):
        commands.append("systemctl daemon-reload")
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
    return {"changed": bool(commands), "unit": unit, "commands": commands,
            "before": old.stdout if old.rc == 0 else "", "after": text}


def want(runner, path: str, unit: str) -> list[str]:
    """The link `systemctl enable` makes for WantedBy=remote-fs.target, made without enable's reload (boot reads
    it; a running manager needs it not to start the unit now). Returns the commands (none when it is there)."""
    wants_dir = f"{UNIT_DIR}/{WANTED_BY}.wants"
    if runner.run(["readlink", f"{wants_dir}/{unit}"], check=False).stdout.strip() == path:
        return []
    runner.run(["mkdir", "-p", wants_dir], mutating=True)
    runner.run(["ln", "-sfn", path, f"{wants_dir}/{unit}"], mutating=True)
    return [f"link {wants_dir}/{unit}"]


def reload_if_stale(runner, unit: str) -> bool:
    """After a unit file was written: `systemctl daemon-reload` only when the manager holds an older copy of the
    unit (NeedDaemonReload); one it never loaded, or looked up when there was no file (systemd retries a unit
    not found once its unit directories changed), is read from disk when first used. In a dry run the file is
    not written: a unit loaded now would need the reload. Returns whether it reloads."""
    out = runner.run(["systemctl", "show", "--property=LoadState,NeedDaemonReload", unit], check=False).stdout
    props = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    if props.get("NeedDaemonReload") == "yes" or (runner.dry_run and props.get("LoadState") == "loaded"):
        runner.run(["systemctl", "daemon-reload"], mutating=True)
        return True
    return False


def marked_units(runner) -> list[dict]:
    """Every .mount unit in UNIT_DIR that carries an owner marker: [{unit, path, owner, mountpoint,
    device}], sorted. One grep reads the marker, What= and Where= of every unit file (not the
    *.wants links)."""
    res = runner.run(["grep", "-r", "-H", "--include=*.mount", "-E", f"^({OWNER_MARK}|What=|Where=)", UNIT_DIR],
                     ok_rcs=(0, 1))
    files: dict[str, dict] = {}
    for line in res.stdout.splitlines():
        path, sep, text = line.partition(":")
        if not sep or path.count("/") != UNIT_DIR.count("/") + 1:
            continue  # not directly in UNIT_DIR
        entry = files.setdefault(path, {"unit": path.rsplit("/", 1)[1], "path": path, "owner": "",
                                        "mountpoint": "", "device": ""})
        if text.startswith(OWNER_MARK):
            entry["owner"] = text[len(OWNER_MARK):].strip()
        elif text.startswith("What="):
            entry["device"] = text[len("What="):].strip()
        elif text.startswith("Where="):
            entry["mountpoint"] = text[len("Where="):].strip()
    return [e for _path, e in sorted(files.items()) if e["owner"] and e["mountpoint"]]


def _of_owner(marked: list[dict], owner: str) -> list[dict]:
    """owner's entries of ``marked_units``, without their owner field."""
    return [{k: v for k, v in u.items() if k != "owner"} for u in marked if u["owner"] == owner]


def owned_units(runner, owner: str) -> list[dict]:
    """The .mount units in UNIT_DIR marked as owner's: [{unit, path, mountpoint, device}], sorted."""
    check_owner(owner)
    return _of_owner(marked_units(runner), owner)


def reconcile(runner, wanted: list[dict], *, owner: str, purge: bool = True, force: bool = False) -> dict:
    """Make owner's mount units exactly ``wanted``.

    wanted: [{device, mountpoint, fstype, readonly (default True), description}]. Each is written,
    enabled and mounted (``ensure_mount``); with ``purge``, owner's units whose mount point is not
    wanted are unmounted and removed (refused while in use unless ``force``), before anything is
    written. Returns {changed, mounts: [ensure results], removed: [owned_units entries], commands}.
    """
    check_owner(owner)
    points = [m["mountpoint"] for m in wanted]
    dupes = sorted({p for p in points if points.count(p) > 1})
    if dupes:
        raise UserError(f"mount point(s) listed twice: {', '.join(dupes)}", "give each mount its own mount point")
    removed, commands = [], []
    marked = marked_units(runner)
    theirs = [u for u in marked if u["owner"] != owner and u["mountpoint"] in points]
    if theirs:  # refused before anything changes
        raise UserError("mount point(s) already mounted by another tool's unit: "
                        + "; ".join(f"{u['mountpoint']} ({u['unit']}, {u['owner']})" for u in theirs),
                        "choose other mount points, or remove those mounts with the tool that made them")
    if purge:
        stale = [u for u in _of_owner(marked, owner) if u["mountpoint"] not in points]
        busy = {u["mountpoint"]: users(runner, u["mountpoint"]) for u in stale}
        busy = {m: who for m, who in busy.items() if who}
        if busy and not force:
            raise Busy("mounts no longer wanted are in use: "
                       + "; ".join(f"{m} by {', '.join(who)}" for m, who in sorted(busy.items())),
                       "stop those processes and run again (or force the removal; they will get I/O errors)")
        for u in stale:
            res = remove_mount(runner, u["mountpoint"], force=force)
            commands += res["commands"]
            removed.append(u)
    done = []
    for m in wanted:
        res = ensure_mount(runner, device=m["device"], mountpoint=m["mountpoint"], fstype=m["fstype"],
                           readonly=m.get("readonly", True), description=m.get("description") or "fabric dataset",
                           owner=owner)
        commands += res["commands"]
        done.append(res)
    return {"changed": bool(commands), "mounts": done, "removed": removed, "commands": commands}


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
    unit = unit_name(mountpoint)
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
        # one reload, after the file is gone (`disable` would reload the manager itself, before)
        runner.run(["systemctl", "disable", "--no-reload", unit], mutating=True, check=False)
        runner.run(["rm", "-f", path], mutating=True)
        runner.run(["systemctl", "daemon-reload"], mutating=True)
        commands.append(f"remove {path}")
    if runner.run(["test", "-d", mountpoint], check=False).rc == 0:
        runner.run(["rmdir", mountpoint], mutating=True, check=False)
    return {"changed": bool(commands), "unit": unit, "commands": commands, "users": busy}


# --------------------------------------------------------------------------------------------
# runtime mounts: gone at reboot (a job's attachment)


def runtime_mount_argv(*, device: str, mountpoint: str, fstype: str) -> list[str]:
    """`mount` of a read-only version (the mount point made by mount's --mkdir), no unit file: systemd makes the
    mount point's unit (``unit_name``) from the mount table itself, and it is gone at reboot. No fsck (a read-only
    export must never be written), the fabric's read-only options. Their `_netdev` (kept by mount in
    /run/mount/utab, where systemd reads it) makes systemd order the mount as a network file system's: after
    remote-fs-pre.target, which open-iscsi.service comes before, so at shutdown it is unmounted before the sessions
    go. Not `systemd-mount`: that waits for systemd's unit of the device, so for udev's rules, and cost 0.7-0.8 s
    against mount's 0.2 s on the lab's GPU nodes (issue 29's prolog budget is 3 s); not a unit file: a
    daemon-reload costs 3-6 s there."""
    return ["mount", "--mkdir", "-t", fstype, "-o", options(fstype, True), device, mountpoint]


def ensure_runtime_mount(runner, *, device: str, mountpoint: str, fstype: str, current=UNREAD) -> dict:
    """Mount a read-only version until the next boot (``runtime_mount_argv``); a mount there already stays (it
    must be read-only). ``current``: what ``current_mount`` read there, when the caller read it. ``remove_mount``
    unmounts it (`systemctl stop` of the mount point's unit). Returns {changed, unit, commands}."""
    unit = unit_name(mountpoint)
    now = current_mount(runner, mountpoint) if current is UNREAD else current
    if now is not None:
        if "ro" not in now["options"]:
            raise UserError(f"{mountpoint} is mounted, and not read-only ({now['source']})",
                            f"find out who mounted it there (`systemctl status {unit}`) and unmount it")
        return {"changed": False, "unit": unit, "commands": []}
    # read-only by the kernel's own flag once mount succeeds: nothing to read back
    res = runner.run(runtime_mount_argv(device=device, mountpoint=mountpoint, fstype=fstype), mutating=True,
                     check=False)
    if res.rc != 0:
        raise UserError(f"mount of {device} at {mountpoint} failed: {(res.stderr or res.stdout).strip()}",
                        "see `dmesg` on the host; `fabricctl verify NAME@VERSION` on the storage node checks the "
                        "version")
    return {"changed": True, "unit": unit, "commands": [f"mount {device} {mountpoint} (read-only, until reboot)"]}


def persist_mount(runner, *, device: str, mountpoint: str, fstype: str, description: str, owner: str) -> dict:
    """Keep a version mounted now (a runtime mount) across reboots too: its unit file written to UNIT_DIR and
    wanted by remote-fs.target, without touching the mount. `systemctl enable` refuses while a transient unit
    of the name is loaded (its file in /run/systemd/transient comes first), so the wants link is made here,
    as enable makes it for ``WantedBy=remote-fs.target``. Returns {changed, commands}."""
    unit = unit_name(mountpoint)
    path = f"{UNIT_DIR}/{unit}"
    text = unit_text(device=device, mountpoint=mountpoint, fstype=fstype, readonly=True, description=description,
                     device_unit=path_unit(device, "device"), owner=owner)
    old = runner.run(["cat", path], check=False)
    if old.rc == 0 and OWNER_MARK in old.stdout and f"{OWNER_MARK}{owner}\n" not in old.stdout:
        raise UserError(f"{mountpoint} has a mount unit {path} of another tool", "remove it with that tool first")
    commands = []
    if old.rc != 0 or old.stdout != text:
        runner.run(["install", "-D", "-m", "0644", "/dev/stdin", path], data=text, mutating=True)
        commands.append(f"write {path}")
    commands += want(runner, path, unit)
    if commands and reload_if_stale(runner, unit):
        commands.append("systemctl daemon-reload")
    return {"changed": bool(commands), "commands": commands}


def unpersist_mount(runner, mountpoint: str) -> dict:
    """A version mounted now stops coming back at boot: its unit file (and wants link) removed, the mount left
    as it is (systemd keeps a unit for every mount). Returns {changed, commands}."""
    unit = unit_name(mountpoint)
    path = f"{UNIT_DIR}/{unit}"
    if runner.run(["test", "-e", path], check=False).rc != 0:
        return {"changed": False, "commands": []}
    runner.run(["systemctl", "disable", "--no-reload", unit], mutating=True, check=False)
    runner.run(["rm", "-f", path], mutating=True)
    runner.run(["systemctl", "daemon-reload"], mutating=True)
    return {"changed": True, "commands": [f"remove {path} (stays mounted until it is detached)"]}
