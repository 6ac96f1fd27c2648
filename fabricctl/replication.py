"""Replication to the other storage nodes, for `fabricctl replicate` and `fabricctl checkpoint replicate`,
and the restricted command those nodes run for it (`fabricctl replica-serve`).

This node (the source) reads its volume and, over SSH, the target's (``Peer.state``), plans with
``fabric_core.services.replicate.plan`` and runs each transfer: ``zfs send`` here, piped by
``fabric_core.services.replicate.Pump`` into ``ssh TARGET receive ...`` (OpenSSH: the stream is the one place
where the SSH client's speed matters). The target's side is ``serve``: the fabricctl key of a storage
node is authorized on the others with ``command="fabricctl replica-serve",restrict`` (role fabricctl),
so that key can only ask for the state of a volume under the target's own dataset or checkpoint root,
or receive into one, or export a version it holds (the same GUID) read-only to hosts of its own
configuration (`fabricctl publish --from-nodes`); it cannot run a shell, read another volume, withdraw an
export, or destroy anything.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import select
import shlex
import subprocess
import sys

from fabric_core.base.errors import CommandBounded, CommandError, FabricError, UserError
from fabric_core.base.names import (
    validate_dataset_name,
    validate_hostname,
    validate_snapshot_component,
    validate_version,
)
from fabric_core.base.runner import PEER_TIMEOUT, SSH_ALIVE_COUNT, SSH_ALIVE_INTERVAL, STALL_SECONDS, bounded_run
from fabric_core.services import replicate
from fabric_core.services.grants import Grants
from fabric_core.storage import holders, lzc

from . import datasets
from .output import ProgressBar, human_bytes


class PeerError(FabricError):
    """Another storage node could not be reached, or refused."""


class Peer:
    """Another storage node, reached with OpenSSH and fabricctl's key; it runs only ``replica-serve``."""

    def __init__(self, node, ssh):
        self.node = node
        self.ssh = ssh

    @property
    def name(self) -> str:
        return self.node.name

    def argv(self, *words: str) -> list[str]:
        """OpenSSH with fabricctl's own key and known_hosts and nothing else: no configuration file (-F /dev/null:
        neither ~/.ssh/config nor /etc/ssh/ssh_config, so nobody's ProxyCommand, Include or ControlMaster), no
        agent, no other identity, no global known_hosts, no host key ever added or updated; bounded by
        ConnectTimeout and ServerAlive."""
        s = self.ssh
        options = {"IdentitiesOnly": "yes", "IdentityAgent": "none", "BatchMode": "yes",
                   "StrictHostKeyChecking": "yes", "UserKnownHostsFile": s.known_hosts,
                   "GlobalKnownHostsFile": "/dev/null", "UpdateHostKeys": "no", "CheckHostIP": "no",
                   "ConnectTimeout": str(max(1, int(s.connect_timeout))),
                   "ServerAliveInterval": str(SSH_ALIVE_INTERVAL), "ServerAliveCountMax": str(SSH_ALIVE_COUNT),
                   "LogLevel": "ERROR"}
        return ["ssh", "-F", "/dev/null", "-i", s.key_file,
                *[w for k, v in options.items() for w in ("-o", f"{k}={v}")],
                "-p", str(s.port), "-l", s.user, self.node.address, "--", shlex.join(words)]

    def _ask(self, what: str, *words: str) -> dict:
        """One replica-serve request whose answer is JSON; ``what`` names it in errors."""
        try:  # bounded: a peer that hangs or floods fails this request, naming it
            rc, stdout, stderr = bounded_run(self.argv(*words), timeout=PEER_TIMEOUT, env={**os.environ, "LC_ALL": "C"})
        except CommandBounded as exc:
            raise PeerError(f"storage node {self.name} ({self.node.address}) did not answer to {what}: the request "
                            f"{exc.why}", "check that it is up and not overloaded, and the network between the "
                            "nodes; then run the same command again") from None
        if rc != 0:
            raise self.error(what, rc, stderr)
        try:
            return json.loads(stdout)
        except ValueError:
            raise PeerError(f"{self.name} answered `{words[0]} {words[1]}` with something else than JSON: "
                            f"{stdout[:200]!r}", "install the same fabricctl on every storage node "
                            "(playbooks/fabricctl.yml)") from None

    def state(self, dataset: str) -> replicate.Side:
        return replicate.Side.from_dict(self._ask("read the state of " + dataset, "state", dataset))

    def export(self, dataset: str, version: str, guid: str, hosts: list[str], *, published: bool = False) -> dict:
        """Ask the node to export DATASET@VERSION (which must have this GUID there) read-only to hosts of its
        configuration (``serve``): granted, or with ``published`` tagged as a publish's (the hosts log in there
        too and stay); returns its answer: {node, portal, target, storage}."""
        return self._ask(f"export {dataset.rpartition('/')[2]}@{version}", "export", dataset, version, guid,
                         *(["--published"] if published else []), *hosts)

    def revoke(self, dataset: str, version: str, hosts: list[str], *, force: bool = False) -> dict:
        """Ask the node to take DATASET@VERSION's grant back from hosts of its configuration (``serve``; refused
        there while one is logged in, unless ``force``); returns its answer: {node, target, storage}."""
        return self._ask(f"revoke {dataset.rpartition('/')[2]}@{version}", "revoke", dataset, version,
                         *(["--force"] if force else []), *hosts)

    def error(self, what: str, rc: int, stderr: str) -> PeerError:
        detail = " ".join(stderr.split())[:500] or "no message"
        if rc == 255:
            return PeerError(f"cannot reach storage node {self.name} ({self.node.address}) to {what}: {detail}",
                             "check that it is up and that playbooks/fabricctl.yml ran on both storage nodes (it "
                             "authorizes each node's key on the others and records their host keys)")
        return PeerError(f"{self.name} could not {what} (exit {rc}): {detail}",
                         "read the message above; `journalctl -t fabricctl` on it has the record")


def wanted_versions(rows: list[dict], version: str | None, every: bool) -> list[str]:
    """The snapshot names to replicate: one version, or every one (``--all``), oldest first."""
    if every:
        return [r["snapshot"] for r in rows]
    return [version] if version else []


def replicate_to(ctx, dataset: str, wanted: list[str], node_names: list[str], *, force: bool = False,
                 limit: int = 0, label: str = "") -> list[dict]:
    """Bring ``wanted`` snapshots of ``dataset`` to each named storage node; one result per node."""
    cfg = ctx.config
    if not cfg.node:
        raise UserError("this node's name is not in the fabricctl configuration (`node:`)",
                        "re-run playbooks/fabricctl.yml: the role writes it")
    peers = [Peer(cfg.storage_node(n), cfg.ssh) for n in node_names]
    # holds a killed replicate left (its process is gone) would block destroy and rotation forever
    holders.release_stale(ctx.local, [dataset], (replicate.HOLD_SENDING,))
    src = replicate.read_side(ctx.local, dataset)
    results = []
    for peer in peers:
        ctx.hosts.setdefault(peer.name, "contacted")
        dst = peer.state(dataset)
        resume_name = ""
        if dst.resume_token:
            res = ctx.local.run(["zfs", "send", "-n", "-v", "-t", dst.resume_token], check=False)
            resume_name = replicate.parse_token_name(res.stdout + res.stderr)
        p = replicate.plan(src, dst, wanted, origin=cfg.node, node=peer.name, force=force, resume_name=resume_name)
        transfers = [dataclasses.replace(t, estimate=_estimate(ctx, dataset, t, src)) for t in p.transfers]
        need = sum(t.estimate for t in transfers)
        if need and dst.available and need > dst.available:
            raise UserError(f"{peer.name} has {human_bytes(dst.available)} available for {dataset}, the send needs "
                            f"about {human_bytes(need)}", f"free space on {peer.name}'s pool (or replicate fewer "
                            "versions), then replicate again")
        result = {"node": peer.name, "dataset": dataset, "present": p.present, "notes": p.notes,
                  "transfers": [{"snapshot": t.snapshot, "kind": t.kind, "base": t.base, "force": t.force,
                                 "estimated_bytes": t.estimate, "what": t.describe(dataset)} for t in transfers],
                  "sent_bytes": 0}
        volume_props = replicate.read_fabric_props(ctx.local, dataset) if transfers else {}
        for t in transfers:  # what runs, in the plan's words (a dry run lists it as planned)
            ctx.local.record((*replicate.send_argv(dataset, t, raw=src.encrypted), "|", f"{peer.name}:",
                              *replicate.receive_argv(dataset, origin=cfg.node, force=t.force, props=volume_props)))
        if not ctx.dry_run:
            for t, out in zip(transfers, result["transfers"], strict=True):
                out["sent_bytes"] = _transfer(ctx, peer, dataset, src, t, limit, label or dataset, volume_props)
                result["sent_bytes"] += out["sent_bytes"]
            ctx.hosts[peer.name] = "ok"
        results.append(result)
    return results


def _estimate(ctx, dataset: str, t: replicate.Transfer, src: replicate.Side) -> int:
    res = ctx.local.run(replicate.send_argv(dataset, t, raw=src.encrypted, estimate=True), check=False)
    return replicate.parse_estimate(res.stdout)


def receive_request(dataset: str, t: replicate.Transfer, origin: str, volume_props: dict[str, str],
                    snapshot_props: dict[str, str]) -> list[str]:
    """The words of a transfer's ``receive`` request (``parse_request`` reads them on the target)."""
    # the base is a snapshot there whether it is a snapshot or a bookmark here (the same GUID and name)
    return ["receive", dataset, t.base[1:] if t.base else "-", origin, *(["--force"] if t.force else []),
            *[w for k, v in volume_props.items() for w in ("--prop", f"{k}={v}")],
            *[w for k, v in snapshot_props.items() for w in ("--snapshot-prop", f"{k}={v}")]]


def _transfer(ctx, peer: Peer, dataset: str, src: replicate.Side, t: replicate.Transfer, limit: int,
              label: str, volume_props: dict[str, str]) -> int:
    """One send | ssh receive, the source's snapshots held while it runs; the arrived snapshot bookmarked."""
    held = [f"{dataset}@{t.snapshot}"]
    if t.base and t.base.startswith("@"):
        held.append(dataset + t.base)
    tag = holders.tag(replicate.HOLD_SENDING)  # names this process: the next run releases it if it is killed
    for snap in held:
        lzc.hold(snap, tag, runner=ctx.local)
    progress_bar = None if ctx.json else ProgressBar(1, t.estimate, label=f"{label}@{t.snapshot} -> {peer.name}")
    import tempfile  # noqa: PLC0415 - lazy: a command's start (docs/testing.md)

    try:
        with tempfile.TemporaryFile() as send_err, tempfile.TemporaryFile() as recv_err:
            send = subprocess.Popen(replicate.send_argv(dataset, t, raw=src.encrypted), stdout=subprocess.PIPE,
                                    stderr=send_err)
            words = receive_request(dataset, t, ctx.config.node, volume_props,
                                    replicate.read_fabric_props(ctx.local, f"{dataset}@{t.snapshot}"))
            recv = subprocess.Popen(peer.argv(*words), stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                    stderr=recv_err)
            pump = replicate.Pump(limit, (lambda n: progress_bar.set(0, n)) if progress_bar else None)
            error = None
            try:
                pump.run(send.stdout.fileno(), recv.stdin.fileno())
            except FabricError as exc:
                error = exc
            finally:
                send.stdout.close()
                with contextlib.suppress(BrokenPipeError):
                    recv.stdin.close()
            if error:  # stalled or cut: neither side is waited for past this point
                send.kill()
                recv.kill()
            rc_send, rc_recv = send.wait(), recv.wait()
            if rc_recv != 0 or error:
                send.kill()
                recv_err.seek(0)
                raise peer.error(f"receive {dataset}@{t.snapshot} ({human_bytes(pump.total)} sent; re-run the same "
                                 "command to resume)", rc_recv, recv_err.read().decode(errors="replace"))
            if rc_send != 0:
                send_err.seek(0)
                raise CommandError(replicate.send_argv(dataset, t, raw=src.encrypted), rc_send, "",
                                   send_err.read().decode(errors="replace"),
                                   fix="re-run the same command: the target resumes what arrived")
        mark = f"{dataset}#{t.snapshot}"
        if not any(b.name == t.snapshot for b in src.bookmarks):
            ctx.local.run(["zfs", "bookmark", f"{dataset}@{t.snapshot}", mark], mutating=True, check=False)
        return pump.total
    finally:
        if progress_bar:
            progress_bar.close()
        for snap in held:
            with contextlib.suppress(FabricError):
                lzc.release(snap, tag, runner=ctx.local)


# --------------------------------------------------------------------------------------------
# the target's side: fabricctl replica-serve, the only command another storage node's key may run


def parse_request(words: list[str], roots: tuple[str, ...], peer: str) -> dict:
    """A replica-serve request (the words of SSH_ORIGINAL_COMMAND) of the storage node ``peer`` (the node the key
    belongs to: the forced command names it, ``--peer``), validated; UserError otherwise.

    ``state DATASET`` | ``receive DATASET BASE|- ORIGIN [--force] [--prop K=V]... [--snapshot-prop K=V]...`` |
    ``export DATASET VERSION GUID HOST...``; DATASET is ROOT/NAME for one of ``roots`` (this node's dataset and
    checkpoint roots; for ``export`` the dataset root, the first), BASE a snapshot name of it, ORIGIN the asking
    node (``peer``: a key speaks only for its own node), K=V a fabric:* property of the volume or of the snapshot
    that arrives (``replicate.check_props``), HOST a host name of this node's configuration.
    """
    if not peer:
        raise UserError("replica-serve: this key is not bound to a storage node (its forced command has no --peer)",
                        "re-run playbooks/fabricctl.yml: it authorizes each storage node's key with "
                        "`replica-serve --peer NODE`")
    validate_hostname(peer)
    if not words:
        raise UserError("replica-serve: no request", "this key only serves replication (fabricctl replicate)")
    verb, *rest = words
    shapes = {"state": (1, 1), "receive": (3, 4 + 4 * replicate.MAX_PROPS), "export": (4, 4 + MAX_EXPORT_HOSTS),
              "revoke": (3, 3 + MAX_EXPORT_HOSTS)}
    if verb not in shapes or not shapes[verb][0] <= len(rest) <= shapes[verb][1]:
        raise UserError(f"replica-serve: refused request {shlex.join(words)[:200]!r}",
                        "this key only serves `state DATASET`, `receive DATASET BASE ORIGIN [--force] [--prop K=V]... "
                        "[--snapshot-prop K=V]...`, `export DATASET VERSION GUID [--published] HOST...` and "
                        "`revoke DATASET VERSION [--force] HOST...`")
    dataset = validate_dataset_name(rest[0])
    parent, _slash, name = dataset.rpartition("/")
    allowed = roots[:1] if verb in ("export", "revoke") else roots
    if parent not in allowed or not name:
        raise UserError(f"replica-serve: {dataset} is not a volume under {' or '.join(allowed)}",
                        "replication reaches only fabricctl's datasets and checkpoint jobs; exports only datasets")
    out = {"verb": verb, "dataset": dataset}
    if verb == "export":
        version, guid, *hosts = rest[1:]
        if not guid.isdigit():
            raise UserError(f"replica-serve: {guid!r} is not a snapshot GUID", "a GUID is a decimal number")
        published = hosts[:1] == ["--published"]
        hosts = hosts[1:] if published else hosts
        if not hosts:
            raise UserError("replica-serve: export names no host", "export DATASET VERSION GUID [--published] HOST...")
        out.update(version=validate_version(version), guid=guid, published=published,
                   hosts=[validate_hostname(h) for h in hosts])
        return out
    if verb == "revoke":
        version, *hosts = rest[1:]
        force = hosts[:1] == ["--force"]
        hosts = hosts[1:] if force else hosts
        if not hosts:
            raise UserError("replica-serve: revoke names no host", "revoke DATASET VERSION [--force] HOST...")
        out.update(version=validate_version(version), force=force, hosts=[validate_hostname(h) for h in hosts])
        return out
    if verb == "receive":
        base, origin, *options = rest[1:]
        if base != "-":
            validate_snapshot_component(base)  # the rulebook's part after '@': a version or step-N
        if validate_hostname(origin) != peer:
            raise UserError(f"replica-serve: this key belongs to {peer}; it cannot receive for {origin}",
                            f"replicate from {origin} with {origin}'s own key")
        force, props = False, {"--prop": {}, "--snapshot-prop": {}}
        while options:
            option = options.pop(0)
            if option == "--force" and not force:
                force = True
            elif option in props and options and "=" in options[0]:
                key, _eq, value = options.pop(0).partition("=")
                if key in props[option]:
                    raise UserError(f"replica-serve: {option} {key[:80]!r} given twice", "give each property once")
                props[option][key] = value
            else:
                raise UserError(f"replica-serve: unknown option {option[:80]!r}",
                                "only --force, --prop K=V and --snapshot-prop K=V")
        out.update(base=None if base == "-" else base, origin=origin, force=force,
                   props=replicate.check_props(props["--prop"], dataset),
                   snapshot_props=replicate.check_props(props["--snapshot-prop"], f"the snapshot of {dataset}"))
    return out


def describe_request(words: list[str] | None, peer: str) -> dict[str, str]:
    """The journal record's fields of a request (fabricctl.audit: FABRIC_REQUEST_*): what it asked, as it asked it,
    refused or not; each field one line of at most 200 printable characters (the words come from another node)."""
    words = words or []
    verb, rest = (words[0], words[1:]) if words else ("-", [])
    names = {"receive": ("dataset", "base", "origin"), "state": ("dataset",), "export": ("dataset", "version", "guid"),
             "revoke": ("dataset", "version")}
    out = {"peer": peer or "-", "verb": verb}
    positional = [w for w in rest if not w.startswith("--")]
    for field_name, value in zip(names.get(verb, ()), positional, strict=False):
        out[field_name] = value
    if verb == "receive":
        out["force"] = "yes" if "--force" in rest else "no"
        out["props"] = ",".join(v.partition("=")[0] for k, v in zip(rest, rest[1:], strict=False)
                                if k in ("--prop", "--snapshot-prop"))
    elif verb == "export":
        out["published"] = "yes" if "--published" in rest else "no"
        out["hosts"] = ",".join(w for w in rest[3:] if w != "--published")
    elif verb == "revoke":
        out["force"] = "yes" if "--force" in rest else "no"
        out["hosts"] = ",".join(w for w in rest[2:] if w != "--force")
    elif verb not in names:
        out["words"] = shlex.join(words)
    return {k: "".join(c if c.isprintable() else "?" for c in v)[:200] for k, v in out.items()}


MAX_EXPORT_HOSTS = 256  # hosts one export request may name


def read_header(fd: int, stall: float = STALL_SECONDS) -> bytes:
    """The stream's first record (replicate.RECORD_SIZE bytes, fewer when it ends before), read from ``fd`` before
    anything is received; a sender silent for ``stall`` seconds is Stalled."""
    data = b""
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    while len(data) < replicate.RECORD_SIZE:
        if not poller.poll(int(stall * 1000)):
            raise replicate.Stalled(f"replica-serve: no stream arrived within {stall:g} s",
                                    "the sending node re-runs the same command")
        chunk = os.read(fd, replicate.RECORD_SIZE - len(data))
        if not chunk:
            break
        data += chunk
    return data


def _serve_export(ctx, request: dict) -> int:
    """Export a version held here read-only to hosts of this node's configuration, when it is the same snapshot
    (GUID) the asking node has: the storage side of its `publish --from-nodes` (the asking node logs the hosts
    in). Hosts are resolved in this node's own configuration, with their CHAP credentials from it."""
    dataset, version = request["dataset"], request["version"]
    name = dataset.rpartition("/")[2]
    row = datasets.require_version(ctx, name, version)
    here = replicate.read_side(ctx.local, dataset).guids
    if here.get(version) != request["guid"]:
        raise UserError(f"{name}@{version} here has GUID {here.get(version)}, the asking node's has "
                        f"{request['guid']}: not the same snapshot", "replicate the version again from the node "
                        "that made it (fabricctl replicate --force), then publish")
    hosts = [ctx.config.host(h) for h in request["hosts"]]
    export = datasets.export_of(ctx, row, datasets.require(ctx, name))
    # no read of the whole of LIO per request
    storage = Grants(ctx.publisher).grant(export, hosts, published=request.get("published", False))
    ctx.emit({"node": ctx.config.node, "portal": ctx.publisher.settings.portal,
              "target": ctx.publisher.settings.target_iqn(export), "storage": storage})
    return 0


def _serve_revoke(ctx, request: dict) -> int:
    """Take a version's grant back from hosts of this node's configuration (the storage side of the asking node's
    `revoke`; refused while one is logged in here, unless --force)."""
    dataset, version = request["dataset"], request["version"]
    name = dataset.rpartition("/")[2]
    row = datasets.require_version(ctx, name, version)
    hosts = [ctx.config.host(h) for h in request["hosts"]]
    storage = Grants(ctx.publisher).revoke(datasets.export_of(ctx, row), hosts, force=request["force"])
    ctx.emit({"node": ctx.config.node, "target": storage["target"], "storage": storage})
    return 0


def serve(ctx, request: dict) -> int:
    """Answer one request of another storage node (stdin/stdout are its SSH channel)."""
    dataset = request["dataset"]
    if request["verb"] == "export":
        return _serve_export(ctx, request)
    if request["verb"] == "revoke":
        return _serve_revoke(ctx, request)
    if request["verb"] == "state":
        side = replicate.read_side(ctx.local, dataset)
        # the space a receive may take: the parent's (its quota and the pool's), never more than the volume's
        # own (a volume's "available" counts its unused refreservation, which a snapshot's blocks do not get)
        parent = replicate.read_side(ctx.local, dataset.rpartition("/")[0]).available
        side.available = min(side.available, parent) if side.exists else parent
        ctx.emit(side.to_dict())
        return 0
    # the target's own checks, whatever the source planned: the volume it writes, then what the stream carries
    replicate.check_receive(replicate.read_side(ctx.local, dataset), origin=request["origin"], force=request["force"],
                            node=ctx.config.node or "this node")
    head = read_header(sys.stdin.fileno())
    snapshot = replicate.check_stream(replicate.parse_stream_header(head), dataset)
    base = f"{dataset}@{request['base']}" if request["base"] else None
    holders.release_stale(ctx.local, [dataset], (replicate.HOLD_RECEIVING,))  # of a receive that was killed
    tag = holders.tag(replicate.HOLD_RECEIVING)
    if base:
        lzc.hold(base, tag, runner=ctx.local)
    try:
        argv = replicate.receive_argv(dataset, origin=request["origin"], force=request["force"],
                                      props=request["props"])
        sys.stdout.flush()
        import tempfile  # noqa: PLC0415 - lazy: a command's start (docs/testing.md)

        with tempfile.TemporaryFile() as err:
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=err,
                                    env={**os.environ, "LC_ALL": "C"})
            try:  # through a pump: a sender silent for STALL_SECONDS ends the receive (resumable), its lock freed
                with contextlib.suppress(BrokenPipeError):  # zfs receive gave up at once: its stderr says why
                    os.write(proc.stdin.fileno(), head)  # 312 bytes into an empty pipe: never blocks
                replicate.Pump().run(sys.stdin.fileno(), proc.stdin.fileno())
            except FabricError as exc:
                if not isinstance(exc, replicate.Stalled):  # zfs receive closed its input: it is ending
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        proc.wait(timeout=10)
                if proc.poll() is None:
                    proc.kill()
                    raise
                # zfs receive ended (refused the stream): its own message, below
            finally:
                with contextlib.suppress(BrokenPipeError):
                    proc.stdin.close()
                returncode = proc.wait()
            err.seek(0)
            stderr = err.read(64 << 10).decode(errors="replace")
        if returncode != 0:
            raise CommandError(argv, returncode, "", stderr, fix="the sending node re-runs the same command to resume")
        if request["snapshot_props"]:
            ctx.local.run(replicate.snapshot_props_argv(f"{dataset}@{snapshot}", request["snapshot_props"]),
                          mutating=True)
        return 0
    finally:
        if base:
            with contextlib.suppress(FabricError):
                lzc.release(base, tag, runner=ctx.local)
