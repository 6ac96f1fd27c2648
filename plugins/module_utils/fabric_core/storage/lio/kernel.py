"""Reading and applying LIO through rtslib-fb: the only part of the LIO mechanism that needs root and the kernel.

``read_live()`` reads ``{"dump": RTSRoot().dump(), "sessions": [...], "devices": {...}}`` (the planner's input);
``apply(steps)`` runs a plan's changes through rtslib-fb in the planned order and, when one fails, deletes what
this run created (reverse order) before raising ``LioApplyError``; ``converge`` is the one applier of a plan
(``reconcile``'s, and the publishing service's): it applies it, or in a dry run simulates it, and reports before
and after. rtslib-fb is imported lazily so that the package imports (and plans) without it.
"""

from __future__ import annotations

import contextlib
import copy
import os
import stat
import time

from ...base.errors import FabricError, UserError
from ...base.model import Step
from ...base.names import TPG_TAG
from .operations import OPERATIONS, changes, kept, simulate, summarize
from .persist import SAVE_FILE, save
from .planner import plan
from .spec import DISCOVERY_CREDENTIALS, DesiredState, emulate_pr, parse_desired

CONFIGFS_ROOT = "/sys/kernel/config"
CONFIGFS = "/sys/kernel/config/target"
ISCSI_TARGET_MODULE = "/sys/module/iscsi_target_mod"


class _Rtslib:
    """rtslib-fb objects of the project's targets (``apply``)."""

    BUSY_RETRY_SECONDS = 60.0

    def __init__(self, rts):
        self.rts = rts
        self.fm = rts.FabricModule("iscsi")

    def target(self, iqn):
        return self.rts.Target(self.fm, iqn, mode="lookup")

    def tpg(self, iqn):
        return self.rts.TPG(self.target(iqn), TPG_TAG, mode="lookup")

    def acl(self, iqn, initiator):
        return self.rts.NodeACL(self.tpg(iqn), initiator, mode="lookup")

    def mapped_lun(self, a: Step):
        return self.rts.MappedLUN(self.acl(a.target, a.params["initiator"]), a.params["index"])

    def portal(self, a: Step, mode: str):
        ip = a.params["ip"]
        return self.rts.NetworkPortal(self.tpg(a.target), f"[{ip}]" if ":" in ip else ip, a.params["port"], mode=mode)

    def create_backstore(self, p: dict):
        # zvol opens fail with ERESTARTSYS ("already in use" to rtslib) while another ZFS command holds
        # spa_namespace_lock (seen in the lab): retry for a while; rtslib removes its half-made object.
        deadline = time.monotonic() + self.BUSY_RETRY_SECONDS
        while True:
            try:
                so = self.rts.BlockStorageObject(p["name"], dev=p["device"], wwn=p["wwn"], readonly=p["readonly"])
                break
            except self.rts.RTSLibError as exc:
                if "in use" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        try:
            set_reservations(so, p.get("emulate_pr", emulate_pr(p["readonly"])))
        except Exception:
            so.delete()
            raise
        return so

    def close_discovery(self) -> None:
        """Discovery authentication enforced (first), then every discovery credential cleared: nobody can
        authenticate, so no initiator gets a SendTargets answer."""
        self.fm.discovery_enable_auth = True
        for attr in DISCOVERY_CREDENTIALS:
            setattr(self.fm, f"discovery_{attr}", "")

    def create_target(self, iqn: str):
        try:
            return self.rts.Target(self.fm, iqn, mode="create")
        except Exception:
            if os.path.isdir(f"{self.fm.path}/{iqn}"):  # a refused create can leave a half-made target behind
                self.rts.Target(self.fm, iqn, mode="lookup").delete()
            raise


def set_reservations(so, value: int) -> None:
    """Set a new backstore's emulate_pr (an rtslib StorageObject, not exported yet). A read-only export on a
    kernel without the attribute is refused: its readers could stop each other."""
    if "emulate_pr" not in so.list_attributes():
        if value:
            return  # the kernel's only behaviour is the one wanted
        raise UserError(f"this kernel has no {so.path}/attrib/emulate_pr: LIO cannot refuse SCSI reservations, and "
                        "any host a read-only export is granted to could stop the others' reads",
                        "run a kernel with LIO's emulate_pr attribute (Linux 4.19 or later; Debian 12 and 13 have it)")
    if int(so.get_attribute("emulate_pr")) != value:
        so.set_attribute("emulate_pr", str(value))


# ---------------------------------------------------------------------------------------------
# Reading and applying through rtslib-fb (the only part that needs root and the kernel)


def _rtslib():
    try:
        import rtslib_fb  # noqa: PLC0415 - lazy on purpose: planning works without rtslib
    except ImportError as exc:
        raise UserError("python3-rtslib-fb is not installed on this node",
                        "install the Debian packages targetcli-fb and python3-rtslib-fb") from exc
    return rtslib_fb


def device_facts(paths) -> dict:
    """{path: {"exists", "block", "realpath"}} for the given device paths (os.stat on the node)."""
    facts = {}
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            facts[path] = {"exists": False, "block": False, "realpath": ""}
            continue
        facts[path] = {"exists": True, "block": stat.S_ISBLK(st.st_mode), "realpath": os.path.realpath(path)}
    return facts


def read_live(desired: DesiredState | None = None, rts=None) -> dict:
    """Read the live LIO state: ``{"dump", "sessions", "devices"}`` (the planner's input)."""
    rts = rts or _rtslib()
    if not os.path.isdir(CONFIGFS):
        raise UserError(f"{CONFIGFS} does not exist: configfs is not mounted or target_core_mod is not loaded",
                        "mount configfs (`mount -t configfs none /sys/kernel/config`) and `modprobe target_core_mod`")
    root = rts.RTSRoot()
    dump = root.dump()
    sessions = []
    for t in root.targets:
        if t.fabric_module.name != "iscsi":
            continue
        for tpg in t.tpgs:
            for acl in tpg.node_acls:
                s = acl.session
                if s:
                    sessions.append({"target": t.wwn, "tpg": tpg.tag, "initiator": acl.node_wwn,
                                     "state": s.get("state"), "id": s.get("id")})
    paths = set()
    if desired is not None:
        paths |= {lun.device for t in desired.targets for lun in t.luns}
    paths |= {so.get("dev") for so in dump.get("storage_objects", []) if so.get("dev")}
    return {"dump": dump, "sessions": sessions, "devices": device_facts(sorted(paths))}


RESERVATION_FILES = ("pr/res_holder", "pr/res_type", "pr/res_pr_type", "pr/res_pr_registered_i_pts",
                     "attrib/emulate_pr")


def read_reservations(configfs: str = CONFIGFS) -> dict:
    """The SCSI reservation state of every backstore, as configfs shows it: {backstore name: {file: text}} with
    the files of RESERVATION_FILES (``res_holder``, ..., ``emulate_pr``) under core/HBA/NAME (judged by
    ``health.reservations``). A file that cannot be read is left out. Reading needs no rtslib."""
    out: dict = {}
    core = os.path.join(configfs, "core")
    for hba in sorted(os.listdir(core)) if os.path.isdir(core) else []:
        hba_dir = os.path.join(core, hba)
        for name in sorted(os.listdir(hba_dir)) if os.path.isdir(hba_dir) else []:
            if not os.path.isdir(os.path.join(hba_dir, name, "pr")):
                continue
            files = {}
            for rel in RESERVATION_FILES:
                try:
                    with open(os.path.join(hba_dir, name, rel), encoding="utf-8", errors="replace") as f:
                        files[rel.rsplit("/", 1)[-1]] = f.read(65536).strip()
                except OSError:
                    continue
            out[name] = files
    return out


class LioApplyError(FabricError):
    """A change failed half-way; what this run created was removed again."""

    def __init__(self, problem: str, fix: str, done: list, rolled_back: list):
        super().__init__(problem, fix)
        self.done = done
        self.rolled_back = rolled_back
        self.result: dict = {}


def apply(steps: list[Step], *, rts=None, save_config: bool = True, save_file: str = SAVE_FILE) -> list[str]:
    """Run the changes in order; on failure undo this run's creations and raise LioApplyError.

    Deletions and attribute writes done before the failure are not undone (they are listed in
    the error). Whatever happened, once a change was attempted the whole configuration is saved for the
    boot-time restore (``_saved``): what was applied (a withdrawn ACL) must not come back at the next boot
    because a later step failed; a failed save is added to the error.
    """
    todo = changes(steps)
    if not todo:
        return []
    rts = rts or _rtslib()
    ex = _Rtslib(rts)
    done: list[str] = []
    undo: list = []
    with _saved(rts, save_file if save_config else None, done):
        for s in todo:
            try:
                op = OPERATIONS[s.kind]
                made = op.execute(ex, s)
                undo_it = made if op.creates else None  # the undo of a creation
            except Exception as exc:  # rtslib raises RTSLibError, OSError, ...
                rolled, failed = [], []
                for text, fn in reversed(undo):
                    try:
                        fn()
                        rolled.append(text)
                    except Exception as undo_exc:  # noqa: BLE001 - keep undoing the rest
                        if "does not exist" not in str(undo_exc):
                            failed.append(f"{text}: {undo_exc}")
                problem = f"LIO change failed at `{s.description}`: {exc}"
                if failed:
                    problem += "; could not undo: " + "; ".join(failed)
                raise LioApplyError(problem, "fix the cause and run again (the plan is recomputed from live state); "
                                    "creations of this run were removed, what was applied before the failure is "
                                    "saved for the next boot", done, rolled) from exc
            done.append(s.description)
            if undo_it is not None:
                undo.append((s.description, undo_it))
    return done


@contextlib.contextmanager
def _saved(rts, save_file: str | None, done: list):
    """Save the configuration when the block ends, however it ends (``apply``: a change failed, or the run was
    interrupted): a failed save after a failed change is added to that change's LioApplyError (both are
    reported); after success it is raised as it is."""
    try:
        yield
    except BaseException as err:
        if save_file is not None:
            try:
                save(rts, save_file)
            except Exception as exc:  # noqa: BLE001 - reported with the change's own error
                if isinstance(err, LioApplyError):
                    err.problem += (f"; the configuration could not be saved ({exc}): what was applied "
                                    f"({len(done)} step(s)) is live but not in {save_file}")
                    err.fix += f"; then check that {save_file} is writable"
        raise
    if save_file is not None:
        save(rts, save_file)


def save_config(save_file: str = SAVE_FILE, rts=None) -> None:
    """Save LIO's whole configuration now (``save``): after changes made without their save."""
    save(rts or _rtslib(), save_file)


def kernel_ready() -> bool:
    """LIO can be read without side effects: configfs mounted with the target tree, the iSCSI fabric loaded."""
    return os.path.isdir(CONFIGFS) and os.path.isdir(ISCSI_TARGET_MODULE)


def ensure_kernel(runner) -> list[str]:
    """Mount configfs and load iscsi_target_mod (which loads target_core_mod) when they are not there.

    Returns what it did, or, in a dry run, what it would do (a dry run loads nothing: reading LIO
    through rtslib would create configfs directories and so load the modules)."""
    configfs_root, configfs, module = CONFIGFS_ROOT, CONFIGFS, ISCSI_TARGET_MODULE
    steps = []
    if not os.path.ismount(configfs_root):
        steps.append(f"mount configfs at {configfs_root}")
        runner.run(["mount", "-t", "configfs", "none", configfs_root], mutating=True)
    if not (os.path.isdir(module) and os.path.isdir(configfs)):
        steps.append("load iscsi_target_mod (and target_core_mod)")
        runner.run(["modprobe", "-a", "target_core_mod", "iscsi_target_mod"], mutating=True)
    return steps


def empty_live(desired: DesiredState | None = None) -> dict:
    """The live state of a node whose LIO modules are not loaded yet: no storage object, no target."""
    paths = {lun.device for t in desired.targets for lun in t.luns} if desired is not None else set()
    return {"dump": {"storage_objects": [], "targets": [], "fabric_modules": []}, "sessions": [],
            "devices": device_facts(sorted(paths))}


def run_plan(steps: list[Step], runner, *, rts=None, save_config: bool = True,
             save_file: str = SAVE_FILE) -> list[str]:
    """The one way a plan's LIO changes are made: through rtslib (``apply``, one save), unless ``runner`` is a dry
    run, which makes none; every change is recorded in the runner as ("rtslib", what it does), planned or executed
    (on a failure, those done before it). Returns the changes' descriptions (in a dry run, what would be done)."""
    todo = changes(steps)
    if not todo:
        return []
    if runner.dry_run:
        done = [s.description for s in todo]
    else:
        try:
            done = apply(steps, rts=rts, save_config=save_config, save_file=save_file)
        except LioApplyError as err:
            for text in err.done:
                runner.record(("rtslib", text))
            raise
    for text in done:
        runner.record(("rtslib", text))
    return done


def reconcile(desired: dict | DesiredState, *, runner, purge: bool = False, force: bool = False,
              save_config: bool = True, save_file: str = SAVE_FILE, rts=None, load_kernel: bool = False,
              predicted: dict | None = None) -> dict:
    """Read, plan, apply through ``runner`` (a dry run is the runner's: it plans and records, changes nothing);
    return a plain result for modules and fabricctl.

    ``load_kernel``: LIO's kernel side is made ready first (configfs, modules); a dry run on a node where it is
    not plans from an empty state and says what it would load, loading nothing. ``predicted`` (dry runs only):
    plan from this live state (``simulate``'s, after a plan made earlier in the same dry run) instead of reading
    LIO, which those planned changes did not reach."""
    dry_run = runner.dry_run
    state = parse_desired(desired)
    warnings = []
    loading = ensure_kernel(runner) if load_kernel else []
    if dry_run and loading:
        warnings.append(f"LIO is not loaded on this node: check mode would {' and '.join(loading)}, and plans "
                        "from an empty configuration")
        before = empty_live(state)
    elif dry_run and predicted is not None:
        before = copy.deepcopy(predicted)
    else:
        rts = rts or _rtslib()
        before = read_live(state, rts)
    if dry_run:
        # check mode of a whole run: a zvol that an earlier task would create does not exist yet
        for path, info in before["devices"].items():
            if not info["exists"]:
                before["devices"][path] = {"exists": True, "block": True, "realpath": path}
                warnings.append(f"{path} does not exist yet: check mode assumes an earlier task creates it "
                                "(a real run refuses a missing device)")
    steps = plan(state, before, purge=purge, force=force)
    return converge(state, before, steps, runner=runner, loading=loading, warnings=warnings, rts=rts,
                    save_config=save_config, save_file=save_file)


def converge(state: DesiredState, before: dict, steps: list[Step], *, runner, loading: list | None = None,
             warnings: list | None = None, rts=None, save_config: bool = True, save_file: str = SAVE_FILE) -> dict:
    """The one applier of a plan (``plan``, ``plan_removal``, ``plan_access``) made from ``before``: its changes
    made through ``run_plan`` (recorded in ``runner``; none in its dry run), and {changed, actions, kept, before,
    after, targets, warnings[, done, rolled_back]}. In a dry run ``after`` is the simulation (``simulate``);
    otherwise what LIO reads afterwards. ``loading``: what was done (or is planned) to make the kernel side
    ready first."""
    loading = list(loading or [])
    todo = changes(steps)
    result = {"changed": bool(todo) or bool(loading), "actions": [*loading, *(s.description for s in todo)],
              "kept": [s.description for s in kept(steps)],
              "before": summarize(before, state), "warnings": list(warnings or [])}
    if not todo:
        result["after"] = result["before"]
        result["targets"] = result["before"]["targets"]
        return result
    if runner.dry_run:
        run_plan(steps, runner)
        result["after"] = summarize(simulate(before, steps), state)
        result["targets"] = result["before"]["targets"]
        return result
    rts = rts or _rtslib()
    try:
        result["done"] = run_plan(steps, runner, rts=rts, save_config=save_config, save_file=save_file)
    except LioApplyError as err:
        result["done"] = err.done
        result["rolled_back"] = err.rolled_back
        result["after"] = summarize(read_live(state, rts), state)
        result["targets"] = result["after"]["targets"]
        err.result = result
        raise
    result["after"] = summarize(read_live(state, rts), state)
    result["targets"] = result["after"]["targets"]
    return result
