"""What every command gets: the configuration (loaded on first use), runners, output helpers."""

from __future__ import annotations

import json
import sys

from fabric_core.runner import LocalRunner


class Context:
    def __init__(self, args):
        self.args = args
        self._config = None
        self._ssh: dict = {}
        # every host the command reached -> its last outcome (fan-out status, or "contacted"): the journal record
        self.hosts: dict[str, str] = {}
        self.dry_run = bool(getattr(args, "dry_run", False))
        self.json = bool(getattr(args, "json", False))
        self.local = LocalRunner(dry_run=self.dry_run)

    @property
    def config(self):
        if self._config is None:
            from . import config  # noqa: PLC0415

            self._config = config.load(getattr(self.args, "config", None))
            for text in self._config.deprecations:
                self.note(f"fabricctl: warning: {text}")
        return self._config

    def ssh(self, host):
        """A runner on a GPU node (one connection per host, reused, closed at exit)."""
        self.hosts.setdefault(host.name, "contacted")
        if host.name not in self._ssh:
            from .remote import SSHRunner  # noqa: PLC0415

            self._ssh[host.name] = SSHRunner(host, self.config.ssh, dry_run=self.dry_run)
        return self._ssh[host.name]

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
        print(json.dumps(obj, indent=2, sort_keys=True, default=str))

    def note(self, text: str) -> None:
        print(text, file=sys.stderr)

    def planned(self, runner=None) -> list[str]:
        runner = runner or self.local
        return [" ".join(a) for a in runner.planned]
