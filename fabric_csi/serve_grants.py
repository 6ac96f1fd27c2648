"""What the CSI controller's key may ask of a storage node: fabricctl's grant, revoke and show of one version for one
host, nothing else.

A controller that runs in the cluster reaches a storage node over SSH with a key of its own, authorized there
(root's authorized_keys, docs/csi.md) as
``restrict,command="/opt/fabricctl/bin/fabric-csi serve-grants",from="ADDRESSES" ssh-ed25519 ...``: sshd runs
this whatever the key asks for, and the request arrives in SSH_ORIGINAL_COMMAND. ``parse`` accepts exactly

  grant NAME@VERSION --to HOST --json
  revoke NAME@VERSION --from HOST --json
  show NAME@VERSION --json

(NAME@VERSION by the fabric's naming rules, HOST a host name), and ``main`` then runs fabricctl with those words
in place of this process (exec: fabricctl's own checks, lock, journal record and JSON answer). Anything else is
refused with fabricctl's JSON failure shape (error_type ``Refused``, exit 1) and a line in the journal
(authpriv); nothing runs. The key so grants and revokes what the CSI controller must; it cannot publish, destroy,
replicate or read anything else, and it never reaches a shell.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import syslog

from fabric_core.base.errors import EXIT_USER, UserError
from fabric_core.base.names import parse_ref, validate_hostname

from .backend import find_fabricctl

ENV = "SSH_ORIGINAL_COMMAND"
MAX_REQUEST = 256
SHAPES = {"grant": "--to", "revoke": "--from", "show": None}  # verb -> the option naming the host (show: none)
FIX = ("the CSI controller's key runs only `grant NAME@VERSION --to HOST --json`, `revoke NAME@VERSION --from HOST "
       "--json` and `show NAME@VERSION --json` (fabric-csi --mode controller sends them)")


class Refused(UserError):
    """A request the key may not make (nothing ran)."""


def parse(text: str | None) -> list[str]:
    """SSH_ORIGINAL_COMMAND -> fabricctl's argv (validated, normalized), or ``Refused``."""
    def refuse(problem: str) -> Refused:
        return Refused(f"refused: {problem}", FIX)

    if not text or not text.strip():
        raise refuse("no request (an interactive login is not allowed)")
    if len(text) > MAX_REQUEST or not text.isprintable():
        raise refuse(f"the request is longer than {MAX_REQUEST} characters or has a control character")
    try:
        words = shlex.split(text)
    except ValueError:
        raise refuse("the request is not a command line") from None
    verb = words[0]
    if verb not in SHAPES:
        raise refuse(f"{verb[:40]!r} is not a request this key may make")
    option = SHAPES[verb]
    shape = [verb, "REF", option, "HOST", "--json"] if option else [verb, "REF", "--json"]
    if len(words) != len(shape) or (option and words[2] != option) or words[-1] != "--json":
        raise refuse(f"{verb} takes exactly: {' '.join(shape)}")
    try:
        name, version = parse_ref(words[1])
        host = validate_hostname(words[3]) if option else ""
    except UserError as err:
        raise refuse(err.problem) from None
    ref = f"{name}@{version}"
    return [verb, ref, option, host, "--json"] if option else [verb, ref, "--json"]


def _log(text: str, *, refused: bool) -> None:
    try:
        syslog.openlog("fabric-csi", syslog.LOG_PID, syslog.LOG_AUTHPRIV if refused else syslog.LOG_USER)
        syslog.syslog(syslog.LOG_NOTICE, text)
    except OSError:
        pass


def main(fabricctl: str = "", environ=None) -> int:
    """Serve one request (exec fabricctl), or refuse it (exit 1, the failure as fabricctl's JSON on stdout)."""
    environ = os.environ if environ is None else environ
    request = environ.get(ENV, "")
    try:
        argv = parse(request)
    except Refused as err:
        _log(f"refused a CSI controller's request {request[:200]!r}: {err.problem}", refused=True)
        print(json.dumps({"error": err.problem, "fix": err.fix, "exit_status": EXIT_USER, "error_type": "Refused"}))
        return EXIT_USER
    command = find_fabricctl(fabricctl)
    _log(f"a CSI controller's request: fabricctl {' '.join(argv)}", refused=False)
    sys.stdout.flush()
    os.execv(command, [command, *argv])
    return 0  # not reached: exec replaced this process
