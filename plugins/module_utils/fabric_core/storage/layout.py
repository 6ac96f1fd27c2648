"""The pool layout planner: which disks go into which vdevs, and why. Pure: no commands, no I/O.

``plan(disks, spec)`` takes the disks found by ``disks.discover`` and a spec in one of two forms:

* policy::

    {"data": {"type": "raidz2", "width": 6, "class": "hdd", "count": 1},   # count: default as many as fit
     "special": {"type": "mirror", "width": 2, "class": "nvme", "count": 1},
     "log": {"type": "mirror", "width": 2, "class": "ssd", "count": 1},
     "cache": {"class": "nvme", "count": "rest"},                           # or a number
     "spares": 1,                                                           # from the data class
     "min_size": 4000000000}                                                # bytes, optional

  Free disks (not in use, at least ``min_size``) are taken in by-id order, never twice, in the
  order data, spares, special, log, cache (so cache takes what special left).

* explicit::

    {"vdevs": [{"role": "data", "type": "mirror", "disks": ["ata-A", "/dev/disk/by-id/ata-B"]}, ...],
     "wipe": ["ata-B"]}

  Every disk must exist; a disk in use is refused unless it is listed in ``wipe``.

Both forms accept ``wipe`` (disks whose old content may be destroyed; never one that is mounted,
held or in an imported pool), ``allow_nonredundant_data`` and ``allow_nonredundant_special``.
Bad specs raise UserError (or NotFound, Busy, UnsafeOperation) naming the problem and the fix.
The result carries one explanation sentence per decision; ``explain_text`` renders it for humans.
"""

from __future__ import annotations

from ..base.errors import Busy, NotFound, UnsafeOperation, UserError
from ..base.model import DISK_CLASSES, MIN_WIDTH, VDEV_ROLES, VDEV_TYPES, DiskInfo, PoolLayout, Vdev, tolerated_failures
from ..base.rules import suggestion, unknown_keys
from ..base.units import human_bytes
from .disks import index_of, is_active_use

COMMON_KEYS = ("wipe", "allow_nonredundant_data", "allow_nonredundant_special", "allow_mismatched_redundancy")
POLICY_KEYS = ("data", "special", "log", "cache", "spares", "min_size", *COMMON_KEYS)
EXPLICIT_KEYS = ("vdevs", *COMMON_KEYS)
SECTION_KEYS = {
    "data": ("type", "width", "class", "count"),
    "special": ("type", "width", "class", "count"),
    "log": ("type", "width", "class", "count"),
    "cache": ("class", "count"),
}
VDEV_KEYS = ("role", "type", "disks")
# vdev types ZFS accepts per role (zpool create refuses e.g. "unsupported 'special' device: raidz")
ROLE_TYPES = {
    "data": VDEV_TYPES,
    "special": ("disk", "mirror"),
    "log": ("disk", "mirror"),
    "cache": ("disk",),
    "spare": ("disk",),
}
ROLE_ORDER = {role: i for i, role in enumerate(VDEV_ROLES)}  # data, special, log, cache, spare

_NONREDUNDANT = {
    "data": ("allow_nonredundant_data",
             "a data vdev of type disk has no redundancy: one failed disk loses the whole pool"),
    "special": ("allow_nonredundant_special",
                "a special vdev of type disk has no redundancy: it holds the pool's metadata, so losing it "
                "loses the whole pool"),
}


def short(path: str) -> str:
    """The by-id link name of a path: /dev/disk/by-id/ata-X -> ata-X."""
    return path.rsplit("/", 1)[-1]


def _reasons(disk: DiskInfo) -> str:
    return "; ".join(disk.reasons) or "in use"


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_keys(what: str, given: dict, allowed: tuple, fix: str) -> None:
    unknown = sorted(str(k) for k in unknown_keys(given, allowed))
    if unknown:
        hint = suggestion(unknown[0], allowed)
        raise UserError(f"unknown key{'s' if len(unknown) > 1 else ''} in {what}: {', '.join(unknown)}",
                        f"{hint + ' ' if hint else ''}{fix}; allowed keys: {', '.join(allowed)}")


def _check_choice(what: str, value, choices: tuple) -> None:
    if value not in choices:
        raise UserError(f"unknown {what} {value!r}", f"use one of: {', '.join(choices)}")


# ---------------------------------------------------------------------------------------------
# disk lookup


def _lookup(name, index: dict[str, DiskInfo], disks: list[DiskInfo], what: str) -> DiskInfo:
    if not isinstance(name, str) or name not in index:
        candidates = ", ".join(short(d.by_id) + (" (in use)" if d.in_use else "")
                               for d in sorted(disks, key=lambda d: d.by_id)) or "none"
        raise NotFound(f"disk {name!r} ({what}) not found on this node",
                       f"name a disk by its /dev/disk/by-id path or link name; candidates: {candidates}")
    return index[name]


def _wipe_set(spec: dict, index: dict, disks: list[DiskInfo]) -> dict[str, DiskInfo]:
    wipe = spec.get("wipe") or []
    if not isinstance(wipe, list):
        raise UserError("`wipe` must be a list of disks", "write it as wipe: [ata-..., nvme-...]")
    result = {}
    for name in wipe:
        disk = _lookup(name, index, disks, "listed in wipe")
        active = [r for r in disk.reasons if is_active_use(r)]
        if active:
            raise Busy(f"disk {short(disk.by_id)} is listed in wipe but is actively used: {'; '.join(active)}",
                       "unmount it, stop what holds it or export/destroy its pool first, or choose another disk")
        result[disk.by_id] = disk
    return result


def _accept_in_use(disk: DiskInfo, wipe: dict, explanation: list) -> bool:
    """True when an in-use disk may be used because it is listed in wipe (the explanation says so)."""
    if disk.by_id in wipe:
        explanation.append(f"{short(disk.by_id)} is in use ({_reasons(disk)}) but listed in wipe: "
                           "it will be wiped and its old content destroyed")
        return True
    return False


def _size_note(role: str, number: int, members: list[DiskInfo]) -> list[str]:
    sizes = sorted({d.size for d in members})
    if len(sizes) < 2:
        return []
    listing = ", ".join(f"{short(d.by_id)} {human_bytes(d.size)}" for d in members)
    return [f"warning: {role} vdev {number} mixes disk sizes ({listing}); every member only contributes "
            f"the size of the smallest ({human_bytes(sizes[0])})"]


def _describe(role: str, number: int, vtype: str, members: list[DiskInfo], how: str) -> str:
    sizes = sorted({d.size for d in members})
    classes = sorted({d.disk_class for d in members})
    size = human_bytes(sizes[0]) if len(sizes) == 1 else "mixed sizes"
    kind = vtype if vtype != "disk" else "single disk"
    return (f"{role} vdev {number}: {kind} of {', '.join(short(d.by_id) for d in members)} "
            f"({len(members)} x {size} {'/'.join(classes)}; {how})")


def _check_redundancy(role: str, vtype: str, spec: dict) -> None:
    if vtype == "disk" and role in _NONREDUNDANT:
        flag, why = _NONREDUNDANT[role]
        if spec.get(flag) is not True:
            raise UnsafeOperation(f"refusing a {role} vdev of type disk: {why}",
                                  f"use type mirror (or raidz for data), or set {flag}: true if you accept that")


def _order(vdevs: list[Vdev]) -> list[Vdev]:
    return sorted(vdevs, key=lambda v: ROLE_ORDER[v.role])  # stable: keeps the order within a role


# ---------------------------------------------------------------------------------------------
# policy form


def _section(name: str, raw, spec: dict) -> dict:
    if not isinstance(raw, dict):
        raise UserError(f"`{name}` must be a mapping", f"write it as {name}: {{type: mirror, width: 2, class: nvme}}")
    _check_keys(f"`{name}`", raw, SECTION_KEYS[name], f"fix the keys of `{name}`")
    role = name
    if "class" not in raw:
        raise UserError(f"`{name}` has no class", f"add class: one of {', '.join(DISK_CLASSES)}")
    _check_choice(f"disk class in `{name}`", raw["class"], DISK_CLASSES)
    section = {"role": role, "class": raw["class"]}
    if name == "cache":
        count = raw.get("count", "rest")
        if count != "rest" and not (_is_int(count) and count > 0):
            raise UserError(f"invalid cache count {count!r}", "use a positive number or \"rest\"")
        section.update(type="disk", width=1, count=count)
        return section
    if "type" not in raw:
        raise UserError(f"`{name}` has no type", f"add type: one of {', '.join(ROLE_TYPES[role])}")
    vtype = raw["type"]
    _check_choice(f"vdev type in `{name}`", vtype, VDEV_TYPES)
    if vtype not in ROLE_TYPES[role]:
        raise UserError(f"a {role} vdev cannot be {vtype}: ZFS supports only {' or '.join(ROLE_TYPES[role])} there",
                        f"use type: {ROLE_TYPES[role][-1]}")
    default_width = {"disk": 1, "mirror": 2}.get(vtype)
    width = raw.get("width", default_width)
    if width is None:
        raise UserError(f"`{name}` of type {vtype} has no width",
                        f"add width: the number of disks per {vtype} vdev (at least {MIN_WIDTH[vtype]})")
    if not _is_int(width):
        raise UserError(f"invalid width {width!r} in `{name}`", "use a whole number of disks")
    if vtype == "disk" and width != 1:
        raise UserError(f"`{name}` of type disk has width {width}: a disk vdev has exactly one disk",
                        "drop width (use count for several single-disk vdevs) or use type mirror/raidz")
    if width < MIN_WIDTH[vtype]:
        raise UserError(f"a {vtype} vdev needs at least {MIN_WIDTH[vtype]} disks, `{name}` asks for width {width}",
                        f"use width: {MIN_WIDTH[vtype]} or more, or another type")
    count = raw.get("count", None if name == "data" else 1)
    if count is not None and not (_is_int(count) and count > 0):
        raise UserError(f"invalid count {count!r} in `{name}`", "use a positive number of vdevs")
    _check_redundancy(role, vtype, spec)
    section.update(type=vtype, width=width, count=count)
    return section


def _shortage(what: str, needed: int, cls: str, free: list[DiskInfo], all_disks: list[DiskInfo],
              taken: set) -> UserError:
    in_use = [d for d in all_disks if d.disk_class == cls and d.in_use]
    elsewhere = [d for d in all_disks if d.disk_class == cls and d.by_id in taken]
    free_text = ", ".join(short(d.by_id) for d in free) or "none"
    parts = [f"not enough free {cls} disks for {what}: {needed} needed, {len(free)} free ({free_text})"]
    if elsewhere:
        parts.append(f"already planned for other vdevs: {', '.join(short(d.by_id) for d in elsewhere)}")
    if in_use:
        parts.append("in use: " + "; ".join(f"{short(d.by_id)} ({_reasons(d)})" for d in in_use))
    return UserError(". ".join(parts),
                     "lower count or width, add disks, or list in-use disks whose content may be destroyed in wipe")


def _plan_policy(disks: list[DiskInfo], spec: dict) -> PoolLayout:
    _check_keys("the layout spec", spec, POLICY_KEYS, "use the policy form (data, special, log, cache, spares, "
                "min_size) or the explicit form (vdevs)")
    if "data" not in spec:
        raise UserError("the layout spec has no `data` section",
                        "add data: {type: raidz2, width: 6, class: hdd}, or give explicit vdevs")
    sections = [_section(name, spec[name], spec) for name in ("data", "special", "log", "cache") if name in spec]
    spares = spec.get("spares", 0)
    if not (_is_int(spares) and spares >= 0):
        raise UserError(f"invalid spares {spares!r}", "use a number of hot spares (0 or more)")
    min_size = spec.get("min_size", 0)
    if not (_is_int(min_size) and min_size >= 0):
        raise UserError(f"invalid min_size {min_size!r}", "give min_size in bytes, for example 4000000000")
    for flag in ("allow_nonredundant_data", "allow_nonredundant_special"):
        if flag in spec and not isinstance(spec[flag], bool):
            raise UserError(f"`{flag}` must be true or false", f"write {flag}: true")
    index = index_of(disks)
    wipe = _wipe_set(spec, index, disks)

    explanation: list[str] = []
    data = sections[0]
    asked = ", ".join(
        f"{s['role']}: {s['count'] if s['count'] is not None else 'as many as fit'} x "
        f"{s['type'] if s['type'] != 'disk' else 'single disk'}"
        f"{' of ' + str(s['width']) if s['width'] > 1 else ''} {s['class']}" for s in sections)
    explanation.append(f"policy layout requested: {asked}" + (f", {spares} {data['class']} spare(s)" if spares else "")
                       + (f", disks of at least {human_bytes(min_size)}" if min_size else ""))

    ordered = sorted(disks, key=lambda d: (d.by_id, d.name))
    free: dict[str, list[DiskInfo]] = {c: [] for c in DISK_CLASSES}
    for disk in ordered:
        if disk.in_use and not _accept_in_use(disk, wipe, explanation):
            explanation.append(f"skipped {short(disk.by_id)} (in use: {_reasons(disk)})")
            continue
        if disk.size < min_size:
            explanation.append(f"skipped {short(disk.by_id)} ({human_bytes(disk.size)} is smaller than min_size "
                               f"{human_bytes(min_size)})")
            continue
        free.setdefault(disk.disk_class, []).append(disk)

    taken: set[str] = set()
    vdevs: list[Vdev] = []

    def take(cls: str, n: int) -> list[DiskInfo]:
        picked, free[cls] = free[cls][:n], free[cls][n:]
        taken.update(d.by_id for d in picked)
        return picked

    def add_vdevs(section: dict, count: int, how: str) -> None:
        role, vtype, width = section["role"], section["type"], section["width"]
        for _vdev in range(count):
            members = take(section["class"], width)
            number = len([v for v in vdevs if v.role == role]) + 1
            vdevs.append(Vdev(role=role, type=vtype, disks=[d.by_id for d in members]))
            explanation.append(_describe(role, number, vtype, members, how))
            explanation.extend(_size_note(role, number, members))

    # data: as many full vdevs as fit unless count is given, keeping the spares aside
    cls, width = data["class"], data["width"]
    available = len(free[cls]) - spares
    count = data["count"] if data["count"] is not None else max(available, 0) // width
    label = f"data ({data['count'] or 1} x {data['type']} of {width})" if data["type"] != "disk" else "data"
    if count == 0 or count * width > available:
        need = (count or 1) * width
        what = label + (f" plus {spares} spare(s)" if spares else "")
        raise _shortage(what, need + spares, cls, free[cls], disks, taken)
    how = (f"count {data['count']} requested" if data["count"] is not None else
           f"as many full vdevs of {width} as the {len(free[cls])} free {cls} disks allow"
           + (f" after keeping {spares} spare(s)" if spares else ""))
    add_vdevs(data, count, how)
    if spares:
        picked = take(cls, spares)
        for disk in picked:
            vdevs.append(Vdev(role="spare", type="disk", disks=[disk.by_id]))
        explanation.append(f"hot spare(s) from the data class {cls}: {', '.join(short(d.by_id) for d in picked)}")

    for section in sections[1:]:
        role, cls = section["role"], section["class"]
        if role == "cache" and section["count"] == "rest":
            picked = take(cls, len(free[cls]))
            if not picked:
                explanation.append(f"cache: no free {cls} disk left after the other vdevs, so no cache device")
            for disk in picked:
                vdevs.append(Vdev(role="cache", type="disk", disks=[disk.by_id]))
            if picked:
                explanation.append(f"cache: the remaining free {cls} disks {', '.join(short(d.by_id) for d in picked)} "
                                   "(count: rest), one cache device each")
            continue
        needed = section["count"] * section["width"]
        if len(free[cls]) < needed:
            kind = section["type"] if section["type"] != "disk" else "single disk"
            raise _shortage(f"{role} ({section['count']} x {kind} of {section['width']})", needed, cls,
                            free[cls], disks, taken)
        if role == "cache":
            picked = take(cls, needed)
            for disk in picked:
                vdevs.append(Vdev(role="cache", type="disk", disks=[disk.by_id]))
            explanation.append(f"cache: {', '.join(short(d.by_id) for d in picked)} (count {needed}), "
                               "one cache device each")
            continue
        if role == "log" and section["type"] == "disk":
            explanation.append("note: a log of type disk is not mirrored; losing it during a crash loses the "
                               "last few seconds of synchronous writes")
        if section["type"] == "disk" and role in _NONREDUNDANT:
            explanation.append(f"note: {role} vdevs of type disk have no redundancy "
                               f"({_NONREDUNDANT[role][0]} is true)")
        add_vdevs(section, section["count"], f"count {section['count']}")
    if data["type"] == "disk":
        explanation.append("note: data vdevs of type disk have no redundancy (allow_nonredundant_data is true)")

    wanted = {s["class"] for s in sections}
    for cls_name in DISK_CLASSES:
        for disk in free.get(cls_name, []):
            if cls_name not in wanted:
                why = f"no section asks for {cls_name} disks"
            elif cls_name == data["class"] and data["count"] is None:
                why = f"{len(free[cls_name])} left, fewer than the {data['width']} a further data vdev needs"
            else:
                why = "not needed by the requested counts"
            explanation.append(f"left {short(disk.by_id)} unused ({why})")
    for path in sorted(wipe):
        if path not in taken:
            explanation.append(f"{short(path)} is listed in wipe but not used by this layout; it is left alone")
    return PoolLayout(vdevs=_order(vdevs), explanation=explanation)


# ---------------------------------------------------------------------------------------------
# explicit form


def _plan_explicit(disks: list[DiskInfo], spec: dict) -> PoolLayout:
    _check_keys("the layout spec", spec, EXPLICIT_KEYS,
                "the explicit form takes vdevs (and wipe, allow_nonredundant_*); do not mix it with the policy form")
    raw_vdevs = spec["vdevs"]
    if not isinstance(raw_vdevs, list) or not raw_vdevs:
        raise UserError("`vdevs` must be a non-empty list",
                        "write vdevs: [{role: data, type: mirror, disks: [ata-A, ata-B]}]")
    index = index_of(disks)
    wipe = _wipe_set(spec, index, disks)
    explanation = [f"explicit layout requested: {len(raw_vdevs)} vdev entr{'y' if len(raw_vdevs) == 1 else 'ies'}"]
    used: dict[str, str] = {}
    vdevs: list[Vdev] = []
    for i, raw in enumerate(raw_vdevs, 1):
        where = f"vdevs entry {i}"
        if not isinstance(raw, dict):
            raise UserError(f"{where} must be a mapping", "write {role: data, type: mirror, disks: [...]}")
        _check_keys(where, raw, VDEV_KEYS, "fix the keys of the vdev")
        role = raw.get("role", "data")
        _check_choice(f"vdev role in {where}", role, VDEV_ROLES)
        vtype = raw.get("type", "disk")
        _check_choice(f"vdev type in {where}", vtype, VDEV_TYPES)
        if vtype not in ROLE_TYPES[role]:
            raise UserError(f"{where}: a {role} vdev cannot be {vtype}: ZFS supports only "
                            f"{' or '.join(ROLE_TYPES[role])} there", f"use type: {ROLE_TYPES[role][-1]}")
        names = raw.get("disks")
        if not isinstance(names, list) or not names:
            raise UserError(f"{where} has no disks", "list its disks: disks: [ata-..., ata-...]")
        if len(names) < MIN_WIDTH[vtype]:
            raise UserError(f"{where}: a {vtype} vdev needs at least {MIN_WIDTH[vtype]} disks, {len(names)} given",
                            f"list {MIN_WIDTH[vtype]} or more disks, or use another type")
        _check_redundancy(role, vtype, spec)
        members = []
        for name in names:
            disk = _lookup(name, index, disks, f"in {where}")
            if disk.by_id in used:
                raise UserError(f"disk {short(disk.by_id)} is used twice ({used[disk.by_id]} and {where})",
                                "give every disk to one vdev only")
            used[disk.by_id] = where
            if disk.in_use and not _accept_in_use(disk, wipe, explanation):
                raise UnsafeOperation(f"disk {short(disk.by_id)} in {where} is in use: {_reasons(disk)}",
                                      f"choose a free disk, or add {short(disk.by_id)} to wipe if its content "
                                      "may be destroyed")
            if isinstance(name, str) and name not in (disk.by_id, short(disk.by_id)):
                explanation.append(f"{name} is {short(disk.by_id)} (its preferred /dev/disk/by-id name)")
            members.append(disk)
        groups = [[d] for d in members] if vtype == "disk" else [members]
        for group in groups:
            number = len([v for v in vdevs if v.role == role]) + 1
            vdevs.append(Vdev(role=role, type=vtype, disks=[d.by_id for d in group]))
            explanation.append(_describe(role, number, vtype, group, f"{where}, chosen explicitly"))
            explanation.extend(_size_note(role, number, group))
        if vtype == "disk" and role in _NONREDUNDANT:
            explanation.append(f"note: {role} vdevs of type disk have no redundancy ({_NONREDUNDANT[role][0]} is true)")
    if not any(v.role == "data" for v in vdevs):
        explanation.append("note: no data vdev: this layout can only be added to an existing pool")
    for path in sorted(wipe):
        if path not in used:
            explanation.append(f"{short(path)} is listed in wipe but not used by this layout; it is left alone")
    return PoolLayout(vdevs=_order(vdevs), explanation=explanation)


# ---------------------------------------------------------------------------------------------
# entry points


def _check_replication(layout: PoolLayout, spec: dict) -> PoolLayout:
    """A special vdev must survive as many device failures as the data vdevs: losing it loses the pool.

    ZFS itself refuses the mismatch at `zpool create`/`zpool add` ("mismatched replication level")
    unless forced. The plan refuses it first, with the fix, unless the spec accepts it
    (allow_mismatched_redundancy, or allow_nonredundant_special for a single-device special vdev);
    an accepted mismatch marks the layout ``force`` so the pool is created with -f.
    """
    data = layout.by_role("data")
    if not data:
        return layout
    need = min(tolerated_failures(v) for v in data)
    weakest = min(data, key=tolerated_failures)
    for number, vdev in enumerate(layout.by_role("special"), 1):
        have = tolerated_failures(vdev)
        if have >= need:
            continue
        accepted = spec.get("allow_mismatched_redundancy") is True or (
            vdev.type == "disk" and spec.get("allow_nonredundant_special") is True)
        what = (f"special vdev {number} ({vdev.type} of {len(vdev.disks)}) survives {have} failed device(s), "
                f"the data vdevs ({weakest.type} of {len(weakest.disks)}) survive {need}")
        if not accepted:
            raise UnsafeOperation(
                f"refusing mismatched redundancy: {what}; losing the special vdev loses the whole pool, and "
                "`zpool create` refuses this mix too",
                f"give the special vdev {need + 1} devices (a {need + 1}-way mirror: width: {need + 1}), or set "
                "allow_mismatched_redundancy: true to accept it (the pool is then created with -f)")
        layout.force = True
        layout.explanation.append(f"accepted mismatched redundancy ({what}): the pool is created with -f")
    return layout


def plan(disks: list[DiskInfo], spec: dict) -> PoolLayout:
    """The layout for ``spec`` over ``disks`` (see the module docstring); raises UserError subclasses."""
    if not isinstance(spec, dict) or not spec:
        raise UserError("the layout spec is empty or not a mapping",
                        "give a policy ({data: {type: raidz2, width: 6, class: hdd}}) or explicit vdevs")
    if "vdevs" in spec:
        return _check_replication(_plan_explicit(disks, spec), spec)
    return _check_replication(_plan_policy(disks, spec), spec)


def explain_text(layout: PoolLayout) -> str:
    """The layout as an indented vdev tree followed by the reasons, for humans."""
    lines = []
    for vdev in layout.vdevs:
        if vdev.type == "disk":
            lines.append(f"{vdev.role}: {short(vdev.disks[0])}")
        else:
            lines.append(f"{vdev.role}: {vdev.type}")
            lines.extend(f"    {short(p)}" for p in vdev.disks)
    if not layout.vdevs:
        lines.append("(no vdevs)")
    if layout.explanation:
        lines.append("why:")
        lines.extend(f"  - {sentence}" for sentence in layout.explanation)
    return "\n".join(lines) + "\n"
