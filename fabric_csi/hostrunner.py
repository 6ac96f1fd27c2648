"""Commands in the host's namespaces, for a node plugin that runs in a container (the DaemonSet).

The agent's work is the host's: its iSCSI sessions (iscsid), its mounts (the host's mount table, which the
host's systemd reads), its multipath maps, and the kubelet's paths, which are the host's paths. In a container with
the host's PID namespace (``hostPID: true``, privileged), ``HostRunner`` runs every command through
``nsenter --target 1`` into the mount, UTS, IPC, network and PID namespaces of the host's init, so each one runs
exactly as it does when the plugin runs on the host itself (role fabric_node's systemd service, which uses a
plain LocalRunner). The files the agent reads and writes itself (its configuration, its records, the node lock)
are the host's through hostPath volumes at the same paths (deploy/kubernetes/node.yaml).
"""

from __future__ import annotations

from fabric_core.base.runner import LocalRunner

NSENTER = ("nsenter", "--target", "1", "--mount", "--uts", "--ipc", "--net", "--pid", "--")


class HostRunner(LocalRunner):
    """A LocalRunner whose commands run in the host's namespaces (the same bounds of time and output)."""

    def _run(self, argv, data):
        return super()._run((*NSENTER, *argv), data)
