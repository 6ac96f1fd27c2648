"""The iSCSI initiator side (open-iscsi, `iscsiadm`): parsers, node records, sessions, devices.

Everything runs through a ``Runner``: reads always run, state changes are ``mutating=True`` so a
dry run (Ansible check mode) does every read and plans the changes. Outputs were recorded from
open-iscsi 2.1.8 (Debian 12) in the lab; see tests/unit/data/iscsi/README.md.

Facts of iscsiadm this module relies on (checked in the lab):

* exit 21 (ISCSI_ERR_NO_OBJS_FOUND) means "No active sessions" / "No records found": not an error;
* exit 15 on login means a session exists already; exit 24 is an authorization failure (the
  initiator is not in the target's ACL, or CHAP is wrong); exit 8 (transport timeout) or 4/11 is
  a portal that cannot be reached;
* `iscsiadm -m node -T IQN -p PORTAL` prints the record as `key = value` with CHAP passwords
  masked as `********`; `-S` shows them (on stdout), which is the only way to compare them;
* `iscsiadm -m node -T IQN -p PORTAL -o new` makes a record without asking the portal. The fabric's
  storage nodes refuse SendTargets discovery (a host learns only the target names it is given), so
  records are made from the names the fabric gives, never from a discovery; with the fabric's TPG tag
  (`-p ADDRESS:PORT,1`, ``names.TPG_TAG``): a record made without one is the single file ADDRESS,PORT
  whatever its iface, which another iface's record of the same target and portal replaces or deletes.
  Every other command names the portal without the tag, which matches a record with any tag;
* a node record is a file, `/etc/iscsi/nodes/IQN/ADDRESS,PORT[,TPGT][/IFACE]` (`/var/lib/iscsi/nodes`
  on some distributions), `key = value` lines, mode 0600 (iscsiadm runs with umask 077); iscsiadm
  reads it at every login, and open-iscsi.service at boot. `iscsiadm -o update` takes the value on
  its command line, where every user sees it (`ps`, /proc/PID/cmdline): CHAP secrets are written into
  the record file instead (``RECORD_WRITER``: the values on stdin, a temporary file of mode 0600 in
  the record's directory, fsync, rename), and every other setting goes through `-o update`.

Sessions converge as plan, then apply: ``session_spec`` validates the declared state, ``read_session``
does every read, ``plan_session`` (pure) turns both into steps, conflicts, warnings and the predicted
after-state, and ``apply_session`` runs the plan; ``ensure_session`` is the three in a row.

CHAP secrets never appear on a command line, in returned commands or in error messages.
"""

from __future__ import annotations

import ipaddress
import json
import re
import shlex
import time
from dataclasses import dataclass, field

from ..base.errors import EXIT_USER, MASK, Busy, CommandBounded, CommandError, FabricError, UserError, redact_argv
from ..base.model import Step, apply_steps
from ..base.names import TPG_TAG, validate_iqn
from ..base.rules import OPEN_ISCSI, parse_chap
from .devices import wait_for_device, wait_for_disk

ISCSIADM = "iscsiadm"
DEFAULT_PORT = 3260

RC_NO_OBJECTS = 21  # "No active sessions." / "No records found"
RC_SESSION_EXISTS = 15
RC_AUTH_FAILED = 24
RC_UNREACHABLE = (4, 8, 11)  # transport error, transport timeout, PDU timeout

STARTUP_VALUES = ("automatic", "manual", "onboot")
STATES = ("logged_in", "logged_out")

AUTH_KEYS = {
    "username": "node.session.auth.username",
    "password": "node.session.auth.password",
    "username_in": "node.session.auth.username_in",
    "password_in": "node.session.auth.password_in",
}
SECRET_KEYS = ("node.session.auth.password", "node.session.auth.password_in")
NODE_RECORD_ROOTS = ("/etc/iscsi/nodes", "/var/lib/iscsi/nodes")  # Debian's, and where other builds keep them

# Writes secret settings into the node records of one target and portal: argv IQN ADDRESS PORT [--iface=NAME]
# ROOT..., stdin a JSON object {key: value} (an empty value removes the key). Every record of the target at that
# portal (any TPGT; any iface, or NAME's only) is rewritten through a temporary file of mode 0600 in its
# directory, fsync and rename; exit 2 when there is none. Run by ``apply_session`` with the host's python3
# (through the runner, so over SSH too): the secrets travel on stdin, never on a command line.
RECORD_WRITER = r"""
import json, os, sys
iqn, address, port, *roots = sys.argv[1:]
iface = roots.pop(0)[len("--iface="):] if roots and roots[0].startswith("--iface=") else None
def iface_of(path):  # a record file of the old layout (ADDRESS,PORT) names its iface inside
    with open(path) as fh:
        for line in fh:
            if line.split("=", 1)[0].strip() == "iface.iscsi_ifacename":
                return line.split("=", 1)[1].strip()
    return "default"
values = json.load(sys.stdin)
if any(not isinstance(v, str) or not v.isprintable() or " " in v for v in values.values()):
    sys.exit("refused: a value with white space or a control character")
found = []
for root in roots:
    base = os.path.join(root, iqn)
    if not os.path.isdir(base) or os.path.islink(base):
        continue
    for entry in sorted(os.listdir(base)):
        if entry.split(",")[:2] != [address, port]:
            continue
        path = os.path.join(base, entry)
        if os.path.islink(path):
            continue
        if os.path.isdir(path):
            found += [os.path.join(path, f) for f in sorted(os.listdir(path)) if iface in (None, f)
                      and os.path.isfile(os.path.join(path, f)) and not os.path.islink(os.path.join(path, f))]
        elif os.path.isfile(path) and iface in (None, iface_of(path)):
            found.append(path)
if not found:
    print("no node record of %s at %s:%s%s in %s" % (iqn, address, port, " for iface %s" % iface if iface else "",
                                                      " or ".join(roots)), file=sys.stderr)
    sys.exit(2)
for path in found:
    with open(path) as fh:
        lines = fh.read().splitlines()
    kept = [line for line in lines if line.split("=", 1)[0].strip() not in values]
    end = next((i for i, line in enumerate(kept) if line.startswith("# END RECORD")), len(kept))
    added = ["%s = %s" % (k, v) for k, v in values.items() if v]
    tmp = "%s.fabric-%d" % (path, os.getpid())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write("\n".join(kept[:end] + added + kept[end:]) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise
    dfd = os.open(os.path.dirname(path), os.O_RDONLY)
    os.fsync(dfd)
    os.close(dfd)
print(len(found))
"""


# --------------------------------------------------------------------------------------------
# errors


class LoginFailed(CommandError):
    """`iscsiadm --login` failed. ``reason`` is "authorization", "unreachable" or "other"."""

    exit_code = EXIT_USER
    reason = "other"

    def __init__(self, argv, rc: int, stdout: str, stderr: str, problem: str, fix: str):
        super().__init__(argv, rc, stdout, stderr, fix)
        self.problem = problem
        self.args = (problem,)

    def __str__(self) -> str:
        return f"{self.problem}\n  fix: {self.fix}" if self.fix else self.problem


class AuthorizationFailed(LoginFailed):
    """The target refused the login: initiator not in its ACL, or wrong CHAP credentials."""

    reason = "authorization"


class PortalUnreachable(LoginFailed):
    """No iSCSI connection to the portal (down, wrong address, firewall, no target listening)."""

    reason = "unreachable"


# --------------------------------------------------------------------------------------------
# names and helpers


def normalize_portal(portal: str) -> str:
    """`10.77.0.11` -> `10.77.0.11:3260`; `10.77.0.11:3261` stays; IPv6 as `[addr]:port`."""
    if not isinstance(portal, str) or not portal.strip():
        raise UserError("iSCSI portal is empty", "give the storage node's address, for example `10.77.0.11` "
                        "or `10.77.0.11:3260`")
    text = portal.strip(" ")
    if not text.isprintable():
        raise UserError(f"invalid iSCSI portal {portal!r}: it contains a control character (a newline?)",
                        "give the address on one line, for example `10.77.0.11:3260`")
    host, port = text, str(DEFAULT_PORT)
    if text.startswith("["):
        match = re.fullmatch(r"\[([^\]]+)\](?::(\d+))?", text)
        if not match:
            raise UserError(f"invalid iSCSI portal {portal!r}", "write an IPv6 portal as `[ADDRESS]:PORT`")
        host, port = match.group(1), match.group(2) or port
    elif text.count(":") == 1:
        host, port = text.split(":")
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        raise UserError(f"invalid iSCSI portal {portal!r}: {host!r} is not an IP address (the stable device path "
                        "/dev/disk/by-path/ip-ADDRESS:PORT-iscsi-IQN-lun-N is named by the address)",
                        "give the storage node's IP address, optionally with :PORT") from None
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise UserError(f"invalid iSCSI portal {portal!r}: port {port!r} is not 1-65535", "use the default port 3260")
    return f"[{addr}]:{int(port)}" if addr.version == 6 else f"{addr}:{int(port)}"


def by_path(portal: str, target_iqn: str, lun: int = 0) -> str:
    """The udev path of a LUN: /dev/disk/by-path/ip-ADDRESS:PORT-iscsi-IQN-lun-N."""
    return f"/dev/disk/by-path/ip-{normalize_portal(portal)}-iscsi-{target_iqn}-lun-{int(lun)}"


_BY_PATH = re.compile(r"^/dev/disk/by-path/ip-(?P<portal>\[[^\]]+\]:\d+|[0-9.]+:\d+)"
                      r"-iscsi-(?P<iqn>.+)-lun-(?P<lun>\d+)$")


def parse_by_path(path: str) -> dict | None:
    """The inverse of ``by_path``: {portal, target_iqn, lun}, or None for any other device path."""
    match = _BY_PATH.fullmatch(path or "")
    if not match:
        return None
    return {"portal": match.group("portal"), "target_iqn": match.group("iqn"), "lun": int(match.group("lun"))}


def redact(argv) -> list:
    """A copy of an argv with the value of every CHAP password setting replaced by ``MASK``
    (``errors.redact_argv``)."""
    return redact_argv(argv)


def _cmdline(argv) -> str:
    return shlex.join(redact(argv))


def credentials(chap: dict | None) -> dict | None:
    """CHAP credentials in open-iscsi's names (rules.parse_chap, OPEN_ISCSI view): all four fields, or None."""
    parsed = parse_chap(chap, OPEN_ISCSI)
    return parsed.fields(OPEN_ISCSI) if parsed else None


# --------------------------------------------------------------------------------------------
# parsers

_SESSION_LINE = re.compile(r"^(?P<transport>\S+): \[(?P<sid>\d+)\] (?P<portal>\S+),(?P<tpgt>-?\d+) (?P<target>\S+)")
_NODE_LINE = re.compile(r"^(?P<portal>\S+),(?P<tpgt>-?\d+) (?P<target>\S+)$")


def _tpgt(text: str) -> int:
    value = int(text)
    return -1 if value == 4294967295 else value  # a record made with `-o new` has no tpgt


def parse_sessions(text: str) -> list[dict]:
    """`iscsiadm -m session` or `iscsiadm -m session -P 1|3` -> list of sessions.

    Each: {target, portal, tpgt, sid, transport, state, connection_state, initiator, disks}; disks
    is a list of {lun, disk} (from -P 3; empty otherwise). "No active sessions." gives [].
    """
    sessions: list[dict] = []
    target = None
    current: dict | None = None
    host_lun = None
    for raw in text.splitlines():
        line = raw.strip()
        match = _SESSION_LINE.match(line)
        if match:
            sessions.append({"target": match["target"], "portal": match["portal"], "tpgt": _tpgt(match["tpgt"]),
                             "sid": int(match["sid"]), "transport": match["transport"], "state": None,
                             "connection_state": None, "initiator": None, "disks": []})
            continue
        if line.startswith("Target: "):
            target = line.split()[1]
            continue
        if line.startswith("Current Portal: ") and target:
            portal, _comma, tpgt = line.split(": ", 1)[1].rpartition(",")
            current = {"target": target, "portal": portal, "tpgt": _tpgt(tpgt), "sid": None, "transport": None,
                       "state": None, "connection_state": None, "initiator": None, "disks": []}
            sessions.append(current)
            continue
        if current is None:
            continue
        disk = re.match(r"^Attached scsi disk (\S+)", line)
        if disk:
            current["disks"].append({"lun": host_lun, "disk": disk.group(1)})
            continue
        key, sep, value = line.partition(": ")
        if not sep:
            continue
        value = value.strip()
        if key == "SID":
            current["sid"] = int(value)
        elif key == "Iface Transport":
            current["transport"] = value
        elif key == "Iface Initiatorname":
            current["initiator"] = value
        elif key == "iSCSI Session State":
            current["state"] = value
        elif key == "iSCSI Connection State":
            current["connection_state"] = value
        elif re.match(r"^scsi\d+ Channel \d+ Id \d+ Lun$", key):
            host_lun = int(value)
    return sessions


def parse_nodes(text: str) -> list[dict]:
    """`iscsiadm -m node` -> [{portal, tpgt, target}]; "No records found" gives []."""
    nodes = []
    for raw in text.splitlines():
        match = _NODE_LINE.match(raw.strip())
        if match:
            nodes.append({"portal": match["portal"], "tpgt": _tpgt(match["tpgt"]), "target": match["target"]})
    return nodes


def parse_discovery(text: str) -> list[dict]:
    """`iscsiadm -m discovery -t sendtargets -p PORTAL` -> [{portal, tpgt, target}]."""
    return parse_nodes(text)


def parse_node_record(text: str) -> dict:
    """`iscsiadm -m node -T IQN -p PORTAL [-S]` -> {key: value}; `<empty>` becomes ""."""
    record = {}
    for raw in text.splitlines():
        key, sep, value = raw.partition(" = ")
        if sep and key and not key.startswith(("#", "iscsiadm:")):
            value = value.strip()
            record[key.strip()] = "" if value == "<empty>" else value
    return record


# --------------------------------------------------------------------------------------------
# commands


def _node_argv(target_iqn: str, portal: str) -> list:
    return [ISCSIADM, "-m", "node", "-T", target_iqn, "-p", portal]


def read_sessions(runner) -> list[dict]:
    res = runner.run([ISCSIADM, "-m", "session", "-P", "3"], ok_rcs=(0, RC_NO_OBJECTS))
    return [] if res.rc == RC_NO_OBJECTS else parse_sessions(res.stdout)


def read_node_record(runner, target_iqn: str, portal: str, *, secrets: bool = False) -> dict | None:
    argv = _node_argv(target_iqn, portal) + (["-S"] if secrets else [])
    res = runner.run(argv, ok_rcs=(0, RC_NO_OBJECTS))
    return None if res.rc == RC_NO_OBJECTS else parse_node_record(res.stdout)


def discover(runner, portal: str) -> list[dict]:
    """SendTargets discovery without creating node records; raises PortalUnreachable. The fabric's own storage
    nodes refuse it (no session needs it); it serves other portals and diagnosis."""
    argv = [ISCSIADM, "-m", "discovery", "-t", "sendtargets", "-p", portal, "-o", "nonpersistent"]
    res = runner.run(argv, check=False)
    if res.rc != 0:
        raise PortalUnreachable(
            argv, res.rc, res.stdout, res.stderr,
            f"iSCSI discovery on portal {portal} failed (iscsiadm exit {res.rc}): {_last_line(res)}",
            f"check that {portal} is the storage node's storage address, that the node is up and its iSCSI target "
            "listens there (`ss -tln` on the node shows the port), and that no firewall is in between")
    return parse_discovery(res.stdout)


def _last_line(res) -> str:
    lines = [ln for ln in (res.stderr or res.stdout).strip().splitlines() if ln.strip()]
    return lines[-1].removeprefix("iscsiadm: ") if lines else "no output"


def find_session(sessions: list[dict], target_iqn: str, portal: str) -> dict | None:
    for s in sessions:
        if s["target"] == target_iqn and s["portal"] == portal:
            return s
    return None


def _login_error(argv, res, target_iqn: str, portal: str, initiator: str | None) -> LoginFailed:
    if res.rc == RC_AUTH_FAILED:
        who = f"this initiator ({initiator})" if initiator else "this initiator"
        return AuthorizationFailed(
            argv, res.rc, res.stdout, res.stderr,
            f"login to {target_iqn} at {portal} was refused: authorization failure (iscsiadm exit 24): either "
            f"{who} is not in the target's ACL, or the CHAP credentials are wrong",
            "on the storage node, add this host's initiator name (/etc/iscsi/initiatorname.iscsi) to the export's "
            "ACL; if the target uses CHAP, give the same username/password (and username_in/password_in for "
            "mutual CHAP) as the target's ACL; without CHAP the target's TPG needs authentication=0")
    if res.rc in RC_UNREACHABLE:
        return PortalUnreachable(
            argv, res.rc, res.stdout, res.stderr,
            f"login to {target_iqn} at {portal} failed: the portal cannot be reached or does not serve this target "
            f"(iscsiadm exit {res.rc}: {_last_line(res)})",
            f"check that {portal} is the storage node's storage address and the node is up, that the target "
            f"{target_iqn} exists and its portal is enabled, "
            f"and that no firewall blocks TCP port {portal.rsplit(':', 1)[1]}")
    return LoginFailed(argv, res.rc, res.stdout, res.stderr,
                       f"login to {target_iqn} at {portal} failed (iscsiadm exit {res.rc}): {_last_line(res)}",
                       "see `journalctl -u iscsid` on this host and the kernel log of the storage node")


def read_initiator_name(runner) -> str | None:
    """This host's initiator name, from /etc/iscsi/initiatorname.iscsi (None when it has none)."""
    res = runner.run(["cat", "/etc/iscsi/initiatorname.iscsi"], check=False)
    for line in res.stdout.splitlines():
        if line.startswith("InitiatorName="):
            return line.split("=", 1)[1].strip()
    return None


def _masked(settings: dict) -> dict:
    return {k: (MASK if k in SECRET_KEYS and v else v) for k, v in settings.items()}


def desired_settings(chap: dict | None, startup: str, extra: dict | None = None) -> dict:
    """The node record settings ensure_session enforces, in the order they are applied."""
    wanted = {"node.startup": startup}
    for key, value in (extra or {}).items():
        wanted[str(key)] = str(value)
    if chap:
        wanted["node.session.auth.authmethod"] = "CHAP"
        for field_name, key in AUTH_KEYS.items():
            wanted[key] = chap[field_name]
    else:
        wanted["node.session.auth.authmethod"] = "None"
    return wanted


# --------------------------------------------------------------------------------------------
# sessions: declared state + live state -> a pure plan; one applier runs it


@dataclass(frozen=True)
class SessionSpec:
    """The declared state of one target's session on this host (``session_spec`` validates it)."""

    portal: str  # normalised ADDRESS:PORT
    target_iqn: str
    state: str = "logged_in"  # or logged_out
    startup: str = "automatic"
    lun: int = 0
    chap: dict | None = None  # open-iscsi's names, all four fields (``credentials``)
    settings: tuple = ()  # further node record settings, as (key, value) pairs

    @property
    def device(self) -> str:
        return by_path(self.portal, self.target_iqn, self.lun)

    def wanted(self) -> dict:
        """The node record settings enforced, in the order they are applied."""
        return desired_settings(self.chap, self.startup, dict(self.settings))

    def node_argv(self, *extra) -> list:
        return [*_node_argv(self.target_iqn, self.portal), *extra]


def session_spec(*, portal: str, target_iqn: str, chap: dict | None = None, startup: str = "automatic",
                 state: str = "logged_in", lun: int = 0, settings: dict | None = None) -> SessionSpec:
    """Validate the declared state; UserError (InvalidName) before anything is read."""
    portal = normalize_portal(portal)
    validate_iqn(target_iqn)
    if startup not in STARTUP_VALUES:
        raise UserError(f"invalid startup {startup!r}", f"use one of {', '.join(STARTUP_VALUES)}")
    if state not in STATES:
        raise UserError(f"invalid state {state!r}", f"use one of {', '.join(STATES)}")
    if not isinstance(lun, int) or lun < 0:
        raise UserError(f"invalid LUN {lun!r}", "give the LUN number as a non-negative integer (usually 0)")
    return SessionSpec(portal, target_iqn, state, startup, lun, credentials(chap),
                       tuple((str(k), str(v)) for k, v in (settings or {}).items()))


@dataclass
class SessionLive:
    """What this host has for the target: its session, its node record, and the mount points of the session's
    disks (read for a logout)."""

    session: dict | None
    record: dict | None
    mounted: list = field(default_factory=list)  # "/dev/sdX on /mount/point"


def read_session(runner, spec: SessionSpec, sessions: list | None = None) -> SessionLive:
    """Every read the plan needs (each runs in a dry run too; ``sessions``: the host's, when the caller just read
    them). The portal is never asked what it offers: a record is made from the target name given (SendTargets
    discovery is refused by the fabric's targets)."""
    session = find_session(read_sessions(runner) if sessions is None else sessions, spec.target_iqn, spec.portal)
    live = SessionLive(session, read_node_record(runner, spec.target_iqn, spec.portal, secrets=bool(spec.chap)))
    if spec.state == "logged_out":
        live.mounted = _mounted_disks(runner, session) if session is not None else []
    return live


def record_writer_argv(target_iqn: str, portal: str, iface: str | None = None) -> tuple:
    """The command that writes secret settings (on its stdin) into the node records of a target at a portal (of
    one iSCSI interface's record only, with ``iface``)."""
    address, port = normalize_portal(portal).rsplit(":", 1)
    return ("python3", "-c", RECORD_WRITER, target_iqn, address.strip("[]"), port,
            *((f"--iface={iface}",) if iface else ()), *NODE_RECORD_ROOTS)


def session_step(kind: str, argv, *, keys: tuple = (), secrets: tuple = ()) -> Step:
    """One change of a node record or session, as a plan step (``model.Step``): ``kind`` is create_record, update
    (``iscsiadm -o update``, the non-secret settings ``keys``, a ``-n``/``-v`` pair each), write_secrets (the
    CHAP ``secrets``, ((key, value), ...), written into the record file from stdin: never on a command line, never
    shown), login, logout or delete_record. A logout or record deletion already done (iscsiadm's "no objects")
    and a login to a session that exists are success."""
    argv = tuple(argv)
    if kind == "write_secrets":
        target, address, port = argv[3:6]
        keys = tuple(k for k, _secret in secrets)
        description = (f"write {', '.join(keys)} into the node record of {target} at {address}:{port} "
                       "(mode 0600, from stdin)")
    else:
        description = _cmdline(argv)
    ok_rcs = {"logout": (0, RC_NO_OBJECTS), "delete_record": (0, RC_NO_OBJECTS),
              "login": (0, RC_SESSION_EXISTS)}.get(kind, (0,))
    return Step(description, argv=list(argv), data=json.dumps(dict(secrets)) if secrets else None, ok_rcs=ok_rcs,
                kind=kind, keys=tuple(keys))


@dataclass
class SessionPlan:
    steps: list  # [model.Step] (``session_step``), in order
    conflicts: list  # FabricErrors that forbid the change (the applier raises the first, before any change)
    warnings: list
    before: dict
    after: dict  # the predicted after-state

    @property
    def updated(self) -> list[str]:
        return [key for step in self.steps for key in step.keys]

    @property
    def creates_record(self) -> bool:
        return any(step.kind == "create_record" for step in self.steps)


def plan_session(spec: SessionSpec, live: SessionLive, *, unmounting: tuple = (),
                 paths_left: bool = False) -> SessionPlan:
    """The steps from ``live`` to ``spec`` (pure). A missing record is planned as created with none of the
    wanted settings, so every one is then set (what ``-o new`` made is not read back: setting a default again
    costs nothing, a read and a second plan cost a command each); the settings that differ are one ``update``
    step (one iscsiadm with a ``-n``/``-v`` pair each), the CHAP secrets one ``write_secrets`` step (into the
    record file, from stdin). Mount points in ``unmounting`` do not count as
    mounted: a dry run's own planned unmounts (``ensure_session`` passes them only in a dry run, where nothing
    was unmounted; in a real run what is still mounted refuses the logout). ``paths_left``: the disk is one
    path of a multipath map with other paths left, so its logout is safe while the map is mounted."""
    wanted = spec.wanted()
    record = live.record
    before = {"logged_in": live.session is not None, "record": record is not None,
              **(_masked({k: record.get(k, "") for k in wanted}) if record is not None else {})}
    steps: list[Step] = []
    conflicts: list[FabricError] = []
    warnings: list[str] = []
    if spec.state == "logged_out":
        if live.session is not None:
            mounted = [m for m in live.mounted if m.split(" on ", 1)[1] not in unmounting and not paths_left]
            if mounted:
                conflicts.append(Busy(f"{spec.target_iqn} at {spec.portal} is in use: {', '.join(mounted)}",
                                      "unmount it first (stop and disable its .mount unit); logging out under a "
                                      "mounted file system makes it fail with I/O errors"))
            steps.append(session_step("logout", spec.node_argv("--logout")))
        if record is not None:
            steps.append(session_step("delete_record", spec.node_argv("-o", "delete")))
        return SessionPlan(steps, conflicts, warnings, before, {"logged_in": False, "record": False})
    if record is not None and record.get("node.tpgt") == "-1" and live.session is None:
        # a record made without the fabric's TPG tag (before it tagged them: the one file ADDRESS,PORT, which
        # another iface's record of the target replaces): made again, tagged, before this login; a record with a
        # session is left as it is (deleting it does not end the session, but it is what the next boot reads).
        # The default iface's only: another iface's records of the target (an admin's) stay
        steps.append(session_step("delete_record", spec.node_argv("-I", "default", "-o", "delete")))
        record = None
    if record is None:
        # with the fabric's TPG tag: the record is then ADDRESS,PORT,TAG/default, a file no other iface's shares
        steps.append(session_step("create_record", [*_node_argv(spec.target_iqn, f"{spec.portal},{TPG_TAG}"),
                                                    "-o", "new"]))
        record = {}
    secrets, settings = [], []
    for key, value in wanted.items():
        if record.get(key) == value:
            continue
        if key in SECRET_KEYS:
            secrets.append((key, value))  # never on a command line: into the record file, from stdin
        else:
            settings.append((key, value))
    if settings:  # one iscsiadm for them all: it takes any number of -n NAME -v VALUE pairs, and checks each name
        pairs = [arg for key, value in settings for arg in ("-n", key, "-v", value)]
        keys = tuple(key for key, _value in settings)
        steps.append(session_step("update", spec.node_argv("-o", "update", *pairs), keys=keys))
    if secrets:
        steps.append(session_step("write_secrets", record_writer_argv(spec.target_iqn, spec.portal),
                                  secrets=tuple(secrets)))
    updated = [key for step in steps for key in step.keys]
    if live.session is not None and updated and live.record is not None:
        warnings.append(f"{spec.target_iqn}: changed node settings ({', '.join(updated)}) take effect at the "
                        "next login; the current session keeps its old ones")
    if live.session is None:
        steps.append(session_step("login", spec.node_argv("--login")))
    after = {"logged_in": True, "record": True, **_masked(wanted)}
    for key in SECRET_KEYS:
        if key in wanted and key in updated and wanted[key]:
            after[key] = MASK + " (changed)"
    return SessionPlan(steps, conflicts, warnings, before, after)


def apply_session(runner, spec: SessionSpec, live: SessionLive, plan: SessionPlan, *, device_timeout: float = 60.0,
                  sleep=time.sleep, udev: bool = True) -> dict:
    """Run a plan: refuse its first conflict before any change, run its steps in order through the one applier,
    then wait for the LUN's device (``ensure_session``'s ``udev``). Returns the result of ``ensure_session``."""
    if plan.conflicts:
        raise plan.conflicts[0]
    commands: list[str] = []
    record_created = plan.creates_record
    warnings, after, updated = list(plan.warnings), plan.after, plan.updated
    for step in plan.steps:
        commands.append(step.description)
        try:
            apply_steps(runner, [step])  # the one applier: a dry run records the step and runs nothing
        except CommandBounded:
            raise
        except CommandError as err:
            if step.kind == "login":
                raise _login_error(step.argv, err, spec.target_iqn, spec.portal, read_initiator_name(runner)) from None
            # shown by its summary: the writer's argv is a whole program
            raise CommandError([step.description], err.rc, err.stdout, err.stderr,
                               "see `journalctl -u iscsid` on this host; a node record is a file under "
                               "/etc/iscsi/nodes") from None
    result = {"changed": bool(commands), "commands": commands, "session": live.session, "device": None,
              "kernel_device": None, "record_created": record_created, "updated": updated, "warnings": warnings,
              "target": spec.target_iqn, "portal": spec.portal, "lun": spec.lun, "before": plan.before,
              "after": after}
    if spec.state == "logged_out":
        result["session"] = None
        return result
    if runner.dry_run and live.session is None:
        result["device"] = spec.device  # where it will appear; nothing was logged in
        return result
    result["device"] = spec.device
    if not udev:
        result["kernel_device"] = wait_for_disk(runner, portal=spec.portal, target_iqn=spec.target_iqn, lun=spec.lun,
                                                timeout=device_timeout)
        return result
    result["kernel_device"] = wait_for_device(runner, spec.device, timeout=device_timeout, sleep=sleep)
    if live.session is None:
        result["session"] = find_session(read_sessions(runner), spec.target_iqn, spec.portal)
    return result


def ensure_session(runner, *, portal: str, target_iqn: str, chap: dict | None = None, startup: str = "automatic",
                   state: str = "logged_in", lun: int = 0, settings: dict | None = None,
                   device_timeout: float = 60.0, sleep=time.sleep, unmounting: tuple = (),
                   paths_left: bool = False, sessions: list | None = None, udev: bool = True) -> dict:
    """Converge one target's node record and session on this host: read, plan, apply.

    logged_in: make the node record if it is missing (from the target name given: the portal is not
    asked), set node.startup, CHAP and ``settings`` where they differ (the secrets into the record
    file, from stdin), log in if there is no session, then wait for /dev/disk/by-path/...-lun-LUN (udev's link:
    ``devices.wait_for_device``). ``udev=False``: wait only for the kernel's disk of the session's LUN
    (``devices.wait_for_disk``), for a caller that uses ``kernel_device`` itself before udev's rules ran; the
    session a login made is not read again then (``session`` stays None), and ``device`` names a link udev may not
    have made yet.
    A login refused by the target (exit 24: not in its ACL, or wrong CHAP) is ``AuthorizationFailed``;
    an unreachable portal or unknown target is ``PortalUnreachable``.
    logged_out: log out (refused while the disk is mounted) and delete the node record. In a dry
    run, mount points in ``unmounting`` (the caller's own planned unmounts, still mounted because
    nothing ran) do not count as mounted; with ``paths_left`` (the disk is one path of a mounted
    multipath map that keeps other paths) nothing does. ``sessions``: the host's (``read_sessions``), just read.

    Returns {changed, commands, session, device, kernel_device, record_created, updated, warnings,
    before, after}; commands are redacted command lines of the changes (run or, in a dry run, planned).
    """
    spec = session_spec(portal=portal, target_iqn=target_iqn, chap=chap, startup=startup, state=state, lun=lun,
                        settings=settings)
    live = read_session(runner, spec, sessions)
    plan = plan_session(spec, live, unmounting=unmounting if runner.dry_run else (), paths_left=paths_left)
    return apply_session(runner, spec, live, plan, device_timeout=device_timeout, sleep=sleep, udev=udev)


def refresh_record(runner, *, portal: str, target_iqn: str, chap: dict | None) -> dict:
    """A node record's CHAP settings made ``chap``'s (a rotated secret; the secrets into the record file from
    stdin) and nothing else: its startup and other settings kept, no login, no logout; a session keeps running
    and the new secret counts at its next login. No record: nothing. Returns {changed, commands}."""
    spec = session_spec(portal=portal, target_iqn=target_iqn, chap=chap)
    record = read_node_record(runner, spec.target_iqn, spec.portal, secrets=True)
    if record is None:
        return {"changed": False, "commands": []}
    spec = SessionSpec(spec.portal, spec.target_iqn, startup=record.get("node.startup") or "automatic",
                       chap=spec.chap)
    # planned as if logged in: a record with no session is updated, never logged in
    plan = plan_session(spec, SessionLive({}, record))
    apply_steps(runner, plan.steps)
    return {"changed": bool(plan.steps), "commands": [step.description for step in plan.steps]}


def _mounted_disks(runner, session: dict) -> list[str]:
    """Mount points of the session's disks (and their partitions)."""
    mounted = []
    for disk in session.get("disks", []):
        res = runner.run(["lsblk", "-nro", "MOUNTPOINT", f"/dev/{disk['disk']}"], check=False)
        mounted += [f"/dev/{disk['disk']} on {m}" for m in res.stdout.split() if m]
    return mounted
