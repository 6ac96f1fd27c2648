"""The publishing service: immutable versions exported read-only to many hosts, and taken back.

The same machinery serves dataset versions (``ds``: ``POOL/ROOT/NAME@VERSION`` mounted at
``MOUNT_ROOT/NAME/VERSION``), checkpoint restores (``ck``, read-only at
``CHECKPOINT_MOUNT_ROOT/JOB/restore/STEP``) and a job's writable checkpoint volume (one writer).
``Publisher`` owns both sides of an export; fabricctl's commands (publish, unpublish, checkpoint
restore, volume create/destroy, rollback) only choose what to export to whom.

The storage side (``Publisher.export`` / ``withdraw``), on this node:

1. the snapshot's block device is made visible (``snapdev=visible`` on its zvol);
2. the snapshot is held (``fabric:published``, libzfs_core) so nobody can destroy it while exported;
3. the LIO target is reconciled: one read-only LUN, one ACL per host (``lio.reconcile``); withdrawn,
   the ACLs go, and with no host left the target, its backstore (``lio.plan_removal``) and the hold.

The host side (``Publisher.attach`` / ``detach``), on each host through its runner (SSH): the host's
initiator name is checked, then the iSCSI session (``iscsi.ensure_session``), a read-only systemd
mount unit (``mounts.ensure_mount``) and, for a dataset, the atomic switch of the ``current`` link
to the newest version the host has. Every step converges, so an interrupted publish is finished by
running it again; unpublish runs it backwards (hosts first, refused while a process uses the mount).

On a host that runs multipathd (role iscsi_initiator), a read-only export is mounted through its
multipath map (``multipath.claim``), named by WWID: the same version published from another storage
node (same GUID, same LUN serial) adds a path to the same map, and unpublishing from one node logs
out its path only while another node's path remains; the mount goes with the last path.

``ExportIndex`` is what the live LIO state says about exports: who has a version, which snapshots
are exported, which restores exist, which sessions are logged in. Commands ask it; none reads an
LIO dump.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

from ..base.errors import UserError
from ..base.exports import (  # noqa: F401 - the service's names of exports (one rule, base.exports)
    WRITABLE_VERSION,
    Export,
    checkpoint_restore_export,
    checkpoint_volume_export,
    dataset_export,
)
from ..base.rules import OPEN_ISCSI, Chap
from ..base.runner import Runner
from ..node import attach as hostside
from ..node import iscsi
from ..node.attach import read_link, switch_link
from ..node.client import HOLDER, AgentClient, AgentError
from ..storage import blockfs, lio, lioacls, lzc, zfs


def desired_state(export: Export, *, iqn_base: str, backstore_prefix: str, portal_ip: str, portal_port: int,
                  chaps: Mapping[str, dict | None], require_chap: bool = True,
                  tagged: Iterable[str] = ()) -> dict:
    """The LIO desired state of one export (a dict for ``lio.reconcile``; other targets are left alone): one
    ACL per initiator of ``chaps`` (initiator -> its own CHAP credentials in LIO's field names: userid,
    password, mutual_userid, mutual_password; None: none, refused unless ``require_chap`` is False). The ACLs
    of ``tagged`` get ``lio.PUBLISHED_TAG`` (a publish: hosts expected to stay logged in); the others keep the tag
    they have."""
    tagged = set(tagged)
    return {
        "base_iqn": iqn_base,
        "backstore_prefix": backstore_prefix,
        "require_chap": require_chap,
        "targets": [{
            "name": export.target_name,
            "portals": [{"ip": portal_ip, "port": portal_port}],
            "writable": export.writable,
            "luns": [{"name": export.lun_name, "device": export.device, "readonly": not export.writable, "lun": 0,
                      **({"wwn": export.serial} if export.serial else {})}],
            "acls": [{"initiator": i, "chap": dict(chaps[i]) if chaps[i] else None,
                      **({"tag": lio.PUBLISHED_TAG} if i in tagged else {})} for i in sorted(chaps)],
        }],
    }


def acl_initiators(live: dict, target_iqn: str, tag: str | None = None) -> list[str]:
    """Initiators with an ACL on the target (with ``tag`` only: those whose ACL has that tag), from
    ``lio.read_live()``."""
    for t in live["dump"].get("targets", []):
        if t["wwn"] == target_iqn:
            return sorted(a["node_wwn"] for tpg in t.get("tpgs", []) for a in tpg.get("node_acls", [])
                          if tag is None or a.get("tag") == tag)
    return []


def staying(initiators: Iterable[str], hosts: Iterable, detached: Iterable[str], *, force: bool) -> list[str]:
    """The initiators whose ACLs stay on an export after ``hosts`` were detached from it: a host that detached
    (``detached``: host names) loses its ACL, so it cannot log in again; one that could not be reached keeps it
    (its session may still be there), unless ``force``: then it is cut off too."""
    detached = set(detached)
    withdrawn = {h.initiator for h in hosts if force or h.name in detached}
    return [i for i in initiators if i not in withdrawn]


# --------------------------------------------------------------------------------------------
# What the service needs of a storage node's configuration


@dataclass(frozen=True)
class Settings:
    """Where exports live and how they are exported (fabricctl's configuration gives them)."""

    iqn_base: str
    backstore_prefix: str
    portal_ip: str
    portal_port: int
    dataset_root: str
    mount_root: str
    checkpoint_root: str
    checkpoint_mount_root: str
    chap: Mapping[str, Chap] = field(default_factory=dict)  # initiator -> its host's own CHAP credentials
    insecure_no_chap: bool = False  # exports without CHAP allowed (an isolated lab only)

    @property
    def portal(self) -> str:
        """``IP:PORT`` (``[IP]:PORT`` for IPv6), as iscsiadm and the by-path device names write it."""
        ip = f"[{self.portal_ip}]" if ":" in self.portal_ip else self.portal_ip
        return iscsi.normalize_portal(f"{ip}:{self.portal_port}")

    def target_iqn(self, export: Export) -> str:
        return export.target_iqn(self.iqn_base)

    def target_prefix(self, kind: str, name: str) -> str:
        """The common start of the IQNs of every version of dataset (``ds``) or job (``ck``) NAME."""
        return f"{self.iqn_base}:{kind}.{name}."

    def dataset(self, name: str, version: str, fstype: str) -> Export:
        return dataset_export(self.dataset_root, self.mount_root, name, version, fstype)

    def restore(self, job: str, step: int, fstype: str) -> Export:
        return checkpoint_restore_export(self.checkpoint_root, self.checkpoint_mount_root, job, step, fstype)

    def writable(self, job: str, fstype: str) -> Export:
        return checkpoint_volume_export(self.checkpoint_root, self.checkpoint_mount_root, job, fstype)

    def chap_of(self, initiator: str) -> Chap | None:
        """The CHAP credentials of the host with this initiator name; refused when it has none (unless exports
        without CHAP are allowed)."""
        chap = self.chap.get(initiator)
        if chap is None and not self.insecure_no_chap:
            raise UserError(f"no CHAP credentials for initiator {initiator}: an export without CHAP lets any host "
                            "that sets this initiator name log in",
                            "give the host its own CHAP secret (the fabricctl role writes every GPU node's into "
                            "hosts.NAME.chap of the configuration); only on an isolated lab, set "
                            "insecure_no_chap: true")
        return chap

    def desired(self, export: Export, initiators: Iterable[str], published: Iterable[str] = ()) -> dict:
        """The export's LIO desired state, with an ACL for each initiator (with its own CHAP credentials); those of
        ``published`` tagged as a publish's (``lio.PUBLISHED_TAG``)."""
        chaps = {}
        for initiator in sorted(set(initiators)):
            chap = self.chap_of(initiator)
            chaps[initiator] = chap.fields() if chap else None
        return desired_state(export, iqn_base=self.iqn_base, backstore_prefix=self.backstore_prefix,
                             portal_ip=self.portal_ip, portal_port=self.portal_port, chaps=chaps,
                             require_chap=not self.insecure_no_chap, tagged=published)

    def access(self, initiators: Iterable[str]) -> dict[str, Chap | None]:
        """Initiator -> its CHAP credentials, for ``lio.plan_access`` (which removes every other ACL)."""
        return {initiator: self.chap_of(initiator) for initiator in initiators}


# --------------------------------------------------------------------------------------------
# The export index: the live LIO state, as answers about exports


class ExportIndex:
    """What LIO has exported, read once (``Publisher.index``). ``hosts`` (objects with ``name`` and
    ``initiator``) name the initiators; one no host has is named by its IQN."""

    def __init__(self, live: dict, settings: Settings, hosts: Iterable = ()):
        self.live = live
        self.settings = settings
        self.hosts = {h.initiator: h for h in hosts}
        self._ownership = lio.DesiredState(base_iqn=settings.iqn_base, backstore_prefix=settings.backstore_prefix)

    def _targets(self) -> list[str]:
        return [t["wwn"] for t in self.live["dump"].get("targets", [])]

    def targets(self) -> list[str]:
        """The IQNs of the fabric's targets (under the IQN base), sorted."""
        return sorted(t for t in self._targets() if self._ownership.owns_target(t))

    def target_initiators(self, target_iqn: str) -> list[str]:
        """The initiators with an ACL on a target."""
        return acl_initiators(self.live, target_iqn)

    def published_initiators(self, target_iqn: str) -> list[str]:
        """The initiators whose ACL on a target is a publish's (tagged ``lio.PUBLISHED_TAG``: the host was asked
        to attach it and stay logged in), unlike a grant's (the host attaches when a job wants it)."""
        return acl_initiators(self.live, target_iqn, lio.PUBLISHED_TAG)

    def name_of(self, initiator: str) -> str:
        """The host name of an initiator (its IQN when no known host has it)."""
        return self._name(initiator)

    def discovery_closed(self) -> bool:
        """Whether SendTargets discovery is closed on this node (``lio.discovery_closed``)."""
        return lio.discovery_closed(self.live)

    def unknown_initiators(self, export: Export) -> list[str]:
        """Initiators with an ACL on the export that no host of the configuration has (a host taken out of it)."""
        return [i for i in self.initiators(export) if i not in self.hosts]

    def _name(self, initiator: str) -> str:
        host = self.hosts.get(initiator)
        return host.name if host is not None else initiator

    def exists(self, export: Export) -> bool:
        """Whether LIO has the export's target."""
        return self.settings.target_iqn(export) in self._targets()

    def initiators(self, export: Export) -> list[str]:
        """The initiators with an ACL on the export (who has this version)."""
        return acl_initiators(self.live, self.settings.target_iqn(export))

    def published_to(self, export: Export) -> list[str]:
        """Host names (IQNs for initiators no host has) the export is published to."""
        return [self._name(i) for i in self.initiators(export)]

    def hosts_of(self, export: Export) -> tuple[list, list[str]]:
        """(the known hosts with an ACL on the export, the initiators of no known host)."""
        inits = self.initiators(export)
        return [self.hosts[i] for i in inits if i in self.hosts], [i for i in inits if i not in self.hosts]

    def versions(self, kind: str, name: str) -> list[str]:
        """The versions of dataset (``ds``) or job (``ck``) NAME that have a target, sorted."""
        prefix = self.settings.target_prefix(kind, name)
        return sorted(t[len(prefix):] for t in self._targets() if t.startswith(prefix))

    def versions_on(self, export: Export, initiator: str) -> list[str]:
        """The other versions of the export's dataset or job published to an initiator."""
        return [v for v in self.versions(export.kind, export.name)
                if v != export.version and initiator in self.initiators(replace(export, version=v))]

    def restores(self, job: str) -> list[str]:
        """The restores of a job's checkpoints that exist (versions ``s<STEP>``; not its writable volume)."""
        return [v for v in self.versions("ck", job) if v != WRITABLE_VERSION]

    def backstore(self, name: str) -> dict | None:
        """LIO's storage object of that name (its ``dev``, ``wwn``, ...), or None."""
        return next((so for so in self.live["dump"].get("storage_objects", []) if so.get("name") == name), None)

    def published_snapshots(self) -> set[str]:
        """Snapshots the fabric's backstores export (``POOL/.../NAME@VERSION``)."""
        out = set()
        for so in self.live["dump"].get("storage_objects", []):
            dev = so.get("dev") or ""
            if self._ownership.owns_backstore(so.get("name", "")) and dev.startswith("/dev/zvol/") and "@" in dev:
                out.add(dev[len("/dev/zvol/"):])
        return out

    def sessions(self) -> dict[str, list[str]]:
        """Host (or initiator) -> the targets it is logged in to, in LIO's order."""
        out: dict[str, list[str]] = {}
        for s in self.live["sessions"]:
            out.setdefault(self._name(s["initiator"]), []).append(s["target"])
        return out


# --------------------------------------------------------------------------------------------
# The service


def _quiet(_text: str) -> None:
    """A host step's progress, when nobody shows it."""


def _same_path(host, export: Export, answer: dict, variables: str) -> None:
    """The host's agent mounted the export where this node's configuration says (else the roots differ)."""
    if answer.get("path") != export.mountpoint:
        raise UserError(f"{host.name} mounts {export.ref} at {answer.get('path')}, this node's configuration says "
                        f"{export.mountpoint}", f"give {variables} the same value (playbooks/site.yml)")


def _through_here(host, export: Export, answer: dict, portal: str) -> None:
    """A host reading a version through a multipath map logs in at every storage node that grants it: this node among
    them (else its agent does not know this node, or its login here failed, and the publish made a path nobody
    uses). An agent older than ``portals`` in its answer, or a host without multipathd (one path, wherever it
    was first), is not checked."""
    portals = answer.get("portals")
    if not answer.get("multipath") or portals is None:
        return
    if portal not in {iscsi.normalize_portal(p) for p in portals}:
        via = ", ".join(answer.get("storage_nodes") or []) or "no storage node"
        raise UserError(f"{host.name} reads {export.ref} through {via} only, not through this storage node ({portal}): "
                        "its agent does not list this node, or its login here failed",
                        "converge the GPU nodes' agent with an inventory naming this storage node (`ansible-playbook "
                        "playbooks/gpu.yml --tags agent`, or site.yml), then publish again (`fabric-node list` on the "
                        "host names the storage nodes it has sessions with)")


class Publisher:
    """Exports on this node (``local``: its runner) and their hosts (``connect(host)``: a runner on it).

    ``hosts``: the hosts the configuration knows (to name initiators). A dry run is the runners'."""

    def __init__(self, settings: Settings, local: Runner, connect: Callable[[object], Runner], hosts: Iterable = (),
                 agents: Callable[[object], AgentClient] | None = None):
        self.settings = settings
        self.local = local
        self.connect = connect
        self.hosts = list(hosts)
        # agents(host): the host's node agent (node.client), when this node's key runs only the agent there: a
        # dataset version's host side is then the agent's attach/detach as the `manual` holder, nothing else runs
        self.agents = agents

    @property
    def dry_run(self) -> bool:
        return self.local.dry_run

    def index(self) -> ExportIndex:
        """The export index of LIO as it is now."""
        return ExportIndex(lio.read_live(), self.settings, self.hosts)

    def acl_index(self, kind: str, name: str) -> ExportIndex:
        """An index of the ACLs alone of every version of dataset (``ds``) or job (``ck``) NAME, read from
        configfs directory names (``lioacls``) instead of rtslib's full read: for listings that only ask who
        has which version (no backstores, sessions or device facts in it)."""
        prefix = self.settings.target_prefix(kind, name)
        return ExportIndex(lioacls.as_live(lioacls.acl_map(prefix)), self.settings, self.hosts)

    def exported_snapshots(self) -> set[str]:
        """``ExportIndex.published_snapshots`` from the block backstores' device paths in configfs (``lioacls``)
        instead of rtslib's full read: what a rotation asks of LIO (which snapshots it must not destroy)."""
        live = lioacls.as_live({}, lioacls.block_devices())
        return ExportIndex(live, self.settings, self.hosts).published_snapshots()

    # ---- the storage side

    def export(self, export: Export, hosts: Iterable, *, hold: bool = True, published: bool = True) -> dict:
        """Snapshot device visible, the hold, the LIO target with ACLs for (existing + new) hosts. ``published``:
        the new hosts' ACLs are tagged as a publish's (they are asked to attach it and stay logged in, which
        `status` checks); False for a grant's (they attach when a job wants it)."""
        hosts = list(hosts)
        changed_snapdev = False
        if export.is_snapshot:
            volume = export.snapshot.split("@")[0]
            snapdev = zfs.get_props(self.local, volume, ["snapdev"]).get(volume, {}).get("snapdev", ("hidden",))[0]
            if snapdev != "visible":
                self.local.run(["zfs", "set", "snapdev=visible", volume], mutating=True)
                changed_snapdev = True
        held = lzc.hold(export.snapshot, runner=self.local) if hold else False
        try:
            if not self.dry_run:
                blockfs.require(export.device, runner=self.local)
            index = self.index()
            export = self.identify(export, index)
            # hosts taken out of the configuration lose their access first (they are no longer trusted)
            revoke = self.revoke_unknown(export, index)
            initiators = (set(index.initiators(export)) - set(revoke["revoked_initiators"])
                          | {h.initiator for h in hosts})
            tagged = {h.initiator for h in hosts} if published else ()
            result = lio.reconcile(self.settings.desired(export, initiators, tagged), runner=self.local,
                                   predicted=revoke.get("predicted"))
        except Exception:
            if held:  # this run's hold guards nothing when the export was not made
                self._release_unexported(export)
            raise
        return {"held": held, "snapdev": changed_snapdev, "lio_changed": result["changed"] or bool(revoke["revoked"]),
                "lio_actions": revoke["lio_actions"] + result["actions"], "revoked": revoke["revoked"],
                "warnings": result.get("warnings", [])}

    def identify(self, export: Export, index: ExportIndex) -> Export:
        """The export with its LUN's serial: a snapshot's comes from its GUID (``lio.snapshot_serial``: the same
        on every storage node holding the version, so dm-multipath groups their paths); a LUN exported already
        keeps the serial it has (initiators know the disk by it; changing it would re-create a LUN in use)."""
        if export.serial or not export.is_snapshot:
            return export
        live = index.backstore(self.settings.backstore_prefix + export.lun_name)
        if live is not None and live.get("wwn"):
            return replace(export, serial=str(live["wwn"]).lower())
        guid = zfs.get_props(self.local, export.snapshot, ["guid"]).get(export.snapshot, {}).get("guid", ("",))[0]
        return replace(export, serial=lio.snapshot_serial(guid)) if str(guid).isdigit() else export

    def revoke_unknown(self, export: Export, index: ExportIndex) -> dict:
        """Remove the ACLs of the export's initiators that no configured host has (cut off if logged in: a host
        taken out of the configuration is no longer trusted). Returns {revoked, revoked_initiators,
        lio_actions}."""
        unknown = self.unknown(export, index)
        if not unknown:
            return {"revoked": [], "revoked_initiators": [], "lio_actions": []}
        keep = [i for i in index.initiators(export) if i not in unknown]
        return self._access(export, keep, index, force=False)

    def unknown(self, export: Export, index: ExportIndex) -> frozenset:
        """The export's initiators no configured host has (none when this publisher knows no hosts: it cannot
        tell)."""
        return frozenset(index.unknown_initiators(export)) if self.hosts else frozenset()

    def _access(self, export: Export, keep: list[str], index: ExportIndex, *, force: bool,
                detached: frozenset = frozenset()) -> dict:
        """One target's ACLs brought to ``keep`` (``lio.plan_access``): the others are removed; those of hosts
        no longer configured are cut off even while logged in."""
        target = self.settings.target_iqn(export)
        steps = lio.plan_access(index.live, target_iqn=target, keep=self.settings.access(keep), force=force,
                                planned_logouts=detached if self.dry_run else frozenset(),
                                cut_off=self.unknown(export, index))
        gone = lio.revoked(steps)
        result = lio.converge(self._state(), index.live, steps, runner=self.local)
        # a dry run's next plan starts from LIO as these changes would leave it
        return {"revoked": [index.name_of(i) for i in gone], "revoked_initiators": gone,
                "lio_actions": result["actions"],
                "predicted": lio.simulate(index.live, steps) if self.dry_run else None}

    def _state(self) -> lio.DesiredState:
        return lio.DesiredState(base_iqn=self.settings.iqn_base, backstore_prefix=self.settings.backstore_prefix,
                                require_chap=not self.settings.insecure_no_chap)

    def withdraw(self, export: Export, remaining: list[str], *, force: bool, index: ExportIndex | None = None,
                 detached: frozenset = frozenset()) -> dict:
        """After hosts detached: only the ACLs of ``remaining`` stay (every other ACL and its mapped LUNs go, so a
        withdrawn host can no longer log in); with none left, the target, its backstore and the hold go.
        ``detached``: the initiators the caller detached in this run; in a dry run their logouts were only
        planned, so their sessions do not make the plan refuse. ``index``: LIO as read after the detaches (read
        now when not given). Returns {revoked (host names), lio_actions, released}."""
        index = index or self.index()
        unknown = self.unknown(export, index)
        remaining = [i for i in remaining if i not in unknown]  # hosts no longer configured keep nothing
        if remaining:
            out = self._access(export, remaining, index, force=force, detached=detached)
            return {"revoked": out["revoked"], "lio_actions": out["lio_actions"], "released": False}
        steps = lio.plan_removal(index.live, iqn_base=self.settings.iqn_base,
                                 backstore_prefix=self.settings.backstore_prefix,
                                 target_iqns=[self.settings.target_iqn(export)], force=force,
                                 planned_logouts=(detached if self.dry_run else frozenset()) | unknown)
        try:
            result = lio.converge(self._state(), index.live, steps, runner=self.local)
        except lio.LioApplyError:
            self._release_unexported(export)  # a later step failed: the hold goes if its backstore went
            raise
        gone = index.initiators(export) if any(s.kind == "delete_target" for s in steps) else []
        return {"revoked": [index.name_of(i) for i in gone], "lio_actions": result["actions"],
                "released": lzc.release(export.snapshot, runner=self.local) if export.is_snapshot else False}

    def _release_unexported(self, export: Export) -> bool:
        """After a failed export or withdraw: the publish hold of the export's snapshot is released when no
        backstore of the fabric exports that snapshot any more (what it guarded is gone); kept otherwise. Never
        raises (the caller is already raising the failure's own error)."""
        if not export.is_snapshot or self.dry_run:
            return False
        try:
            if export.snapshot in self.index().published_snapshots():
                return False
            return lzc.release(export.snapshot, runner=self.local)
        except Exception:  # noqa: BLE001 - the original error is the one to report
            return False

    def sync_access(self, force: bool = True) -> dict:
        """Every target of the fabric brought in line with the configuration: the ACLs of initiators no configured
        host has are removed (cut off: a host taken out of the configuration is no longer trusted; ``force``
        False refuses instead while it is logged in), and every other ACL gets its host's current CHAP
        credentials (a rotated secret; sessions stay). Returns {target IQN: {revoked, lio_actions}} of the
        targets that changed, and the hosts with sessions to the fabric's targets ({host name: [IQN]})."""
        index = self.index()
        known = {h.initiator for h in self.hosts}
        changed: dict = {}
        for target in index.targets():
            keep = [i for i in index.target_initiators(target) if i in known]
            steps = lio.plan_access(index.live, target_iqn=target, keep=self.settings.access(keep), force=force)
            if not lio.changes(steps):
                continue
            gone = lio.revoked(steps)
            result = lio.converge(self._state(), index.live, steps, runner=self.local)
            changed[target] = {"revoked": [index.name_of(i) for i in gone], "lio_actions": result["actions"]}
        sessions = {h.name: [t for t in index.sessions().get(h.name, []) if t in index.targets()]
                    for h in self.hosts}
        return {"targets": changed, "sessions": {h: t for h, t in sessions.items() if t}}

    # ---- the host side (node.attach, the GPU-node agent's own code, run over the host's runner)

    def attach(self, export: Export, host, step: Callable[[str], None] = _quiet, *,
               created: Mapping[str, int] | None = None, portals: Iterable[str] = ()) -> dict:
        """On a host: its initiator name checked, the session, the mount unit; with ``created`` (a dataset's
        versions -> creation time), ``current`` moves to this version when it is the newest the host has.
        A read-only export on a host with multipathd is mounted through its multipath map (``node.attach.device``);
        ``portals``: other storage nodes' portals exporting the same version (``publish --from-nodes``), each
        logged in too, as further paths of the map (refused on a host without multipathd).
        Returns {changed, device, mountpoint, commands, multipath[, current, switched]}."""
        if self.agents is not None:
            return self._agent_attach(export, host, step, created)
        runner = self.connect(host)
        step("check initiator")
        actual = iscsi.read_initiator_name(runner)
        if actual != host.initiator:
            raise UserError(f"{host.name} has initiator name {actual!r}, the config says {host.initiator!r}",
                            "run playbooks/site.yml (it sets both from the inventory) or fix hosts in the fabricctl "
                            "config")
        res = hostside.attach_export(runner, portal=self.settings.portal, target_iqn=self.settings.target_iqn(export),
                                     mountpoint=export.mountpoint, fstype=export.fstype, writable=export.writable,
                                     chap=self.settings.chap_of(host.initiator), description=export.description,
                                     others=tuple(portals), host=host.name, step=step)
        if created is not None and export.current_link:
            step("current")
            now = read_link(runner, export.current_link)
            newer = now not in created or created[now] <= created[export.version]
            switched = switch_link(runner, export.current_link, export.version) if newer else False
            res.update(current=export.version if newer else now, switched=switched)
            res["changed"] = res["changed"] or switched
        return res

    def _agent_attach(self, export: Export, host, step, created) -> dict:
        """The host side through the host's agent: a dataset version attached as the manual holder (it logs in to
        every storage node granting the version), then ``current`` when this version is the newest the host has;
        a job's checkpoint volume (read-write, its writer) or restore from this storage node."""
        agent = self.agents(host)
        step("attach")
        if export.kind == "ck":
            res = (agent.attach_writable(export.name, export.fstype) if export.writable else
                   agent.attach_restore(export.name, export.step, export.fstype))
            _same_path(host, export, res, "fabricctl_checkpoint_mount_root and fabric_node_checkpoint_mount_root")
            return {"changed": bool(res.get("changed")), "device": res.get("device"), "mountpoint": export.mountpoint,
                    "commands": list(res.get("commands") or []), "multipath": res.get("multipath")}
        # the newest version the storage node has: ``current`` moves to it whatever it points at now (the rule
        # below), so the attach's own request moves it (one request, not two); an agent older than --current refuses
        # the option, and is asked the old way
        newest = created is not None and bool(export.current_link) and \
            all(t <= created[export.version] for t in created.values())
        try:
            res = agent.attach(export.ref, current=newest)
        except AgentError as err:
            if not (newest and "--current" in err.problem):
                raise
            newest = False
            res = agent.attach(export.ref)
        _same_path(host, export, res, "fabricctl_mount_root and fabric_node_mount_root")
        _through_here(host, export, res, self.settings.portal)
        out = {"changed": bool(res.get("changed")), "device": res.get("device"), "mountpoint": export.mountpoint,
               "commands": list(res.get("commands") or []), "multipath": res.get("multipath"),
               "holders": list(res.get("holders") or [])}
        if newest:
            out.update(current=export.version, switched=bool(res.get("switched")))
        elif created is not None and export.current_link:
            step("current")
            # the attach's answer names the link's version (an agent older than that: one more request to read it)
            now = res["current"] if "current" in res else agent.current(export.name)["current"]
            newer = now not in created or created[now] <= created[export.version]
            switched = bool(agent.current(export.name, export.version)["switched"]) if newer and \
                now != export.version else False
            out.update(current=export.version if newer else now, switched=switched)
            out["changed"] = out["changed"] or switched
        return out

    def refresh(self, host, targets: Iterable[str], step: Callable[[str], None] = _quiet) -> dict:
        """On a host: the node records of its sessions to ``targets`` get its current CHAP credentials, and nothing
        else (``iscsi.refresh_record``: a rotated secret counts at the next login; no session is dropped, no
        startup changes). Through the host's agent, every record of the fabric's targets there gets the agent's own
        credentials (``refresh-credentials``: no secret travels). Returns {changed, commands}."""
        if self.agents is not None:
            step("refresh-credentials")
            res = self.agents(host).refresh_credentials()
            return {"changed": bool(res.get("changed")), "commands": list(res.get("commands") or [])}
        runner = self.connect(host)
        chap = self.settings.chap_of(host.initiator)
        out: dict = {"changed": False, "commands": []}
        for target in targets:
            step(f"record {target.rsplit(':', 1)[-1]}")
            res = iscsi.refresh_record(runner, portal=self.settings.portal, target_iqn=target,
                                       chap=chap.fields(OPEN_ISCSI, compact=True) if chap else None)
            out["changed"] = out["changed"] or res["changed"]
            out["commands"] += res["commands"]
        return out

    def in_use(self, export: Export, host, step: Callable[[str], None] = _quiet) -> list[str]:
        """The processes using the export's mount on a host ("PID COMMAND"); none while another storage node's
        path keeps the mount (``detach`` leaves it)."""
        step("in use?")
        if self.agents is not None and export.kind == "ds":  # a job holding it uses it too
            res = self.agents(host).ask("in-use", export.ref)
            return list(res["users"]) + [f"(held by {h})" for h in res.get("holders", []) if h != HOLDER]
        return hostside.in_use(self.connect(host), export.mountpoint, self.settings.target_iqn(export),
                               self.settings.portal)

    def paths(self, exports: Iterable[Export], host, step: Callable[[str], None] = _quiet) -> dict:
        """On a host: how many paths each export has, and how many carry I/O (``node.attach.paths``): {ref:
        {multipath (the map's WWID, None for a plain disk), up, paths}}."""
        exports = list(exports)
        if self.agents is not None and all(e.kind == "ds" for e in exports):
            step("paths")
            found = {a["ref"]: a.get("paths") for a in self.agents(host).list()["attachments"]}
            return {e.ref: found[e.ref] for e in exports if found.get(e.ref)}
        return hostside.paths(self.connect(host), [(e.ref, e.mountpoint, self.settings.target_iqn(e))
                                                   for e in exports], step)

    def detach(self, export: Export, host, step: Callable[[str], None] = _quiet, *, force: bool = False,
               index: ExportIndex | None = None, created: Mapping[str, int] | None = None) -> dict:
        """On a host: the mount unit removed (refused while in use unless ``force``), then the logout; with
        ``index`` and ``created``, a ``current`` link pointing at this version moves to the newest other
        version published to the host (or goes). A multipath map with another storage node's path left keeps
        its mount: only this node's path is logged out. Returns {changed, commands, paths_left[, current]}."""
        if self.agents is not None:
            return self._agent_detach(export, host, step, force=force, index=index, created=created)
        runner = self.connect(host)
        res = hostside.detach(runner, target_iqn=self.settings.target_iqn(export), mountpoint=export.mountpoint,
                              portal=self.settings.portal, force=force, step=step)
        if res["paths_left"]:
            return res  # the version stays mounted on the host: its current link stays too
        if index is not None and created is not None and export.current_link:
            if read_link(runner, export.current_link) == export.version:
                others = sorted((created[v], v) for v in index.versions_on(export, host.initiator) if v in created)
                res["current"] = others[-1][1] if others else None
                switch_link(runner, export.current_link, res["current"])
        return res

    def _agent_detach(self, export: Export, host, step, *, force: bool, index, created) -> dict:
        """The host side of an unpublish through the host's agent: the manual holder counted out (the last holder
        unmounts and logs out of every storage node), or, read through other storage nodes' paths too, only this
        node's path logged out (the agent knows the asking node from its key); ``current`` moves as ``detach``
        says."""
        agent = self.agents(host)
        step("detach")
        if export.kind == "ck":  # fabricctl's own export on the host: no holders, this storage node's session
            res = (agent.detach_writable(export.name, force=force) if export.writable else
                   agent.detach_restore(export.name, export.step, force=force))
            return {"changed": bool(res.get("changed")), "commands": list(res.get("commands") or []),
                    "paths_left": int(res.get("paths_left") or 0)}
        res = agent.detach(export.ref, force=force)
        if res.get("paths_left"):  # only this node's path went (the key named this node): others still publish it
            return {"changed": bool(res.get("changed")), "commands": list(res.get("commands") or []),
                    "paths_left": int(res["paths_left"])}
        out = {"changed": bool(res.get("changed")), "commands": list(res.get("commands") or []), "paths_left": 0,
               "holders": list(res.get("holders") or [])}
        if out["holders"]:
            raise UserError(f"{host.name} still holds {export.ref} for {', '.join(out['holders'])}",
                            "let those jobs end (their epilog detaches it), then unpublish again")
        if index is not None and created is not None and export.current_link:
            if agent.current(export.name)["current"] == export.version:
                others = sorted((created[v], v) for v in index.versions_on(export, host.initiator) if v in created)
                out["current"] = others[-1][1] if others else None
                agent.current(export.name, out["current"])
        return out
