"""ZFS datasets and volumes: read ``zfs get``/``zfs list`` as OpenZFS 2.3 JSON, normalise property values,
converge a dataset (read, a pure plan, one applier: see model.py).

Reads are JSON without ``--json-int`` (``zfs get -j -p``, ``zfs list -j -p``: every value arrives as the
text ``zfs get -H -p`` prints, so a user property set to ``007`` stays ``007``; see zjson.py, recorded
outputs in tests/unit/data/zfs23b/*_s.json); the dry run ``zfs create -n -v`` prints text, shown unparsed. A
dataset is created with ``fabric:managed=true``; an existing one is changed only by ``zfs set`` of
the properties that differ. Nothing here destroys a dataset.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..base.errors import UnsafeOperation, UserError
from ..base.model import Step, apply_steps
from ..base.names import validate_dataset_name
from ..base.rules import MANAGED_PROP
from ..base.runner import Runner
from . import zjson

SIZE_PROPS = {"quota", "refquota", "reservation", "refreservation", "recordsize", "volsize", "volblocksize",
              "special_small_blocks", "dnodesize_bytes"}
# sizes where "none" means 0 in `zfs get -p`
NONE_IS_ZERO = {"quota", "refquota", "reservation", "refreservation"}
ONOFF_PROPS = {"atime", "relatime", "readonly", "exec", "setuid", "devices", "canmount", "overlay", "zoned",
               "vscan", "nbmand", "utf8only", "jailed", "mlslabel"}
# fixed when the dataset is created (zfs(8): "can only be set at creation time")
CREATE_ONLY = {"casesensitivity", "normalization", "utf8only", "volblocksize", "encryption", "keyformat",
               "pbkdf2iters"}
# read-only statistics: cannot be declared at all
READ_ONLY = {"type", "creation", "used", "available", "referenced", "compressratio", "mounted", "origin",
             "usedbysnapshots", "usedbydataset", "usedbychildren", "usedbyrefreservation", "written",
             "logicalused", "logicalreferenced", "refcompressratio", "guid", "createtxg", "objsetid",
             "encryptionroot", "keystatus", "clones", "defer_destroy", "userrefs", "snapshots_changed",
             "filesystem_count", "snapshot_count", "version"}
KEYFORMATS = ("passphrase", "hex", "raw")
# what OpenZFS 2.3 means by "on" and by the short names of algorithms
_COMPRESSION_ALIASES = {"on": "lz4", "zstd": "zstd-3", "gzip": "gzip-6"}
_CHECKSUM_ALIASES = {"on": "fletcher4"}
_DEDUP_ALIASES = {"on": "sha256", "verify": "sha256,verify"}
_SIZE_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*([KMGTPE]?)(?:i?B)?$", re.IGNORECASE)
_UNITS = {"": 0, "K": 1, "M": 2, "G": 3, "T": 4, "P": 5, "E": 6}
DEDUP_WARNING = ("deduplication keeps a table in RAM: plan about 5 GB of RAM per TB of unique data, or the pool "
                 "slows to a crawl when the table spills to disk")


def parse_size(value) -> int:
    """'10G' -> 10737418240, '1.5T', '512', '64K', 'none' -> 0 (binary units, as ZFS uses)."""
    if isinstance(value, bool):
        raise UserError(f"invalid size {value!r}", "give a size such as 10G or 512M")
    if isinstance(value, int):
        return value
    text = str(value).strip()
    if text.lower() in ("none", "0", "-"):
        return 0
    m = _SIZE_RE.match(text)
    if not m:
        raise UserError(f"invalid size {value!r}", "give a size such as 10G, 1.5T, 128K or a number of bytes")
    return int(float(m.group(1)) * (1024 ** _UNITS[m.group(2).upper()]))


def _text(value) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value).strip()


def normalize(prop: str, value) -> str:
    """A canonical text for a property value, so declared and live values compare equal.

    Sizes become bytes, booleans and yes/no become on/off, algorithm aliases are resolved
    (compression on -> lz4, zstd -> zstd-3), enumerations are lower-cased; user properties (with ':')
    are compared verbatim, as text: `zfs get -j -p` returns them as set (007 stays 007, see zjson.py).
    """
    text = _text(value)
    if ":" in prop:
        return text
    low = text.lower()
    if prop in SIZE_PROPS:
        if prop in NONE_IS_ZERO or low != "none":
            try:
                return str(parse_size(text))
            except UserError:
                return low
        return low
    if low in ("yes", "true"):
        low = "on"
    elif low in ("no", "false"):
        low = "off"
    if prop == "compression":
        return _COMPRESSION_ALIASES.get(low, low)
    if prop == "checksum":
        return _CHECKSUM_ALIASES.get(low, low)
    if prop == "dedup":
        return _DEDUP_ALIASES.get(low, low)
    if prop == "acltype":
        # zfs(8): posixacl and noacl are accepted aliases; `zfs get` reports posix and off
        return {"posixacl": "posix", "noacl": "off"}.get(low, low)
    if prop == "xattr":
        # OpenZFS 2.2 made `on` mean system-attribute xattrs: `zfs set xattr=sa` reads back as `on`
        return "on" if low == "sa" else low
    if prop in ("mountpoint", "sharenfs", "sharesmb", "keylocation", "comment"):
        return text
    return low


def parse_get(text: str) -> dict:
    """`zfs get -j -p PROPS NAME...` -> {dataset: {property: (value, source)}}, value and source
    as `zfs get -H -p` printed them ("-" when unset; local, default, -, inherited from X, ...)."""
    doc = zjson.loads(("zfs", "get"), text)
    return {str(d.get("name", "")): zjson.properties(d) for d in zjson.objects(doc, "datasets")}


def get_props(runner: Runner, name: str, props=None) -> dict:
    """{dataset: {prop: (value, source)}} of NAME, or {} when it does not exist."""
    what = ",".join(props) if props else "all"
    doc = zjson.run(runner, ["zfs", "get", *zjson.ZFS_JSON, what, name], missing=zjson.NO_DATASET)
    return {} if doc is None else {str(d.get("name", "")): zjson.properties(d) for d in zjson.objects(doc, "datasets")}


# `zfs list -o` accepts short names; its JSON names each property by its full name
COLUMN_NAMES = {"avail": "available", "refer": "referenced", "ratio": "compressratio", "refratio": "refcompressratio",
                "compress": "compression", "reserv": "reservation", "refreserv": "refreservation",
                "recsize": "recordsize", "volblock": "volblocksize", "lused": "logicalused",
                "lrefer": "logicalreferenced", "usedsnap": "usedbysnapshots", "usedds": "usedbydataset",
                "usedchild": "usedbychildren", "usedrefreserv": "usedbyrefreservation"}


def list_rows(text: str, columns, *, by_txg: bool = False) -> list:
    """`zfs list -j -p -o name,COLUMNS ...` -> one dict per dataset with "name" and each column's
    value as `zfs list -H -p` printed it ("-" when unset), in the order listed, or oldest first (by the
    creation txg every object of the JSON carries) with ``by_txg``."""
    return rows_of(zjson.loads(("zfs", "list"), text), columns, by_txg=by_txg)


def rows_of(doc: dict, columns, *, by_txg: bool = False) -> list:
    """list_rows of a parsed `zfs list -j` document."""
    objs = zjson.objects(doc, "datasets")
    if by_txg:
        objs = sorted(objs, key=lambda o: _txg(o.get("createtxg")))
    rows = []
    for obj in objs:
        props = obj.get("properties") or {}
        row = {"name": str(obj.get("name", ""))}
        for column in columns:
            if column != "name":
                entry = props.get(column) or props.get(COLUMN_NAMES.get(column, column))
                row[column] = zjson.value_text(entry.get("value")) if isinstance(entry, dict) else "-"
        rows.append(row)
    return rows


def _txg(value) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0


def list_datasets(runner: Runner, root: str | None = None, prop: str = MANAGED_PROP, value: str | None = "true",
                  columns=("type", "used", "avail")) -> list:
    """Datasets and volumes (recursively under ``root``) whose user property ``prop`` equals ``value``.

    ``value=None`` returns all of them with the property's value. Each item: {name, <columns>, prop}.
    Uses `zfs list -j -p -o name,COLUMNS,PROP -t filesystem,volume [-r ROOT]`.
    """
    cols = ["name", *columns, prop]
    argv = ["zfs", "list", *zjson.ZFS_JSON, "-o", ",".join(cols), "-t", "filesystem,volume"]
    if root:
        argv += ["-r", root]
    doc = zjson.run(runner, argv, missing=zjson.NO_DATASET if root else "")
    items = []
    for row in rows_of(doc or {}, cols):
        for key in ("used", "avail", "available", "referenced", "volsize", "quota"):
            if key in row and row[key].isdigit():
                row[key] = int(row[key])
        if value is None or row.get(prop) == value:
            items.append(row)
    return items


def _validate_properties(properties: dict, allow_dedup: bool, warnings: list) -> dict:
    clean = {}
    for key, value in properties.items():
        if not isinstance(key, str) or not re.match(r"^[a-z0-9_.:-]+$", key, re.IGNORECASE) or key.startswith(":"):
            raise UserError(f"invalid property name {key!r}",
                            "use ZFS property names (compression, quota, ...) or user properties with ':' "
                            "(fabric:role)")
        if key in READ_ONLY:
            raise UserError(f"property {key!r} is read-only and cannot be declared", "remove it from properties")
        if key in ("encryption", "keyformat", "keylocation"):
            raise UserError(f"property {key!r} is managed by the encryption option",
                            "use encryption: {enabled: true, key: ..., keyformat: passphrase}")
        if value is None or (isinstance(value, str) and ("\n" in value or value == "")):
            raise UserError(f"property {key!r} has no value", "give a value, or remove the property")
        if key in SIZE_PROPS:
            parse_size(value) if normalize(key, value) != "none" else None
        if key == "dedup" and normalize(key, value) != "off":
            if not allow_dedup:
                raise UserError(f"dedup={_text(value)} was requested but deduplication is not allowed: "
                                + DEDUP_WARNING, "set allow_dedup=true if you have measured it is worth the RAM, "
                                "or leave dedup off (compression is usually the better tool)")
            warnings.append(DEDUP_WARNING)
        clean[key] = _text(value)
    return clean


def _validate_encryption(encryption) -> dict | None:
    if encryption is None:
        return None
    if not isinstance(encryption, dict):
        raise UserError("encryption must be a dict", "use {enabled: true, key: ..., keyformat: passphrase}")
    enabled = encryption.get("enabled", True)
    if not enabled:
        return {"enabled": False}
    keyformat = encryption.get("keyformat") or "passphrase"
    if keyformat not in KEYFORMATS:
        raise UserError(f"encryption keyformat {keyformat!r} is not supported", f"use one of {', '.join(KEYFORMATS)}")
    key = encryption.get("key")
    if not key or not isinstance(key, str):
        raise UserError("encryption is enabled but no key was given",
                        "pass the key (from a vault) in encryption.key; it goes to zfs on stdin, never on the "
                        "command line")
    if keyformat == "passphrase" and not 8 <= len(key) <= 512:
        raise UserError("the encryption passphrase must be 8 to 512 characters long (ZFS rule)",
                        "use a longer passphrase")
    if keyformat == "hex" and not re.match(r"^[0-9a-fA-F]{64}$", key):
        raise UserError("a hex encryption key must be 64 hexadecimal characters (32 bytes)", "generate one with "
                        "`openssl rand -hex 32`")
    if keyformat == "raw" and len(key.encode()) != 32:
        raise UserError("a raw encryption key must be exactly 32 bytes", "use keyformat: hex for a printable key")
    return {"enabled": True, "key": key, "keyformat": keyformat,
            "algorithm": encryption.get("algorithm") or "aes-256-gcm"}


def create_argv(name: str, properties: dict, encryption: dict | None = None, volume_size: str | None = None,
                check_only: bool = False) -> list:
    """zfs create [-n -v] -p [-V SIZE] -o k=v ... [-o encryption=... -o keyformat=... -o keylocation=prompt]
    -o fabric:managed=true NAME (a key, if any, goes on stdin)."""
    argv = ["zfs", "create"] + (["-n", "-v"] if check_only else []) + ["-p"]  # -n: ZFS's own validation
    if volume_size is not None:
        argv += ["-V", str(volume_size)]
    for key, value in properties.items():
        if key != MANAGED_PROP:
            argv += ["-o", f"{key}={value}"]
    if encryption and encryption.get("enabled"):
        argv += ["-o", f"encryption={encryption['algorithm']}", "-o", f"keyformat={encryption['keyformat']}",
                 "-o", "keylocation=prompt"]
    return argv + ["-o", f"{MANAGED_PROP}=true", name]


# --------------------------------------------------------------------------------------------------
# converging a dataset: declared spec, live state, a pure plan, one applier


@dataclass
class DatasetSpec:
    """A declared dataset, validated: nothing wrong in it is found only after a command ran."""

    name: str
    properties: dict  # property -> value as text (booleans as on/off)
    encryption: dict | None = None  # _validate_encryption's form; None: not declared
    volume_size: str | None = None  # as declared; None for a filesystem
    adopt: bool = False
    warnings: list = field(default_factory=list)  # what validation found worth saying (dedup's RAM cost)


def dataset_spec(name: str, properties: dict | None = None, encryption: dict | None = None,
                 allow_dedup: bool = False, volume_size=None, adopt: bool = False) -> DatasetSpec:
    """Validate a declared dataset (or volume, with ``volume_size``); UserError before any command."""
    validate_dataset_name(name)
    warnings: list = []
    props = _validate_properties(dict(properties or {}), allow_dedup, warnings)
    enc = _validate_encryption(encryption)
    if volume_size is not None:
        size = parse_size(volume_size)
        if size <= 0:
            raise UserError(f"volume_size {volume_size!r} must be larger than 0", "give a size such as 100G")
        if "volsize" in props:
            raise UserError("give the volume size once", "use volume_size, not properties.volsize")
    return DatasetSpec(name=name, properties=props, encryption=enc,
                       volume_size=None if volume_size is None else str(volume_size), adopt=adopt, warnings=warnings)


@dataclass
class LiveDataset:
    """What ZFS says of a dataset: its properties, or None when it does not exist."""

    props: dict | None  # {property: (value, source)} of `zfs get -j -p all NAME`
    # for a dataset that does not exist, read in a dry run only: whether its pool exists, so that
    # `zfs create -n` can check the creation (None: not read)
    pool_exists: bool | None = None


def read_dataset(runner: Runner, name: str) -> LiveDataset:
    """The live state of NAME: `zfs get -j -p all NAME`; in a dry run, for a missing dataset, its pool's
    existence too (`zpool list -j --json-int POOL`: check mode of a whole run plans datasets of a pool that an
    earlier task only planned)."""
    props = get_props(runner, name).get(name)
    pool_exists = None
    if props is None and runner.dry_run:
        pool_exists = runner.run(["zpool", "list", *zjson.ZPOOL_JSON, name.split("/")[0]], check=False).ok
    return LiveDataset(props=props, pool_exists=pool_exists)


@dataclass
class DatasetPlan:
    """The steps that turn a live dataset into the declared one, and what they change."""

    name: str
    steps: list  # list[Step]; empty when nothing changes
    created: bool = False
    changed_properties: dict = field(default_factory=dict)  # {prop: {before, after}}
    before: dict = field(default_factory=dict)
    after: dict = field(default_factory=dict)  # predicted
    warnings: list = field(default_factory=list)


def plan_dataset(spec: DatasetSpec, live: LiveDataset) -> DatasetPlan:
    """The plan for ``spec`` over ``live`` (pure: no command). Raises UserError/UnsafeOperation for what may
    not change (encryption, the properties fixed at creation, a shrinking volume, a dataset this project did
    not create without ``adopt``), before any step."""
    warnings = list(spec.warnings)
    if live.props is None:
        return _plan_create(spec, live, warnings)
    return _plan_change(spec, live.props, warnings)


def _plan_create(spec: DatasetSpec, live: LiveDataset, warnings: list) -> DatasetPlan:
    name, enc, props = spec.name, spec.encryption, spec.properties
    argv = create_argv(name, props, enc, spec.volume_size)
    key = enc["key"] if enc and enc.get("enabled") else None
    check = None
    if live.pool_exists is False:
        # check mode of a whole run: the pool is created by an earlier task that did not run
        warnings.append(f"pool {name.split('/')[0]} does not exist yet: `zfs create -n` cannot check {name} now; "
                        "it is created once the pool exists")
    else:
        check = create_argv(name, props, enc, spec.volume_size, check_only=True)
    kind = "volume" if spec.volume_size is not None else "filesystem"
    what = f"create {kind} {name}" + (f" of {spec.volume_size}" if spec.volume_size is not None else "")
    shown = [f"{k}={v}" for k, v in props.items() if k != MANAGED_PROP]
    if enc and enc.get("enabled"):
        shown.append(f"encryption={enc['algorithm']} (key on stdin)")
    step = Step(description=what + (f" with {', '.join(shown)}" if shown else "") + f" and {MANAGED_PROP}=true",
                argv=argv, data=key, dry_run_argv=check,
                # /dev/zvol/... appears after zfs create returns
                follow_up=[["udevadm", "settle"]] if spec.volume_size is not None else [])
    after = {"exists": True, "type": kind, **props}
    if spec.volume_size is not None:
        after["volsize"] = spec.volume_size
    if enc and enc.get("enabled"):
        after.update(encryption=enc["algorithm"], keyformat=enc["keyformat"])
    after[MANAGED_PROP] = "true"
    changed = {k: {"before": None, "after": v} for k, v in after.items() if k not in ("exists", "type")}
    return DatasetPlan(name=name, steps=[step], created=True, changed_properties=changed, before={"exists": False},
                       after=after, warnings=warnings)


def _plan_change(spec: DatasetSpec, live: dict, warnings: list) -> DatasetPlan:
    name, enc = spec.name, spec.encryption
    kind = live.get("type", ("", ""))[0]
    if spec.volume_size is not None and kind != "volume":
        raise UserError(f"{name} exists as a {kind}, not a volume", "use another name for the volume, or drop "
                        "volume_size")
    # a volume declared without size: its size is left alone
    live_enc = live.get("encryption", ("off", ""))[0]
    if enc is not None:
        if enc["enabled"] and live_enc == "off":
            raise UserError(f"{name} exists unencrypted; encryption can only be chosen when a dataset is created",
                            "create a new encrypted dataset and copy the data (zfs send | zfs receive), or drop "
                            "the encryption option")
        if not enc["enabled"] and live_enc != "off":
            raise UserError(f"{name} is encrypted ({live_enc}); encryption cannot be removed",
                            "create a new dataset without encryption and copy the data")
        if enc["enabled"]:
            if normalize("encryption", enc["algorithm"]) != live_enc:
                raise UserError(f"{name} is encrypted with {live_enc}, not {enc['algorithm']}; the algorithm is fixed "
                                "at creation", f"declare algorithm {live_enc}")
            live_fmt = live.get("keyformat", ("", ""))[0]
            if live_fmt != enc["keyformat"]:
                raise UserError(f"{name} has keyformat {live_fmt}, not {enc['keyformat']}",
                                "change it with `zfs change-key`, or declare the current keyformat")
    wanted = dict(spec.properties)
    if spec.volume_size is not None:
        wanted["volsize"] = spec.volume_size
    changes: dict = {}
    for key, value in wanted.items():
        have = live.get(key)
        if have is None:
            if ":" in key:
                have = ("-", "-")
            else:
                raise UserError(f"{name} has no property {key!r}", "check the name with `zfs get all " + name + "`")
        if normalize(key, have[0]) == normalize(key, value):
            continue
        if key in CREATE_ONLY:
            raise UserError(f"{key} of {name} is {have[0]} and cannot change after creation (declared {value})",
                            f"declare {key}: {have[0]}, or create a new dataset and copy the data")
        if key == "volsize" and parse_size(value) < parse_size(have[0]):
            raise UnsafeOperation(f"shrinking volume {name} from {have[0]} to {parse_size(value)} bytes would "
                                  "destroy data at its end", "declare the current size or larger")
        changes[key] = {"before": have[0], "after": value}
    before = {"exists": True, **{k: live[k][0] if k in live else None for k in wanted}}
    after = {"exists": True, **{k: (changes[k]["after"] if k in changes else live[k][0]) for k in wanted
                                if k in changes or k in live}}
    steps = []
    if changes:
        managed = live.get(MANAGED_PROP, ("-", "-"))
        owned = managed[0] == "true" and managed[1] == "local"
        if not owned and not spec.adopt:
            raise UnsafeOperation(f"{name} exists but was not created by this project ({MANAGED_PROP}=true is not "
                                  "set on it); refusing to change it",
                                  "set adopt=true to take it over (sets fabric:managed=true), or use another name")
        settings = [f"{k}={v['after']}" for k, v in changes.items()]
        description = f"set {', '.join(settings)} on {name}"
        if not owned:
            settings.append(f"{MANAGED_PROP}=true")
            description += f" and adopt it ({MANAGED_PROP}=true)"
            warnings.append(f"adopted {name}: set {MANAGED_PROP}=true")
        steps.append(Step(description=description, argv=["zfs", "set", *settings, name]))
    return DatasetPlan(name=name, steps=steps, changed_properties=changes, before=before, after=after,
                       warnings=warnings)


def apply_dataset(runner: Runner, plan: DatasetPlan) -> dict:
    """Run the plan's steps (apply_steps) and report: {changed, created, changed_properties, commands, warnings,
    prepared, before, after, steps}."""
    done = apply_steps(runner, plan.steps)
    return {"changed": bool(plan.steps), "created": plan.created, "changed_properties": plan.changed_properties,
            "commands": done.commands, "warnings": [*plan.warnings, *done.warnings], "prepared": done.prepared,
            "before": plan.before, "after": plan.after, "steps": [step.to_dict() for step in plan.steps]}


def ensure_dataset(runner: Runner, *, name: str, properties: dict | None = None, encryption: dict | None = None,
                   allow_dedup: bool = False, volume_size=None, adopt: bool = False) -> dict:
    """Create the dataset (or volume when ``volume_size`` is set) or set the properties that differ: validate,
    read (read_dataset), plan (plan_dataset, pure), apply (apply_dataset).

    Returns {changed, created, changed_properties {prop: {before, after}}, commands, warnings, prepared,
    before, after, steps}. Never destroys; refuses to change what cannot change after creation
    (encryption, casesensitivity, normalization, utf8only, volblocksize) and to shrink a volume.
    An existing dataset without a local fabric:managed=true is changed only with ``adopt=True``.
    """
    spec = dataset_spec(name, properties, encryption, allow_dedup, volume_size, adopt)
    return apply_dataset(runner, plan_dataset(spec, read_dataset(runner, spec.name)))


__all__ = ["DEDUP_WARNING", "DatasetPlan", "DatasetSpec", "LiveDataset", "apply_dataset", "create_argv",
           "dataset_spec", "ensure_dataset", "get_props", "list_datasets", "list_rows", "normalize", "parse_get",
           "parse_size", "plan_dataset", "read_dataset", "rows_of"]
