"""The GPU-node agent's configuration: what the roles write for it, read and checked whole before anything else.

Two files, both root's alone (the role writes them 0600 in a 0700 directory; a file others may read or write
is refused, since it is what the agent trusts):

* ``/etc/fabric-node/config.json``: this node (its inventory name, its initiator name), the storage nodes it
  may attach from (name -> portal), the IQN base of fabricctl's targets (``fabricctl_iqn_base``: the target of
  NAME@VERSION is ``exports.dataset_on_node``'s), the mount root, the checkpoint mount root (where fabricctl's
  checkpoint volumes and restores are mounted: ``checkpoint_mount_root``, fabricctl's), the state directory,
  the lock's wait and, optionally, the command that says whether a job still runs (``job_alive_command``: argv
  with ``{job}``, e.g. ``["squeue", "-h", "-o", "%T", "-j", "{job}"]``; the Slurm hooks install it);
* ``/etc/fabric-node/credentials.json``: this node's own CHAP credentials in open-iscsi's names
  (``{"chap": {"username", "password", "username_in", "password_in"}}``), written into node records from
  stdin (``iscsi.RECORD_WRITER``), never on a command line; ``{"chap": null}`` only with
  ``insecure_no_chap`` (an isolated lab).
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass, field

from ..base.errors import UserError
from ..base.names import validate_hostname, validate_iqn, validate_iqn_base
from ..base.rules import OPEN_ISCSI, Chap, check_keys, parse_chap, validate_path
from .iscsi import normalize_portal

CONFIG_DIR = "/etc/fabric-node"
CONFIG_PATH = f"{CONFIG_DIR}/config.json"
CREDENTIALS_PATH = f"{CONFIG_DIR}/credentials.json"
STATE_DIR = "/var/lib/fabric-node"
LOCK_PATH = "/run/fabric/node.lock"  # the node lock (base.lock): the agent's calls and the roles' changes in turn
LOCK_WAIT = 300.0  # an attach may wait this long for another (a login to a storage node that is down: ~2 min)
ROLE_FIX = "re-run playbooks/site.yml (role fabric_node writes it)"
KEYS = ("host", "initiator", "iqn_base", "mount_root", "checkpoint_mount_root", "storage_nodes", "state_dir",
        "lock_wait_seconds", "job_alive_command", "insecure_no_chap", "multipath")
NODE_KEYS = ("portal",)
CREDENTIAL_KEYS = ("chap",)


@dataclass(frozen=True)
class StorageNode:
    name: str
    portal: str  # ADDRESS:PORT (iscsi.normalize_portal)


@dataclass(frozen=True)
class NodeConfig:
    host: str
    initiator: str
    iqn_base: str  # of fabricctl's targets
    storage_nodes: tuple = ()  # (StorageNode, ...), in the configuration's order
    mount_root: str = "/datasets"
    checkpoint_mount_root: str = "/checkpoints"  # fabricctl's: a job's volume at ROOT/JOB, its restores below
    state_dir: str = STATE_DIR
    lock_wait: float = LOCK_WAIT
    job_alive_command: tuple = ()  # argv with "{job}"; () none: only a reboot makes a job holder stale
    insecure_no_chap: bool = False
    multipath: bool = True  # several storage nodes' paths of a version as one multipath map (multipathd runs)
    chap: Chap | None = field(default=None, repr=False)

    def node_of(self, portal: str) -> str:
        """The storage node of a portal (the portal itself when none is configured with it)."""
        return next((n.name for n in self.storage_nodes if n.portal == portal), portal)

    def storage_node(self, name: str) -> StorageNode:
        """A storage node of this configuration by name (UserError naming the known ones otherwise)."""
        found = next((n for n in self.storage_nodes if n.name == name), None)
        if found is None:
            raise UserError(f"{name!r} is not one of this node's storage nodes "
                            f"({', '.join(n.name for n in self.storage_nodes)})", ROLE_FIX)
        return found


def _read(path: str, what: str, *, secret: bool) -> dict:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise UserError(f"{path} does not exist: this node has no fabric-node {what}", ROLE_FIX) from None
    except PermissionError:
        raise UserError(f"cannot read {path}: permission denied", "run fabric-node as root") from None
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror or exc}", ROLE_FIX) from None
    with os.fdopen(fd, encoding="utf-8") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise UserError(f"{path} is not a regular file", ROLE_FIX)
        if st.st_mode & (0o077 if secret else 0o022) or st.st_uid != os.geteuid():
            raise UserError(f"{path} is {'readable or writable' if secret else 'writable'} by others (mode "
                            f"{stat.S_IMODE(st.st_mode):04o}, owner uid {st.st_uid}): the agent trusts it",
                            f"chmod 0600 {path} and chown root (or {ROLE_FIX})")
        try:
            raw = json.load(fh)
        except ValueError as exc:
            raise UserError(f"{path} is not valid JSON: {exc.msg} (line {exc.lineno})" if not secret
                            else f"{path} is not valid JSON (its content is not shown)", ROLE_FIX) from None
    if not isinstance(raw, dict):
        raise UserError(f"{path} must hold a JSON object", ROLE_FIX)
    return raw


def parse(raw: dict, credentials: dict, source: str = CONFIG_PATH,
          credentials_source: str = CREDENTIALS_PATH) -> NodeConfig:
    """Both files' content checked whole (UserError naming the key and the fix; a secret is never shown)."""
    check_keys(raw, KEYS, source, ROLE_FIX)
    where = f"{source}: "
    try:
        host = validate_hostname(raw.get("host"))
        initiator = validate_iqn(raw.get("initiator"))
        iqn_base = validate_iqn_base(raw.get("iqn_base"))
        mount_root = validate_path(raw.get("mount_root", "/datasets"), mount_root=True)
        checkpoint_mount_root = validate_path(raw.get("checkpoint_mount_root", "/checkpoints"), mount_root=True)
        state_dir = validate_path(raw.get("state_dir", STATE_DIR))
    except UserError as err:
        raise UserError(where + err.problem, err.fix or ROLE_FIX) from None
    nodes_raw = raw.get("storage_nodes")
    if not isinstance(nodes_raw, dict) or not nodes_raw:
        raise UserError(f"{where}storage_nodes must name at least one storage node "
                        "({NAME: {portal: ADDRESS:PORT}})", ROLE_FIX)
    nodes = []
    for name, node in nodes_raw.items():
        if not isinstance(node, dict):
            raise UserError(f"{where}storage_nodes.{name} must be a mapping with portal", ROLE_FIX)
        check_keys(node, NODE_KEYS, f"{source}: storage_nodes.{name}", ROLE_FIX)
        try:
            nodes.append(StorageNode(validate_hostname(name), normalize_portal(node.get("portal"))))
        except UserError as err:
            raise UserError(f"{where}storage_nodes.{name}: {err.problem}", err.fix) from None
    if mount_root.rstrip("/") == checkpoint_mount_root.rstrip("/"):
        raise UserError(f"{where}checkpoint_mount_root is the same directory as mount_root", ROLE_FIX)
    portals = [n.portal for n in nodes]
    if len(set(portals)) != len(portals):
        raise UserError(f"{where}two storage nodes share a portal", "give each storage node its own address")
    wait = raw.get("lock_wait_seconds", LOCK_WAIT)
    if isinstance(wait, bool) or not isinstance(wait, (int, float)) or not 0 <= wait <= 3600:
        raise UserError(f"{where}lock_wait_seconds must be a number of seconds, 0-3600", ROLE_FIX)
    command = raw.get("job_alive_command") or []
    if not isinstance(command, list) or not all(isinstance(w, str) and w and w.isprintable() for w in command) \
            or (command and not any("{job}" in w for w in command)):
        raise UserError(f"{where}job_alive_command must be a list of words (argv) with {{job}} in one of them",
                        'for example ["squeue", "-h", "-o", "%T", "-j", "{job}"]')
    insecure = raw.get("insecure_no_chap", False)
    multipath = raw.get("multipath", True)
    for key, value in (("insecure_no_chap", insecure), ("multipath", multipath)):
        if not isinstance(value, bool):
            raise UserError(f"{where}{key} must be true or false", ROLE_FIX)
    check_keys(credentials, CREDENTIAL_KEYS, credentials_source, ROLE_FIX)
    chap = parse_chap(credentials.get("chap"), OPEN_ISCSI, where=f"{credentials_source}: ")
    if chap is None and not insecure:
        raise UserError(f"{credentials_source} has no CHAP credentials: every host logs in with its own",
                        f"{ROLE_FIX}; only on an isolated lab, insecure_no_chap: true (fabric_insecure_no_chap)")
    return NodeConfig(host=host, initiator=initiator, iqn_base=iqn_base, storage_nodes=tuple(nodes),
                      mount_root=mount_root, checkpoint_mount_root=checkpoint_mount_root, state_dir=state_dir,
                      lock_wait=float(wait),
                      job_alive_command=tuple(command), insecure_no_chap=insecure, multipath=multipath, chap=chap)


def load(path: str = CONFIG_PATH, credentials_path: str = CREDENTIALS_PATH) -> NodeConfig:
    """Read and check both files (root's alone: refused when others may read or write them)."""
    return parse(_read(path, "configuration", secret=False), _read(credentials_path, "credentials", secret=True),
                 path, credentials_path)
