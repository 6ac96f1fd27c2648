"""A training job's checkpoints on this GPU node, as a storage node's fabricctl asks for them through the agent.

fabricctl's checkpoint commands act on a job's hosts: ``checkpoint volume create`` mounts the job's volume
read-write on its one writer (``destroy`` and ``rollback`` unmount it, ``rollback`` mounts it again),
``checkpoint restore`` mounts a checkpoint read-only on many hosts (``--remove`` takes it off), and
``checkpoint snapshot`` freezes the writer's file system around the snapshot. Where fabricctl's key on the host
runs only the agent (``fabric-node --ssh``), it asks for these steps instead of running them; the agent runs the
very code fabricctl ran over a key that runs commands (``node.attach.attach_export``/``detach``, ``node.freeze``),
so the result on the host is the same whichever way it came:

* a volume or restore is fabricctl's export, not an attachment of the agent's: no holders, no record; it comes
  back at boot (a persistent mount unit of owner ``fabricctl``, node records ``node.startup=automatic``), and
  the agent's ``gc`` never touches it (it looks at the dataset versions only);
* its session is to the storage node that asked, the one its key is bound to (``fabric-node --ssh --from NODE``,
  a storage node of this node's configuration): a writable volume must never be read through another node;
* its target and mount point come from the job's name and step, validated, by the storage side's own rule
  (``base.exports``): CHECKPOINT_MOUNT_ROOT/JOB and CHECKPOINT_MOUNT_ROOT/JOB/restore/STEP, never anything else;
* freeze and thaw touch only CHECKPOINT_MOUNT_ROOT/JOB mounted read-write, with the safety timer of
  ``node.freeze`` (a freeze never thawed is thawed by its timer on this node, whatever happens to the caller).

Changes run under the node lock, as the agent's own; a freeze and a thaw take none (the freeze has its own lock,
and a snapshot never waits for an attach).
"""

from __future__ import annotations

from ..base.errors import UserError
from ..base.exports import Export, checkpoint_restore_export, checkpoint_volume_export
from ..base.names import validate_fabric_name, validate_step
from ..base.rules import validate_filesystem
from . import attach as hostside
from . import freeze

MAX_JOBS = 64  # the jobs one writer-state request may name


class Checkpoints:
    """The checkpoint side of an ``agent.Agent`` (its configuration, runner, node lock and initiator check)."""

    def __init__(self, agent):
        self.agent = agent

    @property
    def runner(self):
        return self.agent.runner

    def export(self, job: str, step: int | str | None = None, fstype: str = "ext4") -> Export:
        """JOB's writable volume (``step`` None) or its restore of STEP, as this node mounts it."""
        root = self.agent.config.checkpoint_mount_root
        validate_fabric_name(job, "job")
        if step is None:
            return checkpoint_volume_export("", root, job, fstype)
        return checkpoint_restore_export("", root, job, validate_step(step), fstype)

    def _describe(self, export: Export, node) -> dict:
        return {"job": export.name, "kind": "writable" if export.writable else "restore", "step": export.step,
                "path": export.mountpoint, "target": export.target_iqn(self.agent.config.iqn_base),
                "storage_node": node.name, "portal": node.portal}

    def attach(self, job: str, *, storage_node: str, fstype: str, step: int | str | None = None,
               progress=hostside.quiet) -> dict:
        """JOB's volume mounted read-write (``step`` None: this node is its writer) or its checkpoint of STEP
        mounted read-only, from ``storage_node``. Returns {job, kind, step, path, target, storage_node, portal,
        device, multipath, changed, commands}."""
        export = self.export(job, step, validate_filesystem(fstype))
        cfg = self.agent.config
        node = cfg.storage_node(storage_node)
        what = f"{export.name} step {export.step}" if export.step is not None else f"{export.name} (read-write)"
        with self.agent.locked(f"fabric-node checkpoint attach {what} from {node.name}"):
            self.agent.check_initiator()
            res = hostside.attach_export(self.runner, portal=node.portal, target_iqn=export.target_iqn(cfg.iqn_base),
                                         mountpoint=export.mountpoint, fstype=export.fstype,
                                         writable=export.writable, chap=cfg.chap, description=export.description,
                                         host=cfg.host, step=progress)
        return {**self._describe(export, node), "device": res["device"], "multipath": res["multipath"],
                "changed": res["changed"], "commands": res["commands"]}

    def detach(self, job: str, *, storage_node: str, step: int | str | None = None, force: bool = False,
               progress=hostside.quiet) -> dict:
        """JOB's volume (``step`` None) or restore of STEP unmounted (refused while a process uses it unless
        ``force``: then lazily) and logged out of ``storage_node``. Returns {job, kind, step, path, target,
        storage_node, portal, changed, commands, paths_left}."""
        export = self.export(job, step)
        cfg = self.agent.config
        node = cfg.storage_node(storage_node)
        what = f"{export.name} step {export.step}" if export.step is not None else f"{export.name} (read-write)"
        with self.agent.locked(f"fabric-node checkpoint detach {what} from {node.name}"):
            res = hostside.detach(self.runner, target_iqn=export.target_iqn(cfg.iqn_base),
                                  mountpoint=export.mountpoint, portal=node.portal, force=force, step=progress)
        return {**self._describe(export, node), **res}

    def freeze(self, job: str, seconds: int, *, since: float | None = None) -> dict:
        """The writer's file system of JOB frozen for a snapshot (``freeze.Here.freeze``): refused unless JOB's
        volume is mounted read-write here (FreezeRefused: nothing set), ``sync -f``, the safety timer that thaws it
        after ``seconds`` whatever happens (``freeze.arm``), then ``fsfreeze -f``. ``since``: when the request
        started (time.monotonic), so that ``lead_seconds`` counts what passed before the timer was set. A dry run
        checks and plans. Returns {job, path, frozen, lead_seconds, thaw_unit[, planned]}."""
        here = freeze.Here(self.runner, self.export(job).mountpoint)
        out = {"job": job, "path": here.mountpoint, "thaw_unit": freeze.thaw_unit(here.mountpoint)}
        if self.agent.dry_run:
            here.check(int(seconds))
            planned = (["sync", "-f", here.mountpoint], freeze.recover_argv(here.mountpoint),
                       freeze.arm_argv(here.mountpoint, int(seconds)), freeze.freeze_argv(here.mountpoint))
            return {**out, "frozen": False, "lead_seconds": 0.0, "planned": [" ".join(a) for a in planned]}
        lead = here.freeze(int(seconds), since=since)
        return {**out, "frozen": True, "lead_seconds": round(lead, 6)}

    def thaw(self, job: str, seconds: int) -> dict:
        """JOB's file system thawed under the freeze's lock, and its safety timer stopped once nothing is frozen
        and nothing in flight (``freeze.Here.thaw``: FreezeInFlight or a failed thaw leave the timer to do it).
        ``seconds``: the timer's (named in the messages). Returns {job, path, thawed}."""
        mountpoint = self.export(job).mountpoint
        freeze.Here(self.runner, mountpoint).thaw(int(seconds))
        return {"job": job, "path": mountpoint, "thawed": True}

    def writer_state(self, jobs: list[str]) -> dict:
        """What of JOBS' volumes is frozen here under a thaw timer, and every task waiting for a frozen file
        system (``freeze.read_writer``; reads only). {jobs: {job: path}, frozen: {path: ...}, blocked: [...]}."""
        if not jobs or len(jobs) > MAX_JOBS:
            raise UserError(f"writer-state takes 1-{MAX_JOBS} jobs")
        paths = {job: self.export(job).mountpoint for job in jobs}
        return {"jobs": paths, **freeze.read_writer(self.runner, sorted(paths.values()))}
