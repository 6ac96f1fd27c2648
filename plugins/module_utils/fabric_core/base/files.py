"""A role's small files and directories, declared together and converged in one pass on the node.

Each Ansible task that installs one file (``template``, ``copy``, ``file``) runs one module on the node to read it
and, when it differs, another to write it: seconds each on a busy or emulated node, for a converged run that
changes nothing. A role names its files in one list instead (``fabric_files``): one read of them all, a pure plan
(``plan``: declared and live -> ``model.Step``s and what each file becomes), one apply through the runner (whose dry
run, check mode, records the steps and makes none).

What is declared, per path: ``file`` (the content, its mode, owner and group), ``directory`` (made when missing,
its missing parents too, its mode and owner set; never anything inside it), ``link`` (a symbolic link to ``src``,
made or moved atomically: a new link under a temporary name renamed over the old one) or ``absent`` (a file or a
link removed; a directory only when empty). Content is written through ``atomic.write_file`` (a temporary file of
its own, fsync, rename), so a link planted at a file's name is replaced, never written through. A directory in the
way of a file (or of a link), or anything other than a directory in the way of one, is refused with the fix:
nothing the fabric did not write is removed to make room. A file given as ``secret_content`` (credentials) never
shows its content in a diff or a step (the module marks that option no_log, so its value never reaches the node's
journal either).
"""

from __future__ import annotations

import grp
import os
import pwd
import stat
from dataclasses import dataclass, field
from functools import partial

from . import atomic
from .errors import UserError
from .model import Step, apply_steps

STATES = ("file", "directory", "link", "absent")


@dataclass(frozen=True)
class Wanted:
    """One declared path: its state, and for a file its content; mode as an int, owner and group by name (None:
    a new one gets root's, an existing one keeps its own)."""

    path: str
    state: str = "file"
    content: str | None = field(default=None, repr=False)
    src: str | None = None  # a link's target
    mode: int | None = None
    owner: str | None = None
    group: str | None = None
    secret: bool = False


@dataclass(frozen=True)
class Live:
    """A path as it is (``lstat``, no link followed): its kind, mode, owner and group ids, and a file's content."""

    path: str
    kind: str | None  # "file", "directory", "link", "other"; None when nothing is there
    mode: int = 0
    uid: int = 0
    gid: int = 0
    content: bytes | None = field(default=None, repr=False)
    target: str | None = None  # a link's


@dataclass
class Plan:
    """The steps that converge the paths, and per path what changes (``changes``: path -> words), with the text
    before and after for a diff (secret files left out)."""

    steps: list = field(default_factory=list)
    changes: dict = field(default_factory=dict)
    diffs: list = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.steps)


def parse_mode(value) -> int | None:
    """"0644" (or 0o644, or 420) -> 0o644; None stays None; anything else is refused with the fix."""
    if value is None or value == "":
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    else:
        text = str(value).strip()
        if not text.isdigit() or any(c not in "01234567" for c in text):
            raise UserError(f"file mode {value!r} is not an octal number", "quote it as a string, e.g. mode: \"0644\"")
        number = int(text, 8)
    if not 0 <= number <= 0o7777:
        raise UserError(f"file mode {value!r} is out of range", "give permission bits only, e.g. \"0644\"")
    return number


def declared(items: list) -> list[Wanted]:
    """The module's ``files`` list (dicts) as ``Wanted``, checked: absolute, normalized and unique paths, a known
    state, content for a file and none otherwise."""
    out, seen = [], set()
    for item in items:
        path = str(item.get("path") or "")
        if not path.startswith("/") or os.path.normpath(path) != path or path == "/":
            raise UserError(f"path {path!r} is not an absolute, normalized path below /",
                            "give the full path without '..', '.' or a trailing slash")
        if path in seen:
            raise UserError(f"{path} is declared twice", "declare each path once")
        seen.add(path)
        state = item.get("state") or "file"
        if state not in STATES:
            raise UserError(f"{path}: state {state!r} is not one of {', '.join(STATES)}", "use one of them")
        content, secret = item.get("content"), item.get("secret_content")
        if content is not None and secret is not None:
            raise UserError(f"{path}: content and secret_content are both given", "give one of them")
        if secret is not None:
            content = secret
        if state == "file" and content is None:
            raise UserError(f"{path}: a file needs its content", "give content (a template lookup, a string)")
        if state != "file" and content is not None:
            raise UserError(f"{path}: only a file has content (state is {state})", "leave content out")
        src = item.get("src") or None
        if (state == "link") != (src is not None):
            raise UserError(f"{path}: a link, and only a link, has a src (state is {state})",
                            "give src with state: link, and leave it out otherwise")
        out.append(Wanted(path=path, state=state, content=content, src=src, mode=parse_mode(item.get("mode")),
                          owner=item.get("owner") or None, group=item.get("group") or None,
                          secret=secret is not None))
    return out


def read(path: str) -> Live:
    """One path as it is; a regular file's content is read (to compare and to show in a diff)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return Live(path=path, kind=None)
    if stat.S_ISREG(st.st_mode):
        kind = "file"
    elif stat.S_ISDIR(st.st_mode):
        kind = "directory"
    elif stat.S_ISLNK(st.st_mode):
        kind = "link"
    else:
        kind = "other"
    content = None
    if kind == "file":
        with open(path, "rb") as fh:
            content = fh.read()
    return Live(path=path, kind=kind, mode=stat.S_IMODE(st.st_mode), uid=st.st_uid, gid=st.st_gid, content=content,
                target=os.readlink(path) if kind == "link" else None)


def ids(wanted: list[Wanted]) -> dict:
    """User and group names of the declaration -> their ids on this node; an unknown one is refused by name."""
    out = {}
    for item in wanted:
        for name, lookup, what in ((item.owner, pwd.getpwnam, "user"), (item.group, grp.getgrnam, "group")):
            if name is None or (what, name) in out:
                continue
            try:
                entry = lookup(name)
            except KeyError:
                raise UserError(f"{item.path}: {what} {name!r} does not exist on this node",
                                f"create the {what} first, or name an existing one") from None
            out[(what, name)] = entry.pw_uid if what == "user" else entry.gr_gid
    return out


def _is_empty_dir(path: str) -> bool:
    with os.scandir(path) as entries:
        return next(entries, None) is None


def plan(wanted: list[Wanted], live: dict, names: dict, *, empty_dir=_is_empty_dir) -> Plan:
    """Pure but for ``empty_dir`` (asked only of a directory declared absent): the steps that bring each path from
    ``live`` (path -> Live) to its declaration, in the declared order (a directory before the files in it).
    ``names``: ``ids``'s answer."""
    out = Plan()

    def uid_gid(item: Wanted, now: Live | None) -> tuple[int, int]:
        uid = names[("user", item.owner)] if item.owner else (now.uid if now and now.kind else 0)
        gid = names[("group", item.group)] if item.group else (now.gid if now and now.kind else 0)
        return uid, gid

    def add(item: Wanted, words: str, step: Step) -> None:
        out.steps.append(step)
        out.changes.setdefault(item.path, []).append(words)

    for item in wanted:
        now = live[item.path]
        if item.state == "absent":
            if now.kind is None:
                continue
            if now.kind == "directory":
                if not empty_dir(item.path):
                    raise UserError(f"{item.path} is a directory with files in it, declared absent",
                                    "remove what is in it by hand if it is not needed, or stop declaring it absent")
                add(item, "removed", Step(f"remove the empty directory {item.path}", call=partial(os.rmdir, item.path),
                                          entry=("rmdir", item.path)))
            else:
                add(item, "removed", Step(f"remove {item.path}", call=partial(os.unlink, item.path),
                                          entry=("unlink", item.path)))
            continue
        if item.state == "link":
            if now.kind == "link" and now.target == item.src:
                continue
            if now.kind not in (None, "link"):
                raise UserError(f"{item.path} is a {now.kind}, where a link is declared",
                                "move it out of the way by hand, then run again")
            add(item, f"linked to {item.src}" + (f" (was {now.target})" if now.kind else ""),
                Step(f"link {item.path} to {item.src}", call=partial(atomic.replace_link, item.path, item.src),
                     entry=("symlink", item.src, item.path)))
            continue
        uid, gid = uid_gid(item, now)
        if item.state == "directory":
            if now.kind not in (None, "directory"):
                raise UserError(f"{item.path} is a {now.kind}, where a directory is declared",
                                "move it out of the way by hand, then run again")
            mode = item.mode if item.mode is not None else (now.mode if now.kind else 0o755)
            if now.kind is None:
                add(item, f"created (mode {mode:04o})",
                    Step(f"create the directory {item.path}", call=partial(_mkdir, item.path, mode, uid, gid),
                         entry=("mkdir", item.path, f"mode={mode:04o}", f"owner={uid}:{gid}")))
                continue
            _attributes(item.path, now, mode, uid, gid, add, item)
            continue
        if now.kind in ("directory", "other"):
            raise UserError(f"{item.path} is a {now.kind}, where a file is declared",
                            "move it out of the way by hand, then run again")
        data = item.content.encode()
        mode = item.mode if item.mode is not None else (now.mode if now.kind == "file" else 0o644)
        if now.kind != "file" or now.content != data:
            what = "written" if now.kind == "file" else ("written over a link" if now.kind == "link" else "created")
            add(item, f"{what} (mode {mode:04o})",
                Step(f"write {item.path}",
                     call=partial(atomic.write_file, item.path, data, mode=mode, owner=(uid, gid)),
                     entry=("write", item.path, f"mode={mode:04o}", f"owner={uid}:{gid}")))
            if not item.secret:
                before = now.content.decode(errors="replace") if now.kind == "file" else ""
                out.diffs.append({"before_header": item.path, "after_header": item.path, "before": before,
                                  "after": item.content})
            continue
        _attributes(item.path, now, mode, uid, gid, add, item)
    return out


def _attributes(path: str, now: Live, mode: int, uid: int, gid: int, add, item: Wanted) -> None:
    """The steps that set an existing file's or directory's mode and owner (never through a link)."""
    if (now.uid, now.gid) != (uid, gid):
        add(item, f"owner {now.uid}:{now.gid} -> {uid}:{gid}",
            Step(f"chown {path}", call=partial(os.chown, path, uid, gid, follow_symlinks=False),
                 entry=("chown", path, f"{uid}:{gid}")))
    if now.mode != mode:
        add(item, f"mode {now.mode:04o} -> {mode:04o}",
            Step(f"chmod {path}", call=partial(os.chmod, path, mode), entry=("chmod", path, f"{mode:04o}")))


def _mkdir(path: str, mode: int, uid: int, gid: int) -> None:
    """The directory, its missing parents first (root's 0755, as `mkdir -p` by root makes them)."""
    parent = os.path.dirname(path)
    if not os.path.isdir(parent):
        os.makedirs(parent, mode=0o755)
    os.mkdir(path, 0o700)  # narrow until its owner and mode are set
    os.chown(path, uid, gid, follow_symlinks=False)
    os.chmod(path, mode)


def ensure(runner, items: list) -> dict:
    """Check the declaration, read every path once, plan, apply through ``runner`` (a dry run records the steps).
    Returns {changed, changes, diffs, commands}."""
    wanted = declared(items)
    planned = plan(wanted, {item.path: read(item.path) for item in wanted}, ids(wanted))
    done = apply_steps(runner, planned.steps)
    return {"changed": planned.changed, "changes": planned.changes, "diffs": planned.diffs,
            "commands": done.commands}
