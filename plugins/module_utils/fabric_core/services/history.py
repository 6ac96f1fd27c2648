"""Dataset versions as an ML team expects them: who sealed a version from what and why (provenance), names that
move over versions that never do (tags), and the history of a dataset (``fabricctl log``/``show``).

Pure functions of what fabricctl read (listing rows, properties), but for the one file ingest leaves for the next
seal (``add_sources``/``read_sources``, through the atomic writer). Where things live:

* **Provenance**, set by ``fabricctl dataset seal`` on the snapshot itself in the one libzfs_core call that makes
  it (so a version never exists without it, and it travels with ``fabricctl replicate``, which carries a
  snapshot's ``fabric:*`` properties): ``fabric:note`` (the message), ``fabric:author``, ``fabric:parent`` (the
  version the staging volume sealed before, ``-`` for the first), ``fabric:sources`` (what ``dataset ingest``
  copied in since that seal, a JSON list), beside ``fabric:manifest-sha256`` and ``fabric:stat-cache-sha256``
  (the stat cache the next seal may reuse: node/manifest). A ZFS user property value holds at most 8191 bytes:
  the message is refused past it, the sources are cut to fit (their count is kept).
* **Tags**: one user property per tag on the dataset's staging volume, ``fabric:tag:TAG=VERSION``. Setting it is
  one ``zfs set``, so a tag moves atomically: a reader sees the old version or the new one, never none. Only
  the volume's own (local) value counts (snapshots inherit it; a parent's is never a tag). A tag is resolved when
  a command runs (``fabricctl/datasets.require_version``): mount paths, targets and LUNs are the version's.
"""

from __future__ import annotations

import json
import os

from ..base import atomic
from ..base.errors import AlreadyExists, NotFound, UserError
from ..base.names import validate_tag

MESSAGE_PROP = "fabric:note"  # the seal's message (named note before provenance; the same property)
AUTHOR_PROP = "fabric:author"
PARENT_PROP = "fabric:parent"
SOURCES_PROP = "fabric:sources"
CACHE_SHA_PROP = "fabric:stat-cache-sha256"
PROVENANCE_PROPS = (AUTHOR_PROP, PARENT_PROP, SOURCES_PROP, CACHE_SHA_PROP)
TAG_PREFIX = "fabric:tag:"
MAX_VALUE_BYTES = 8191  # a ZFS user property's value (ZAP_MAXVALUELEN 8192 with its NUL)
MAX_AUTHOR = 256
MAX_TAGS = 32  # per dataset: tags travel with the volume's properties, of which a replication carries 64
SOURCES_FILE = os.path.join(".fabric", "ingest-sources.json")  # in the staging file system, until the next seal


def _control(text: str, allowed: str = "") -> list[str]:
    """The control characters of text (C0, DEL, C1, line/paragraph separators), but ``allowed``."""
    import unicodedata  # noqa: PLC0415 - lazy: a command's start (docs/testing.md)

    return sorted({c for c in text if c not in allowed and (unicodedata.category(c) == "Cc" or c in "\u2028\u2029")})


def validate_author(author: str) -> str:
    """An author as given (``--author``): printable, one line, at most MAX_AUTHOR characters."""
    if not isinstance(author, str) or not author.strip():
        raise UserError("the author is empty", "give a name, e.g. --author 'Ada Lovelace <ada@example.org>'")
    bad = _control(author)
    if bad:
        raise UserError(f"the author {author.encode('unicode_escape').decode()[:80]!r} holds control characters "
                        f"({', '.join(repr(c) for c in bad)})",
                        "give a name on one line without control characters, e.g. --author 'Ada <ada@example.org>'")
    if len(author) > MAX_AUTHOR:
        raise UserError(f"the author is {len(author)} characters long, more than {MAX_AUTHOR}", "shorten it")
    return author.strip()


def validate_message(message: str) -> str:
    """A seal's message: lines (newlines and tabs kept), no other control character, at most MAX_VALUE_BYTES."""
    bad = _control(message, allowed="\n\t")
    if bad:
        raise UserError(f"the message holds control characters ({', '.join(repr(c) for c in bad)})",
                        "write it without them (newlines and tabs are kept)")
    size = len(message.encode())
    if size > MAX_VALUE_BYTES:
        raise UserError(f"the message is {size} bytes, more than the {MAX_VALUE_BYTES} a ZFS property holds",
                        "shorten it; put long notes into the dataset itself (a README file)")
    return message


def parent_of(rows: list[dict]) -> dict | None:
    """The version the staging volume sealed last: the newest of its sealed versions (rows oldest first, as
    versions.list_snapshots gives them), or None before the first. (A version destroyed since is not a parent.)"""
    return rows[-1] if rows else None


def sources_value(sources: list[str]) -> str:
    """The property value of the ingest sources: a JSON list, cut to fit MAX_VALUE_BYTES; its last item then says
    how many were left out ("... and 12 more")."""
    kept = list(sources)
    while True:
        extra = len(sources) - len(kept)
        value = json.dumps(kept + ([f"... and {extra} more"] if extra else []), ensure_ascii=False)
        if len(value.encode()) <= MAX_VALUE_BYTES:
            return value
        kept.pop()


def parse_sources(value: str | None) -> list[str]:
    """The ingest sources of a version's property (a JSON list; [] when unset or not a list)."""
    if not value or value == "-":
        return []
    try:
        parsed = json.loads(value)
    except ValueError:
        return [value]
    return [str(s) for s in parsed] if isinstance(parsed, list) else [str(parsed)]


def read_sources(root: str) -> list[str]:
    """The sources ``dataset ingest`` recorded in the staging file system at ROOT since the last seal."""
    try:
        with open(os.path.join(root, SOURCES_FILE), "rb") as fh:
            return parse_sources(fh.read().decode("utf-8", "replace"))
    except FileNotFoundError:
        return []


def add_sources(root: str, sources: list[str]) -> list[str]:
    """Record ingested sources for the next seal (each once, in order); returns them all."""
    known = read_sources(root)
    merged = known + [s for s in dict.fromkeys(sources) if s not in known]
    os.makedirs(os.path.join(root, ".fabric"), exist_ok=True)
    atomic.write_file(os.path.join(root, SOURCES_FILE), json.dumps(merged, ensure_ascii=False) + "\n", mode=0o644)
    return merged


def source_label(source: str, into: str = "") -> str:
    """One ingest source as recorded: its absolute path, and where it went when not the dataset's root."""
    path = os.path.abspath(source) + ("/" if source.endswith("/") else "")
    return f"{path} -> {into}" if into else path


def provenance(*, message: str, author: str, parent: str | None, sources: list[str], cache_sha256: str) -> dict:
    """The seal's provenance properties of a new version ("-" for what is unset)."""
    return {MESSAGE_PROP: message or "-", AUTHOR_PROP: author, PARENT_PROP: parent or "-",
            SOURCES_PROP: sources_value(sources) if sources else "-", CACHE_SHA_PROP: cache_sha256 or "-"}


# --------------------------------------------------------------------------------------------- tags


def tag_prop(tag: str) -> str:
    return TAG_PREFIX + validate_tag(tag)


def tags_of(props: dict) -> dict[str, str]:
    """{tag: version} of a volume's properties ({prop: (value, source)}, as zfs.get_props gives them): only
    its own values (local, or received from its origin), never one inherited from a parent."""
    return {prop[len(TAG_PREFIX):]: value for prop, (value, source) in sorted(props.items())
            if prop.startswith(TAG_PREFIX) and source in ("local", "received") and value not in ("", "-")}


def tags_by_version(tags: dict[str, str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for tag, version in sorted(tags.items()):
        out.setdefault(version, []).append(tag)
    return out


def plan_tag(name: str, tags: dict[str, str], versions: list[str], version: str, tag: str) -> dict:
    """What ``fabricctl tag NAME@VERSION TAG`` does: {"tag", "version", "previous", "action"} with action
    "create", "move" or "unchanged". Refused (nothing changes): a tag named like a version or as one of the
    dataset's versions, a version that does not exist, a tag past MAX_TAGS."""
    validate_tag(tag)
    if tag in versions:
        raise AlreadyExists(f"{name} has a version named {tag!r}: a tag of that name would hide it",
                            "choose another tag name")
    if version not in versions:
        raise NotFound(f"unknown version {name}@{version} (versions of {name}: {', '.join(versions) or 'none'})",
                       "tag a sealed version")
    previous = tags.get(tag)
    if previous is None and len(tags) >= MAX_TAGS:
        raise UserError(f"{name} has {len(tags)} tags already, the most a dataset may have ({MAX_TAGS})",
                        f"remove one first (`fabricctl untag {name} TAG`)")
    action = "create" if previous is None else ("unchanged" if previous == version else "move")
    return {"dataset": name, "tag": tag, "version": version, "previous": previous, "action": action}


def plan_untag(name: str, tags: dict[str, str], tag: str) -> dict:
    """What ``fabricctl untag NAME TAG`` does; NotFound naming the dataset's tags when it has no such tag."""
    if tag not in tags:
        known = ", ".join(f"{t} -> {v}" for t, v in sorted(tags.items())) or "none"
        raise NotFound(f"{name} has no tag {tag!r} (its tags: {known})", "check the tag's name (`fabricctl log NAME`)")
    return {"dataset": name, "tag": tag, "previous": tags[tag], "action": "remove"}


# --------------------------------------------------------------------------------------------- history


def _value(row: dict, prop: str):
    value = row.get(prop)
    return None if value in (None, "-", "") else value


def _int(value):
    """A size as a number (the listing gives ZFS's numbers as digits; a column it does not type stays text)."""
    return int(value) if isinstance(value, str) and value.isdigit() else value


def entry(row: dict, tags: dict[str, str]) -> dict:
    """A version as log and show give it: provenance, sizes (bytes of its files, ZFS ``referenced`` and
    ``written``: what this version wrote since its parent, its own), tags."""
    by_version = tags_by_version(tags)
    return {"version": row["snapshot"], "snapshot": row["name"], "created_at": _value(row, "fabric:created-at"),
            "created_by": _value(row, "fabric:created-by"), "author": _value(row, AUTHOR_PROP),
            "message": _value(row, MESSAGE_PROP), "parent": _value(row, PARENT_PROP),
            "sources": parse_sources(row.get(SOURCES_PROP)), "files": _int(row.get("fabric:files")),
            "bytes": _int(row.get("fabric:bytes")), "referenced": _int(row.get("referenced")),
            "written": _int(row.get("written")), "used": _int(row.get("used")),
            "manifest_sha256": _value(row, "fabric:manifest-sha256"),
            "tags": by_version.get(row["snapshot"], [])}


def log(rows: list[dict], tags: dict[str, str]) -> list[dict]:
    """The history of a dataset, newest first (rows oldest first, as listed)."""
    return [entry(r, tags) for r in reversed(rows)]


def dangling(tags: dict[str, str], versions: list[str]) -> dict[str, str]:
    """Tags that name a version not on this node (destroyed, or not replicated here yet)."""
    return {t: v for t, v in tags.items() if v not in versions}


def clear_sources(root: str) -> None:
    """Forget the recorded sources once a seal took them (its snapshot keeps the file and the property)."""
    try:
        os.unlink(os.path.join(root, SOURCES_FILE))
    except FileNotFoundError:
        pass
