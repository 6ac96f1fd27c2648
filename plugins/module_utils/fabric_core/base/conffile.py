"""Set keys in a packaged configuration file in place, leaving the rest of it as the package wrote it.

A conffile (dpkg's word: /etc/iscsi/iscsid.conf of open-iscsi, say) is the package's: replacing it
whole makes the next package upgrade prompt, or silently reverts the package's new defaults on the
next run. The fabric edits only the keys it manages: for each key, the first active line
(``key = value``) is rewritten; without one, the first commented-out line (``# key = value``, the
package's documented default) is replaced by the active line; without either, the line is appended
at the end under one marker comment. Every other line, comments included, stays byte for byte.
Later active duplicates of a managed key are commented out (the first wins in open-iscsi, but a
reader should not have to know that).
"""

from __future__ import annotations

import re
from pathlib import Path

from . import atomic
from .errors import UserError

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


def ensure(path: Path, settings: dict, *, dry_run: bool = False, separator: str = " = ",
           mode: int | None = None) -> dict:
    """Set the keys in the file at path (which must exist: it is the package's); atomic replace, the file's
    mode and owner kept. Returns {changed, changes, before, after}."""
    if not path.exists():
        raise UserError(f"{path} does not exist", "install the package that provides it first")
    before = path.read_text()
    after, changes = set_keys(before, settings, separator)
    changed = after != before
    if changed and not dry_run:
        st = path.stat()
        atomic.write_file(path, after, mode=mode if mode is not None else st.st_mode & 0o7777,
                          owner=(st.st_uid, st.st_gid))
    return {"changed": changed, "changes": {k: {"before": b, "after": a} for k, (b, a) in changes.items()},
            "before": before, "after": after}
