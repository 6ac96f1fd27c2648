"""Converging a pool: declared spec, live state, a pure plan, one applier (model.apply_steps).

``pool_spec`` validates the declared pool against the node's disks; ``read_pool`` reads the live pool (then
``check_layout`` refuses a conflicting layout before ``read_pool_details`` reads its properties and root
dataset); ``plan_pool`` is pure: declared + live -> ordered steps (model.Step: a description and the argv),
warnings and the predicted after-state, every refusal raised before any step; ``apply_pool`` runs the steps
through the Runner (model.apply_steps), recording every one, so a dry run shows them all. ``ensure_pool``
does the four in order.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...base.errors import CommandError, FabricError, NotFound, UnsafeOperation, UserError
from ...base.model import Applied, PoolLayout, Step, Vdev, apply_steps
from ...base.names import validate_pool_name
from ...base.rules import MANAGED_PROP
from ...base.runner import Runner
from .. import zfs
from ..disks import ACTIVE_USE_PREFIXES, index_of
from .status import (
    PoolHealth,
    expanding_of,
    get_layout,
    get_props,
    health_of,
    layout_of,
    parse_props,
    pool_exists,
    pool_object,
    status_object,
    strip_part1,
)
from .vdevs import (
    Expansion,
    LayoutDiff,
    add_argv,
    compare_layout,
    create_argv,
    normalize_pool_prop,
    prop_text,
    validate_layout,
)


def _check_props(props: dict, what: str) -> None:
    for key in props:
        if not isinstance(key, str) or not key or "=" in key or " " in key:
            raise UserError(f"invalid {what} name {key!r}", "use ZFS property names such as `autotrim`")


def check_json_int_safe(properties: dict) -> None:
    """Refuse a declared pool property value that `zpool get -j --json-int` would not read back as written.

    --json-int prints every all-digit value as a JSON number, and `zpool get all` lists a pool's user
    properties (OpenZFS 2.2 and later) and the string property ``comment``: ``007`` reads back as 7, so
    the pool would differ on every run (see zjson.py).
    """
    for key, value in properties.items():
        text = prop_text(value).strip()
        if text.isascii() and text.isdigit() and str(int(text)) != text:
            raise UserError(f"pool property {key}={text}: `zpool get -j --json-int` prints an all-digit value as a "
                            f"number, so it would read back as {int(text)} and the pool would be changed on every run",
                            f"write it as {int(text)}, or keep such a value in a user property of the root dataset "
                            "(filesystem_properties), which the fabric reads as text")


def wipe_steps(path: str, reasons: list) -> list:
    """The steps that clear ZFS labels and every signature of a disk (``zpool labelclear`` exits 1 on a disk
    without a label: no error)."""
    why = "; ".join(reasons) or "in use"
    return [Step(f"wipe {path} ({why}): clear its ZFS labels", ["zpool", "labelclear", "-f", path], check=False),
            Step(f"wipe {path}: erase every signature, destroying its contents", ["wipefs", "-a", path])]


@dataclass
class PoolSpec:
    """A declared pool, validated against the node's disks: nothing wrong in it is found after a command ran."""

    name: str
    layout: PoolLayout  # as declared (declared spellings of the disks)
    canonical: PoolLayout  # the same with every disk's by-id path
    by_disk: dict  # declared path -> DiskInfo
    aliases: dict  # every path of a known disk -> its by-id path (to read a live pool in the same terms)
    ashift: int = 12
    properties: dict = field(default_factory=dict)
    fs_properties: dict = field(default_factory=dict)
    safe_mode: bool = True
    wipe: set = field(default_factory=set)  # by-id paths whose contents may be destroyed
    allow_grow: bool = False
    adopt: bool = False
    allow_raidz_expansion: bool = False
    upgrade_features: bool = False


def pool_spec(*, name: str, layout: PoolLayout, disks: list, ashift: int = 12, properties: dict | None = None,
              fs_properties: dict | None = None, safe_mode: bool = True, wipe: list | None = None,
              allow_grow: bool = False, adopt: bool = False, allow_raidz_expansion: bool = False,
              upgrade_features: bool = False) -> PoolSpec:
    """Validate a declared pool (pure); UserError/NotFound before any command."""
    properties = dict(properties or {})
    fs_properties = dict(fs_properties or {})
    validate_pool_name(name)
    if isinstance(layout, dict):
        layout = PoolLayout.from_dict(layout)
    validate_layout(layout)
    _check_props(properties, "pool property")
    check_json_int_safe(properties)
    _check_props(fs_properties, "filesystem property")
    if not isinstance(ashift, int) or not 9 <= ashift <= 16:
        raise UserError(f"ashift {ashift!r} is out of range", "use 12 (4 KiB sectors) or 13 (8 KiB); 9..16 allowed")
    index = index_of(disks)
    by_disk: dict = {}
    for path in layout.disks():
        disk = index.get(path) or index.get(strip_part1(path))
        if disk is None:
            raise NotFound(f"declared disk {path} was not found on this node",
                           "check the path under /dev/disk/by-id (fabric disk discovery lists the disks found)")
        by_disk[path] = disk
    wipe_set = set()
    for path in wipe or []:
        disk = index.get(path)
        if disk is None:
            raise NotFound(f"disk {path} to wipe was not found on this node", "name it by its /dev/disk/by-id path")
        wipe_set.add(disk.by_id)
    # compare with by_id paths on both sides
    canonical = PoolLayout(vdevs=[Vdev(v.role, v.type, [by_disk[d].by_id for d in v.disks]) for v in layout.vdevs],
                           force=layout.force)
    return PoolSpec(name=name, layout=layout, canonical=canonical, by_disk=by_disk,
                    aliases={path: disk.by_id for path, disk in index.items()}, ashift=ashift, properties=properties,
                    fs_properties=fs_properties, safe_mode=safe_mode, wipe=wipe_set, allow_grow=allow_grow,
                    adopt=adopt, allow_raidz_expansion=allow_raidz_expansion, upgrade_features=upgrade_features)


@dataclass
class LivePool:
    """What ZFS says of the pool: read_pool fills the first part, read_pool_details the rest."""

    name: str
    exists: bool
    layout: PoolLayout | None = None  # by-id paths (aliases mapped)
    health: PoolHealth | None = None
    expanding: dict | None = None  # a raidz expansion in progress: {vdev, reflowed, to_reflow}
    managed: bool = False  # fabric:managed=true on the root dataset
    props: dict | None = None  # {property: (value, source)} of `zpool get -j --json-int all`
    root: zfs.LiveDataset | None = None  # the root dataset, read when filesystem properties are declared

    @classmethod
    def from_outputs(cls, name: str, *, status: str, managed: str, props: str | None = None,
                     root: str | None = None, aliases: dict | None = None) -> LivePool:
        """The live state of an existing pool from the outputs read_pool reads (`zpool status -j --json-int -P`,
        `zfs get -j -p fabric:managed`, `zpool get -j --json-int all`, `zfs get -j -p all` of the root): for
        planning without a runner."""
        live = cls(name=name, exists=True)
        _fill_status(live, pool_object(status, name, "zpool status -j --json-int -P"), aliases)
        live.managed = zfs.parse_get(managed).get(name, {}).get(MANAGED_PROP, ("-", ""))[0] == "true"
        if props is not None:
            live.props = parse_props(props, name)
        if root is not None:
            live.root = zfs.LiveDataset(props=zfs.parse_get(root).get(name))
        return live


def _fill_status(live: LivePool, obj: dict, aliases: dict | None) -> None:
    layout = layout_of(obj)
    for vdev in layout.vdevs:
        vdev.disks = [(aliases or {}).get(d, d) for d in vdev.disks]
    live.layout, live.health, live.expanding = layout, health_of(obj), expanding_of(obj)


def read_pool(runner: Runner, spec: PoolSpec) -> LivePool:
    """Whether the pool exists (`zpool list -j --json-int NAME`) and, when it does, its layout, health and
    expansion (`zpool status -j --json-int -P NAME`) and whether this project made it (`zfs get -j -p
    fabric:managed NAME`). Enough to refuse a conflicting layout before reading more (read_pool_details)."""
    if pool_exists(runner, spec.name) is None:
        return LivePool(name=spec.name, exists=False)
    live = LivePool(name=spec.name, exists=True)
    obj = status_object(runner, spec.name)
    _fill_status(live, obj, spec.aliases)
    root = zfs.get_props(runner, spec.name, [MANAGED_PROP]).get(spec.name, {})
    live.managed = root.get(MANAGED_PROP, ("-", ""))[0] == "true"
    return live


def read_pool_details(runner: Runner, spec: PoolSpec, live: LivePool) -> LivePool:
    """The pool's properties and features (`zpool get -j --json-int all NAME`) and, when filesystem properties
    are declared, its root dataset (`zfs get -j -p all NAME`)."""
    live.props = get_props(runner, spec.name)
    if spec.fs_properties:
        live.root = zfs.read_dataset(runner, spec.name)
    return live


@dataclass
class PoolPlan:
    """The steps that turn the live pool into the declared one, what they change, and the predicted result."""

    name: str
    steps: list  # list[Step], in order; empty when nothing changes
    created: bool = False
    warnings: list = field(default_factory=list)
    before: dict = field(default_factory=dict)
    after: dict = field(default_factory=dict)  # predicted
    added: list = field(default_factory=list)  # vdev dicts created or added
    expanded: list = field(default_factory=list)  # [{vdev, disks}] grown by raidz expansion
    properties_changed: dict = field(default_factory=dict)
    fs: zfs.DatasetPlan | None = None  # the root dataset's properties (filesystem properties of an existing pool)
    health: str = ""  # the live pool's state ("" for a pool to create)
    reshapes: bool = False  # the layout changes: a real run reads it back


def _disabled_features(props: dict) -> list:
    return sorted(k.split("@", 1)[1] for k, (value, _source) in props.items()
                  if k.startswith("feature@") and value == "disabled")


def _some(names: list, shown: int = 5) -> str:
    """The first names of a list, and how many more there are."""
    more = len(names) - shown
    return ", ".join(names[:shown]) + (f" and {more} more" if more > 0 else "")


def _refuse_or_wipe(spec: PoolSpec, paths: list) -> list:
    """The disks among ``paths`` that must be wiped first; raise for in-use disks that may not be wiped."""
    to_wipe = []
    for path in paths:
        disk = spec.by_disk[path]
        if not disk.in_use:
            continue
        reasons = "; ".join(disk.reasons) or "in use"
        active = [r for r in disk.reasons if r.startswith(ACTIVE_USE_PREFIXES)]
        if active:
            raise UnsafeOperation(f"disk {path} is in active use ({'; '.join(active)}); refusing to use it",
                                  "use another disk; a mounted disk, a held disk or a member of an imported "
                                  "pool is never wiped")
        if disk.by_id in spec.wipe and not spec.safe_mode:
            to_wipe.append(path)
            continue
        if disk.by_id in spec.wipe:
            fix = "set safe_mode=false as well to wipe it (this destroys its contents)"
        else:
            fix = (f"use another disk, or list {path} in wipe AND set safe_mode=false to erase it "
                   "(this destroys its contents)")
        raise UnsafeOperation(f"disk {path} is in use ({reasons}); refusing to use it", fix)
    return to_wipe


def _wipes(spec: PoolSpec, paths: list, steps: list, warnings: list) -> list:
    to_wipe = _refuse_or_wipe(spec, paths)
    for path in to_wipe:
        steps += wipe_steps(path, spec.by_disk[path].reasons)
        warnings.append(f"wiped {path} ({'; '.join(spec.by_disk[path].reasons)})")
    return to_wipe


def _summary(vdevs: list) -> str:
    return "; ".join(f"{v.role} {v.type} of {', '.join(v.disks)}" for v in vdevs)


def check_layout(spec: PoolSpec, live: LivePool) -> LayoutDiff:
    """The declared layout against the live pool's (pure); UserError naming every conflict."""
    diff = compare_layout(spec.canonical, live.layout or PoolLayout(), allow_grow=spec.allow_grow,
                          allow_raidz_expansion=spec.allow_raidz_expansion)
    if diff.conflicts:
        raise UserError(f"pool {spec.name} does not match the declared layout: " + "; ".join(diff.conflicts),
                        "declare the pool as it is (see `zpool status -P`) plus only what may be added; this module "
                        "never removes or reshapes vdevs")
    return diff


def plan_pool(spec: PoolSpec, live: LivePool) -> PoolPlan:
    """The plan for ``spec`` over ``live`` (pure: no command): create the pool, or on an existing one adopt it,
    upgrade its features, wipe and add vdevs, expand raidz vdevs, set pool and root dataset properties.
    Every refusal (a conflicting layout, a disk in use, a feature missing for raidz expansion, a pool this
    project did not create) is raised here, before any step runs."""
    if not live.exists:
        return _plan_create(spec)
    return _plan_existing(spec, live)


def _plan_create(spec: PoolSpec) -> PoolPlan:
    steps: list = []
    warnings: list = []
    wiped = _wipes(spec, spec.layout.disks(), steps, warnings)
    steps.append(Step(
        description=f"create pool {spec.name} (ashift {spec.ashift}): {_summary(spec.layout.vdevs)}"
        + ("; with -f: the plan accepted mismatched redundancy" if spec.layout.force else ""),
        argv=create_argv(spec.name, spec.layout, spec.ashift, spec.properties, spec.fs_properties),
        dry_run_argv=create_argv(spec.name, spec.layout, spec.ashift, spec.properties, spec.fs_properties,
                                 check_only=True),
        dry_run_strict=not wiped,
        dry_run_refusal="`zpool create -n` refused the plan before the wipe that a real run does first: "))
    return PoolPlan(name=spec.name, steps=steps, created=True, warnings=warnings,
                    before={"pool": spec.name, "exists": False, "vdevs": []},
                    after={"pool": spec.name, "exists": True, **_layout_dict(spec.canonical)},
                    added=[v.to_dict() for v in spec.layout.vdevs], reshapes=True)


def _plan_existing(spec: PoolSpec, live: LivePool) -> PoolPlan:
    name = spec.name
    diff = check_layout(spec, live)
    if live.props is None or (spec.fs_properties and (live.root is None or live.root.props is None)):
        raise FabricError(f"pool {name}: its properties (and, with filesystem properties, its root dataset) were "
                          "not read", "read them with read_pool_details before planning")
    props = live.props
    health = live.health.state if live.health else ""
    warnings: list = []
    if health and health != "ONLINE":
        bad = ", ".join(f"{d.path or d.name} {d.state}" for d in live.health.unhealthy() if d.role != "pool")
        warnings.append(f"pool {name} is {health}" + (f": {bad}" if bad else ""))
    if live.expanding:
        e = live.expanding
        warnings.append(f"pool {name} is expanding {e['vdev']} (raidz expansion in progress, {e['reflowed']} of "
                        f"{e['to_reflow']} bytes copied): its new disk counts as a member already; the space it adds "
                        f"is usable once `zpool wait -t raidz_expand {name}` returns")
    prop_changes = {}
    for key, value in spec.properties.items():
        if key == "ashift":
            continue
        have = props.get(key)
        if have is None:
            raise UserError(f"pool {name} has no property {key!r}", "check `zpool get all` for valid names")
        if normalize_pool_prop(key, have[0]) != normalize_pool_prop(key, value):
            prop_changes[key] = {"before": have[0], "after": prop_text(value)}
    disabled = _disabled_features(props)
    upgrade = bool(spec.upgrade_features and disabled)
    if diff.expansions and not upgrade:
        feature = props.get("feature@raidz_expansion", ("missing", "-"))[0]
        if feature not in ("enabled", "active"):
            vdevs = ", ".join(e.vdev for e in diff.expansions)
            raise UnsafeOperation(
                f"pool {name} cannot grow {vdevs} by raidz expansion: its feature@raidz_expansion is {feature} "
                "(ZFS refuses the attach: \"raidz_expansion feature must be enabled in order to attach a device "
                "to raidz\"); nothing was changed",
                f"enable the pool's features with `zpool upgrade {name}` (or upgrade_features=true), knowing that "
                "afterwards an older ZFS can no longer import the pool, so going back to the previous OS or ZFS "
                "release is no longer possible with it; or declare the vdev as it is")
    fs_plan = None
    if spec.fs_properties:
        fs_plan = zfs.plan_dataset(zfs.dataset_spec(name, spec.fs_properties, adopt=True), live.root)
    steps: list = []
    if not live.managed and (diff.to_add or diff.expansions or prop_changes or upgrade or spec.fs_properties):
        if not spec.adopt:
            raise UnsafeOperation(f"pool {name} exists but was not created by this project "
                                  f"({MANAGED_PROP} is not true on its root dataset); refusing to change it",
                                  "set adopt=true to take it over (sets fabric:managed=true), or use another name")
        steps.append(Step(f"adopt pool {name}: set {MANAGED_PROP}=true on its root dataset",
                          ["zfs", "set", f"{MANAGED_PROP}=true", name]))
        warnings.append(f"adopted pool {name}: set {MANAGED_PROP}=true")
    if upgrade:
        steps.append(Step(f"enable the {len(disabled)} disabled feature(s) of pool {name} ({_some(disabled)}), as "
                          "upgrade_features asks: an older ZFS can no longer import the pool afterwards, which rules "
                          "out going back to the previous OS or ZFS release with it", ["zpool", "upgrade", name]))
    elif disabled:
        warnings.append(f"pool {name} has {len(disabled)} disabled feature(s) ({_some(disabled)}); they stay off "
                        "(upgrade_features is false), so an older ZFS can still import the pool: the way back "
                        "after a failed OS or ZFS upgrade. Set upgrade_features=true to enable them")
    # the declared spelling of every new disk (the comparison ran on by-id paths), for the in-use and wipe rules,
    # the command lines and the report
    to_path = {disk.by_id: path for path, disk in spec.by_disk.items()}
    to_add = [Vdev(v.role, v.type, [to_path.get(d, d) for d in v.disks]) for v in diff.to_add]
    expansions = [Expansion(e.vdev, e.live, [to_path.get(d, d) for d in e.disks]) for e in diff.expansions]
    new_paths = [d for v in to_add for d in v.disks] + [d for e in expansions for d in e.disks]
    wiped = _wipes(spec, new_paths, steps, warnings)
    if to_add:
        steps.append(Step(
            description=f"add to pool {name}: {_summary(to_add)}",
            argv=add_argv(name, to_add, ashift=spec.ashift, force=spec.layout.force),
            dry_run_argv=add_argv(name, to_add, check_only=True, ashift=spec.ashift, force=spec.layout.force),
            dry_run_strict=not any(d in wiped for v in to_add for d in v.disks),
            dry_run_refusal="`zpool add -n` refused the plan before the wipe that a real run does first: "))
    if diff.expansions and live.expanding:
        steps.append(Step(f"wait for the raidz expansion of {live.expanding['vdev']} in progress to finish (ZFS "
                          "expands one disk at a time)", ["zpool", "wait", "-t", "raidz_expand", name]))
    for expansion in expansions:
        warnings.append(f"raidz expansion of {expansion.vdev} in pool {name} by {', '.join(expansion.disks)}: it "
                        "cannot be undone; the data already on the vdev keeps its old data-to-parity ratio (and "
                        "space use) until it is rewritten; ZFS expands one disk at a time, so each attach is "
                        "followed by a wait for its reflow (hours on large disks)")
        total = len(expansion.disks)
        for n, disk in enumerate(expansion.disks, 1):
            steps.append(Step(f"attach {disk} to {expansion.vdev} (raidz expansion, disk {n} of {total}): ZFS "
                              "reflows the vdev's data across its disks",
                              ["zpool", "attach", name, expansion.vdev, disk]))
            steps.append(Step(f"wait until {expansion.vdev} is expanded onto {disk} (`zpool wait` returns when "
                              "the reflow is done)", ["zpool", "wait", "-t", "raidz_expand", name]))
    for key, change in prop_changes.items():
        steps.append(Step(f"set pool property {key}={change['after']} on {name} (was {change['before']})",
                          ["zpool", "set", f"{key}={change['after']}", name]))
    if fs_plan is not None:
        steps += fs_plan.steps
        warnings += fs_plan.warnings
    by_id = {path: disk.by_id for path, disk in spec.by_disk.items()}
    grown = {e.vdev: [by_id.get(d, d) for d in e.disks] for e in expansions}
    predicted = PoolLayout(vdevs=[Vdev(v.role, v.type, [*v.disks, *grown.get(v.name, [])]) for v in live.layout.vdevs]
                           + [Vdev(v.role, v.type, [by_id.get(d, d) for d in v.disks]) for v in to_add])
    return PoolPlan(name=name, steps=steps, warnings=warnings,
                    before={"pool": name, "exists": True, **_layout_dict(live.layout)},
                    after={"pool": name, "exists": True, **_layout_dict(predicted)},
                    added=[v.to_dict() for v in to_add], expanded=[e.to_dict() for e in expansions],
                    properties_changed=prop_changes, fs=fs_plan, health=health,
                    reshapes=bool(to_add or diff.expansions))


# What `zpool create`/`zpool add` print when the kernel could not open a vdev it was just given (ENOENT): the disk's
# links under /dev/disk/by-id are removed and made again by udev after zpool writes its partition table, and the
# kernel retries a missing path for zfs_vdev_open_timeout_ms (1 s by default) only. On a busy node udev can take
# longer (the lab's storage1, emulated, under two labs' load: "cannot create 'tank': no such pool or dataset").
VDEV_LINK_GONE = "no such pool or dataset"


def _apply(runner: Runner, steps: list) -> Applied:
    """``apply_steps``, with a pool's create or add run once more after `udevadm settle` when the kernel found a
    vdev's link gone (``VDEV_LINK_GONE``): nothing was created or added then, and the disks' labels are written
    again by the second run."""
    done = Applied()
    for step in steps:
        try:
            part = apply_steps(runner, [step])
        except CommandError as err:
            if step.argv[:2] not in (["zpool", "create"], ["zpool", "add"]) or VDEV_LINK_GONE not in err.stderr:
                raise
            runner.run(["udevadm", "settle", "--timeout=120"], check=False)
            part = apply_steps(runner, [step])
            part.warnings.append(f"{step.description}: the kernel found a disk's link gone while udev made it again "
                                 f"(`{err.stderr.strip()}`); run again once udev had settled")
        done.commands += part.commands
        done.prepared = part.prepared or done.prepared
        done.warnings += part.warnings
    return done


def apply_pool(runner: Runner, spec: PoolSpec, plan: PoolPlan) -> dict:
    """Run the plan's steps (model.apply_steps; a create or add once more when a vdev's link was gone, ``_apply``)
    and report; a real run that changed the layout reads it back.

    Returns {changed, created, added, expanded, commands, prepared, before, after, warnings, health,
    properties_changed, steps} (and fs_properties_changed when the root dataset's properties were planned).
    """
    done = _apply(runner, plan.steps)
    result: dict = {"changed": bool(plan.steps), "created": plan.created, "added": plan.added,
                    "expanded": plan.expanded, "commands": done.commands, "prepared": done.prepared,
                    "before": plan.before, "after": plan.after, "warnings": [*plan.warnings, *done.warnings],
                    "properties_changed": plan.properties_changed, "steps": [s.to_dict() for s in plan.steps]}
    if plan.health:
        result["health"] = plan.health
    if plan.fs is not None:
        result["fs_properties_changed"] = plan.fs.changed_properties
    if plan.reshapes and not runner.dry_run:
        after, health = get_layout(runner, spec.name, spec.aliases)
        result["after"] = {"pool": spec.name, "exists": True, **_layout_dict(after)}
        if plan.created:
            result["health"] = health.state
    return result


def ensure_pool(runner: Runner, *, name: str, layout: PoolLayout, disks: list, ashift: int = 12,
                properties: dict | None = None, fs_properties: dict | None = None, safe_mode: bool = True,
                wipe: list | None = None, allow_grow: bool = False, adopt: bool = False,
                allow_raidz_expansion: bool = False, upgrade_features: bool = False) -> dict:
    """Create the pool NAME with ``layout``, or add what is missing to it; never destroy or remove.

    ``disks``: the node's disks (disks.discover); every declared disk must be one of them.
    Validate (pool_spec), read (read_pool; a conflicting layout is refused before the pool's properties are
    read; read_pool_details), plan (plan_pool, pure), apply (apply_pool): see apply_pool for the result.
    In a dry run (runner.dry_run) nothing changes; `zpool create -n`/`zpool add -n` validate the
    plan and their output is in ``prepared``.
    """
    spec = pool_spec(name=name, layout=layout, disks=disks, ashift=ashift, properties=properties,
                     fs_properties=fs_properties, safe_mode=safe_mode, wipe=wipe, allow_grow=allow_grow, adopt=adopt,
                     allow_raidz_expansion=allow_raidz_expansion, upgrade_features=upgrade_features)
    live = read_pool(runner, spec)
    if live.exists:
        check_layout(spec, live)
        read_pool_details(runner, spec, live)
    return apply_pool(runner, spec, plan_pool(spec, live))


def _layout_dict(layout: PoolLayout) -> dict:
    return {"vdevs": [v.to_dict() for v in layout.vdevs]}
