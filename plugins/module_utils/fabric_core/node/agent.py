"""The GPU-node agent: this node attaches the versions granted to it, counts who holds each, and lets go.

Storage nodes grant (an ACL with this host's own CHAP on every storage node exporting a version: ``fabricctl
grant``); the GPU node attaches by itself, driven by a scheduler's hooks (a job's holder) or by an operator
(``manual``, what ``fabricctl publish`` asks for). ``Agent`` is the library; ``fabric-node`` is its thin CLI
(``fabric_node/``), and a CSI node plugin can call the same methods.

``attach(REF, HOLDER)``: the target of NAME@VERSION is derived with the storage side's rule
(``exports.dataset_on_node``); the agent logs in to every storage node of its configuration that exports it
(all at once, one multipath map when multipathd runs; else the first that lets it in; a job's attachment on a
node whose configuration names one storage node reads the session's disk, no map), mounts it read-only at
MOUNT_ROOT/NAME/VERSION and records the holder. A second holder of a mounted version only adds itself. A
version held by ``manual`` comes back after a reboot (node records ``node.startup=automatic``, a mount unit in
/etc/systemd/system); one held by jobs only never logs in again by itself (``node.startup=manual``, a transient
mount unit, gone at reboot). ``detach`` counts a holder out; the last one out unmounts, logs out, deletes the
node records and the record. ``gc`` drops stale job holders (recorded in another boot, or whose job is no
longer running) and removes what no holder references. Every change runs under the node lock
(``base.lock``: one flock, /run/fabric/node.lock), so concurrent calls take turns.

A version no storage node lets this host in to (iSCSI exit 24 on every portal: no ACL for this initiator, or
no such target) is ``NotGranted``, whose fix names the grant to run on a storage node; storage nodes that
cannot be reached are ``StorageUnreachable``. Both change nothing on this node.
"""

from __future__ import annotations

import contextlib
import functools
import os
import posixpath
import time
from collections.abc import Callable
from dataclasses import replace

from ..base import lock
from ..base.errors import Busy, FabricError, NotFound, UserError
from ..base.exports import current_link_of, dataset_on_node, dataset_target_prefix
from ..base.model import Step, apply_steps
from ..base.names import validate_tag
from ..base.rules import FILESYSTEMS, OPEN_ISCSI, validate_filesystem
from ..base.runner import Runner
from . import attach as hostside
from . import iscsi, mounts, multipath
from .attachments import (
    MANUAL,
    Attachment,
    Store,
    add_holder,
    gc_dict,
    job_of,
    now_text,
    parse_version_ref,
    plan_gc,
    read_boot_id,
    remove_holder,
    validate_holder,
)
from .checkpoints import Checkpoints
from .config import LOCK_PATH, NodeConfig

OWNER = "fabric-node"  # the owner marker of the agent's persistent mount units (mounts.OWNER_MARK)
ADOPTED_OWNERS = ("fabricctl",)  # units fabricctl wrote on this host before the agent: the agent's to keep up
# open-iscsi retries a refused login (node.session.initial_login_retry_max, 8 by default) until each attempt's
# login_timeout (15 s) runs out: LIO refuses a target it does not have with "target error (03/01)", which open-iscsi
# takes for a transient error, so a storage node without the version cost a job 31.6 s (2 retries) and a node that
# is down 30 s. The agent makes one attempt (measured on the lab: a refusal then exits 5 in 0.25 s), retries a
# refusal itself once after LOGIN_PAUSE (a target being restored at the node's boot), and does not log in to a
# portal that takes no TCP connection within PROBE_SECONDS.
LOGIN_RETRIES = 0
LOGIN_PAUSE = 1.0
RC_NOT_FOUND = 19  # iscsiadm: non-retryable login failure (LIO: no such target)
RC_REJECTED = (5, *iscsi.RC_UNREACHABLE)  # a login that failed or timed out: refused, or the node is down
PROBE_SECONDS = 3  # the TCP probe that tells the two apart
MANIFEST = posixpath.join(".fabric", "manifest.tsv")


class NotGranted(UserError):
    """No storage node lets this host in to the version (no ACL for it, or no such export)."""

    reason = "not_granted"


class StorageUnreachable(UserError):
    """No storage node that could export the version answered."""

    reason = "unreachable"


def command_liveness(argv: tuple | list, runner: Runner) -> Callable[[str], bool | None]:
    """An "is this job alive" answer from a command (``job_alive_command``, argv with ``{job}``): alive when it
    exits 0 printing something (squeue lists the job), ended when it exits 0 printing nothing or says the job id
    is invalid (gone from the controller), unknown (None: the holder is kept) otherwise."""
    def alive(job: str) -> bool | None:
        res = runner.run([w.replace("{job}", job) for w in argv], check=False)
        if res.rc == 0:
            return bool(res.stdout.strip())
        if "invalid job id" in (res.stderr + res.stdout).lower():
            return False
        return None
    return alive


class Agent:
    """This GPU node's attachments (``config``: its configuration; ``runner``: a local runner; a dry run is the
    runner's: every read runs, nothing changes, no record is written)."""

    def __init__(self, config: NodeConfig, runner: Runner, *, store: Store | None = None,
                 boot_id: str | None = None, lock_path: str = LOCK_PATH, sleep: Callable[[float], None] = time.sleep):
        self.config = config
        self.sleep = sleep
        self.runner = runner
        self.store = store or Store(config.state_dir)
        self.boot_id = read_boot_id() if boot_id is None else boot_id
        self.lock_path = lock_path

    @property
    def dry_run(self) -> bool:
        return self.runner.dry_run

    @property
    def checkpoints(self) -> Checkpoints:
        """fabricctl's checkpoint exports on this node (a job's writable volume, its restores, the writer's
        freeze): ``node.checkpoints``."""
        return Checkpoints(self)

    # ---- names

    def version(self, ref: str) -> tuple[str, str, str, str]:
        """(name, version, target IQN, mount point) of NAME@VERSION (the storage side's rule)."""
        name, version = parse_version_ref(ref)
        target, mountpoint = dataset_on_node(self.config.iqn_base, self.config.mount_root, name, version)
        return name, version, target, mountpoint

    def is_alive(self) -> Callable[[str], bool | None] | None:
        """The configured job liveness command as a callable (None: none configured)."""
        command = self.config.job_alive_command
        return command_liveness(command, self.runner) if command else None

    @contextlib.contextmanager
    def locked(self, what: str):
        """The node lock around a change (none in a dry run)."""
        if self.dry_run:
            yield
            return
        with lock.node_lock(what, path=self.lock_path, wait=self.config.lock_wait):
            yield

    def _save(self, att: Attachment) -> None:
        if not self.dry_run:
            self.store.save(att)

    def _remove(self, ref: str) -> None:
        if not self.dry_run:
            self.store.remove(ref)

    # ---- attach

    def attach(self, ref: str, holder: str, step: Callable[[str], None] = hostside.quiet, *,
               via: str | None = None, current: bool = False) -> dict:
        """Mount NAME@VERSION read-only for ``holder`` (see the module's docstring). ``via``: a storage node of the
        configuration that exports it now (the one whose key asks): an attachment read through a multipath map
        without a path through it converges again, logging in there too (a version replicated and granted there
        after it was attached). Returns {ref, name, version, path, device, holders, storage_nodes, portals,
        fstype, multipath, persistent, changed, commands, current, switched}: ``current``, the version
        MOUNT_ROOT/NAME/current points at (None: no link), saves a storage node's publish a round trip to read it.
        With ``current`` the link is pointed at this version once it is mounted, under the same lock (a publish of a
        dataset's newest version: one request instead of two); ``switched`` says whether it moved."""
        name, version, target, mountpoint = self.version(ref)
        validate_holder(holder)
        with self.locked(f"fabric-node attach {name}@{version} --holder {holder}"):
            self.check_initiator()
            att = self.store.load(f"{name}@{version}") or Attachment(name, version, target, mountpoint)
            added = add_holder(att, holder, since=now_text(), boot_id=self.boot_id)
            self._save(att)  # the holder is counted before anything changes: a killed attach is found again
            try:
                commands = [] if self._settled(att, via) else self._converge(att, step)
            except BaseException:
                if added:
                    remove_holder(att, holder)
                if not att.holders:
                    with contextlib.suppress(Exception):  # the attach's own error is the one to report
                        self._teardown(att, force=False)
                    self._remove(att.ref)
                else:
                    self._save(att)
                raise
            att.state = "attached"
            self._save(att)
            link = current_link_of(mountpoint)
            switched = hostside.switch_link(self.runner, link, version) if current else False
            now = version if current else hostside.read_link(self.runner, link)
        return {**self._describe(att), "changed": bool(commands) or added or switched, "commands": commands,
                "current": now, "switched": switched}

    def _settled(self, att: Attachment, via: str | None = None) -> bool:
        """An attachment that needs nothing for its new holder: attached, as persistent as its holders want, and
        mounted (a second job of a version only counts itself in); read through a multipath map, with a path
        through ``via`` when that storage node of the configuration exports it."""
        if via is not None and att.multipath and via not in att.portals and \
                any(node.name == via for node in self.config.storage_nodes):
            return False
        return (att.state == "attached" and att.persistent == att.wants_persistent()
                and mounts.current_mount(self.runner, att.mountpoint) is not None)

    def _describe(self, att: Attachment) -> dict:
        return {"ref": att.ref, "name": att.name, "version": att.version, "path": att.mountpoint,
                "device": att.device, "holders": sorted(att.holders), "storage_nodes": sorted(att.portals),
                "portals": sorted(att.portals.values()),
                "fstype": att.fstype, "multipath": att.multipath, "persistent": att.persistent,
                "target": att.target, "state": att.state}

    def check_initiator(self) -> None:
        actual = iscsi.read_initiator_name(self.runner)
        if actual != self.config.initiator:
            raise UserError(f"this node's initiator name is {actual!r}, its fabric-node configuration says "
                            f"{self.config.initiator!r}",
                            "re-run playbooks/site.yml (roles iscsi_initiator and fabric_node set both from the "
                            "inventory)")

    def _converge(self, att: Attachment, step) -> list[str]:
        """Sessions, device, mount and persistence of an attachment as its holders want them; returns the
        changes (commands, redacted)."""
        persistent = att.wants_persistent()
        # A job's attachment (gone at reboot) from the one storage node this node's configuration names reads the
        # session's disk: no other node can add a path to a map before that configuration changes, and a map's udev
        # events cost an attach about 2 s on the lab (issue 29's prolog). A manual holder's attachment (it outlives
        # configurations), one with several storage nodes, or one read through a map already, goes through a map.
        paths = self.config.multipath and (persistent or len(self.config.storage_nodes) > 1 or bool(att.multipath)) \
            and multipath.active(self.runner)
        # a job's plain disk (neither a map's path nor a mount unit's link) needs nothing of udev's: its kernel disk
        # is mounted as soon as the login's SCSI scan added it (udev's rules cost 1-1.4 s on the lab)
        plain = not (persistent or paths)
        step("login")
        sessions, commands = self._login(att.target, persistent=persistent, paths=paths, udev=not plain)
        first = next(iter(sessions.values()))
        # read once: neither the claim nor the file system's probe changes what is mounted there
        mounted = mounts.current_mount(self.runner, att.mountpoint)
        unit_text = mounts.read_unit(self.runner, att.mountpoint)
        device, claimed = hostside.device(self.runner, att.mountpoint, first, paths, step, current=mounted,
                                          unit=unit_text)
        commands += claimed["commands"]
        att.portals = {node: res["portal"] for node, res in sessions.items()}
        att.multipath = claimed.get("wwid") or att.multipath
        att.device = device
        source = (first["kernel_device"] or device) if plain else device
        att.fstype = att.fstype or self._fstype(source)
        step("mount")
        description = f"fabric dataset version {att.ref}"  # the publishing service's: an adopted unit stays as it is
        unit = mounts.unit_owner(unit_text)
        if persistent:
            if mounted is not None and unit is None:  # held by jobs so far (a runtime mount): kept, and persisted
                commands += mounts.persist_mount(self.runner, device=device, mountpoint=att.mountpoint,
                                                 fstype=att.fstype, description=description, owner=OWNER)["commands"]
            else:
                commands += mounts.ensure_mount(self.runner, device=device, mountpoint=att.mountpoint,
                                                fstype=att.fstype, readonly=True, description=description,
                                                owner=unit if unit in ADOPTED_OWNERS else OWNER)["commands"]
        else:
            if unit is not None:  # a manual holder left: the mount stays, until reboot only
                commands += mounts.unpersist_mount(self.runner, att.mountpoint)["commands"]
            commands += mounts.ensure_runtime_mount(self.runner, device=source, mountpoint=att.mountpoint,
                                                    fstype=att.fstype, current=mounted)["commands"]
        att.persistent = persistent
        return commands

    def _fstype(self, device: str) -> str:
        """The file system on the version's device (a low-level probe; only ext4 and xfs are the fabric's)."""
        if self.dry_run and not self.runner.run(["test", "-e", device], check=False).ok:
            return "ext4"  # nothing logged in: what a version usually has (a real run reads it)
        # only the fabric's types probed: a whole probe reads more of the disk, each read a round trip to the storage
        # node (0.28 against 0.10 s on the lab); anything else, or both, reads as none of them
        res = self.runner.run(["blkid", "-p", "-n", ",".join(FILESYSTEMS), "-o", "value", "-s", "TYPE", device],
                              check=False)
        fstype = res.stdout.strip()
        try:
            return validate_filesystem(fstype)
        except UserError:
            raise UserError(f"{device} has no file system the fabric mounts ({fstype or 'none found'})",
                            "check the version on the storage node (`fabricctl verify NAME@VERSION`)") from None

    def _login(self, target: str, *, persistent: bool, paths: bool, udev: bool = True) -> tuple[dict, list[str]]:
        """Sessions to the target: with ``paths`` at every storage node that lets this host in (at once), else at
        the first one (one with a session already first); ``udev``: wait for udev's link of the disk, else for the
        kernel's disk only (``attach.login``). Returns ({node: ensure_session result}, commands);
        raises NotGranted / StorageUnreachable / the login's error when none let it in, after removing the node
        records its failed logins left."""
        nodes = list(self.config.storage_nodes)
        chap = self.config.chap
        startup = "automatic" if persistent else "manual"
        settings = {"node.session.initial_login_retry_max": LOGIN_RETRIES}

        found = iscsi.read_sessions(self.runner)
        live = {s["portal"] for s in found if s["target"] == target}

        def attempt(node, sessions=None):
            return hostside.login(self.runner, portal=node.portal, target_iqn=target, chap=chap, startup=startup,
                                  map_path=paths, settings=settings, sessions=sessions, udev=udev)

        def one(node):
            if node.portal not in live and not self.runner.dry_run and not self._answers(node.portal):
                return node, None, iscsi.PortalUnreachable(
                    [], 8, "", "", f"storage node {node.name} ({node.portal}) takes no TCP connection within "
                    f"{PROBE_SECONDS} s", "check that it is up and reachable on the storage network")
            try:
                try:
                    return node, attempt(node, found), None  # the sessions just read; a retry reads them again
                except iscsi.LoginFailed as err:
                    if err.rc not in RC_REJECTED or isinstance(err, iscsi.AuthorizationFailed) or self.runner.dry_run:
                        raise
                    self.sleep(LOGIN_PAUSE)
                    return node, attempt(node), None
            except FabricError as err:
                with contextlib.suppress(Exception):  # the record a refused login left behind
                    iscsi.ensure_session(self.runner, portal=node.portal, target_iqn=target, state="logged_out")
                return node, None, err

        outcomes = []
        if paths:
            # lazy: concurrent.futures imports logging and traceback, a tenth of the agent's start on the lab
            from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415

            with ThreadPoolExecutor(max_workers=max(1, len(nodes))) as pool:
                outcomes = list(pool.map(one, nodes))
        else:
            for node in sorted(nodes, key=lambda n: n.portal not in live):
                outcomes.append(one(node))
                if outcomes[-1][1] is not None:
                    break
        ok = {node.name: res for node, res, _err in outcomes if res is not None}
        if ok:
            return ok, [c for _node, res, _err in outcomes if res is not None for c in res["commands"]]
        raise self._refused(target, {node.name: err for node, _res, err in outcomes})

    def _answers(self, portal: str) -> bool:
        """Whether a storage node's portal (HOST:PORT) takes a TCP connection within PROBE_SECONDS."""
        host, _sep, port = portal.rpartition(":")
        res = self.runner.run(["timeout", str(PROBE_SECONDS), "bash", "-c", 'exec 3<>"/dev/tcp/$0/$1"',
                               host.strip("[]"), port], check=False)
        return res.rc == 0

    def _refused(self, target: str, errors: dict) -> FabricError:
        ref = target.rsplit(":ds.", 1)[-1].replace(".", "@", 1)
        host = self.config.host
        denied = [n for n, e in errors.items() if isinstance(e, iscsi.AuthorizationFailed)
                  or (isinstance(e, iscsi.LoginFailed) and e.rc == RC_NOT_FOUND)]
        # LIO answers a login to a target it does not have with "target error (03/01)", which open-iscsi retries
        # until the login times out: iscsiadm then exits 5 or 8, as for a node that is down. A node whose portal
        # takes a TCP connection is up: its refusal means the version is not there for this host.
        portals = {node.name: node.portal for node in self.config.storage_nodes}
        denied += [n for n, e in errors.items() if n not in denied and n in portals
                   and isinstance(e, iscsi.LoginFailed) and e.rc in RC_REJECTED and self._answers(portals[n])]
        down = [n for n, e in errors.items() if n not in denied and isinstance(e, iscsi.PortalUnreachable)]
        _name, _sep, version = ref.partition("@")
        tag = ""
        with contextlib.suppress(UserError):
            validate_tag(version)
            tag = (f"; if {version!r} is a tag, name the version it points to (`fabricctl show {ref}` on a storage "
                   "node): the agent cannot resolve tags")
        if len(denied) == len(errors):
            return NotGranted(f"{ref} is not granted to this host ({host}, {self.config.initiator}) on any storage "
                              f"node ({', '.join(errors)}), or does not exist there (iSCSI login refused)",
                              f"on a storage node that holds it: `fabricctl grant {ref} --to {host}`{tag}")
        if down and len(down) + len(denied) == len(errors):
            refused = f"; refused by {', '.join(denied)}" if denied else ""
            return StorageUnreachable(
                f"{ref}: no storage node that could export it answered ({', '.join(down)} cannot be reached{refused})",
                "check that the storage nodes are up and reachable on the storage network, then attach again "
                f"(a version replicated to another node is read from there: `fabricctl replicate {ref} --to NODE` "
                f"and `fabricctl grant {ref} --to {host}` there)")
        return next(e for n, e in errors.items() if n not in denied and n not in down)

    # ---- detach

    def detach(self, ref: str, holder: str, *, force: bool = False,
               is_alive: Callable[[str], bool | None] | None = None, step=hostside.quiet,
               via: str | None = None) -> dict:
        """Count ``holder`` out of NAME@VERSION; the last one out unmounts (refused while a process uses the
        mount, unless ``force`` or the holder is a job that has ended: then lazily), logs out and deletes the node
        records and the record. A holder that does not hold it changes nothing (an epilog may run twice).
        ``via``: the storage node whose key asks (an operator's unpublish there): when the manual holder reads the
        version through a multipath map with paths through other nodes too, only that node's path goes (its
        session and node record) and the holder stays, as the others still publish it.
        Returns {ref, path, held, detached, holders, changed, commands[, users, paths_left]}."""
        name, version, target, mountpoint = self.version(ref)
        validate_holder(holder)
        with self.locked(f"fabric-node detach {name}@{version} --holder {holder}"):
            att = self.store.load(f"{name}@{version}")
            if att is None and holder == MANUAL and \
                    mounts.unit_owner(mounts.read_unit(self.runner, mountpoint)) in ADOPTED_OWNERS:
                # published by fabricctl before the agent: its operator's publish is the manual holder
                att = Attachment(name, version, target, mountpoint, holders={MANUAL: {"since": "", "boot_id": ""}},
                                 state="attached", persistent=True)
            if att is not None and holder == MANUAL and holder in att.holders and att.multipath and \
                    via in att.portals and len(att.portals) > 1:
                return self._drop_path(att, via, step)
            return self._detach(att, f"{name}@{version}", mountpoint, holder, force=force, is_alive=is_alive,
                                step=step)

    def _drop_path(self, att: Attachment, node: str, step) -> dict:
        """One storage node's path of a multipath attachment logged out (its node record deleted); the map, the
        mount and the holders stay on the other paths."""
        step(f"logout {node}")
        portal = att.portals.pop(node)
        commands = iscsi.ensure_session(self.runner, portal=iscsi.normalize_portal(portal), target_iqn=att.target,
                                        state="logged_out", paths_left=True)["commands"]
        self._save(att)
        return {"ref": att.ref, "path": att.mountpoint, "held": True, "detached": False, "changed": bool(commands),
                "commands": commands, "holders": sorted(att.holders), "paths_left": len(att.portals)}

    def _detach(self, att: Attachment | None, ref: str, mountpoint: str, holder: str, *, force: bool, is_alive,
                step) -> dict:
        out = {"ref": ref, "path": mountpoint, "held": False, "detached": False, "changed": False, "commands": []}
        if att is None or holder not in att.holders:
            return {**out, "holders": sorted(att.holders) if att else []}
        out["held"] = True
        if len(att.holders) > 1:
            remove_holder(att, holder)
            commands = self._converge(att, step) if att.persistent and not att.wants_persistent() else []
            self._save(att)
            return {**out, "holders": sorted(att.holders), "changed": True, "commands": commands}
        users = mounts.users(self.runner, mountpoint)
        job = job_of(holder)
        ended = job is not None and is_alive is not None and is_alive(job) is False
        if users and not (force or ended):
            raise Busy(f"{ref} is in use by {', '.join(users)} (holder {holder} is its last)",
                       "stop those processes and detach again" + (", or let the job end" if job else "")
                       + "; --force unmounts anyway (lazily: they get I/O errors)")
        commands = self._teardown(att, force=bool(users), step=step)
        self._remove(ref)
        return {**out, "holders": [], "detached": True, "changed": True, "commands": commands,
                **({"users": users} if users else {})}

    def _teardown(self, att: Attachment, *, force: bool, step=hostside.quiet) -> list[str]:
        """An attachment taken down whole: the mount (and its unit), the map, every session and node record of
        its target. Refused while in use unless ``force``."""
        runner = self.runner
        wwid = att.multipath or hostside.mount_wwid(runner, att.mountpoint)
        step("unmount")
        commands = mounts.remove_mount(runner, att.mountpoint, force=force)["commands"]
        if wwid:
            commands += multipath.release(runner, wwid)["commands"]
        step("logout")
        portals = {s["portal"] for s in iscsi.read_sessions(runner) if s["target"] == att.target}
        portals |= {r["portal"] for r in self._node_records() if r["target"] == att.target}
        portals |= set(att.portals.values())
        for portal in sorted(portals):
            commands += iscsi.ensure_session(runner, portal=iscsi.normalize_portal(portal), target_iqn=att.target,
                                             state="logged_out", unmounting=(att.mountpoint,))["commands"]
        return commands

    def _node_records(self) -> list[dict]:
        res = self.runner.run([iscsi.ISCSIADM, "-m", "node"], ok_rcs=(0, iscsi.RC_NO_OBJECTS))
        return [] if res.rc == iscsi.RC_NO_OBJECTS else iscsi.parse_nodes(res.stdout)

    def detach_all(self, holder: str, *, force: bool = False,
                   is_alive: Callable[[str], bool | None] | None = None) -> dict:
        """Count ``holder`` out of everything it holds (a job's epilog). Returns {holder, detached: [ref],
        released: [ref] (others still hold them), failed: {ref: error}}."""
        validate_holder(holder)
        out: dict = {"holder": holder, "detached": [], "released": [], "failed": {}, "changed": False}
        with self.locked(f"fabric-node detach --holder {holder} --all"):
            for att in self.store.all():
                if holder not in att.holders:
                    continue
                try:
                    res = self._detach(att, att.ref, att.mountpoint, holder, force=force, is_alive=is_alive,
                                       step=hostside.quiet)
                except FabricError as err:
                    out["failed"][att.ref] = err
                    continue
                out["detached" if res["detached"] else "released"].append(att.ref)
                out["changed"] = True
        return out

    # ---- reading

    def list(self) -> dict:
        """What this node has: {attachments: [... with mounted, sessions, paths], sessions (the fabric's), mounts
        (the fabric's, under the mount root)}."""
        records = self.store.all()
        sessions = [s for s in iscsi.read_sessions(self.runner)
                    if s["target"].startswith(dataset_target_prefix(self.config.iqn_base))]
        mounted = self._mounts()
        paths = hostside.paths(self.runner, [(a.ref, a.mountpoint, a.target) for a in records]) if records else {}
        out = []
        for att in records:
            out.append({**self._describe(att), "holders": [{"holder": h, **info} for h, info in
                                                           sorted(att.holders.items())],
                        "mounted": att.mountpoint in mounted,
                        "sessions": sorted(s["portal"] for s in sessions if s["target"] == att.target),
                        "paths": paths.get(att.ref)})
        return {"host": self.config.host, "attachments": out,
                "sessions": [{"target": s["target"], "portal": s["portal"], "node": self.config.node_of(s["portal"])}
                             for s in sessions],
                "mounts": sorted(m for m in mounted)}

    def _mounts(self) -> list[str]:
        """The mount points mounted under the mount root."""
        res = self.runner.run(["findmnt", "-rn", "-o", "TARGET"], check=False)
        root = self.config.mount_root.rstrip("/") + "/"
        return sorted({line.strip() for line in res.stdout.splitlines() if line.strip().startswith(root)})

    def in_use(self, ref: str) -> dict:
        """Who uses the version's mount here: {ref, path, users: ["PID COMMAND"], holders}."""
        name, version, _target, mountpoint = self.version(ref)
        att = self.store.load(f"{name}@{version}")
        return {"ref": f"{name}@{version}", "path": mountpoint, "users": mounts.users(self.runner, mountpoint),
                "holders": sorted(att.holders) if att else []}

    # ---- gc

    def gc(self, *, is_alive: Callable[[str], bool | None] | None = None) -> dict:
        """Drop stale job holders and remove what no holder references (``attachments.plan_gc``). In a dry run
        the plan only. Returns {steps: [...], done: [...], failed: {step: error}}."""
        with self.locked("fabric-node gc"):
            records = self.store.all()
            marked = mounts.marked_units(self.runner)
            foreign = [u["mountpoint"] for u in marked if u["owner"] not in (OWNER, *ADOPTED_OWNERS)]
            # a fabricctl unit no record names is fabricctl's (a publish from before the agent): left alone
            adopted = {a.mountpoint for a in records}
            foreign += [u["mountpoint"] for u in marked if u["owner"] in ADOPTED_OWNERS
                        and u["mountpoint"] not in adopted]
            steps = plan_gc(records, sessions=iscsi.read_sessions(self.runner), node_records=self._node_records(),
                            mounts=self._mounts(), foreign=foreign,
                            target_prefix=dataset_target_prefix(self.config.iqn_base),
                            mount_root=self.config.mount_root, boot_id=self.boot_id, is_alive=is_alive)
            out: dict = {"steps": [gc_dict(s) for s in steps], "done": [], "failed": {}, "changed": False}
            if self.dry_run:
                out["planned"] = [s.description for s in steps]
                return out
            by_ref = {a.ref: a for a in records}
            for s in steps:
                # each step through the one applier (recorded in the runner as a call); a failure is reported
                # and the next step still runs: one stale mount must not keep the rest of the node uncollected
                call = replace(s, call=functools.partial(self._gc_step, s, by_ref),
                               entry=("fabric-node gc", s.description))
                try:
                    apply_steps(self.runner, [call])
                except FabricError as err:
                    out["failed"][s.description] = err
                    continue
                out["done"].append(s.description)
                out["changed"] = True
            return out

    def _gc_step(self, s: Step, by_ref: dict) -> None:
        runner, p = self.runner, s.params
        if s.kind == "drop_holder":
            att = by_ref[p["ref"]]
            remove_holder(att, p["holder"])
            if att.holders:  # the others keep it; a manual holder gone: the mount stops coming back at boot
                if att.persistent and not att.wants_persistent():
                    self._converge(att, hostside.quiet)
                self._save(att)
        elif s.kind == "detach":
            self._teardown(by_ref[p["ref"]], force=False)
            self._remove(p["ref"])
        elif s.kind == "unmount":
            mounts.remove_mount(runner, p["mountpoint"], force=False)
        else:  # logout, delete_record: ensure_session logs out (refused while mounted) and deletes the record
            iscsi.ensure_session(runner, portal=iscsi.normalize_portal(p["portal"]), target_iqn=p["target"],
                                 state="logged_out")

    # ---- credentials

    def refresh_credentials(self) -> dict:
        """Every node record of the fabric's targets (dataset versions and checkpoints, under the IQN base) at
        this node's storage nodes gets this node's own current CHAP credentials (credentials.json: a rotated
        secret), from stdin; nothing else changes (no login, no logout: a session keeps running and the new secret
        counts at its next login). Returns {records: [{target, portal}], changed, commands}."""
        prefix = f"{self.config.iqn_base}:"
        portals = {n.portal for n in self.config.storage_nodes}
        chap = self.config.chap.fields(OPEN_ISCSI, compact=True) if self.config.chap else None
        out: dict = {"records": [], "changed": False, "commands": []}
        with self.locked("fabric-node refresh-credentials"):
            records = sorted({(r["target"], iscsi.normalize_portal(r["portal"])) for r in self._node_records()})
            for target, portal in records:
                if not target.startswith(prefix) or portal not in portals:
                    continue  # another tool's record, or a portal this node was not given: not the fabric's
                res = iscsi.refresh_record(self.runner, portal=portal, target_iqn=target, chap=chap)
                out["records"].append({"target": target, "portal": portal})
                out["changed"] = out["changed"] or res["changed"]
                out["commands"] += res["commands"]
        return out

    # ---- what fabricctl asks of a host: the current link, a verification

    def current(self, name: str, version: str | None = "") -> dict:
        """MOUNT_ROOT/NAME/current: read (``version`` ""), pointed at VERSION (attached or mounted here), or removed
        (None). {link, current, switched, changed}."""
        if version is None or version == "":
            mountpoint = self.version(f"{name}@v1")[3]  # the name's rule; the link is beside any version's mount
        else:
            _n, _v, _t, mountpoint = self.version(f"{name}@{version}")
            if not self.dry_run and self.store.load(f"{name}@{version}") is None and \
                    mounts.current_mount(self.runner, mountpoint) is None:  # a dry run's attach was only planned
                raise NotFound(f"{name}@{version} is not attached on this node", "attach it first")
        link = current_link_of(mountpoint)
        if version == "":
            now = hostside.read_link(self.runner, link)
            return {"link": link, "current": now, "switched": False, "changed": False}
        with self.locked(f"fabric-node current {name} {version or '--none'}"):
            switched = hostside.switch_link(self.runner, link, version)
        return {"link": link, "current": version, "switched": switched, "changed": switched}

    def verify(self, ref: str, *, workers: int = 4, progress=None) -> dict:
        """The version as mounted here checked against its manifest: manifest.verify's report, and the SHA-256 of
        the manifest itself (the caller compares it with the one recorded on the snapshot)."""
        name, version, _target, mountpoint = self.version(ref)
        if mounts.current_mount(self.runner, mountpoint) is None:
            raise NotFound(f"{name}@{version} is not mounted on this node at {mountpoint}",
                           f"attach it first (`fabric-node attach {name}@{version} --holder manual`)")
        path = posixpath.join(mountpoint, MANIFEST)
        import hashlib  # noqa: PLC0415 - lazy: a command's start (docs/testing.md)

        try:
            with open(path, "rb") as fh:
                sha = hashlib.file_digest(fh, "sha256").hexdigest()
        except OSError as exc:
            raise NotFound(f"{path} cannot be read: {exc.strerror or exc}",
                           "the version has no manifest: seal it again on the storage node") from None
        from . import manifest  # here only: a fifth of the agent's start (zipfile, multiprocessing) for one verb

        report = manifest.verify(mountpoint, path, workers=workers, progress=progress).to_dict()
        report["manifest_sha256"] = {"actual": sha}
        report["ref"] = f"{name}@{version}"
        return report


def as_dict(err: FabricError) -> dict:
    """An error as the agent's JSON shows it (problem, fix, reason)."""
    return {"problem": err.problem, "fix": err.fix, **({"reason": err.reason} if getattr(err, "reason", "") else {})}


def is_root() -> bool:
    return os.geteuid() == 0
