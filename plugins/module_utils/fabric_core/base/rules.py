"""The rulebook: CHAP credentials, file systems, mount roots, ownership properties and unknown keys.

Names (pools, datasets, IQNs, IQN bases, backstore prefixes, hosts, ...) have their rules in
``names.py``; everything else the fabric checks in more than one place is here, once. fabricctl's
configuration, the Ansible modules, the LIO and open-iscsi code and the roles' preflights (through
the test plugins in plugins/test/fabric.py) all call these functions. Nothing here runs a command.

CHAP has one rule and two views of its four fields: LIO's (userid, password, mutual_userid,
mutual_password: the target's ACL and fabricctl's configuration) and open-iscsi's (username,
password, username_in, password_in: the initiator's node record). The target side also enforces
RFC 3720's secret length, which LIO needs and some initiators cap (an initiator may log in to a
target that is not ours, so its view only checks the form).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from .errors import UserError

# --------------------------------------------------------------------------------------------
# unknown keys and near misses


def closest(word, choices: Iterable) -> str | None:
    """The choice closest to ``word`` (difflib's ratio of at least 0.6), or None. Never ``word`` itself (nor a
    choice that reads the same, e.g. the key "1" for a YAML key 1): a word that is one of the choices but refused
    for another reason (a group where one host is wanted) needs that reason, not itself suggested back."""
    import difflib  # noqa: PLC0415 - lazy: a command's start (docs/testing.md)

    typed = str(word)
    match = difflib.get_close_matches(typed, [str(c) for c in choices if str(c) != typed], n=1)
    return match[0] if match else None


def suggestion(word, choices: Iterable) -> str:
    """``did you mean 'x'?`` for the closest choice other than ``word``, or "" when none is close."""
    match = closest(word, choices)
    return f"did you mean {match!r}?" if match else ""


def unknown_keys(given: Iterable, allowed: Sequence) -> list:
    """The keys of ``given`` (a mapping or its keys) that are not in ``allowed``, in their order.
    A key that is not a string is always unknown."""
    return [key for key in given if not isinstance(key, str) or key not in allowed]


def check_keys(given: Mapping, allowed: Sequence, where: str, fix: str = "") -> None:
    """Refuse the first unknown key of a mapping, naming where it is and the closest valid key."""
    unknown = unknown_keys(given, allowed)
    if unknown:
        hint = suggestion(unknown[0], allowed)
        raise UserError(f"{where}: unknown key {unknown[0]!r}" + (f"; {hint}" if hint else ""),
                        fix or f"use only these keys: {', '.join(allowed)}")


# --------------------------------------------------------------------------------------------
# CHAP

# RFC 3720 8.2.1 wants secrets of at least 96 bits (12 bytes); the Microsoft initiator and several
# HBAs accept at most 16. 12..16 printable ASCII characters work with every initiator.
CHAP_SECRET_MIN, CHAP_SECRET_MAX = 12, 16
CHAP_TEXT_MAX = 255
_CHAP_TEXT = re.compile(rf"^[\x21-\x7e]{{1,{CHAP_TEXT_MAX}}}$")  # printable ASCII, no space


@dataclass(frozen=True)
class ChapView:
    """How one side names the four CHAP fields; ``target_side``: the secret length rules apply."""

    userid: str
    password: str
    mutual_userid: str
    mutual_password: str
    target_side: bool

    @property
    def names(self) -> tuple[str, str, str, str]:
        return (self.userid, self.password, self.mutual_userid, self.mutual_password)


LIO = ChapView("userid", "password", "mutual_userid", "mutual_password", target_side=True)
OPEN_ISCSI = ChapView("username", "password", "username_in", "password_in", target_side=False)


@dataclass(frozen=True)
class Chap:
    """Valid CHAP credentials (``parse_chap`` makes them): the initiator's, and the target's for mutual CHAP.
    Their repr (a traceback's locals, a debug print of a host) names the user ids, never the secrets."""

    userid: str
    password: str = field(repr=False)
    mutual_userid: str = ""
    mutual_password: str = field(default="", repr=False)

    @property
    def mutual(self) -> bool:
        return bool(self.mutual_userid)

    def fields(self, view: ChapView = LIO, *, compact: bool = False) -> dict[str, str]:
        """The four fields in the view's names; ``compact``: without the mutual ones when there are none."""
        values = (self.userid, self.password, self.mutual_userid, self.mutual_password)
        out = dict(zip(view.names, values, strict=True))
        if compact and not self.mutual:
            for name in view.names[2:]:
                out.pop(name)
        return out


class ChapError(UserError):
    """A CHAP rule broken; ``field`` is the offending field in the caller's view (never its value)."""

    def __init__(self, problem: str, fix: str, field: str):
        super().__init__(problem, fix)
        self.field = field


def parse_chap(raw, view: ChapView = LIO, *, where: str = "", prefix: str = "chap.") -> Chap | None:
    """Validate CHAP credentials given in ``view``'s names; None when there are none (no authentication).

    The rules: only the view's four fields; userid and password together; the mutual pair together
    (and only with them); every value printable ASCII without spaces, at most 255; on the target
    side the secrets 12-16 characters and the two secrets different. Errors name the field as
    ``{where}{prefix}{field}`` and never show a value.
    """
    u, p, mu, mp = view.names

    def refuse(name: str, detail: str, fix: str = "") -> ChapError:
        return ChapError(f"{where}{prefix}{name}: {detail}", fix or _chap_fix(view), name)

    if raw in (None, {}, ""):
        return None
    if not isinstance(raw, Mapping):
        raise ChapError(f"{where}{prefix.rstrip('.')}: expected a mapping with {u} and {p}", _chap_fix(view), "")
    unknown = unknown_keys(raw, view.names)
    if unknown:
        hint = suggestion(unknown[0], view.names)
        raise refuse(str(unknown[0]), f"unknown CHAP field {unknown[0]!r}" + (f"; {hint}" if hint else ""),
                     f"use only {', '.join(view.names)}")
    values = {name: "" if raw.get(name) in (None, "") else str(raw.get(name)) for name in view.names}
    if not any(values.values()):
        return None
    for name in (u, p):
        if not values[name]:
            raise refuse(name, f"CHAP needs both {u} and {p} (the initiator's credentials)",
                         f"set {prefix}{u} and {prefix}{p}, or leave CHAP out for no authentication")
    if bool(values[mu]) != bool(values[mp]):
        raise refuse(mp if values[mu] else mu, f"mutual CHAP needs both {mu} and {mp} (the target's credentials)",
                     "set both, or neither for one-way CHAP")
    for name in (u, mu):
        if values[name] and not _CHAP_TEXT.fullmatch(values[name]):
            raise refuse(name, f"invalid CHAP {name}: it must be 1-{CHAP_TEXT_MAX} printable characters without "
                         "white space")
    for name in (p, mp):
        secret = values[name]
        if not secret:
            continue
        if view.target_side and not _CHAP_TEXT.fullmatch(secret):
            raise refuse(name, f"must be {CHAP_SECRET_MIN}-{CHAP_SECRET_MAX} printable ASCII characters without "
                         "spaces")
        if view.target_side and not CHAP_SECRET_MIN <= len(secret) <= CHAP_SECRET_MAX:
            raise refuse(name, f"must be {CHAP_SECRET_MIN}-{CHAP_SECRET_MAX} characters (got {len(secret)}); "
                         "shorter secrets are weak (RFC 3720 8.2.1), longer ones are refused by some initiators")
        if not _CHAP_TEXT.fullmatch(secret):
            raise refuse(name, f"invalid CHAP {name}: it must be 1-{CHAP_TEXT_MAX} printable characters without "
                         "white space")
    if view.target_side and values[mp] and values[mp] == values[p]:
        raise refuse(mp, f"equals {prefix}{p}", "use different secrets for the two directions (RFC 3720 8.2.1)")
    return Chap(*(values[name] for name in view.names))


def _chap_fix(view: ChapView) -> str:
    u, p, mu, mp = view.names
    secret = (f"a {p} of {CHAP_SECRET_MIN}-{CHAP_SECRET_MAX} printable ASCII characters without spaces (for "
              "example from `openssl rand -base64 12`, kept in Ansible Vault)") if view.target_side else \
        f"a {p} without spaces"
    different = "a different " if view.target_side else ""
    return f"give {u} (printable, no spaces) and {secret}; for mutual CHAP also {mu} and {different}{mp}"


def chap_secret_ok(secret) -> bool:
    """A target-side CHAP secret: 12-16 printable ASCII characters without spaces."""
    return (isinstance(secret, str) and bool(_CHAP_TEXT.fullmatch(secret))
            and CHAP_SECRET_MIN <= len(secret) <= CHAP_SECRET_MAX)


# --------------------------------------------------------------------------------------------
# file systems and mount points

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")  # no path, name or value of the fabric holds one
FILESYSTEMS = ("ext4", "xfs")  # of volumes the fabric formats, exports and mounts

# Directories a mount or staging root must never be (mounting over them hides the system).
SYSTEM_DIRECTORIES = frozenset({"/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib64", "/opt", "/proc",
                                "/root", "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr", "/var"})


def validate_filesystem(fstype) -> str:
    if fstype not in FILESYSTEMS:
        raise UserError(f"unsupported file system {fstype!r}", f"use one of {', '.join(FILESYSTEMS)}")
    return fstype


# A dataset volume's block size (fixed at creation): ZFS reads and checksums whole blocks, so it is the unit
# of every read the GPU nodes send. 16K is OpenZFS's default; larger blocks cost fewer reads per byte and
# compress better, and make a small random read fetch more. Powers of two; 128K is the largest a zvol takes
# without the large_blocks pool feature.
VOLBLOCKSIZE_DEFAULT = "16K"
VOLBLOCKSIZES = ("4K", "8K", "16K", "32K", "64K", "128K")


def validate_volblocksize(value) -> str:
    text = str(value).strip().upper()
    if text not in VOLBLOCKSIZES:
        raise UserError(f"volblocksize {value!r} is not one a dataset volume takes",
                        f"use one of {', '.join(VOLBLOCKSIZES)} (default {VOLBLOCKSIZE_DEFAULT})")
    return text


def validate_path(value, *, mount_root: bool = False) -> str:
    """An absolute, normalised path; with ``mount_root``, not a system directory either."""
    if not isinstance(value, str) or not value.startswith("/") or posixpath.normpath(value) != value \
            or "//" in value:
        raise UserError(f"{value!r} must be an absolute, normalised path (no '..', '.', '//' or trailing '/')")
    if _CONTROL.search(value):
        raise UserError(f"{value!r} contains a control character (a newline, a tab, ...)",
                        "write the path on one line, without control characters")
    if mount_root and value in SYSTEM_DIRECTORIES:
        raise UserError(f"{value!r} is a system directory; mounting there would hide it",
                        "choose a directory of its own, such as /datasets")
    return value


# --------------------------------------------------------------------------------------------
# ownership: what the fabric made carries these ZFS user properties

MANAGED_PROP = "fabric:managed"  # "true" on every dataset, volume and snapshot the fabric created
KIND_PROP = "fabric:kind"  # what it is; set on snapshots themselves, which is how a hand-made one is told apart
KIND_DATASET, KIND_DATASET_VERSION = "dataset", "dataset-version"
KIND_CHECKPOINT_VOLUME, KIND_CHECKPOINT = "checkpoint-volume", "checkpoint"
HOLD_PUBLISHED = "fabric:published"  # the hold on a snapshot while it is exported
