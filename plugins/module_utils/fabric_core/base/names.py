"""Naming rules, the one place for each: ZFS pools, datasets and snapshots, iSCSI qualified names and
IQN bases, host names, fabricctl's dataset, version and job names, LIO target and LUN names, the
backstore prefix, and the names fabricctl's configuration and the roles give (users, metrics, exports).

Every validator returns the name unchanged when it is valid and raises ``InvalidName`` with the
rule that was broken and how to fix it otherwise. Nothing here runs a command. The other rules
(CHAP, file systems, mount roots, ownership, unknown keys) are in ``rules.py``.
"""

from __future__ import annotations

import re

from .errors import InvalidName

# The one target portal group (TPG) of every fabric target, on the storage nodes (LIO) and in the GPU nodes' node
# records (`-p ADDRESS:PORT,TPG_TAG`): open-iscsi keeps a record made without its tag as the single file
# ADDRESS,PORT whatever its iface, so a second iface's record of the same target and portal (an admin's NIC
# binding, a test posing as another host) would replace or delete the fabric's; with the tag each iface's record
# is a file of its own (ADDRESS,PORT,TPG_TAG/IFACE).
TPG_TAG = 1

# ZFS: component names may contain alphanumerics and - _ . : (zfs(8) "ZFS Component Naming").
_ZFS_COMPONENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$")
_POOL = re.compile(r"^[A-Za-z][A-Za-z0-9_.:-]*$")
_RESERVED_POOLS = {"mirror", "raidz", "raidz1", "raidz2", "raidz3", "draid", "spare",
                   "log", "cache", "special", "dedup"}
ZFS_MAX_NAME = 255

# RFC 3720 3.2.6.3.1: iqn.YYYY-MM.reversed.domain[:unique] of a-z, 0-9, "-", ".", ":" (rtslib refuses
# "_" too, seen in the lab); LIO (rtslib) also wants a dotted
# naming authority: iqn.2026-11.lab:x is refused, iqn.2026-11.io.example.lab:x is accepted.
_IQN = re.compile(r"^iqn\.(\d{4})-(0[1-9]|1[0-2])\.([a-z0-9-]+(?:\.[a-z0-9-]+)+)(?::([a-z0-9.:-]+))?$")
_EUI = re.compile(r"^eui\.[0-9A-F]{16}$")
IQN_MAX = 223
_HOST = re.compile(r"^(?=.{1,63}\Z)[a-z0-9]([a-z0-9-]*[a-z0-9])?$")


def validate_pool_name(name: str) -> str:
    if not isinstance(name, str) or not name:
        raise InvalidName("pool name is empty", "give the pool a name such as `tank`")
    if len(name) > ZFS_MAX_NAME:
        raise InvalidName(f"invalid pool name {name!r}: longer than {ZFS_MAX_NAME} characters", "choose a shorter name")
    if not _POOL.fullmatch(name):
        raise InvalidName(f"invalid pool name {name!r}: it must start with a letter and contain only "
                          "letters, digits, '_', '-', '.', ':'", "choose a name such as `tank` or `fast0`")
    lowered = name.lower()
    if lowered in _RESERVED_POOLS or re.match(r"^(c[0-9]|mirror|raidz|draid|spare)", lowered):
        raise InvalidName(f"invalid pool name {name!r}: names beginning with 'mirror', 'raidz', 'draid', "
                          "'spare' or c[0-9], and the words log/cache/special/dedup, are reserved by ZFS",
                          "choose another name, for example `tank`")
    return name


def validate_dataset_name(name: str) -> str:
    """POOL/A/B (no snapshot or bookmark part)."""
    if not isinstance(name, str) or not name:
        raise InvalidName("dataset name is empty", "name it POOL/PATH, for example `tank/datasets/imagenet`")
    if "@" in name or "#" in name:
        raise InvalidName(f"invalid dataset name {name!r}: '@' and '#' belong to snapshots and bookmarks",
                          "give the dataset without a version; versions are snapshots")
    if len(name) > ZFS_MAX_NAME:
        raise InvalidName(f"invalid dataset name {name!r}: longer than {ZFS_MAX_NAME} characters")
    pool, *rest = name.split("/")
    validate_pool_name(pool)
    for part in rest:
        if not part or not _ZFS_COMPONENT.fullmatch(part):
            raise InvalidName(f"invalid dataset name {name!r}: component {part!r} must be non-empty and contain only "
                              "letters, digits, '_', '-', '.', ':' (and not start with a punctuation character)",
                              "use names such as `tank/datasets/imagenet-2026`")
    return name


def validate_snapshot_component(version: str) -> str:
    """The part after '@' (a dataset version or a checkpoint step)."""
    if not isinstance(version, str) or not version or not _ZFS_COMPONENT.fullmatch(version):
        raise InvalidName(f"invalid snapshot name {version!r}: it must contain only letters, digits, '_', '-', "
                          "'.', ':' and start with a letter or digit", "use a version such as `v1` or `2026-11-22`")
    return version


def snapshot_name(step: int) -> str:
    """The snapshot of a checkpoint taken at training step STEP (its volume's @step-STEP)."""
    return f"step-{step}"


STEP_MAX_DIGITS = 18  # a training step: any count a job reaches, and its target name stays far within an IQN's 223


def validate_step(step) -> int:
    """A checkpoint's training step: a whole number 0 or more (at most 18 digits), as an int."""
    text = str(step) if isinstance(step, int) and not isinstance(step, bool) else step
    if not isinstance(text, str) or not text.isascii() or not text.isdigit() or len(text) > STEP_MAX_DIGITS:
        raise InvalidName(f"invalid step {str(step)[:40]!r}: a whole number, 0 or more (at most {STEP_MAX_DIGITS} "
                          "digits)", "give the checkpoint's training step, e.g. 12000")
    return int(text)


def validate_snapshot_name(name: str) -> str:
    """DATASET@SNAPSHOT."""
    if not isinstance(name, str) or name.count("@") != 1:
        raise InvalidName(f"invalid snapshot name {name!r}: expected DATASET@VERSION",
                          "write it as `tank/datasets/imagenet@v1`")
    dataset, version = name.split("@")
    validate_dataset_name(dataset)
    validate_snapshot_component(version)
    if len(name) > ZFS_MAX_NAME:
        raise InvalidName(f"invalid snapshot name {name!r}: longer than {ZFS_MAX_NAME} characters")
    return name


def validate_iqn(iqn: str) -> str:
    """An iSCSI qualified name (iqn. form with a dotted naming authority) or an eui. name."""
    if not isinstance(iqn, str) or not iqn:
        raise InvalidName("iSCSI name is empty", "use a name such as `iqn.2026-11.com.example:storage1`")
    if len(iqn.encode()) > IQN_MAX:
        raise InvalidName(f"invalid iSCSI name {iqn!r}: longer than {IQN_MAX} bytes (RFC 3720)")
    if _EUI.fullmatch(iqn):
        return iqn
    if iqn.lower().startswith("iqn.") and iqn != iqn.lower():
        raise InvalidName(f"invalid iSCSI name {iqn!r}: iqn names are lower case (RFC 3722 stringprep)",
                          f"use {iqn.lower()!r}")
    if "_" in iqn:
        raise InvalidName(f"invalid iSCSI name {iqn!r}: '_' is not allowed in iSCSI names (RFC 3720; LIO refuses it)",
                          f"use '-' instead: {iqn.replace('_', '-')!r}")
    if not _IQN.fullmatch(iqn):
        raise InvalidName(
            f"invalid iSCSI name {iqn!r}: expected iqn.YYYY-MM.reversed.domain[:unique], with a date the domain "
            "was owned and a dotted domain (LIO refuses a single-label one)",
            "use a name such as `iqn.2026-11.com.example:gpu1`")
    return iqn


def validate_iqn_base(base: str) -> str:
    """An IQN without its unique part (``iqn.YYYY-MM.reversed.domain``): target and host names are appended
    after ':'."""
    if isinstance(base, str) and ":" in base:
        raise InvalidName(f"{base!r} must not contain ':' (it is an IQN base: target and host names are appended "
                          "after ':')", f"use {base.split(':')[0]!r}")
    return validate_iqn(base)


def validate_hostname(name: str) -> str:
    if not isinstance(name, str) or not _HOST.fullmatch(name):
        raise InvalidName(f"invalid host name {name!r}: expected a DNS label (a-z, 0-9, '-', at most 63)",
                          "use the inventory hostname, for example `gpu1`")
    return name


def initiator_name(base: str, hostname: str) -> str:
    """THE rule of a GPU node's initiator name: BASE:HOSTNAME. Every place that names a host's initiator asks it:
    the iscsi_initiator role (its default, through the collection's filter ``fabric_initiator_name``), the
    fabricctl and fabric_node roles, the controller plugins (plugins/plugin_utils/inventory.py: which variable
    gives the base) and fabricctl's configuration (a host without ``initiator``).

    ``base`` is an iqn without the unique part, for example ``iqn.2026-11.com.example.fabric``.
    A hostname with characters an IQN cannot hold is lower-cased and gets a short digest so that
    two hosts never share a name.
    """
    validate_iqn_base(base)
    unique = hostname.lower()
    if not re.fullmatch(r"[a-z0-9.-]+", unique):
        import hashlib  # noqa: PLC0415 - lazy: a command's start (docs/testing.md)

        digest = hashlib.sha256(hostname.encode()).hexdigest()[:8]
        unique = re.sub(r"[^a-z0-9.-]+", "-", unique).strip("-") + "-" + digest
    return validate_iqn(f"{base}:{unique}")


# --- fabricctl objects: dataset names, versions, job names ------------------------------------------
# They become parts of ZFS names, iSCSI target names (no '_', lower case), LIO backstore names,
# systemd unit names and mount paths, so the rules are the intersection of all of those.
# Lengths: "ds.<name>.<version>" must fit a 63-character LIO target name and "<name>.<version>" a
# 48-character LUN name.
FABRIC_NAME_MAX, VERSION_MAX = 30, 16
_FABRIC_NAME = re.compile(rf"^[a-z0-9][a-z0-9-]{{0,{FABRIC_NAME_MAX - 1}}}$")
_VERSION = re.compile(rf"^[a-z0-9][a-z0-9.-]{{0,{VERSION_MAX - 1}}}$")
RESERVED_VERSIONS = {"current", "restore"}  # the mount layout: MOUNT_ROOT/NAME/current, .../JOB/restore/STEP
# The versions of a checkpoint job's exports: "rw" (its writable volume) and "s<STEP>" (a restore). A dataset
# version never takes them, so a dataset and a job of one name never share an LIO backstore (NAME.VERSION).
CHECKPOINT_VERSIONS = re.compile(r"rw|s[0-9]+")


def validate_fabric_name(name: str, what: str = "dataset") -> str:
    """A dataset or job name as fabricctl uses it: a-z, 0-9, '-', at most 30, starting alphanumeric."""
    if not isinstance(name, str) or not _FABRIC_NAME.fullmatch(name):
        raise InvalidName(f"invalid {what} name {name!r}: use lower-case letters, digits and '-' (at most "
                          f"{FABRIC_NAME_MAX}, starting with a letter or digit; no '_' or '.', which iSCSI target "
                          "names or ZFS paths would not keep)", "for example `imagenet-2026`")
    return name


def validate_version(version: str) -> str:
    """A dataset version: a-z, 0-9, '.', '-' (at most 16, starting alphanumeric); not a reserved word."""
    if not isinstance(version, str) or not _VERSION.fullmatch(version) or ".." in version:
        raise InvalidName(f"invalid version {version!r}: use lower-case letters, digits, '.' and '-' (at most "
                          f"{VERSION_MAX}, starting with a letter or digit)",
                          "for example `v1`, `v1.2` or `2026-11-22`")
    if version in RESERVED_VERSIONS:
        raise InvalidName(f"invalid version {version!r}: the word is reserved for the mount layout "
                          f"({', '.join(sorted(RESERVED_VERSIONS))})", "choose another version, for example `v1`")
    if CHECKPOINT_VERSIONS.fullmatch(version):
        raise InvalidName(f"invalid version {version!r}: 'rw' and 's<digits>' name a checkpoint job's writable "
                          "volume and its restores (a dataset and a job may share a name, their exports may not)",
                          "choose another version, for example `v1`")
    return version


# A tag names one version of a dataset and moves (``fabricctl tag``); it is written where a version is
# (NAME@TAG), so it follows the versions' rule, and never looks like one: a version is usually v<digits>,
# <digits> or a date, so a tag starting with a digit or with v<digit> is refused (it would be taken for, or
# collide with, a version sealed later).
_VERSION_LIKE = re.compile(r"^v?[0-9]")


def validate_tag(tag: str) -> str:
    """A dataset tag (``latest``, ``prod``): a version's rule, starting with a letter, and not v<digit>..."""
    if not isinstance(tag, str) or not _VERSION.fullmatch(tag) or ".." in tag:
        raise InvalidName(f"invalid tag {tag!r}: use lower-case letters, digits, '.' and '-' (at most {VERSION_MAX}, "
                          "starting with a letter)", "for example `latest`, `prod` or `stable`")
    if _VERSION_LIKE.match(tag):
        raise InvalidName(f"invalid tag {tag!r}: it is named like a version (a digit, or 'v' and a digit, first); a "
                          "tag must never be taken for a version", "name it for its use: `latest`, `prod`, `stable`")
    if tag in RESERVED_VERSIONS or CHECKPOINT_VERSIONS.fullmatch(tag):
        raise InvalidName(f"invalid tag {tag!r}: the word is reserved ({', '.join(sorted(RESERVED_VERSIONS))}, 'rw' "
                          "and 's<digits>')", "choose another tag, for example `prod`")
    return tag


def parse_ref(ref: str, *, version_required: bool = True) -> tuple[str, str | None]:
    """NAME@VERSION (or NAME alone when version_required is False) -> (name, version). VERSION may be a tag
    (it follows the versions' rule): fabricctl resolves it to the version it names when the command runs."""
    if not isinstance(ref, str) or ref.count("@") > 1:
        raise InvalidName(f"invalid reference {ref!r}: expected NAME@VERSION", "for example `imagenet@v1`")
    name, _at, version = ref.partition("@")
    validate_fabric_name(name)
    if not version:
        if version_required:
            raise InvalidName(f"invalid reference {ref!r}: the version is missing", f"write it as `{name}@v1`")
        return name, None
    return name, validate_version(version)


# --- LIO objects: target and LUN names, the prefix that marks the fabric's backstores ---------------
_TARGET_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]{0,62}$")
_LUN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,47}$")
_BACKSTORE_PREFIX = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,31}$")


def _rule(pattern: re.Pattern, problem: str, fix: str, doc: str):
    """A validator: the value when it is a string the pattern matches, else InvalidName(problem, fix), where
    ``{!r}`` in the problem is the value."""
    def validate(value: str) -> str:
        if not isinstance(value, str) or not pattern.fullmatch(value):
            raise InvalidName(problem.format(value), fix)
        return value

    validate.__doc__ = doc
    return validate


validate_target_name = _rule(_TARGET_NAME, "invalid target name {!r}: use a-z, 0-9, '.', '-' (at most 63, no '_')",
                             "for example `datasets`", "The unique part of a target's IQN (BASE:NAME).")
validate_lun_name = _rule(_LUN_NAME, "invalid LUN name {!r}: letters, digits, '_', '.', '-' (at most 48, starting with "
                          "a letter or digit)", "for example `imagenet_v1`",
                          "A LUN name (its backstore is PREFIX + NAME).")
validate_backstore_prefix = _rule(_BACKSTORE_PREFIX, "{!r} is not a valid backstore prefix (letters, digits, '_', '-', "
                                  "'.', at most 32, starting with a letter or digit)", "for example fabric_",
                                  "The prefix of the fabric's block backstores: only those are ever changed.")

# --- names fabricctl's configuration and the roles give ----------------------------------------------
validate_user_name = _rule(re.compile(r"^[a-z_][a-z0-9_.-]{0,31}$"), "{!r} is not a valid user name (a-z or '_' "
                           "first, then a-z, 0-9, '_', '.', '-'; at most 32)", "for example root",
                           "A Unix user name (the one fabricctl logs in to GPU nodes as).")
validate_metric_name = _rule(re.compile(r"^[a-z][a-z0-9_.-]{0,63}$"), "{!r} is not a valid metric name (a-z first, "
                             "then a-z, 0-9, '_', '.', '-'; at most 64: it becomes the ZFS user property "
                             "fabric:metric.<name>)", "for example loss", "A checkpoint metric's name.")
validate_export_name = _rule(re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$"), "invalid export name {!r}: a-z, 0-9, '.', "
                             "'_', '-' (at most 64, starting with a-z or 0-9)", "for example welcome",
                             "The name of an export a GPU node mounts (the iscsi_initiator role's).")
