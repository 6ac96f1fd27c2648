"""fabricctl's configuration: /etc/fabricctl/config.yml (written by the fabricctl role), validated whole.

``load(path)`` reads and validates the file; ``from_dict(raw)`` validates an already parsed mapping
(tests, ``fabricctl config check``). Every problem is a ``UserError`` that names the key, where it is
(``ssh.connect_timeout``), the file, and the fix; an unknown key also names the closest valid one.

What is validated here: names (fabric_core.base.names), addresses, paths, numbers, CHAP, hosts and
groups (a host without ``initiator`` gets ``names.initiator_name(initiator_base, NAME)``, the fabric's one rule
of a GPU node's initiator name, from the top-level ``initiator_base``: the site's fabric_iqn_base). ``retention``
is kept as the raw mapping (only its two top-level keys are checked):
``fabric_core.services.retention.parse_policies(config.retention, config.metrics)`` validates the policies.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fabric_core.base import rules
from fabric_core.base.errors import NotFound, UserError
from fabric_core.base.lock import DEFAULT_WAIT as LOCK_DEFAULT_WAIT
from fabric_core.base.names import (
    initiator_name,
    validate_backstore_prefix,
    validate_dataset_name,
    validate_hostname,
    validate_iqn,
    validate_iqn_base,
    validate_metric_name,
    validate_pool_name,
    validate_user_name,
)
from fabric_core.base.rules import LIO, ChapError, parse_chap
from fabric_core.node.iscsi import normalize_portal
from fabric_core.services.health import KEYS as HEALTH_KEYS
from fabric_core.services.health import Thresholds

if TYPE_CHECKING:  # the publishing service is imported where it is used (publishing())
    from fabric_core.services.publish import Settings

DEFAULT_PATH = "/etc/fabricctl/config.yml"
ENV_PATH = "FABRICCTL_CONFIG"

GET_CONFIG_FIX = ("the fabricctl role writes it: run `ansible-playbook playbooks/fabricctl.yml` (or the whole "
                  "`playbooks/site.yml`) from the repository; to use another file set FABRICCTL_CONFIG=PATH")

_HOSTNAME = re.compile(r"^(?=.{1,253}$)([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}"
                       r"[A-Za-z0-9])?)*\.?$")
_GROUP = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")  # Ansible group names; no ',' (target lists)

CHAP_KEYS = LIO.names  # the configuration speaks LIO's names (fabric_core.base.rules)
RETENTION_KEYS = ("policies", "assign")


# --------------------------------------------------------------------------------------------
# the configuration


@dataclass(frozen=True)
class SSHConfig:
    user: str = "root"
    key_file: str = "/etc/fabricctl/id_ed25519"
    known_hosts: str = "/etc/fabricctl/known_hosts"
    connect_timeout: float = 10.0
    port: int = 22
    access: str = "shell"  # GPU_ACCESS: agent (the forced command fabric-node --ssh), shell, none (pull only)


@dataclass(frozen=True)
class Host:
    """A GPU node: its inventory name, the address fabricctl reaches it at, its initiator IQN and its own CHAP
    credentials (None only with insecure_no_chap)."""

    name: str
    address: str
    initiator: str
    chap: rules.Chap | None = None


@dataclass(frozen=True)
class StorageNode:
    """Another storage node: where fabricctl replicates to (over SSH, to its restricted replica-serve)."""

    name: str
    address: str


@dataclass(frozen=True)
class Portal:
    ip: str
    port: int = 3260

    @property
    def address(self) -> str:
        """``IP:PORT`` (``[IP]:PORT`` for IPv6), as iscsiadm and the by-path device names write it."""
        return normalize_portal(f"[{self.ip}]:{self.port}" if ":" in self.ip else f"{self.ip}:{self.port}")


@dataclass(frozen=True)
class Defaults:
    fs: str = "ext4"
    manifest_workers: int = 4
    parallel_hosts: int = 16
    thaw_after_seconds: int = 30  # a checkpoint's writer is thawed by a timer after this long, whatever happens


@dataclass(frozen=True)
class Rotation:
    metrics_file: str | None = "/var/lib/prometheus/node-exporter/fabricctl.prom"  # None: no metrics written


@dataclass(frozen=True)
class Lock:
    """The node lock every change takes (fabric_core.base.lock; its file is fixed, shared with the Ansible modules)."""

    wait_seconds: float = LOCK_DEFAULT_WAIT  # how long a change waits for another one to finish


# rotation.lock_file: rotate's own lock before the node lock replaced it; accepted (config files the
# role wrote before carry it) and ignored, with a warning.
OBSOLETE_LOCK_FILE = ("rotation.lock_file is obsolete and ignored: every change takes the node lock "
                      "(/run/fabric/node.lock); re-run playbooks/fabricctl.yml to rewrite the configuration without it")
LOCK_WAIT_MAX = 3600.0


@dataclass
class Config:
    pool: str
    dataset_root: str
    checkpoint_root: str
    iqn_base: str
    portal: Portal
    backstore_prefix: str = "fctl_"
    mount_root: str = "/datasets"
    checkpoint_mount_root: str = "/checkpoints"
    staging_root: str = "/srv/fabricctl/staging"
    state_dir: str = "/var/lib/fabricctl"
    ssh: SSHConfig = field(default_factory=SSHConfig)
    hosts: dict[str, Host] = field(default_factory=dict)
    groups: dict[str, list[str]] = field(default_factory=dict)
    node: str = ""  # this storage node's name (its inventory name): replicas record where they came from
    storage_nodes: dict[str, StorageNode] = field(default_factory=dict)  # the other storage nodes
    insecure_no_chap: bool = False  # exports without CHAP allowed (an isolated lab only; status warns)
    defaults: Defaults = field(default_factory=Defaults)
    metrics: list[str] = field(default_factory=list)
    retention: dict = field(default_factory=dict)  # raw: fabric_core.services.retention.parse_policies validates it
    rotation: Rotation = field(default_factory=Rotation)
    lock: Lock = field(default_factory=Lock)
    health: Thresholds = field(default_factory=Thresholds)  # when `status` warns (fabric_core.services.health)
    source: str = "<dict>"
    deprecations: list[str] = field(default_factory=list)  # warnings about obsolete keys, for the operator

    # ---- paths

    def dataset(self, name: str) -> str:
        """The ZFS dataset of dataset NAME: <dataset_root>/<NAME>."""
        return validate_dataset_name(f"{self.dataset_root}/{name}")

    def checkpoint(self, job: str) -> str:
        """The ZFS dataset of checkpoint job JOB: <checkpoint_root>/<JOB>."""
        return validate_dataset_name(f"{self.checkpoint_root}/{job}")

    def publishing(self) -> Settings:
        """What the publishing service needs of this configuration (fabric_core.services.publish.Settings)."""
        # imported here: fabric_core.services.publish brings the LIO, iSCSI, multipath and udev code, about 1 s of an
        # emulated lab node's CPU, which the commands that never publish (list, rotate, checkpoint list) skip
        from fabric_core.services.publish import Settings  # pylint: disable=import-outside-toplevel

        return Settings(iqn_base=self.iqn_base, backstore_prefix=self.backstore_prefix, portal_ip=self.portal.ip,
                        portal_port=self.portal.port, dataset_root=self.dataset_root, mount_root=self.mount_root,
                        checkpoint_root=self.checkpoint_root, checkpoint_mount_root=self.checkpoint_mount_root,
                        chap={h.initiator: h.chap for h in self.hosts.values() if h.chap},
                        insecure_no_chap=self.insecure_no_chap)

    # ---- hosts

    def host(self, name: str, option: str = "") -> Host:
        """One GPU node by name. ``option`` (e.g. ``--writer``) names where a person gave it: a group or a list
        there is refused saying that it takes one host."""
        if name in self.hosts:
            return self.hosts[name]
        wanted = f"{option} takes one host" if option else "one host is wanted here"
        if name in self.groups:
            members = ", ".join(self.groups[name])
            raise UserError(f"{name!r} is a group ({members or 'no hosts'}), and {wanted}",
                            f"name one host{': one of ' + members if members else ''}")
        parts = [p.strip() for p in str(name or "").split(",") if p.strip()]
        if len(parts) > 1:
            raise UserError(f"{name!r} is a list of {len(parts)} names, and {wanted}",
                            f"name one host, e.g. {parts[0]!r}")
        raise self._unknown_target(name)

    def resolve_targets(self, spec: str) -> list[Host]:
        """``"gpu_nodes"``, ``"gpu1,gpu2"`` or a mix -> hosts, duplicates collapsed, in the order given."""
        names = [part.strip() for part in str(spec or "").split(",")]
        names = [n for n in names if n]
        if not names:
            raise UserError("no hosts given", f"name hosts or groups, for example `{self._example_spec()}`")
        out: dict[str, Host] = {}
        for name in names:
            if name in self.groups:
                members = self.groups[name]
                if not members:
                    raise UserError(f"group {name!r} has no hosts ({self.source})",
                                    "add hosts to it in the configuration (fabricctl_groups of the role), "
                                    "or name hosts instead")
                for member in members:
                    out.setdefault(member, self.hosts[member])
            elif name in self.hosts:
                out.setdefault(name, self.hosts[name])
            else:
                raise self._unknown_target(name)
        return list(out.values())

    def storage_node(self, name: str) -> StorageNode:
        """Another storage node by name (replication's --to)."""
        if name in self.storage_nodes:
            return self.storage_nodes[name]
        if name and name == self.node:
            raise UserError(f"{name} is this node", "name another storage node: replication copies to other nodes")
        hint = rules.suggestion(name, self.storage_nodes)
        raise NotFound(f"unknown storage node {name!r} (known: {', '.join(sorted(self.storage_nodes)) or 'none'}; "
                       f"from {self.source})", f"{hint + ' ' if hint else ''}storage nodes come from the inventory's "
                       "storage_nodes group: add it there and re-run playbooks/fabricctl.yml")

    def _unknown_target(self, name: str) -> NotFound:
        known = sorted(self.hosts) + sorted(self.groups)
        hint = rules.suggestion(name, known)
        hint = f"{hint} " if hint else ""
        listing = (f"hosts: {', '.join(sorted(self.hosts)) or 'none'}; "
                   f"groups: {', '.join(sorted(self.groups)) or 'none'}")
        return NotFound(f"unknown host or group {name!r} (known {listing}; from {self.source})",
                        f"{hint}use one of the known names; new GPU nodes are added by re-running "
                        "playbooks/fabricctl.yml after adding them to the inventory")

    def _example_spec(self) -> str:
        if self.groups:
            return sorted(self.groups)[0]
        return ",".join(sorted(self.hosts)[:2]) or "gpu1,gpu2"


# --------------------------------------------------------------------------------------------
# loading


def default_path() -> str:
    return os.environ.get(ENV_PATH) or DEFAULT_PATH


def load(path: str | os.PathLike | None = None) -> Config:
    """Read and validate the configuration file (default: $FABRICCTL_CONFIG or /etc/fabricctl/config.yml)."""
    path = os.fspath(path) if path is not None else default_path()
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        raise UserError(f"fabricctl configuration {path} does not exist", GET_CONFIG_FIX) from None
    except PermissionError:
        raise UserError(f"cannot read the fabricctl configuration {path}: permission denied (it may hold CHAP "
                        "secrets and is readable by root only)", "run fabricctl as root (sudo fabricctl ...)") from None
    except IsADirectoryError:
        raise UserError(f"fabricctl configuration {path} is a directory", GET_CONFIG_FIX) from None
    except UnicodeDecodeError as exc:
        raise UserError(f"fabricctl configuration {path} is not UTF-8 text ({exc.reason})", GET_CONFIG_FIX) from None
    raw = _json_config(text)
    if raw is not None:
        return from_dict(raw, source=path)
    import yaml  # PyYAML (python3-yaml on the nodes): only for a file that is not the role's JSON

    try:
        raw = yaml.load(text, Loader=_strict_loader())  # noqa: S506 - a SafeLoader subclass (duplicate keys refused)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise UserError(f"{path} is not valid YAML{where}: {exc.problem or exc}",
                        "fix the syntax (the role writes valid YAML: re-run playbooks/fabricctl.yml to restore it)"
                        ) from None
    except yaml.YAMLError as exc:
        raise UserError(f"{path} is not valid YAML: {exc}", "fix the syntax") from None
    if raw is None:
        raise UserError(f"fabricctl configuration {path} is empty", GET_CONFIG_FIX)
    return from_dict(raw, source=path)


class _DuplicateKey(Exception):
    pass


def _unique_keys(pairs: list) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def _json_config(text: str):
    """The configuration when the file is JSON (the role writes it so: JSON is a subset of YAML, read by the json
    module in milliseconds where importing PyYAML alone costs about 0.5 s of an emulated lab node's CPU at every
    command), after its leading comment lines; None for anything else (hand-written YAML, a duplicate key, broken
    text), which PyYAML then reads, or explains with its line and column."""
    lines = text.splitlines(keepends=True)
    start = 0
    while start < len(lines) and (lines[start].lstrip().startswith("#") or not lines[start].strip()):
        start += 1
    body = "".join(lines[start:])
    if not body.lstrip().startswith("{"):
        return None
    try:
        return json.loads(body, object_pairs_hook=_unique_keys)
    except (ValueError, _DuplicateKey):  # json.JSONDecodeError is a ValueError
        return None


def _strict_loader():
    """yaml.SafeLoader that refuses duplicate keys (PyYAML would keep the last one silently)."""
    import yaml

    class StrictSafeLoader(yaml.SafeLoader):
        pass

    def construct_mapping(loader, node, deep=False):
        seen: dict = {}
        for key_node, _value in node.value:
            key = loader.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping", node.start_mark,
                    f"duplicate key {key!r} (first at line {seen[key].line + 1})", key_node.start_mark)
            seen[key] = key_node.start_mark
        return loader.construct_mapping(node, deep=deep)

    StrictSafeLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, construct_mapping)
    return StrictSafeLoader


# --------------------------------------------------------------------------------------------
# validation


class _Checker:
    def __init__(self, source: str):
        self.source = source

    def fail(self, where: str, problem: str, fix: str = "") -> UserError:
        return UserError(f"{self.source}: {where}: {problem}", fix or "correct the value (the fabricctl role writes "
                         "this file from its fabricctl_* variables; fix them and re-run playbooks/fabricctl.yml)")

    def mapping(self, value, where: str, allowed: tuple, required: tuple = ()) -> dict:
        if not isinstance(value, dict):
            raise self.fail(where or "top level", f"expected a mapping with keys {', '.join(allowed)}, "
                            f"got {_kind(value)}")
        for key in rules.unknown_keys(value, allowed)[:1]:
            place = f"{where}.{key}" if where else str(key)
            hint = rules.suggestion(key, allowed)
            raise UserError(f"{self.source}: unknown key {key!r} at {place}",
                            f"{hint + ' ' if hint else ''}valid keys {'at ' + where if where else 'at the top level'}: "
                            f"{', '.join(allowed)}")
        for key in required:
            if value.get(key) in (None, ""):
                place = f"{where}.{key}" if where else key
                raise self.fail(place, "is required and missing")
        return value

    def string(self, value, where: str, pattern: re.Pattern | None = None, what: str = "") -> str:
        if not isinstance(value, str) or not value:
            raise self.fail(where, f"expected a non-empty string, got {_kind(value)}")
        if pattern is not None and not pattern.fullmatch(value):
            raise self.fail(where, f"{value!r} is not a valid {what}")
        return value

    def integer(self, value, where: str, low: int, high: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(where, f"expected an integer {low}-{high}, got {_kind(value)}")
        if not low <= value <= high:
            raise self.fail(where, f"{value} is out of range {low}-{high}")
        return value

    def number(self, value, where: str, low: float, high: float) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(where, f"expected a number of seconds, got {_kind(value)}")
        if not low < value <= high:
            raise self.fail(where, f"{value} is out of range (more than {low:g}, at most {high:g})")
        return float(value)

    def path(self, value, where: str, *, mount_root: bool = False) -> str:
        value = self.string(value, where)
        try:
            return rules.validate_path(value, mount_root=mount_root)
        except UserError as exc:
            raise self.fail(where, exc.problem, exc.fix) from None

    def name(self, validator, value, where: str) -> str:
        """A value checked by a rule of the core (names, rules): its error, placed in this file."""
        try:
            return validator(value)
        except UserError as exc:
            raise UserError(f"{self.source}: {where}: {exc.problem}", exc.fix) from None

    def address(self, value, where: str) -> str:
        value = self.string(value, where)
        try:
            return str(ipaddress.ip_address(value))
        except ValueError:
            pass
        if _HOSTNAME.fullmatch(value) and not re.fullmatch(r"[0-9.]+", value):
            return value
        raise self.fail(where, f"{value!r} is neither an IP address nor a host name",
                        "give the address fabricctl reaches the host at (its storage-network IP)")


def _kind(value) -> str:
    if value is None:
        return "nothing (null)"
    return f"{type(value).__name__} {value!r}" if not isinstance(value, (dict, list)) else type(value).__name__


TOP_KEYS = ("pool", "dataset_root", "checkpoint_root", "iqn_base", "initiator_base", "portal", "backstore_prefix",
            "mount_root", "checkpoint_mount_root", "staging_root", "state_dir", "ssh", "hosts", "groups", "chap",
            "insecure_no_chap", "defaults", "metrics", "retention", "rotation", "lock", "health", "node",
            "storage_nodes")
SSH_KEYS = ("user", "key_file", "known_hosts", "connect_timeout", "port", "access")
# what this node's key may do on the GPU nodes (role fabricctl, fabricctl_gpu_access): ask the node agent only
# (its forced command, every command that acts on a host), run commands (an older installation), or nothing (pull only)
GPU_ACCESS = ("agent", "shell", "none")
PORTAL_KEYS = ("ip", "port")
HOST_KEYS = ("address", "initiator", "chap")
STORAGE_NODE_KEYS = ("address",)
DEFAULTS_KEYS = ("fs", "manifest_workers", "parallel_hosts", "thaw_after_seconds")
ROTATION_KEYS = ("metrics_file", "lock_file")  # lock_file: obsolete, see OBSOLETE_LOCK_FILE
LOCK_KEYS = ("wait_seconds",)


def from_dict(raw: Any, source: str = "<dict>") -> Config:
    """Validate a parsed configuration mapping; fill in defaults for missing optional keys."""
    c = _Checker(source)
    raw = c.mapping(raw, "", TOP_KEYS, required=("pool", "iqn_base", "portal"))

    pool = c.name(validate_pool_name, c.string(raw["pool"], "pool"), "pool")
    roots = {}
    for key, default in (("dataset_root", f"{pool}/datasets"), ("checkpoint_root", f"{pool}/checkpoints")):
        value = c.name(validate_dataset_name, c.string(raw.get(key, default), key), key)
        if value.split("/")[0] != pool or "/" not in value:
            raise c.fail(key, f"{value!r} is not a dataset inside pool {pool!r}",
                         f"use {pool}/{value.split('/')[-1]} or similar")
        roots[key] = value
    d, k = roots["dataset_root"], roots["checkpoint_root"]
    if d == k or d.startswith(k + "/") or k.startswith(d + "/"):
        raise c.fail("checkpoint_root", f"{k!r} and dataset_root {d!r} overlap",
                     "give datasets and checkpoints separate trees, such as tank/datasets and tank/checkpoints")

    iqn_base = c.name(validate_iqn_base, c.string(raw["iqn_base"], "iqn_base"), "iqn_base")

    portal_raw = c.mapping(raw["portal"], "portal", PORTAL_KEYS, required=("ip",))
    portal_ip = c.string(portal_raw["ip"], "portal.ip")
    try:
        portal_ip = str(ipaddress.ip_address(portal_ip))
    except ValueError:
        raise c.fail("portal.ip", f"{portal_ip!r} is not an IP address (iSCSI device paths are named by it)",
                     "give the storage node's storage-network IP address") from None
    portal = Portal(portal_ip, c.integer(portal_raw.get("port", 3260), "portal.port", 1, 65535))

    prefix = c.name(validate_backstore_prefix, c.string(raw.get("backstore_prefix", "fctl_"), "backstore_prefix"),
                    "backstore_prefix")
    paths = {key: c.path(raw.get(key, default), key, mount_root=True)
             for key, default in (("mount_root", "/datasets"), ("checkpoint_mount_root", "/checkpoints"),
                                  ("staging_root", "/srv/fabricctl/staging"))}
    if paths["mount_root"] == paths["checkpoint_mount_root"]:
        raise c.fail("checkpoint_mount_root", "is the same directory as mount_root",
                     "mount checkpoints and datasets under separate roots, such as /checkpoints and /datasets")
    state_dir = c.path(raw.get("state_dir", "/var/lib/fabricctl"), "state_dir")

    ssh = _ssh(c, raw.get("ssh", {}))
    if raw.get("chap") not in (None, {}):
        raise c.fail("chap", "one CHAP secret shared by every GPU node is refused: any of them could log in as "
                     "another (and to another's writable checkpoint volume)",
                     "give each host its own secret under hosts.NAME.chap (the fabricctl role writes them from the "
                     "per-host secrets: re-run playbooks/fabricctl.yml)")
    insecure = raw.get("insecure_no_chap", False)
    if not isinstance(insecure, bool):
        raise c.fail("insecure_no_chap", f"expected true or false, got {_kind(insecure)}")
    initiator_base = None
    if raw.get("initiator_base") is not None:
        initiator_base = c.name(validate_iqn_base, c.string(raw["initiator_base"], "initiator_base"), "initiator_base")
    hosts = _hosts(c, raw.get("hosts", {}), insecure, initiator_base)
    groups = _groups(c, raw.get("groups", {}), hosts)
    defaults = _defaults(c, raw.get("defaults", {}))
    metrics = _metrics(c, raw.get("metrics", []))

    retention = raw.get("retention")
    retention = {} if retention is None else c.mapping(retention, "retention", RETENTION_KEYS)

    rot = c.mapping(raw.get("rotation") or {}, "rotation", ROTATION_KEYS)
    metrics_file = rot.get("metrics_file", Rotation.metrics_file)
    rotation = Rotation(metrics_file=None if metrics_file in (None, "") else
                        c.path(metrics_file, "rotation.metrics_file"))
    deprecations = []
    if "lock_file" in rot:
        c.path(rot["lock_file"], "rotation.lock_file")
        deprecations.append(f"{source}: {OBSOLETE_LOCK_FILE}")
    lock = _lock(c, raw.get("lock"))
    health = _health(c, raw.get("health"))
    node = c.name(validate_hostname, raw["node"], "node") if raw.get("node") not in (None, "") else ""
    storage_nodes = _storage_nodes(c, raw.get("storage_nodes"), node, hosts)

    return Config(pool=pool, dataset_root=d, checkpoint_root=k, iqn_base=iqn_base, portal=portal,
                  backstore_prefix=prefix, state_dir=state_dir, ssh=ssh, hosts=hosts, groups=groups,
                  insecure_no_chap=insecure, node=node, storage_nodes=storage_nodes,
                  defaults=defaults, metrics=metrics, retention=retention, rotation=rotation, lock=lock,
                  health=health, source=source, deprecations=deprecations, **paths)


def _health(c: _Checker, raw) -> Thresholds:
    """When `fabricctl status` turns WARNING or CRITICAL (fabric_core.services.health.Thresholds; its defaults where a
    key is missing): percentages 1-100 and ages in days 1-3650, each critical threshold at least its warning."""
    raw = c.mapping(raw if raw is not None else {}, "health", HEALTH_KEYS)
    d = Thresholds()
    values = {key: c.integer(raw.get(key, getattr(d, key)), f"health.{key}", 1, 100 if "percent" in key else 3650)
              for key in HEALTH_KEYS}
    for what in ("capacity_{}_percent", "scrub_{}_days"):
        warn, crit = what.format("warn"), what.format("critical")
        if values[crit] < values[warn]:
            raise c.fail(f"health.{crit}", f"{values[crit]} is below health.{warn} ({values[warn]})",
                         f"give {crit} at least {warn} (a check warns first, then turns critical)")
    return Thresholds(**values)


def _lock(c: _Checker, raw) -> Lock:
    raw = c.mapping(raw if raw is not None else {}, "lock", LOCK_KEYS)
    wait = raw.get("wait_seconds", Lock.wait_seconds)
    if isinstance(wait, bool) or not isinstance(wait, (int, float)):
        raise c.fail("lock.wait_seconds", f"expected a number of seconds, got {_kind(wait)}")
    if not 0 <= wait <= LOCK_WAIT_MAX:
        raise c.fail("lock.wait_seconds", f"{wait} is out of range 0-{LOCK_WAIT_MAX:g}",
                     "give how long a change waits for another one to finish, e.g. 60 (0: do not wait)")
    return Lock(wait_seconds=float(wait))


def _ssh(c: _Checker, raw) -> SSHConfig:
    raw = c.mapping(raw if raw is not None else {}, "ssh", SSH_KEYS)
    d = SSHConfig()
    return SSHConfig(
        user=c.name(validate_user_name, c.string(raw.get("user", d.user), "ssh.user"), "ssh.user"),
        key_file=c.path(raw.get("key_file", d.key_file), "ssh.key_file"),
        known_hosts=c.path(raw.get("known_hosts", d.known_hosts), "ssh.known_hosts"),
        connect_timeout=c.number(raw.get("connect_timeout", d.connect_timeout), "ssh.connect_timeout", 0, 600),
        port=c.integer(raw.get("port", d.port), "ssh.port", 1, 65535),
        access=_access(c, raw.get("access", d.access)))


def _access(c: _Checker, value) -> str:
    if value not in GPU_ACCESS:
        raise c.fail("ssh.access", f"{value!r} is not one of {', '.join(GPU_ACCESS)}",
                     "agent: this node's key runs only the GPU nodes' agent (fabric-node --ssh); none: pull only "
                     "(hosts attach what they are granted); shell: an installation from before the agent")
    return value


def _hosts(c: _Checker, raw, insecure: bool = False, initiator_base: str | None = None) -> dict[str, Host]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise c.fail("hosts", f"expected a mapping NAME: {{address, initiator, chap}}, got {_kind(raw)}")
    hosts: dict[str, Host] = {}
    by_address: dict[str, str] = {}
    by_initiator: dict[str, str] = {}
    by_secret: dict[str, str] = {}
    for name, entry in raw.items():
        name = c.name(validate_hostname, name, f"hosts.{name}")
        where = f"hosts.{name}"
        entry = c.mapping(entry, where, HOST_KEYS, required=("address",))
        address = c.address(entry["address"], f"{where}.address")
        if entry.get("initiator") is not None:
            initiator = c.name(validate_iqn, c.string(entry["initiator"], f"{where}.initiator"), f"{where}.initiator")
        elif initiator_base:  # the fabric's one rule, as the roles derive it (filter fabric_initiator_name)
            initiator = c.name(lambda n: initiator_name(initiator_base, n), name, f"{where}.initiator")
        else:
            raise c.fail(f"{where}.initiator", "is missing, and there is no initiator_base to derive it from",
                         "give the host's initiator name (cat /etc/iscsi/initiatorname.iscsi on it), or set "
                         "initiator_base (the site's fabric_iqn_base): hosts then default to <initiator_base>:<NAME>")
        if address in by_address:
            raise c.fail(f"{where}.address", f"{address} is also the address of host {by_address[address]!r}",
                         "give each host its own address")
        if initiator in by_initiator:
            raise c.fail(f"{where}.initiator", f"{initiator} is also the initiator of host "
                         f"{by_initiator[initiator]!r}; the target ACLs could not tell them apart",
                         "give each host its own initiator name (see /etc/iscsi/initiatorname.iscsi on it)")
        by_address[address] = name
        by_initiator[initiator] = name
        chap = _chap(c, entry.get("chap"), f"{where}.chap")
        if chap is None and not insecure:
            raise c.fail(f"{where}.chap", "is missing: without its own CHAP secret, any host that sets this host's "
                         "initiator name could log in to its exports",
                         "re-run playbooks/fabricctl.yml (the role writes each GPU node's own secret); only on an "
                         "isolated lab, set insecure_no_chap: true")
        for secret in (chap.password, chap.mutual_password) if chap else ():
            if secret and by_secret.setdefault(secret, name) != name:
                raise c.fail(f"{where}.chap", f"shares a CHAP secret (not shown) with host {by_secret[secret]!r}: "
                             "either could log in as the other", "give every host its own secrets")
        hosts[name] = Host(name=name, address=address, initiator=initiator, chap=chap)
    with_chap = sorted(n for n, h in hosts.items() if h.chap)
    if with_chap and len(with_chap) != len(hosts):
        raise c.fail("hosts", f"CHAP is set for {', '.join(with_chap)} but not for the other hosts",
                     "give every host its own chap (or, on an isolated lab with insecure_no_chap, none)")
    return hosts


def _storage_nodes(c: _Checker, raw, node: str, hosts: dict[str, Host]) -> dict[str, StorageNode]:
    """The other storage nodes (this node, when listed, is left out: replication copies elsewhere)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise c.fail("storage_nodes", f"expected a mapping NAME: {{address}}, got {_kind(raw)}")
    out: dict[str, StorageNode] = {}
    for name, entry in raw.items():
        name = c.name(validate_hostname, name, f"storage_nodes.{name}")
        where = f"storage_nodes.{name}"
        entry = c.mapping(entry, where, STORAGE_NODE_KEYS, required=("address",))
        if name in hosts:
            raise c.fail(where, f"{name!r} is a GPU node under hosts too", "a node is a storage node or a GPU node")
        if name != node:
            out[name] = StorageNode(name, c.address(entry["address"], f"{where}.address"))
    return out


def _groups(c: _Checker, raw, hosts: dict[str, Host]) -> dict[str, list[str]]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise c.fail("groups", f"expected a mapping GROUP: [HOST, ...], got {_kind(raw)}")
    groups: dict[str, list[str]] = {}
    for name, members in raw.items():
        if not isinstance(name, str) or not _GROUP.fullmatch(name):
            raise c.fail(f"groups.{name}", f"invalid group name {name!r}: letters, digits, '_', '-', '.', at most 64",
                         "use the inventory group name, for example gpu_nodes")
        if name in hosts:
            raise c.fail(f"groups.{name}", f"{name!r} is the name of a host too, so `{name}` would be ambiguous",
                         "rename the group (for example gpu_nodes or rack1)")
        if members is None:
            members = []
        if not isinstance(members, list):
            raise c.fail(f"groups.{name}", f"expected a list of host names, got {_kind(members)}")
        clean: list[str] = []
        for i, member in enumerate(members):
            if not isinstance(member, str) or member not in hosts:
                hint = rules.suggestion(member, hosts)
                hint = f"{hint} " if hint else ""
                raise c.fail(f"groups.{name}[{i}]", f"{member!r} is not a host of this configuration "
                             f"(hosts: {', '.join(sorted(hosts)) or 'none'})",
                             f"{hint}list only hosts defined under `hosts`")
            if member not in clean:
                clean.append(member)
        groups[name] = clean
    return groups


def _chap(c: _Checker, raw, where: str) -> rules.Chap | None:
    """A host's CHAP credentials in LIO's names (fabric_core.base.rules.parse_chap); errors never show a secret."""
    if raw in (None, {}):
        return None
    raw = c.mapping(raw, where, CHAP_KEYS, required=("userid", "password"))
    for key in CHAP_KEYS:
        if raw.get(key) is not None and not isinstance(raw[key], str):
            raise c.fail(f"{where}.{key}", f"expected a string, got {type(raw[key]).__name__}")  # never the value
    try:
        return parse_chap(raw, LIO, where=f"{c.source}: ", prefix=f"{where}.")
    except ChapError as exc:
        raise UserError(exc.problem, exc.fix) from None


def _defaults(c: _Checker, raw) -> Defaults:
    raw = c.mapping(raw if raw is not None else {}, "defaults", DEFAULTS_KEYS)
    d = Defaults()
    fs = raw.get("fs", d.fs)
    if fs not in rules.FILESYSTEMS:
        raise c.fail("defaults.fs", f"{fs!r} is not supported", f"use one of {', '.join(rules.FILESYSTEMS)}")
    return Defaults(fs=fs,
                    manifest_workers=c.integer(raw.get("manifest_workers", d.manifest_workers),
                                               "defaults.manifest_workers", 1, 256),
                    parallel_hosts=c.integer(raw.get("parallel_hosts", d.parallel_hosts),
                                             "defaults.parallel_hosts", 1, 1024),
                    thaw_after_seconds=c.integer(raw.get("thaw_after_seconds", d.thaw_after_seconds),
                                                 "defaults.thaw_after_seconds", 5, 3600))


def _metrics(c: _Checker, raw) -> list[str]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise c.fail("metrics", f"expected a list of metric names, got {_kind(raw)}")
    out: list[str] = []
    for i, name in enumerate(raw):
        c.name(validate_metric_name, c.string(name, f"metrics[{i}]"), f"metrics[{i}]")
        if name in out:
            raise c.fail(f"metrics[{i}]", f"{name!r} is listed twice")
        out.append(name)
    return out
