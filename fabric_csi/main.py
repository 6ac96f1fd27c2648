"""fabric-csi: the CSI plugin's command line (``main(argv) -> int``), a thin shell over the services.

  fabric-csi --mode node [--endpoint unix:///csi/csi.sock] [--node-id HOST] [--host-namespace]
  fabric-csi --mode controller [--endpoint ...] [--storage-node HOST --ssh-key PATH --known-hosts PATH]
  fabric-csi call METHOD [REQUEST_JSON] [--endpoint ...] [--timeout SECONDS]
  fabric-csi serve-grants [--fabricctl PATH]     (a storage node's forced command for the controller's key)

``--mode node`` serves Identity and Node on a GPU node (root: it logs in and mounts), from the agent's
configuration (/etc/fabric-node, written by role fabric_node): the node id is that configuration's host, the
host's fabric name (``--node-id``, when given, must be the same). ``--host-namespace``: the plugin runs in a
container with the host's PID namespace and runs its commands in the host's namespaces (the DaemonSet).
``--mode controller`` serves Identity and Controller: it grants with fabricctl here (on a storage node) or, with
``--storage-node``, on that storage node over SSH with a key restricted there to ``fabric-csi serve-grants``.
Exit statuses are fabricctl's: 0 success, 1 bad input or refused, 2 usage, 5 unexpected.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from fabric_core.base.errors import EXIT_UNEXPECTED, EXIT_USAGE, FabricError, UserError

PROG = "fabric-csi"
DEFAULT_ENDPOINT = "unix:///csi/csi.sock"
log = logging.getLogger("fabric-csi")


def parser() -> argparse.ArgumentParser:
    from fabric_core.node import config as node_config  # noqa: PLC0415

    p = argparse.ArgumentParser(prog=PROG, description="A CSI plugin giving pods a dataset version read-only "
                                "(docs/csi.md). `fabric-csi call --help` and `fabric-csi serve-grants --help` for the "
                                "others.",
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="exit: 0 ok, 1 bad input or refused, 2 usage, 5 unexpected")
    p.add_argument("--endpoint", default=DEFAULT_ENDPOINT,
                   help=f"the unix socket to serve (default {DEFAULT_ENDPOINT})")
    p.add_argument("--mode", required=True, choices=("node", "controller"), help="the services to serve")
    p.add_argument("--node-id", help="node mode: this host's fabric name (default, and it must be: the host of "
                   f"{node_config.CONFIG_PATH})")
    p.add_argument("--config", default=node_config.CONFIG_PATH, help="node mode: the agent's configuration")
    p.add_argument("--credentials", default=node_config.CREDENTIALS_PATH, help="node mode: this host's CHAP")
    p.add_argument("--host-namespace", action="store_true", help="node mode in a container (hostPID): run the "
                   "commands in the host's namespaces (nsenter --target 1)")
    p.add_argument("--fabricctl", default="", help="controller mode on a storage node: the fabricctl command "
                   "(default: on PATH, else /usr/local/sbin/fabricctl)")
    p.add_argument("--storage-node", help="controller mode elsewhere: the storage node to ask over SSH (its address)")
    p.add_argument("--ssh-user", default="root", help="with --storage-node (default root)")
    p.add_argument("--ssh-port", type=int, default=22, help="with --storage-node (default 22)")
    p.add_argument("--ssh-key", help="with --storage-node: the controller's private key (authorized there with "
                   "command=\"fabric-csi serve-grants\")")
    p.add_argument("--known-hosts", help="with --storage-node: a known_hosts file holding the storage node's key")
    p.add_argument("--workers", type=int, default=8, help="calls served at once (default 8)")
    p.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    return p


def call_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"{PROG} call", description="Send one CSI request to a plugin's socket and "
                                "print its answer as JSON (exit 1 with {code, message} when it failed).")
    p.add_argument("method", metavar="METHOD", help="a CSI method, e.g. NodeStageVolume")
    p.add_argument("request", metavar="REQUEST_JSON", nargs="?", default="{}", help="the request (csi.proto's JSON)")
    p.add_argument("--endpoint", default=DEFAULT_ENDPOINT, help=f"the plugin's socket (default {DEFAULT_ENDPOINT})")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for the answer (default 300)")
    return p


def grants_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"{PROG} serve-grants", description="The forced command of the CSI "
                                "controller's key on a storage node: serves grant/revoke/show of one version for "
                                "one host from SSH_ORIGINAL_COMMAND (fabricctl runs them), refuses anything else.")
    p.add_argument("--fabricctl", default="", help="the fabricctl command (default: on PATH, else "
                   "/usr/local/sbin/fabricctl)")
    return p


def node_services(args):
    """(identity health, add_services) of the node mode."""
    from fabric_core.base.runner import LocalRunner  # noqa: PLC0415
    from fabric_core.node import agent as agent_mod  # noqa: PLC0415
    from fabric_core.node import config as node_config  # noqa: PLC0415

    from .hostrunner import HostRunner  # noqa: PLC0415
    from .node import NodeService  # noqa: PLC0415

    if os.geteuid() != 0:
        raise UserError("the node plugin runs as root (it logs in to storage nodes and mounts)",
                        "run it from its systemd service (role fabric_node) or its DaemonSet (privileged)")
    cfg = node_config.load(args.config, args.credentials)
    if args.node_id and args.node_id != cfg.host:
        raise UserError(f"--node-id {args.node_id} is not this host's fabric name ({cfg.host}, from {args.config}): "
                        "the controller grants versions to that name", f"give --node-id {cfg.host}, or none")
    runner = HostRunner() if args.host_namespace else LocalRunner()
    node = NodeService(agent_mod.Agent(cfg, runner))

    def health() -> str:
        try:
            node_config.load(args.config, args.credentials)
        except FabricError as err:
            return str(err)
        return ""

    def add(server):
        from .proto import csi_pb2_grpc  # noqa: PLC0415

        csi_pb2_grpc.add_NodeServicer_to_server(node, server)
    log.info("node plugin for %s (initiator %s, storage nodes %s)", cfg.host, cfg.initiator,
             ", ".join(n.name for n in cfg.storage_nodes))
    return health, add


def controller_services(args):
    """(identity health, add_services) of the controller mode."""
    from .backend import Fabricctl  # noqa: PLC0415
    from .controller import ControllerService  # noqa: PLC0415

    if args.storage_node:
        if not args.ssh_key or not args.known_hosts:
            raise UserError("--storage-node needs --ssh-key and --known-hosts",
                            "give the controller's key and a known_hosts file with the storage node's host key")
        backend = Fabricctl.ssh(args.storage_node, key=args.ssh_key, known_hosts=args.known_hosts,
                                user=args.ssh_user, port=args.ssh_port)
    else:
        backend = Fabricctl.local(args.fabricctl)
    problem = backend.health()
    if problem:
        raise UserError(problem, "see docs/csi.md, \"The controller\"")
    controller = ControllerService(backend)

    def add(server):
        from .proto import csi_pb2_grpc  # noqa: PLC0415

        csi_pb2_grpc.add_ControllerServicer_to_server(controller, server)
    log.info("controller plugin: grants through fabricctl on %s", backend.where)
    return backend.health, add


def serve(args) -> int:
    from .identity import IdentityService  # noqa: PLC0415
    from .server import endpoint_path  # noqa: PLC0415
    from .server import serve as serve_socket  # noqa: PLC0415

    if not 1 <= args.workers <= 64:
        raise UserError("--workers must be 1-64")
    path = endpoint_path(args.endpoint)
    health, add = node_services(args) if args.mode == "node" else controller_services(args)
    identity = IdentityService(controller=args.mode == "controller", health=health)

    def add_all(server):
        from .proto import csi_pb2_grpc  # noqa: PLC0415

        csi_pb2_grpc.add_IdentityServicer_to_server(identity, server)
        add(server)
    return serve_socket(path, add_all, workers=args.workers)


def main(argv: list[str] | None = None, *, environ=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv[:1] == ["serve-grants"]:
            from . import serve_grants  # noqa: PLC0415

            try:
                args = grants_parser().parse_args(argv[1:])
            except SystemExit as exc:
                return int(exc.code or 0) if exc.code in (0, None) else EXIT_USAGE
            return serve_grants.main(args.fabricctl, environ)
        if argv[:1] == ["call"]:
            from .client import call, dumps  # noqa: PLC0415
            from .server import endpoint_path  # noqa: PLC0415

            try:
                args = call_parser().parse_args(argv[1:])
            except SystemExit as exc:
                return int(exc.code or 0) if exc.code in (0, None) else EXIT_USAGE
            rc, answer = call(endpoint_path(args.endpoint), args.method, args.request, timeout=args.timeout)
            print(dumps(answer))
            return rc
        try:
            args = parser().parse_args(argv)
        except SystemExit as exc:
            return int(exc.code or 0) if exc.code in (0, None) else EXIT_USAGE
        logging.basicConfig(level=getattr(logging, args.log_level.upper()), stream=sys.stderr,
                            format="%(levelname)s %(message)s")
        return serve(args)
    except FabricError as err:
        print(f"{PROG}: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - one line, the exit status says unexpected
        print(f"{PROG}: unexpected error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_UNEXPECTED


if __name__ == "__main__":
    sys.exit(main())
