"""Publishing immutable versions read-only to many hosts: names, the LIO export, the host steps.

The same machinery serves dataset versions (``ds``: ``POOL/ROOT/NAME@VERSION`` mounted at
``MOUNT_ROOT/NAME/VERSION``) and checkpoint restores (``ck``). A publish is a sequence of
convergent steps, so an interrupted publish is finished by running it again:

1. the snapshot's block device is made visible (``snapdev=visible`` on its zvol);
2. the snapshot is held (``zfs hold fabric:published``) so nobody can destroy it while exported;
3. the LIO target is reconciled: one read-only LUN, one ACL per host (``lio.reconcile``);
4. on every host: the iSCSI session (``iscsi.ensure_session``), a read-only systemd mount unit
   (``mounts.ensure_mount``) and, for datasets, the atomic switch of the ``current`` link.

Unpublish runs it backwards: hosts first (refused while a process uses the mount), then the
ACLs, then (with no host left) the target, its backstore and the hold.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import iscsi, lio, mounts
from .names import validate_fabric_name, validate_version

KINDS = {"ds": "dataset version", "ck": "checkpoint"}


@dataclass(frozen=True)
class Export:
    """One published object: its ZFS snapshot, LIO names and where hosts mount it."""

    kind: str  # "ds" | "ck"
    name: str  # dataset or job name
    version: str  # version, or "step<N>" for checkpoints
    snapshot: str  # POOL/.../NAME@VERSION
    mountpoint: str  # on the hosts
    fstype: str
    writable: bool = False  # only a checkpoint volume, exported to exactly one writer

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.version}"

    @property
    def target_name(self) -> str:
        return f"{self.kind}.{self.name}.{self.version}"

    @property
    def lun_name(self) -> str:
        return f"{self.name}.{self.version}"

    @property
    def device(self) -> str:
        return "/dev/zvol/" + self.snapshot  # a volume's device, or a snapshot's (snapdev=visible)

    def target_iqn(self, iqn_base: str) -> str:
        return f"{iqn_base}:{self.target_name}"


def checkpoint_volume_export(checkpoint_root: str, mount_root: str, job: str, fstype: str) -> Export:
    """The writable checkpoint volume of a job, exported to its one writer."""
    validate_fabric_name(job, "job")
    return Export("ck", job, "rw", f"{checkpoint_root}/{job}", f"{mount_root}/{job}", fstype, writable=True)


def checkpoint_restore_export(checkpoint_root: str, mount_root: str, job: str, step: int, fstype: str) -> Export:
    """A checkpoint snapshot, exported read-only to many hosts at MOUNT_ROOT/JOB/restore/STEP."""
    validate_fabric_name(job, "job")
    return Export("ck", job, f"s{step}", f"{checkpoint_root}/{job}@{snapshot_name(step)}",
                  f"{mount_root}/{job}/restore/{step}", fstype)


def snapshot_name(step: int) -> str:
    return f"step-{step}"


def dataset_export(dataset_root: str, mount_root: str, name: str, version: str, fstype: str) -> Export:
    validate_fabric_name(name)
    validate_version(version)
    return Export("ds", name, version, f"{dataset_root}/{name}@{version}", f"{mount_root}/{name}/{version}", fstype)


def desired_state(export: Export, *, iqn_base: str, backstore_prefix: str, portal_ip: str, portal_port: int,
                  initiators: list[str], chap: dict | None) -> dict:
    """The LIO desired state of one export (a dict for ``lio.reconcile``; other targets are left alone).

    ``chap`` uses LIO's field names (userid, password, mutual_userid, mutual_password).
    """
    lio_chap = dict(chap) if chap else None
    return {
        "base_iqn": iqn_base,
        "backstore_prefix": backstore_prefix,
        "targets": [{
            "name": export.target_name,
            "portals": [{"ip": portal_ip, "port": portal_port}],
            "writable": export.writable,
            "luns": [{"name": export.lun_name, "device": export.device, "readonly": not export.writable, "lun": 0}],
            "acls": [{"initiator": i, "chap": lio_chap} for i in sorted(set(initiators))],
        }],
    }


def acl_initiators(live: dict, target_iqn: str) -> list[str]:
    """Initiators with an ACL on the target, from ``lio.read_live()``."""
    for t in live["dump"].get("targets", []):
        if t["wwn"] == target_iqn:
            return sorted(a["node_wwn"] for tpg in t.get("tpgs", []) for a in tpg.get("node_acls", []))
    return []


def plan_removal(live: dict, *, iqn_base: str, backstore_prefix: str, target_iqns: list[str],
                 force: bool = False, planned_logouts: frozenset = frozenset()) -> list[lio.Action]:
    """The withdrawal of whole exports (``lio.plan_removal``)."""
    return lio.plan_removal(live, iqn_base=iqn_base, backstore_prefix=backstore_prefix, target_iqns=target_iqns,
                            force=force, planned_logouts=planned_logouts)


# --------------------------------------------------------------------------------------------
# Host side (through a Runner: fabricctl's SSH runner on GPU nodes)


def host_initiator(runner) -> str | None:
    return iscsi.read_initiator_name(runner)


def attach(runner, export: Export, *, target_iqn: str, portal: str, chap: dict | None,
           step=lambda text: None) -> dict:
    """Session, read-only mount unit; returns {changed, device, mountpoint, commands}."""
    step("login")
    session = iscsi.ensure_session(runner, portal=portal, target_iqn=target_iqn, chap=chap, startup="automatic")
    step("mount")
    what = f"fabric {KINDS[export.kind]} {export.name}@{export.version}"
    mount = mounts.ensure_mount(runner, device=session["device"], mountpoint=export.mountpoint, fstype=export.fstype,
                                readonly=not export.writable, description=what)
    return {"changed": session["changed"] or mount["changed"], "device": session["device"],
            "mountpoint": export.mountpoint, "commands": session["commands"] + mount["commands"]}


def detach(runner, export: Export, *, target_iqn: str, portal: str, force: bool = False,
           step=lambda text: None) -> dict:
    step("unmount")
    mount = mounts.remove_mount(runner, export.mountpoint, force=force)
    step("logout")
    session = iscsi.ensure_session(runner, portal=portal, target_iqn=target_iqn, state="logged_out",
                                   unmounting=(export.mountpoint,) if mount["changed"] else ())
    return {"changed": mount["changed"] or session["changed"], "commands": mount["commands"] + session["commands"]}


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
