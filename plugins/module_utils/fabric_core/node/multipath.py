"""dm-multipath on GPU nodes: one device for a read-only version served by several storage nodes.

A version replicated to several storage nodes has the same LUN identity on each (``lio.snapshot_serial``:
the serial, hence the SCSI WWID, comes from the snapshot's GUID), so a GPU node logged in to two portals
sees two paths to one disk. The ``iscsi_initiator`` role configures multipathd with ``find_multipaths
strict``: it claims only the WWIDs listed in /etc/multipath/wwids, which fabricctl adds when it
mounts a read-only export (``claim``) and removes when the last path goes (``release``). No other disk
of the host (local disks, the role's own single-path exports, a writer's volume) is ever claimed.

The mount unit names the map by WWID (``device_of``: /dev/disk/by-id/dm-uuid-mpath-WWID), the same on
every storage node's publish, so a second storage node adds a path without touching the mount.
Every command goes through a ``Runner`` (a dry run plans the changes and reads the real state).
"""

from __future__ import annotations

import re
import time

from ..base.errors import FabricError

BY_ID = "/dev/disk/by-id/dm-uuid-mpath-"
SCSI_ID = "/usr/lib/udev/scsi_id"
WWID_RE = re.compile(r"^[0-9a-zA-Z._:-]{4,128}$")


class MapTimeout(FabricError):
    """A multipath map did not appear after its WWID was claimed."""


def device_of(wwid: str) -> str:
    """The map's stable link (udev's by-id name of the dm device)."""
    return BY_ID + wwid


def wwid_of_device(device: str) -> str | None:
    """The WWID of a map's by-id link (``device_of``'s inverse), None for any other path."""
    return device[len(BY_ID):] if device.startswith(BY_ID) else None


def active(runner) -> bool:
    """multipathd runs on this host (the iscsi_initiator role enables it with iscsi_initiator_multipath)."""
    return runner.run(["systemctl", "is-active", "multipathd.service"], check=False).stdout.strip() == "active"


def wwid(runner, device: str) -> str:
    """The SCSI WWID of a disk (VPD page 0x83, as multipath reads it)."""
    res = runner.run([SCSI_ID, "--whitelisted", "--replace-whitespace", f"--device={device}"])
    value = res.stdout.strip()
    if not WWID_RE.fullmatch(value):
        raise FabricError(f"{device} has no usable SCSI WWID ({value!r})",
                          "check the LUN on the storage node (its wwn serial) and `dmesg` on this host")
    return value


def parse_paths(text: str) -> dict[str, list[dict]]:
    """``multipathd show paths raw format "%w %d %t %T"`` -> {WWID: [{dev, dm_state, checker}]}."""
    out: dict[str, list[dict]] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) != 4 or not WWID_RE.fullmatch(fields[0]):
            continue
        out.setdefault(fields[0], []).append({"dev": fields[1], "dm_state": fields[2], "checker": fields[3]})
    return out


def _show_paths(runner) -> dict[str, list[dict]] | None:
    """Every path multipathd knows, by WWID; None when multipathd does not answer."""
    res = runner.run(["multipathd", "show", "paths", "raw", "format", "%w %d %t %T"], check=False)
    return parse_paths(res.stdout) if res.rc == 0 else None


def read_paths(runner) -> dict[str, list[dict]]:
    """Every path multipathd knows, by WWID ({} when multipathd does not run)."""
    return _show_paths(runner) or {}


def paths_up(paths: list[dict]) -> int:
    """How many of a map's paths carry I/O (active in the map and ready by the path checker)."""
    return sum(1 for p in paths if p["dm_state"] == "active" and p["checker"] == "ready")


def claim(runner, device: str, *, timeout: float = 60.0, sleep=time.sleep, clock=time.monotonic) -> dict:
    """The multipath map of a disk: its WWID added to multipathd's list and the map made when missing
    (a second path of the same WWID joins it by itself). Returns {changed, wwid, device, commands}."""
    ident = wwid(runner, device)
    dm = device_of(ident)
    # multipath takes a kernel name (/dev/sdX): a udev link's name (disk/by-path/...) counts as blacklisted
    device = runner.run(["readlink", "-e", device], check=False).stdout.strip() or device
    commands: list[str] = []
    listed = runner.run(["grep", "-qxF", f"/{ident}/", "/etc/multipath/wwids"], check=False).rc == 0
    if not listed:
        runner.run(["multipath", "-a", ident], mutating=True)
        commands.append(f"multipath -a {ident}")
    if runner.run(["test", "-e", dm], check=False).rc != 0:
        # multipathd makes the map, read-only from the start for a read-only disk (it reads the path's ro flag
        # before the table goes in). The multipath command tries read-write first and retries read-only on the
        # kernel's refusal: a map made and removed, udev events for each (about 2 s of an attach on the lab's GPU
        # nodes). Without an answering multipathd, the command; either way the link is the proof.
        name = device.rsplit("/", 1)[-1]
        added = runner.run(["multipathd", "add", "path", name], mutating=True, check=False)
        commands.append(f"multipathd add path {name}")
        if added.rc != 0 or added.stdout.strip() not in ("", "ok"):
            runner.run(["multipath", device], mutating=True, check=False)
            commands.append(f"multipath {device}")
        if not runner.dry_run:
            # that map's link alone (`udevadm settle` waited for every queued event: 3.9 s of an attach on the lab)
            runner.run(["udevadm", "wait", f"--timeout={int(max(timeout, 1))}", dm], check=False)
            deadline = clock() + timeout
            while runner.run(["test", "-e", dm], check=False).rc != 0:
                if clock() >= deadline:
                    raise MapTimeout(f"no multipath map for {device} (WWID {ident}) within {timeout:g}s",
                                     "see `multipath -v3 " + device + "` and `journalctl -u multipathd` on the host")
                sleep(0.5)
    if not runner.dry_run:
        joined(runner, ident, device, timeout=timeout, sleep=sleep, clock=clock)
    return {"changed": bool(commands), "wwid": ident, "device": dm, "commands": commands}


def joined(runner, ident: str, device: str, *, timeout: float = 60.0, sleep=time.sleep, clock=time.monotonic) -> bool:
    """Wait until ``device`` (a kernel name, /dev/sdX) is a path of map ``ident`` that carries I/O: multipathd adds a
    new session's disk to an existing map on its own uevent, a moment after the login returns, and a caller that
    reports the path must not report it before. A disk that never joins the map is an error (the map would read
    through the other paths alone); one that joins but is not ready by the deadline is left to the path checker
    (False). multipathd not answering: nothing to wait for (True)."""
    name = device.rsplit("/", 1)[-1]
    deadline = clock() + timeout
    while True:
        shown = _show_paths(runner)
        if shown is None:
            return True
        mine = [p for p in shown.get(ident, []) if p["dev"] == name]
        if mine and paths_up(mine):
            return True
        if clock() >= deadline:
            if mine:
                return False
            raise MapTimeout(f"{device} did not join multipath map {ident} within {timeout:g}s",
                             f"see `multipath -v3 {device}` and `journalctl -u multipathd` on the host")
        sleep(0.5)


def release(runner, ident: str) -> dict:
    """A map whose last path goes: flushed (it must not be mounted) and its WWID taken off the list.
    Returns {changed, commands}."""
    commands: list[str] = []
    if runner.run(["test", "-e", device_of(ident)], check=False).rc == 0:
        runner.run(["multipath", "-f", ident], mutating=True)
        commands.append(f"multipath -f {ident}")
    if runner.run(["grep", "-qxF", f"/{ident}/", "/etc/multipath/wwids"], check=False).rc == 0:
        runner.run(["multipath", "-w", ident], mutating=True)
        commands.append(f"multipath -w {ident}")
    return {"changed": bool(commands), "commands": commands}
