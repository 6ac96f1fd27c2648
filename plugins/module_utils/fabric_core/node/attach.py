"""A read-only version on a GPU node: its sessions, its multipath map, its mount, its ``current`` link.

The host side of a publish, one implementation whoever drives it: the GPU-node agent (``node.agent``) runs it
with a local runner, and the publishing service (``services.publish.Publisher``) ran it through an SSH runner
before the agent took that over. Every function takes a ``Runner``: a dry run plans the changes and still
reads the real state.

* ``login``: the session to one storage node's portal, with this host's own CHAP credentials written into the
  node record from stdin (``iscsi.ensure_session``); a path of a multipath map gives up on a lost connection
  after ``MULTIPATH_REPLACEMENT_TIMEOUT`` seconds, so its I/O goes on over the other paths.
* ``device``: what to mount: the session's disk, or on a host with multipathd its map (``multipath.claim``),
  named by WWID, so the same version from another storage node (same GUID, same serial) is one more path.
* ``attach_export``: the three above and a mount unit, for an export fabricctl manages on the host (a checkpoint
  volume read-write for its one writer, a checkpoint restore, a dataset version over a shell key): the session
  comes back at boot, and so does the mount.
* ``in_use``/``detach``: who uses the mount; unmount, the map released, logout (refused while in use unless
  forced); a map with another storage node's path left keeps its mount and only this portal's path goes.
* ``read_link``/``switch_link``: MOUNT_ROOT/NAME/current, replaced atomically.
"""

from __future__ import annotations

from collections.abc import Callable

from ..base.errors import UserError
from ..base.rules import OPEN_ISCSI, Chap
from ..base.runner import Runner
from . import iscsi, mounts, multipath

# seconds a lost path of a multipath map waits for its storage node before its I/O fails over to the other
# paths (open-iscsi's node.session.timeo.replacement_timeout; single-path sessions keep iscsid.conf's 120)
MULTIPATH_REPLACEMENT_TIMEOUT = 5


def quiet(_text: str) -> None:
    """A step's progress, when nobody shows it."""


def read_link(runner, link: str) -> str | None:
    res = runner.run(["readlink", link], check=False)
    return res.stdout.strip() if res.rc == 0 and res.stdout.strip() else None


def switch_link(runner, link: str, target: str | None) -> bool:
    """Point ``link`` at ``target`` atomically (rename over it), or remove it when target is None."""
    if read_link(runner, link) == target:
        return False
    if target is None:
        runner.run(["rm", "-f", link], mutating=True)
        return True
    tmp = f"{link}.fabric-tmp"
    runner.run(["ln", "-sfn", target, tmp], mutating=True)
    runner.run(["mv", "-T", tmp, link], mutating=True)
    return True


def login(runner: Runner, *, portal: str, target_iqn: str, chap: Chap | None, startup: str = "automatic",
          map_path: bool = False, settings: dict | None = None, sessions: list | None = None,
          udev: bool = True) -> dict:
    """The host's session to a target at a portal, with its own CHAP credentials written to the node record (never
    on a command line); a session already there stays, its record gets the current secrets and ``startup``
    (``iscsi.ensure_session``). ``map_path``: a path of a multipath map (MULTIPATH_REPLACEMENT_TIMEOUT).
    ``sessions``: the host's sessions, when the caller just read them (``iscsi.read_sessions``). ``udev=False``:
    a caller that mounts the kernel's disk (``kernel_device``) does not wait for udev's link
    (``iscsi.ensure_session``)."""
    wanted = dict(settings or {})
    if map_path:
        wanted["node.session.timeo.replacement_timeout"] = MULTIPATH_REPLACEMENT_TIMEOUT
    return iscsi.ensure_session(runner, portal=portal, target_iqn=target_iqn,
                                chap=chap.fields(OPEN_ISCSI, compact=True) if chap else None, startup=startup,
                                settings=wanted or None, sessions=sessions, udev=udev)


def device(runner: Runner, mountpoint: str, session: dict, paths: bool,
           step: Callable[[str], None] = quiet, *, current=mounts.UNREAD, unit=mounts.UNREAD) -> tuple[str, dict]:
    """The device to mount: the session's disk, or with ``paths`` its multipath map. A version mounted from the
    plain disk already (published before multipathd ran) stays so: claiming a disk in use fails, and the readers
    must not lose their mount. ``current``/``unit``: the mount there and its unit's text, when the caller read
    them (``mounts.current_mount``, ``mounts.read_unit``). Returns (device, the claim's result: {changed,
    commands[, wwid]})."""
    none = {"changed": False, "commands": []}
    if not paths:
        return session["device"], none
    current = mounts.current_mount(runner, mountpoint) if current is mounts.UNREAD else current
    unit_device = mounts.unit_device(runner, mountpoint, unit)
    if current is not None and multipath.wwid_of_device(unit_device or "") is None and \
            not (current["source"] or "").startswith(("/dev/mapper/", "/dev/dm-")):
        return session["device"], none
    if runner.dry_run and session["session"] is None:  # no disk yet: its WWID is read after the login
        return multipath.device_of("WWID"), {"changed": True,
                                             "commands": [f"multipath -a (the WWID of {session['device']})"]}
    step("multipath")
    claimed = multipath.claim(runner, session["device"])
    return claimed["device"], claimed


def attach_export(runner: Runner, *, portal: str, target_iqn: str, mountpoint: str, fstype: str, writable: bool,
                  chap: Chap | None, description: str, others: tuple | list = (), host: str = "this host",
                  step: Callable[[str], None] = quiet) -> dict:
    """An export mounted on this host through a persistent mount unit (it comes back at boot, and so does its
    session: ``node.startup=automatic``): the session at ``portal`` with the host's own CHAP (``login``), the
    device (a read-only export on a host with multipathd: its multipath map, ``device``), every portal of
    ``others`` logged in too as further paths of the map (refused without multipathd), then the mount unit
    (read-only ``ro,noload``, or read-write for a writable volume's one writer). The caller checked the host's
    initiator name. Returns {changed, device, mountpoint, commands, multipath}."""
    paths = not writable and multipath.active(runner)
    others = [iscsi.normalize_portal(p) for p in others if iscsi.normalize_portal(p) != iscsi.normalize_portal(portal)]
    if others and not paths:
        raise UserError(f"{host} does not run multipathd: a version read from several storage nodes needs it (one "
                        "disk, several paths)", "converge the host with the iscsi_initiator role "
                        "(iscsi_initiator_multipath: true), or publish from one storage node")
    step("login")
    session = login(runner, portal=portal, target_iqn=target_iqn, chap=chap, startup="automatic", map_path=paths)
    dev, claimed = device(runner, mountpoint, session, paths, step)
    commands = session["commands"] + claimed["commands"]
    for other in others:
        step(f"login {other}")
        commands += login(runner, portal=other, target_iqn=target_iqn, chap=chap, startup="automatic",
                          map_path=True)["commands"]
    step("mount")
    mount = mounts.ensure_mount(runner, device=dev, mountpoint=mountpoint, fstype=fstype, readonly=not writable,
                                description=description)
    commands += mount["commands"]
    return {"changed": bool(commands), "device": dev, "mountpoint": mountpoint, "commands": commands,
            "multipath": claimed.get("wwid")}


def mount_wwid(runner: Runner, mountpoint: str) -> str | None:
    """The WWID of the multipath map a mount point is mounted through: its mount unit's device (a persistent
    unit names the map's by-id link), else what is mounted there (a runtime mount of a map: /dev/mapper/WWID,
    multipathd naming maps by WWID); None for a plain disk or nothing."""
    ident = multipath.wwid_of_device(mounts.unit_device(runner, mountpoint) or "")
    if ident:
        return ident
    current = mounts.current_mount(runner, mountpoint)
    source = (current or {}).get("source") or ""
    name = source[len("/dev/mapper/"):] if source.startswith("/dev/mapper/") else ""
    return name if multipath.WWID_RE.fullmatch(name or "-") else None


def other_paths(runner: Runner, mountpoint: str, target_iqn: str, portal: str) -> tuple[str | None, list[dict]]:
    """(WWID, sessions): the multipath map the mount point is mounted through (None: a plain disk) and the host's
    sessions to the same target at other portals than ``portal`` (none for a plain disk)."""
    ident = mount_wwid(runner, mountpoint)
    others = [s for s in (iscsi.read_sessions(runner) if ident else [])
              if s["target"] == target_iqn and iscsi.normalize_portal(s["portal"]) != portal]
    return ident, others


def in_use(runner: Runner, mountpoint: str, target_iqn: str, portal: str) -> list[str]:
    """The processes using the mount ("PID COMMAND"); none while another portal's path keeps the mount
    (``detach`` leaves it)."""
    if other_paths(runner, mountpoint, target_iqn, portal)[1]:
        return []
    return mounts.users(runner, mountpoint)


def detach(runner: Runner, *, target_iqn: str, mountpoint: str, portal: str, force: bool = False,
           step: Callable[[str], None] = quiet) -> dict:
    """The mount removed (refused while in use unless ``force``), the map released, then the logout from
    ``portal``. A multipath map with another portal's path left keeps its mount: only this portal's path is
    logged out. Returns {changed, commands, paths_left}."""
    ident, others = other_paths(runner, mountpoint, target_iqn, portal)
    commands: list[str] = []
    if others:
        step("other paths stay")
    else:
        step("unmount")
        commands += mounts.remove_mount(runner, mountpoint, force=force)["commands"]
        if ident:
            commands += multipath.release(runner, ident)["commands"]
    step("logout")
    session = iscsi.ensure_session(runner, portal=portal, target_iqn=target_iqn, state="logged_out",
                                   unmounting=(mountpoint,) if commands else (), paths_left=bool(others))
    commands += session["commands"]
    return {"changed": bool(commands), "commands": commands, "paths_left": len(others)}


def paths(runner: Runner, versions: list[tuple[str, str, str]], step: Callable[[str], None] = quiet) -> dict:
    """How many paths each version has on this host, and how many carry I/O. ``versions``: [(ref, mount point,
    target IQN)]. {ref: {multipath (the map's WWID, None for a plain disk), up, paths}}: a map's paths as
    multipathd sees them (active and ready count as up); a plain disk's sessions to the target."""
    step("paths")
    maps = multipath.read_paths(runner)
    sessions = iscsi.read_sessions(runner)
    out = {}
    for ref, mountpoint, target in versions:
        ident = mount_wwid(runner, mountpoint)
        if ident:
            found = maps.get(ident, [])
            out[ref] = {"multipath": ident, "up": multipath.paths_up(found), "paths": len(found)}
        else:
            n = sum(1 for s in sessions if s["target"] == target)
            out[ref] = {"multipath": None, "up": n, "paths": n}
    return out
