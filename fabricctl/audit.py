"""One journal record per change: every mutating fabricctl command (not a dry run) logs, when it
ends, what it was, its target and hosts, how it ended and how long it took.

The record goes to the journal with SYSLOG_IDENTIFIER=fabricctl (``journalctl -t fabricctl``)
through the journal's own binding (python3-systemd), or, when that is missing, to syslog with
ident ``fabricctl``. Fields: MESSAGE (one line for people), FABRIC_COMMAND (``publish``,
``checkpoint volume create``), FABRIC_TARGET (NAME@VERSION, dataset, job or JOB@step-N; ``-`` for
rotate), FABRIC_HOSTS (hosts the command reached, in order), FABRIC_HOSTS_FAILED,
FABRIC_HOSTS_REQUESTED (--to/--from/--writer as given), FABRIC_RESULT (ok, refused, partial,
failed, interrupted), FABRIC_EXIT_STATUS, FABRIC_DURATION_SECONDS and FABRIC_ERROR (the error's
class name, never its text). A command that serves another machine's request (``replica-serve``) adds
that request's fields as FABRIC_REQUEST_* (peer, verb, dataset, base, origin, force, ...; ``args.audit_request``,
set by the command from the request as it arrived, refused or not) and names its dataset as the target.

The record is built from explicit fields of the parsed command line and of what the command did,
never from argv, error messages or the configuration: CHAP secrets and encryption keys cannot
reach it (an error message may quote a failed command line, so not even that goes in).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from fabric_core.base.names import snapshot_name

from .errors import EXIT_INTERRUPTED, EXIT_LOCKED, EXIT_OK, EXIT_PARTIAL, EXIT_USER

IDENTIFIER = "fabricctl"

# exit status -> result; any other status (5, or a bug's) is "failed"
RESULTS = {EXIT_OK: "ok", EXIT_USER: "refused", EXIT_LOCKED: "refused", EXIT_PARTIAL: "partial",
           EXIT_INTERRUPTED: "interrupted"}
# syslog priorities (journal PRIORITY): info, notice, warning, err
PRIORITIES = {"ok": 6, "refused": 5, "interrupted": 5, "partial": 4, "failed": 3}
# the options that name hosts, as (attribute of the parsed arguments, option)
HOST_OPTIONS = (("to", "--to"), ("from_", "--from"), ("writer", "--writer"), ("on", "--on"))

Sink = Callable[[dict[str, str]], None]


# --------------------------------------------------------------------------------------------
# what a command is about, from its parsed arguments (explicit fields only)


def target_of(args) -> str:
    """NAME@VERSION, dataset, job or JOB@step-N of a parsed command line; '-' when it has none."""
    ref = getattr(args, "ref", None)
    if ref:
        return str(ref)
    name, version = getattr(args, "name", None), getattr(args, "version", None)
    if name:
        return f"{name}@{version}" if version else str(name)
    job = getattr(args, "job", None)
    if job:
        step = getattr(args, "step", None)
        return f"{job}@{snapshot_name(step)}" if isinstance(step, int) else str(job)
    return "-"


def requested_hosts(args) -> list[tuple[str, str]]:
    """(option, value) of the host options given: [("--to", "gpu_nodes")]."""
    return [(option, str(getattr(args, attr))) for attr, option in HOST_OPTIONS if getattr(args, attr, None)]


def command_line(args) -> str:
    """``fabricctl publish imagenet@v1 --to gpu_nodes``: the command, its target and its hosts, for the
    node lock's holder description. Built from explicit fields, so no secret (nor a free-text note)."""
    words = ["fabricctl", *args.command_path]
    target = target_of(args)
    if target != "-":
        words.append(target)
    for option, value in requested_hosts(args):
        words += [option, value]
    return " ".join(words)


# --------------------------------------------------------------------------------------------
# the record


@dataclass
class Record:
    command: str  # "publish", "checkpoint volume create"
    target: str
    exit_status: int
    duration: float  # seconds
    hosts: list[str] = field(default_factory=list)
    hosts_failed: list[str] = field(default_factory=list)
    hosts_requested: str = ""
    error: str = ""  # the error's class name
    request: dict[str, str] = field(default_factory=dict)  # a served request's fields (replica-serve)

    @property
    def result(self) -> str:
        return RESULTS.get(self.exit_status, "failed")

    @property
    def message(self) -> str:
        text = f"{self.command} {self.target}: {self.result} (exit {self.exit_status}) in {self.duration:.1f} s"
        if self.hosts:
            text += f"; hosts {','.join(self.hosts)}"
        if self.hosts_failed:
            text += f"; failed on {','.join(self.hosts_failed)}"
        if self.error:
            text += f"; {self.error}"
        if self.request:
            text += "; request " + " ".join(f"{k}={v or '-'}" for k, v in self.request.items())
        return text

    def fields(self) -> dict[str, str]:
        return {"MESSAGE": self.message, "SYSLOG_IDENTIFIER": IDENTIFIER, "PRIORITY": str(PRIORITIES[self.result]),
                "FABRIC_COMMAND": self.command, "FABRIC_TARGET": self.target,
                "FABRIC_HOSTS": ",".join(self.hosts), "FABRIC_HOSTS_FAILED": ",".join(self.hosts_failed),
                "FABRIC_HOSTS_REQUESTED": self.hosts_requested, "FABRIC_RESULT": self.result,
                "FABRIC_EXIT_STATUS": str(self.exit_status), "FABRIC_DURATION_SECONDS": f"{self.duration:.3f}",
                "FABRIC_ERROR": self.error, **{f"FABRIC_REQUEST_{k.upper()}": v for k, v in self.request.items()}}


def record(args, hosts: dict[str, str], exit_status: int, duration: float, error: str = "") -> Record:
    """The record of a command that ended: ``hosts`` maps each host it reached to its last outcome
    (ok, failed, interrupted, skipped, or contacted when no fan-out reported on it)."""
    request = dict(getattr(args, "audit_request", None) or {})
    return Record(command=" ".join(args.command_path), target=request.get("dataset") or target_of(args),
                  exit_status=exit_status, duration=duration, hosts=list(hosts),
                  hosts_failed=[h for h, status in hosts.items() if status not in ("ok", "contacted")],
                  hosts_requested=" ".join(f"{o} {v}" for o, v in requested_hosts(args)), error=error,
                  request=request)


# --------------------------------------------------------------------------------------------
# sinks


def journal_sink(fields: dict[str, str]) -> None:
    """The journal, through its own binding (python3-systemd)."""
    from systemd import journal  # noqa: PLC0415 - present on the storage nodes, not everywhere

    journal.send(**fields)


def syslog_sink(fields: dict[str, str]) -> None:
    """The standard library's syslog, ident fabricctl: the message, then the FABRIC_* fields as key=value."""
    import syslog  # noqa: PLC0415

    extra = " ".join(f"{k.lower()}={v or '-'}" for k, v in fields.items() if k.startswith("FABRIC_"))
    syslog.openlog(IDENTIFIER, syslog.LOG_PID, syslog.LOG_USER)
    try:
        syslog.syslog(int(fields.get("PRIORITY", syslog.LOG_INFO)), f"{fields['MESSAGE']} [{extra}]")
    finally:
        syslog.closelog()


def default_sink() -> Sink:
    """The journal when its binding is installed, else syslog."""
    try:
        from systemd import journal  # noqa: F401, PLC0415
    except ImportError:
        return syslog_sink
    return journal_sink


def emit(rec: Record, sink: Sink | None = None) -> None:
    """Send the record; a logging failure is reported on stderr and never changes the command's outcome."""
    try:
        (sink or default_sink())(rec.fields())
    except Exception as exc:  # noqa: BLE001 - the change is done (or not) whatever the log does
        print(f"fabricctl: warning: could not log the command to the journal: {exc!r}", file=sys.stderr)
