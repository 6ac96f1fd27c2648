"""Pool layouts: validated (``validate_layout``), turned into ``zpool create``/``add`` command lines, and compared
with a live pool's (``compare_layout``: what to add, what to grow, what conflicts).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...base.errors import UserError
from ...base.model import MIN_WIDTH, VDEV_ROLES, VDEV_TYPES, PoolLayout, Vdev
from ...base.rules import MANAGED_PROP
from .status import strip_part1

# role -> keyword on the zpool create/add command line
_ROLE_KEYWORD = {"special": "special", "log": "log", "cache": "cache", "spare": "spare"}

# --------------------------------------------------------------------------------------------------
# validation and command lines


def validate_layout(layout: PoolLayout) -> PoolLayout:
    """Check roles, types, widths and duplicates of a declared layout; return it unchanged."""
    if not layout.vdevs:
        raise UserError("the pool layout has no vdevs", "declare at least one data vdev, e.g. "
                        "{role: data, type: raidz1, disks: [A, B, C]}")
    seen: dict = {}
    for n, vdev in enumerate(layout.vdevs):
        where = f"vdev {n} ({vdev.role} {vdev.type})"
        if vdev.role not in VDEV_ROLES:
            raise UserError(f"{where}: unknown role {vdev.role!r}", f"use one of {', '.join(VDEV_ROLES)}")
        if vdev.type not in VDEV_TYPES:
            raise UserError(f"{where}: unknown type {vdev.type!r}", f"use one of {', '.join(VDEV_TYPES)}")
        if not isinstance(vdev.disks, list) or not vdev.disks or not all(isinstance(d, str) and d for d in vdev.disks):
            raise UserError(f"{where}: disks must be a non-empty list of device paths",
                            "list /dev/disk/by-id/... paths")
        if vdev.role in ("cache", "spare") and vdev.type != "disk":
            raise UserError(f"{where}: {vdev.role} devices cannot be grouped in a {vdev.type}",
                            f"use type: disk for {vdev.role} devices (one entry per device or several disks)")
        if vdev.type != "disk" and len(vdev.disks) < MIN_WIDTH[vdev.type]:
            raise UserError(f"{where}: a {vdev.type} needs at least {MIN_WIDTH[vdev.type]} disks, "
                            f"{len(vdev.disks)} given", "add disks or choose another vdev type")
        if vdev.type == "disk" and vdev.role in ("data", "special", "log") and len(vdev.disks) != 1:
            raise UserError(f"{where}: type disk holds exactly one disk, {len(vdev.disks)} given",
                            "declare one vdev per disk, or use mirror/raidz")
        for disk in vdev.disks:
            if not disk.startswith("/"):
                raise UserError(f"{where}: {disk!r} is not an absolute device path",
                                "use /dev/disk/by-id/... paths (stable across reboots)")
            key = strip_part1(disk)
            if key in seen:
                raise UserError(f"disk {disk} is declared twice ({seen[key]} and {where})",
                                "use every disk in one vdev only")
            seen[key] = where
    if not layout.by_role("data"):
        raise UserError("the pool layout has no data vdev", "declare at least one vdev with role: data")
    return layout


def _vdev_args(vdev: Vdev) -> list:
    return list(vdev.disks) if vdev.type == "disk" else [vdev.type, *vdev.disks]


def vdev_args(vdevs: list) -> list:
    """The vdev part of a zpool create/add command line, grouped by role in ZFS's order."""
    argv: list = []
    for role in VDEV_ROLES:
        group = [v for v in vdevs if v.role == role]
        if not group:
            continue
        if role != "data":
            argv.append(_ROLE_KEYWORD[role])
        for vdev in group:
            argv += _vdev_args(vdev)
    return argv


def prop_text(value) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def create_argv(name: str, layout: PoolLayout, ashift: int = 12, pool_properties: dict | None = None,
                fs_properties: dict | None = None, check_only: bool = False) -> list:
    """zpool create [-n] [-f] -o ashift=N -o k=v ... -O k=v ... -O fabric:managed=true NAME VDEVS...

    -f only when the plan accepted mismatched redundancy (layout.force); the project's own disk
    checks have run before, so -f overrides nothing else that matters.
    """
    argv = ["zpool", "create"] + (["-n"] if check_only else []) + (["-f"] if layout.force else [])  # -n: validation
    if ashift:
        argv += ["-o", f"ashift={int(ashift)}"]
    for key, value in (pool_properties or {}).items():
        if key != "ashift":
            argv += ["-o", f"{key}={prop_text(value)}"]
    fs = dict(fs_properties or {})
    fs[MANAGED_PROP] = "true"
    for key, value in fs.items():
        argv += ["-O", f"{key}={prop_text(value)}"]
    return argv + [name] + vdev_args(layout.vdevs)


def add_argv(name: str, vdevs: list, check_only: bool = False, ashift: int | None = None, force: bool = False) -> list:
    """zpool add [-n] [-f] [-o ashift=N] NAME special mirror A B log mirror C D cache E spare F. ``check_only``:
    `-n`, ZFS's own validation of the addition (a step's ``dry_run_argv``; the dry run itself is the runner's)."""
    argv = ["zpool", "add"] + (["-n"] if check_only else []) + (["-f"] if force else [])
    if ashift:
        argv += ["-o", f"ashift={int(ashift)}"]
    return argv + [name] + vdev_args(vdevs)


# --------------------------------------------------------------------------------------------------
# comparing declared and live layouts


def _describe(vdev: Vdev) -> str:
    return f"{vdev.role} {vdev.type} [{', '.join(vdev.disks)}]"


@dataclass
class Expansion:
    """A live raidz vdev grown by attaching disks (raidz expansion, OpenZFS 2.3)."""

    vdev: str  # how zpool names it: raidz2-0
    live: Vdev  # its members now
    disks: list  # the disks to attach, in the declared order and spelling

    def to_dict(self) -> dict:
        return {"vdev": self.vdev, "disks": list(self.disks)}


@dataclass
class LayoutDiff:
    """What a declared layout asks of a live pool: vdevs to add, raidz vdevs to expand, and conflicts."""

    to_add: list = field(default_factory=list)  # list[Vdev], declared spelling
    expansions: list = field(default_factory=list)  # list[Expansion]
    conflicts: list = field(default_factory=list)  # one sentence each


def compare_layout(declared: PoolLayout, live: PoolLayout, allow_grow: bool = False,
                   allow_raidz_expansion: bool = False) -> LayoutDiff:
    """The declared layout against the live one (pure).

    to_add: declared vdevs whose disks are all absent from the pool and that can be added:
    special/log/cache/spare always; data vdevs only with ``allow_grow`` and when their type equals
    the pool's data vdev type (adding a data vdev cannot be undone on a pool with raidz).
    expansions: a declared raidzN data vdev made of all the members of a live raidzN vdev plus disks
    that are not in the pool, with ``allow_raidz_expansion`` (without it, a conflict that names the option).
    conflicts: one sentence per problem: a declared vdev whose members are partly or wholly in
    another live vdev, a data vdev of another type, growth without allow_grow, and a live vdev that
    is not declared (reported, never removed). Paths are compared with ``-part1`` stripped.
    """
    def norm(v: Vdev) -> Vdev:
        # cache and spare devices are independent: compare them one device at a time
        return Vdev(v.role, v.type, sorted(strip_part1(d) for d in v.disks), v.name)

    def split(vs: list) -> list:
        out = []
        for v in vs:
            if v.role in ("cache", "spare"):
                out += [Vdev(v.role, "disk", [d], v.name) for d in v.disks]
            else:
                out.append(v)
        return out

    declared_vdevs = split(declared.vdevs)
    have = [norm(v) for v in split(live.vdevs)]
    live_disks = {d: v for v in have for d in v.disks}
    have_keys = {v.key() for v in have}
    # keep the declared spelling of each path (the comparison normalised it)
    spelled = {strip_part1(d): d for d in declared.disks()}
    matched: set = set()
    diff = LayoutDiff()
    to_add: list = []
    live_data_types = {v.type for v in have if v.role == "data"}
    for original in declared_vdevs:
        vdev = norm(original)
        if vdev.key() in have_keys:
            matched.add(vdev.key())
            continue
        present = [d for d in vdev.disks if d in live_disks]
        if present:
            target = live_disks[present[0]]
            new = [strip_part1(d) for d in original.disks if strip_part1(d) not in live_disks]
            if (vdev.role == "data" and vdev.type.startswith("raidz") and target.role == "data"
                    and target.type == vdev.type and new and set(present) == set(target.disks)):
                matched.add(target.key())
                if allow_raidz_expansion:
                    diff.expansions.append(Expansion(target.name, target, [spelled.get(d, d) for d in new]))
                else:
                    diff.conflicts.append(
                        f"declared {_describe(vdev)} is live {target.name} [{', '.join(target.disks)}] plus "
                        f"{', '.join(new)}: growing a raidz vdev by attaching disks (raidz expansion, OpenZFS 2.3) "
                        "needs allow_raidz_expansion=true; expansion cannot be undone, and the data already on "
                        "the vdev keeps its old data-to-parity ratio until it is rewritten")
                continue
            where = sorted({_describe(live_disks[d]) for d in present})
            diff.conflicts.append(f"declared {_describe(vdev)} does not match the pool: {', '.join(present)} "
                                  f"{'is' if len(present) == 1 else 'are'} in live {'; '.join(where)}")
            for d in present:
                matched.add(live_disks[d].key())
            continue
        if vdev.role == "data":
            if live_data_types and vdev.type not in live_data_types:
                diff.conflicts.append(f"declared data vdev {_describe(vdev)} has type {vdev.type} but the pool's data "
                                      f"vdevs are {', '.join(sorted(live_data_types))}; mixing types is refused")
                continue
            if not allow_grow:
                diff.conflicts.append(f"declared data vdev {_describe(vdev)} is not in the pool; adding a data vdev "
                                      "cannot be undone, so it needs allow_grow=true")
                continue
        to_add.append(vdev)
    for vdev in have:
        if vdev.key() not in matched:
            diff.conflicts.append(f"live {_describe(vdev)} is not declared; vdevs are never removed, declare it")
    # cache/spare additions: merge back into one vdev per role for a compact command line
    for vdev in to_add:
        if vdev.role in ("cache", "spare") and diff.to_add and diff.to_add[-1].role == vdev.role:
            diff.to_add[-1].disks.append(vdev.disks[0])
        else:
            diff.to_add.append(Vdev(vdev.role, vdev.type, list(vdev.disks)))
    for vdev in diff.to_add:
        vdev.disks = [spelled.get(d, d) for d in vdev.disks]
    return diff


def diff_layout(declared: PoolLayout, live: PoolLayout, allow_grow: bool = False) -> tuple:
    """(to_add, conflicts) between a declared layout and the live one (compare_layout without raidz expansion:
    a raidz vdev declared with more disks than it has is a conflict)."""
    diff = compare_layout(declared, live, allow_grow=allow_grow)
    return diff.to_add, diff.conflicts


def normalize_pool_prop(prop: str, value) -> str:
    value = prop_text(value).strip()
    low = value.lower()
    if low in ("on", "yes", "true"):
        return "on"
    if low in ("off", "no", "false"):
        return "off"
    if prop in ("comment", "cachefile", "altroot"):
        return value
    return low
