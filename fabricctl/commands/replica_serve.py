"""The other side of `fabricctl replicate`: what another storage node's fabricctl key may run here.

The fabricctl role authorizes each storage node's fabricctl key on the others with
`command="fabricctl replica-serve --peer NODE",restrict` (NODE: the node the key belongs to): sshd runs this
command whatever the key asks for, and the request arrives in SSH_ORIGINAL_COMMAND. It serves exactly three
requests, for a volume under this node's dataset or checkpoint root: `state DATASET` (its snapshots and
bookmarks with GUIDs, an interrupted receive's resume token, space left; JSON), `receive DATASET BASE ORIGIN
[--force] [--prop K=V]... [--snapshot-prop K=V]...` (a resumable `zfs receive` of the stream on stdin, never
mounted, read-only, marked fabric:origin=ORIGIN, its base held while it runs, under its volume's lock:
/run/fabric/locks/dataset-NAME.lock or checkpoint-JOB.lock) and, for a dataset version only, `export DATASET
VERSION GUID HOST...` (the storage side of `fabricctl publish --from-nodes` and `grant`: the version, if it has
that GUID here, granted read-only to those hosts of this node's configuration, under this node's lock) and
`revoke DATASET VERSION [--force] HOST...` (the storage side of `fabricctl revoke`: their grants taken back,
refused while one is logged in unless --force).

A receive is checked here, whatever the sending node planned: ORIGIN must be NODE (a key speaks for its own
node only); the volume must be new or NODE's own replica (never one this node made, one fabricctl does not
own, or another node's replica; --force only into NODE's replica); the stream must be a plain stream of a
volume (no file system, no package carrying properties or other datasets); the properties set are the
fabric's own (fabric:*, checked). Anything else is refused before `zfs receive` runs, and every request but a
`state` goes into the journal with its fields, refused or not. Not for people: run `fabricctl replicate` (or
`publish --from-nodes`) on the node that has the version.
"""

from __future__ import annotations

import os
import shlex

from fabric_core.base.errors import UserError

from .. import replication

PATH = ("replica-serve",)
HELP = "(for other storage nodes' fabricctl keys only) serve replication requests from SSH_ORIGINAL_COMMAND"
ENV = "SSH_ORIGINAL_COMMAND"


def request(args) -> list[str]:
    """The request's words ([] when it is not a command line: run() refuses it); its fields, as they arrived, go
    into the journal record (args.audit_request, fabricctl.audit)."""
    cached = getattr(args, "_request", None)
    if cached is None:
        text = os.environ.get(ENV, "")
        try:
            cached = shlex.split(text)
        except ValueError:
            cached, args._unparsable = [], text
        args._request = cached
        args.audit_request = replication.describe_request(cached or [text], getattr(args, "peer", None) or "")
    return cached


def MUTATING(args) -> bool:  # noqa: N802 - the command modules' declaration, here a function of the request
    return request(args)[:1] != ["state"]  # anything but a reading is recorded, refused or not


def NODE_LOCK(args) -> bool:  # noqa: N802 - an export changes LIO (the node lock); a receive only its volume
    return request(args)[:1] in (["export"], ["revoke"])


def OBJECT_LOCKS(ctx, args):  # noqa: N802 - a receive holds its volume's lock, exclusive, for its whole run
    words = request(args)
    if words[:1] != ["receive"] or len(words) < 2:
        return []
    parent, _slash, name = words[1].rpartition("/")
    kind = "checkpoint" if parent == ctx.config.checkpoint_root else "dataset"
    return [(kind, name, False)] if name else []  # run() refuses anything outside the roots


def configure(p) -> None:
    """The request comes in SSH_ORIGINAL_COMMAND; --peer is written by the role into the forced command."""
    p.add_argument("--peer", metavar="NODE", default="",
                   help="the storage node whose key this is (the role writes it into each key's forced command): "
                        "a receive is accepted only as coming from it")


def run(ctx, args) -> int:
    cfg = ctx.config
    words = request(args)
    if getattr(args, "_unparsable", None) is not None:
        raise UserError("replica-serve: the request is not a command line", "send it with fabricctl replicate")
    if args.peer:
        cfg.storage_node(args.peer)  # a key of a node no longer in storage_nodes is refused
    return replication.serve(ctx, replication.parse_request(words, (cfg.dataset_root, cfg.checkpoint_root),
                                                            args.peer))
