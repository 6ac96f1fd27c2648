"""What every command gets: the configuration (loaded on first use), the runners (this node's, and one
over SSH per GPU node), the publishing service, the fan-out over hosts, and output."""

from __future__ import annotations

import contextlib
import sys

from fabric_core.base import lock
from fabric_core.base.errors import UserError
from fabric_core.base.runner import LocalRunner

from . import output
from .audit import command_line
from .fanout import HostProgress, checkpoint, run_on_hosts


class Context:
    def __init__(self, args):
        self.args = args
        self._config = None
        self._publisher = None
        self._ssh: dict = {}
        # every host the command reached -> its last outcome (fan-out status, or "contacted"): the journal record
        self.hosts: dict[str, str] = {}
        self.dry_run = bool(getattr(args, "dry_run", False))
        self.json = bool(getattr(args, "json", False))
        self.result = None  # what emit() was given: main prints it when the command ends (with the failure, if any)
        self.local = LocalRunner(dry_run=self.dry_run)
        self.local.trace = self.tracer("this node")

    @property
    def config(self):
        if self._config is None:
            from . import config  # noqa: PLC0415 - PyYAML only when a command needs the configuration

            self._config = config.load(getattr(self.args, "config", None))
            for text in self._config.deprecations:
                self.note(f"fabricctl: warning: {text}")
        return self._config

    def ssh(self, host):
        """A runner on a GPU node (one connection per host, reused, closed at exit). Refused when this node's key
        may not run commands there (``ssh.access``: agent or none): every command asks the host's agent then
        (``agent``), or contacts no host (``none``), so this is reached only by a path that forgot to."""
        access = self.config.ssh.access
        if access != "shell":
            raise UserError(f"this command would run commands on {host.name}, and this storage node's key there "
                            + ("runs only the node agent (ssh.access: agent)" if access == "agent" else
                               "is not installed (ssh.access: none, pull only)"),
                            "with agent, fabricctl asks the host's agent (`fabric-node --ssh`) for everything: "
                            "report this command; with none, no command reaches a GPU node (dataset versions are "
                            "granted, `fabricctl grant`, and attached by the hosts; checkpoints need agent)")
        return self._runner(host, forced=False)

    def writer(self, host, job: str, mountpoint: str):
        """A checkpoint writer to freeze and thaw (``freeze.frozen``'s writer): its agent (``ssh.access: agent``),
        else commands over this node's key (``shell``; refused with ``none``)."""
        agent = self.agent(host)
        if agent is not None:
            from fabric_core.node.client import AgentWriter  # noqa: PLC0415

            return AgentWriter(agent, job, mountpoint)
        from fabric_core.node.freeze import Here  # noqa: PLC0415

        return Here(self.ssh(host), mountpoint)

    def _runner(self, host, *, forced: bool):
        self.hosts.setdefault(host.name, "contacted")
        key = (host.name, forced)
        if key not in self._ssh:
            from .remote import SSHRunner  # noqa: PLC0415 - paramiko only when a command reaches a host

            self._ssh[key] = SSHRunner(host, self.config.ssh, dry_run=self.dry_run, forced=forced)
            self._ssh[key].trace = self.tracer(host.name)
        return self._ssh[key]

    def agent(self, host):
        """A GPU node's agent (fabric_core.node.client), asked through this node's key (its forced command runs
        `fabric-node --ssh`); None when the key runs commands (ssh.access: shell) or is not there (none)."""
        if self.config.ssh.access != "agent":
            return None
        from fabric_core.node.client import AgentClient  # noqa: PLC0415

        return AgentClient(self._runner(host, forced=True), host.name)

    # -- locks (fabric_core.base.lock: the volume's lock first, the node lock last and short) --
    def lock_wait(self) -> float:
        """Seconds a lock is waited for: the config's lock.wait_seconds (the default when the config does not
        load: the command itself reports that, after checking its own arguments)."""
        try:
            return self.config.lock.wait_seconds
        except UserError:
            return lock.DEFAULT_WAIT

    def node_lock(self):
        """The node lock around a short change of shared node state (nothing in a dry run)."""
        if self.dry_run:
            return contextlib.nullcontext()
        wait = self.lock_wait()
        return lock.node_lock(command_line(self.args), wait=wait, waiting=lambda holder: self.note(
            f"fabricctl: waiting up to {wait:g} s for this node's lock, held by {lock.describe(holder)}"))

    def object_lock(self, kind: str, name: str, *, shared: bool = False):
        """One object's lock (fabric_core.base.lock.object_lock), for the whole command (nothing in a dry run)."""
        if self.dry_run:
            return contextlib.nullcontext()
        wait = self.lock_wait()
        return lock.object_lock(kind, name, command_line(self.args), shared=shared, wait=wait,
                                waiting=lambda holder: self.note(
                                    f"fabricctl: waiting up to {wait:g} s for the lock of {kind} {name}, held by "
                                    f"{holder['command']}"))

    @property
    def publisher(self):
        """The publishing service (fabric_core.services.publish.Publisher) on this node and, over SSH, its hosts."""
        if self._publisher is None:
            # imported here: the publishing service brings LIO, iSCSI and udev code (about 1 s of a storage
            # node's emulated CPU in the lab), which the commands that never publish do not need
            from fabric_core.services.publish import Publisher  # pylint: disable=import-outside-toplevel
            cfg = self.config
            self._publisher = Publisher(cfg.publishing(), self.local, self.ssh, cfg.hosts.values(),
                                        agents=self.agent if cfg.ssh.access == "agent" else None)
        return self._publisher

    def fan(self, hosts, fn, what: str, *, quiet: bool = False):
        """Run ``fn(host, step)`` on every host in parallel with a per-host progress display (``step(text)``
        shows where a host is, and is a step boundary: after Ctrl-C the host stops there, fanout.checkpoint);
        returns the FanoutResult and notes each host's outcome for the journal."""
        progress = None if quiet or not hosts else HostProgress(hosts, title=what)

        def call(host):
            def step(text: str) -> None:
                if progress:
                    progress.update(host, text)
                else:
                    checkpoint()

            return fn(host, step)

        try:
            result = run_on_hosts(hosts, call, parallel=self.config.defaults.parallel_hosts, progress=progress)
            self.record_outcomes(result)
            return result
        finally:
            if progress:
                progress.close()

    def record_outcomes(self, result) -> None:
        """Note each host's outcome of a fan-out (a FanoutResult) for the journal record."""
        for outcome in result.outcomes:  # in the fan-out's order (hosts first reached in parallel threads)
            self.hosts.pop(outcome.name, None)
            self.hosts[outcome.name] = outcome.status

    def close(self) -> None:
        for runner in self._ssh.values():
            try:
                runner.close()
            except Exception:  # noqa: BLE001,S110 - closing is best effort
                pass
        self._ssh.clear()

    # -- output: results on stdout, progress and notes on stderr --
    def emit(self, obj) -> None:
        """The result as JSON on stdout (output.print_json, fabricctl's one JSON writer), printed by ``finish``
        when the command ends: so that a command that fails after making its result (a partial publish, a verify
        that found differences) still prints exactly one JSON object, its result with the failure added."""
        self.result = obj

    def finish(self, fail: dict | None = None) -> None:
        """Print the command's one JSON object: its result (``emit``) when it succeeded; when it failed, under
        --json, its result with ``fail`` (output.failure) added, or the failure alone (without --json a failure is
        text on stderr only)."""
        result, self.result = self.result, None
        if fail is None:
            if result is not None:
                output.print_json(result)
        elif self.json:
            output.print_json(output.with_failure(result, fail))

    def report(self, out: dict, *lines: str) -> None:
        """A command's result: ``out`` as JSON with --json, else the lines of text."""
        if self.json:
            self.emit(out)
            return
        for line in lines:
            print(line)

    def tense(self, planned: str, done: str) -> str:
        """``planned`` in a dry run ("would publish"), ``done`` otherwise ("published")."""
        return planned if self.dry_run else done

    def tracer(self, where: str):
        """With -v: a runner's trace (fabric_core.base.runner), each command it runs as one line on stderr."""
        if not getattr(self.args, "verbose", False):
            return None
        return lambda line: self.note(f"fabricctl: [{where}] {line}")

    def note(self, text: str) -> None:
        print(text, file=sys.stderr)

    def planned(self, runner=None) -> list[str]:
        """This node's changes a dry run planned (commands, libzfs_core and rtslib calls), one line each."""
        runner = runner or self.local
        return [" ".join(a) for a in runner.planned]
