"""Set keys in a packaged configuration file in place, leaving the rest of it as the package wrote it.

A conffile (dpkg's word: /etc/iscsi/iscsid.conf of open-iscsi, say) is the package's: replacing it
whole makes the next package upgrade prompt, or silently reverts the package's new defaults on the
next run. The fabric edits only the keys it manages: for each key, the first active line
(``key = value``) is rewritten; without one, the first commented-out line (``# key = value``, the
package's documented default) is replaced by the active line; without either, the line is appended
at the end under one marker comment. Every other line, comments included, stays byte for byte.
Later active duplicates of a managed key are commented out (the first wins in open-iscsi, but a
reader should not have to know that).

Read, plan, apply: ``read`` (the file, its mode and owner), ``plan`` (pure: the new text, the keys that change and
one ``model.Step`` that writes it through the atomic writer) and ``model.apply_steps`` through the runner, whose
dry run (check mode) records the write and makes none; ``ensure`` is the three in a row.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from . import atomic
from .errors import UserError
from .model import Step, apply_steps

MARKER = "# Set by the gpu-storage-fabric roles (keys edited in place; the rest is the package's)."


def _key_pattern(key: str, commented: bool) -> re.Pattern:
    prefix = r"^[ \t]*#+[ \t]*" if commented else r"^[ \t]*"
    return re.compile(prefix + re.escape(key) + r"[ \t]*=")


def validate(settings: dict) -> None:
    for key, value in settings.items():
        if not re.fullmatch(r"[A-Za-z0-9_.\[\]-]+", str(key)):
            raise UserError(f"invalid configuration key {key!r}", "use the key exactly as the file documents it")
        if "\n" in str(value) or "\r" in str(value):
            raise UserError(f"the value of {key} has a line break", "give a one-line value")


def render_value(value) -> str:
    if isinstance(value, bool):
        return "Yes" if value else "No"
    return str(value)


def set_keys(text: str, settings: dict, separator: str = " = ") -> tuple[str, dict]:
    """text with every key of settings set; returns (new text, {key: (before, after)} of the changes)."""
    validate(settings)
    lines = text.splitlines(keepends=True)
    changes: dict = {}
    appended: list[str] = []
    for key, raw in settings.items():
        value = render_value(raw)
        wanted = f"{key}{separator}{value}\n"
        active = [i for i, line in enumerate(lines) if _key_pattern(key, False).match(line)]
        if active:
            first = active[0]
            before = lines[first].split("=", 1)[1].strip()
            if before != value:
                lines[first] = wanted
                changes[key] = (before, value)
            for dup in active[1:]:
                lines[dup] = "# " + lines[dup]
                changes.setdefault(key, (before, value))
            continue
        commented = [i for i, line in enumerate(lines) if _key_pattern(key, True).match(line)]
        if commented:
            lines[commented[0]] = wanted
        else:
            appended.append(wanted)
        changes[key] = (None, value)
    if appended:
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n"
        if MARKER + "\n" not in lines:
            lines.append("\n" + MARKER + "\n")
        lines.extend(appended)
    return "".join(lines), changes


@dataclass
class Live:
    """The file as it is: its text, mode and owner (``read``)."""

    path: Path
    text: str
    mode: int
    owner: tuple


@dataclass
class Plan:
    """What ``plan`` decided: the keys that change, the text before and after, and the step that writes it."""

    path: Path
    changes: dict  # key -> {"before": value or None, "after": value}
    before: str
    after: str
    steps: list = field(default_factory=list)  # model.Step: one atomic write, or none

    @property
    def changed(self) -> bool:
        return bool(self.steps)


def read(path: Path) -> Live:
    """The package's file (it must exist): its text, and the mode and owner a rewrite keeps."""
    try:
        st = path.stat()
        text = path.read_text()
    except FileNotFoundError:
        raise UserError(f"{path} does not exist", "install the package that provides it first") from None
    return Live(path=path, text=text, mode=st.st_mode & 0o7777, owner=(st.st_uid, st.st_gid))


def plan(live: Live, settings: dict, *, separator: str = " = ", mode: int | None = None) -> Plan:
    """Pure: the keys of ``settings`` set in ``live``'s text; one step (an atomic replace, the file's mode and owner
    kept unless ``mode`` is given) when the text changes, none otherwise."""
    after, changes = set_keys(live.text, settings, separator)
    steps = []
    if after != live.text:
        keep = mode if mode is not None else live.mode
        steps.append(Step(f"set {', '.join(changes)} in {live.path}",
                          call=partial(atomic.write_file, live.path, after, mode=keep, owner=live.owner),
                          entry=("write", str(live.path), f"mode={keep:04o}", *changes)))
    return Plan(path=live.path, changes={k: {"before": b, "after": a} for k, (b, a) in changes.items()},
                before=live.text, after=after, steps=steps)


def ensure(runner, path: Path, settings: dict, *, separator: str = " = ", mode: int | None = None) -> dict:
    """Read, plan, apply through ``runner`` (whose dry run writes nothing and records the write).
    Returns {changed, changes, before, after, commands}."""
    planned = plan(read(path), settings, separator=separator, mode=mode)
    done = apply_steps(runner, planned.steps)
    return {"changed": planned.changed, "changes": planned.changes, "before": planned.before, "after": planned.after,
            "commands": done.commands}
