"""ZFS kernel module parameters: the persistent file in /etc/modprobe.d and the live values in
/sys/module/zfs/parameters. Reading and writing go through small file functions so the logic
is tested against a temporary directory.

Read, plan, apply: ``read`` (the file, whether the module is loaded, the live values), ``plan`` (pure: the steps,
each a ``model.Step`` whose call is one write: the file through the atomic writer, a live value to sysfs) and
``model.apply_steps`` through the runner, whose dry run (check mode) records the writes and makes none.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from ..base import atomic
from ..base.errors import NotFound, UserError
from ..base.model import Step, apply_steps

SYSFS = Path("/sys/module/zfs/parameters")
MODPROBE_FILE = Path("/etc/modprobe.d/zfs-fabric.conf")
HEADER = "# Managed by the storage_base role (fabric). Changes here are overwritten.\n"


def render_modprobe(params: dict) -> str:
    """The modprobe.d file for params (sorted, so the file is stable across runs)."""
    if not params:
        return HEADER
    opts = " ".join(f"{k}={_value(v)}" for k, v in sorted(params.items()))
    return f"{HEADER}options zfs {opts}\n"


def _value(v) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    return str(v)


def read_live(params, sysfs: Path = SYSFS) -> dict:
    """Live values of the named parameters; NotFound for a parameter this ZFS does not have."""
    live = {}
    for name in params:
        path = sysfs / name
        try:
            live[name] = path.read_text().strip()
        except FileNotFoundError:
            if not sysfs.is_dir():
                raise NotFound(f"{sysfs} does not exist: the zfs kernel module is not loaded",
                               "load it (`modprobe zfs`) before applying live tunables") from None
            raise NotFound(f"unknown ZFS module parameter {name!r} (no {path})",
                           "check the name against `ls /sys/module/zfs/parameters`") from None
    return live


def diff_live(params: dict, live: dict) -> dict:
    """{name: (live, desired)} for every parameter whose live value differs."""
    return {k: (live[k], _value(v)) for k, v in params.items() if live.get(k) != _value(v)}


def write_live(name: str, value: str, sysfs: Path = SYSFS) -> None:
    """One live value written to /sys/module/zfs/parameters/NAME (a plan's step)."""
    path = sysfs / name
    try:
        with open(path, "w") as fh:
            fh.write(value)
    except OSError as exc:
        raise UserError(f"cannot set {name}={value} live: {exc.strerror}",
                        "the value may be out of range for this ZFS version; check `modinfo zfs`") from exc


def validate(params: dict) -> dict:
    """The declared parameters: non-negative integers (or booleans, written 1/0); UserError before anything is read."""
    for k, v in params.items():
        if not isinstance(v, (int, bool)) or (isinstance(v, int) and v < 0):
            raise UserError(f"ZFS tunable {k}={v!r} must be a non-negative integer",
                            "give a number of bytes (zfs_arc_max) or 0/1 (flags)")
    return params


@dataclass
class Live:
    """What ``read`` found: the modprobe file's text ("" when absent), whether the module is loaded, its values."""

    modprobe_file: Path
    modprobe_text: str
    sysfs: Path
    module_loaded: bool
    values: dict


@dataclass
class Plan:
    """What ``plan`` decided: the file's text before and after, the live values that change, and the steps."""

    before: str
    after: str
    file_changed: bool
    module_loaded: bool
    live_changed: dict  # name -> {"before", "after"}
    steps: list = field(default_factory=list)  # model.Step: the file's atomic write, then each live value

    @property
    def changed(self) -> bool:
        return bool(self.steps)


def read(params: dict, *, sysfs: Path = SYSFS, modprobe_file: Path = MODPROBE_FILE) -> Live:
    """The modprobe file and, when the module is loaded, the live values of the declared parameters (NotFound for
    one this ZFS does not have)."""
    try:
        current = modprobe_file.read_text()
    except FileNotFoundError:
        current = ""
    loaded = sysfs.is_dir()
    return Live(modprobe_file=modprobe_file, modprobe_text=current, sysfs=sysfs, module_loaded=loaded,
                values=read_live(params, sysfs) if loaded else {})


def plan(params: dict, live: Live) -> Plan:
    """Pure: the modprobe file rewritten when its text differs, and each live value that differs written (none when
    the module is not loaded: modprobe applies the file's values when it loads)."""
    wanted = render_modprobe(validate(params))
    steps = []
    if live.modprobe_text != wanted:
        steps.append(Step(f"write {live.modprobe_file} ({len(params)} parameter(s))",
                          call=partial(atomic.write_file, live.modprobe_file, wanted, mode=0o644),
                          entry=("write", str(live.modprobe_file))))
    changes = diff_live(params, live.values) if live.module_loaded else {}
    for name, (old, new) in changes.items():
        steps.append(Step(f"set {name}={new} live (was {old})", call=partial(write_live, name, new, live.sysfs),
                          entry=("write", str(live.sysfs / name), new)))
    return Plan(before=live.modprobe_text, after=wanted, file_changed=live.modprobe_text != wanted,
                module_loaded=live.module_loaded,
                live_changed={k: {"before": a, "after": b} for k, (a, b) in changes.items()}, steps=steps)


def ensure(runner, params: dict, *, sysfs: Path = SYSFS, modprobe_file: Path = MODPROBE_FILE) -> dict:
    """Validate, read, plan, apply through ``runner`` (a dry run records the writes and makes none). Returns
    {changed, file_changed, module_loaded, live_changed, before, after, commands}."""
    planned = plan(validate(params), read(params, sysfs=sysfs, modprobe_file=modprobe_file))
    done = apply_steps(runner, planned.steps)
    return {"changed": planned.changed, "file_changed": planned.file_changed, "module_loaded": planned.module_loaded,
            "live_changed": planned.live_changed, "before": planned.before, "after": planned.after,
            "commands": done.commands}
