"""What a storage node's key may ask of this GPU node: the agent's verbs, with validated arguments.

The role writes the storage nodes' fabricctl keys into root's authorized_keys on each GPU node as
``command="/usr/local/sbin/fabric-node --ssh --from NODE",restrict,from="..."`` (NODE: the storage node whose key
it is): sshd runs ``fabric-node --ssh`` whatever the key asks for, and the request arrives in
SSH_ORIGINAL_COMMAND. ``parse`` turns it into the agent's own command line or refuses it (``Refused``, exit 1);
nothing else ever runs: no shell, no other program, no other verb, no option the list below does not name, no
word that breaks its rule. A storage node acts for an
operator, so it holds versions as ``manual`` only: a job's holder is the scheduler's, never the key's.

  attach NAME@VERSION --holder manual [--current] [--dry-run] [--json]
  detach NAME@VERSION --holder manual [--force] [--dry-run] [--json]
  list [--json]
  in-use NAME@VERSION [--json]
  verify NAME@VERSION [--workers N] [--json]
  current NAME [VERSION | --none] [--dry-run] [--json]
  attach-writable JOB --fs ext4|xfs [--dry-run] [--json]        a job's checkpoint volume, read-write (its writer)
  detach-writable JOB [--force] [--dry-run] [--json]
  attach-restore JOB STEP --fs ext4|xfs [--dry-run] [--json]    a checkpoint, read-only
  detach-restore JOB STEP [--force] [--dry-run] [--json]
  freeze JOB --seconds N [--dry-run] [--json]                   the writer's freeze, under its thaw timer (5-3600 s)
  thaw JOB --seconds N [--json]
  writer-state JOB... [--json]                                  what is frozen (reads only)
  refresh-credentials [--dry-run] [--json]                      this node's own CHAP into its node records

The checkpoint verbs act for the storage node the key belongs to: the forced command names it
(``fabric-node --ssh --from NODE``, role fabricctl), and the agent adds ``--from NODE`` to the verbs that log in
or out (a request naming a storage node itself is refused; a key bound to none may not ask for them). A JOB is a
fabric name, a STEP a whole number: the paths are CHECKPOINT_MOUNT_ROOT/JOB[/restore/STEP], nothing else. No
secret travels in a request: refresh-credentials writes this node's own credentials (credentials.json, root's).
"""

from __future__ import annotations

import shlex

from fabric_core.base.errors import UserError
from fabric_core.base.names import validate_fabric_name, validate_hostname, validate_step, validate_version
from fabric_core.base.rules import validate_filesystem
from fabric_core.node.attachments import MANUAL, parse_version_ref
from fabric_core.node.checkpoints import MAX_JOBS
from fabric_core.node.freeze import MAX_SECONDS, MIN_SECONDS

ENV = "SSH_ORIGINAL_COMMAND"
MAX_REQUEST = 512  # characters: every allowed request is far shorter
MAX_WORKERS = 64
FLAGS = {  # verb -> the flags it takes (no value)
    "attach": ("--json", "--dry-run", "--current"),
    "detach": ("--json", "--dry-run", "--force"),
    "list": ("--json",),
    "in-use": ("--json",),
    "verify": ("--json",),
    "current": ("--json", "--dry-run"),
    "attach-writable": ("--json", "--dry-run"),
    "detach-writable": ("--json", "--dry-run", "--force"),
    "attach-restore": ("--json", "--dry-run"),
    "detach-restore": ("--json", "--dry-run", "--force"),
    "freeze": ("--json", "--dry-run"),
    "thaw": ("--json",),
    "writer-state": ("--json",),
    "refresh-credentials": ("--json", "--dry-run"),
}
VALUES = {  # verb -> the options it takes with a value
    "attach": ("--holder",), "detach": ("--holder",), "verify": ("--workers",),
    "attach-writable": ("--fs",), "attach-restore": ("--fs",), "freeze": ("--seconds",), "thaw": ("--seconds",),
}
BOUND = ("attach-writable", "detach-writable", "attach-restore", "detach-restore")  # logged in/out at --from NODE
VIA = ("attach", "detach")  # --from NODE added when the key is bound: the node asking (a path through it)
FIX = ("a storage node's key runs only the agent's verbs: attach NAME@VERSION --holder manual [--current], detach "
       "NAME@VERSION --holder manual, list, in-use "
       "NAME@VERSION, verify NAME@VERSION [--workers N], current NAME [VERSION|--none], attach-writable/"
       "detach-writable JOB, attach-restore/detach-restore JOB STEP, freeze/thaw JOB --seconds N, writer-state "
       "JOB..., refresh-credentials (fabricctl sends them)")


class Refused(UserError):
    """A request the key may not make (nothing ran)."""


def _refuse(problem: str) -> Refused:
    return Refused(f"refused: {problem}", FIX)


def parse(text: str | None, storage_node: str | None = None) -> list[str]:
    """SSH_ORIGINAL_COMMAND -> the agent's argv (validated; the flags in a fixed order), or ``Refused``.
    ``storage_node``: the node the key is bound to (the forced command's --from), added to the verbs that log in
    or out of it."""
    if not text or not text.strip():
        raise _refuse("no request (an interactive login is not allowed)")
    if len(text) > MAX_REQUEST:
        raise _refuse(f"the request is longer than {MAX_REQUEST} characters")
    if not text.isprintable():
        raise _refuse("the request contains a control character")
    try:
        words = shlex.split(text)
    except ValueError:
        raise _refuse("the request is not a command line") from None
    if not words:
        raise _refuse("no request")
    verb, rest = words[0], words[1:]
    if verb not in FLAGS:
        raise _refuse(f"{verb[:40]!r} is not one of the agent's verbs ({', '.join(FLAGS)})")
    flags = [w for w in rest if w in FLAGS[verb]]
    if len(set(flags)) != len(flags):
        raise _refuse(f"an option given twice ({' '.join(flags)})")
    args = [w for w in rest if w not in FLAGS[verb]]
    try:
        positional, options = _split(verb, args)
        out = [verb, *_check(verb, positional, options)]
        if verb in BOUND and not storage_node:
            raise _refuse(f"{verb} acts for the storage node the key belongs to, and this key is bound to none "
                          "(its forced command has no --from NODE: an older role wrote it)")
        if storage_node and verb in BOUND + VIA:
            out += ["--from", validate_hostname(storage_node)]
    except UserError as err:
        if isinstance(err, Refused):
            raise
        raise _refuse(err.problem) from None
    return out + [f for f in FLAGS[verb] if f in flags]


def _split(verb: str, args: list[str]) -> tuple[list[str], dict]:
    """Positional words and the options that take a value (VALUES), or refused."""
    takes = VALUES.get(verb, ())
    positional, options = [], {}
    i = 0
    while i < len(args):
        word = args[i]
        name, eq, value = word.partition("=")
        if word.startswith("-") and word != "--none":
            if name not in takes:
                raise _refuse(f"{verb} takes no option {name[:40]!r}")
            if name in options:
                raise _refuse(f"{name} given twice")
            if not eq:
                if i + 1 >= len(args):
                    raise _refuse(f"{name} needs a value")
                i += 1
                value = args[i]
            options[name] = value
        else:
            positional.append(word)
        i += 1
    return positional, options


def _seconds(options: dict) -> list[str]:
    seconds = options.get("--seconds", "")
    if not seconds.isascii() or not seconds.isdigit() or not MIN_SECONDS <= int(seconds) <= MAX_SECONDS:
        raise _refuse(f"--seconds must be {MIN_SECONDS}-{MAX_SECONDS} (the thaw timer)")
    return ["--seconds", str(int(seconds))]


def _check_checkpoint(verb: str, positional: list[str], options: dict) -> list[str]:
    if verb in ("refresh-credentials",):
        if positional:
            raise _refuse(f"{verb} takes no argument")
        return []
    if verb == "writer-state":
        if not 1 <= len(positional) <= MAX_JOBS or len(set(positional)) != len(positional):
            raise _refuse(f"writer-state takes 1-{MAX_JOBS} different jobs")
        return [validate_fabric_name(job, "job") for job in positional]
    restore = verb.endswith("-restore")
    if len(positional) != (2 if restore else 1):
        raise _refuse(f"{verb} takes " + ("JOB STEP" if restore else "JOB"))
    out = [validate_fabric_name(positional[0], "job")]
    if restore:
        out.append(str(validate_step(positional[1])))
    if verb.startswith("attach-"):
        out += ["--fs", validate_filesystem(options.get("--fs", ""))]
    if verb in ("freeze", "thaw"):
        out += _seconds(options)
    return out


def _check(verb: str, positional: list[str], options: dict) -> list[str]:
    if verb == "list":
        if positional:
            raise _refuse("list takes no argument")
        return []
    if verb == "current":
        if len(positional) not in (1, 2):
            raise _refuse("current takes NAME, and VERSION or --none to change it")
        name, *version = positional
        validate_fabric_name(name)
        return [name, *("--none" if v == "--none" else validate_version(v) for v in version)]
    if verb not in ("attach", "detach", "in-use", "verify"):
        return _check_checkpoint(verb, positional, options)
    if len(positional) != 1:
        raise _refuse(f"{verb} takes one NAME@VERSION")
    name, version = parse_version_ref(positional[0])
    out = [f"{name}@{version}"]
    if verb in ("attach", "detach"):
        holder = options.get("--holder")
        if holder != MANUAL:
            raise _refuse(f"{verb} through a storage node's key holds as `manual` only (--holder manual); a job's "
                          "holder is the scheduler's")
        out += ["--holder", MANUAL]
    if verb == "verify" and "--workers" in options:
        workers = options["--workers"]
        if not workers.isdigit() or not 1 <= int(workers) <= MAX_WORKERS:
            raise _refuse(f"--workers must be 1-{MAX_WORKERS}")
        out += ["--workers", str(int(workers))]
    return out
