"""The other side of `fabricctl replicate`: what another storage node's fabricctl key may run here.

The fabricctl role authorizes each storage node's fabricctl key on the others with
`command="fabricctl replica-serve",restrict`: sshd runs this command whatever the key asks for, and the
request arrives in SSH_ORIGINAL_COMMAND. It serves exactly three requests, for a volume under this node's
dataset or checkpoint root: `state DATASET` (its snapshots and bookmarks with GUIDs, an interrupted
receive's resume token, space left; JSON), `receive DATASET BASE ORIGIN [--force]` (a resumable
`zfs receive` of the stream on stdin, read-only, marked fabric:origin=ORIGIN, its base held while it
runs, under its volume's lock: /run/fabric/locks/dataset-NAME.lock or checkpoint-JOB.lock) and, for a
dataset version only, `export DATASET VERSION GUID HOST...`
(the storage side of `fabricctl publish --from-nodes`: the version, if it has that GUID here, exported
read-only to those hosts of this node's configuration, under this node's lock). Anything else is
refused. Not for people: run `fabricctl replicate` (or `publish --from-nodes`) on the node that has the
version.
"""

from __future__ import annotations

import os
import shlex

from fabric_core.errors import UserError

from .. import replication

PATH = ("replica-serve",)
HELP = "(for other storage nodes' fabricctl keys only) serve replication requests from SSH_ORIGINAL_COMMAND"
ENV = "SSH_ORIGINAL_COMMAND"


def request(args) -> dict:
    cached = getattr(args, "_request", None)
    if cached is None:
        text = os.environ.get(ENV, "")
        try:
            words = shlex.split(text)
        except ValueError:
            raise UserError("replica-serve: the request is not a command line", "") from None
        args._request = cached = words
    return cached


def MUTATING(args) -> bool:  # noqa: N802 - the command modules' declaration, here a function of the request
    words = request(args)
    return bool(words) and words[0] in ("receive", "export")


def NODE_LOCK(args) -> bool:  # noqa: N802 - an export changes LIO (the node lock); a receive only its volume
    return request(args)[:1] == ["export"]


def OBJECT_LOCKS(ctx, args):  # noqa: N802 - a receive holds its volume's lock, exclusive, for its whole run
    words = request(args)
    if words[:1] != ["receive"] or len(words) < 2:
        return []
    parent, _slash, name = words[1].rpartition("/")
    kind = "checkpoint" if parent == ctx.config.checkpoint_root else "dataset"
    return [(kind, name, False)] if name else []  # run() refuses anything outside the roots


def configure(p) -> None:
    """No arguments: the request comes in SSH_ORIGINAL_COMMAND."""


def run(ctx, args) -> int:
    cfg = ctx.config
    return replication.serve(ctx, replication.parse_request(request(args), (cfg.dataset_root, cfg.checkpoint_root)))
