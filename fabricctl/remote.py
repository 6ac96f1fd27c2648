"""Commands on GPU nodes over SSH (paramiko), with host keys verified against fabricctl's known_hosts.

``SSHRunner`` is a ``fabric_core.base.runner.Runner``: the same core code (iscsi.ensure_session, ...) runs
on a GPU node through it. One SSH connection per runner, opened at the first command and kept
until ``close()`` (or the end of a ``with`` block).

Host keys come ONLY from the configured known_hosts file (written by the fabricctl role from facts
Ansible gathered over its own verified connection). An unknown key is refused, a changed key is
refused, and nothing is ever added to any known_hosts file; ~/.ssh is never read (no agent, no
default keys, no system known_hosts).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import shlex
import socket
import threading
import time
from typing import Any

from fabric_core.base.errors import EXIT_UNEXPECTED, EXIT_USER, FabricError, redact_argv
from fabric_core.base.runner import OUTPUT_CAP, REMOTE_IDLE, REMOTE_TIMEOUT, Runner

REMOTE_ENV = ("env", "LC_ALL=C", "LANG=C", "LANGUAGE=C")
KEEPALIVE_SECONDS = 15
FABRICCTL_PLAYBOOK = "playbooks/fabricctl.yml"


# --------------------------------------------------------------------------------------------
# errors


class RemoteError(FabricError):
    """Base of the SSH errors; ``host`` and ``address`` say which node."""

    exit_code = EXIT_USER

    def __init__(self, problem: str, fix: str = "", *, host: str = "", address: str = ""):
        super().__init__(problem, fix)
        self.host = host
        self.address = address


class HostUnreachable(RemoteError):
    """No SSH connection: timeout, connection refused, no route, name not resolved, no SSH banner."""


class HostKeyUnknown(RemoteError):
    """The host's key is not in fabricctl's known_hosts file (refused; never added automatically)."""

    def __init__(self, problem: str, fix: str = "", *, host: str = "", address: str = "", fingerprint: str = ""):
        super().__init__(problem, fix, host=host, address=address)
        self.fingerprint = fingerprint


class HostKeyMismatch(RemoteError):
    """The host offered a key other than the one in known_hosts (re-installed host, or a man in the middle)."""

    def __init__(self, problem: str, fix: str = "", *, host: str = "", address: str = "", expected: str = "",
                 got: str = ""):
        super().__init__(problem, fix, host=host, address=address)
        self.expected = expected
        self.got = got


class AuthFailed(RemoteError):
    """The host refused fabricctl's key (or the key file cannot be read)."""


class ConnectionLost(RemoteError):
    """The connection broke while a command ran: whether the command completed is unknown."""

    exit_code = EXIT_UNEXPECTED


SLICE = 1.0  # seconds a channel read waits before the runner looks at its bounds again


class _Bounded(Exception):
    """A command went past one of the runner's bounds (its text says which)."""


# --------------------------------------------------------------------------------------------
# helpers


def fingerprint(key) -> str:
    """OpenSSH's SHA256 fingerprint of a paramiko key (as `ssh-keygen -lf` prints it)."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def command_line(argv) -> str:
    """The remote command line: argv quoted for the remote shell, run with the C locale."""
    return " ".join(shlex.quote(str(a)) for a in (*REMOTE_ENV, *argv))


def known_hosts_name(address: str, port: int) -> str:
    """How known_hosts names a host: ADDRESS on port 22, [ADDRESS]:PORT otherwise."""
    return address if port == 22 else f"[{address}]:{port}"


def _reject_policy_class():
    import paramiko

    class RecordingRejectPolicy(paramiko.RejectPolicy):
        """RejectPolicy that keeps the fingerprint of the refused key for the error message."""

        def __init__(self):
            self.refused = None

        def missing_host_key(self, client, hostname, key):
            self.refused = (hostname, key.get_name(), fingerprint(key))
            super().missing_host_key(client, hostname, key)

    return RecordingRejectPolicy


# --------------------------------------------------------------------------------------------
# the runner


class SSHRunner(Runner):
    """Run commands on one host over SSH. ``host`` has ``name`` and ``address``; ``ssh`` is a config.SSHConfig.

    Every command is bounded (fabric_core.base.runner's bounds): ``command_timeout`` seconds without any output,
    ``timeout`` seconds in all, ``output_cap`` bytes per stream; past any of them the command is abandoned (its
    channel closed) and ``ConnectionLost`` raised naming the host and the bound.
    """

    def __init__(self, host, ssh, *, dry_run: bool = False, command_timeout: float = REMOTE_IDLE,
                 timeout: float | None = REMOTE_TIMEOUT, output_cap: int = OUTPUT_CAP, forced: bool = False):
        super().__init__(dry_run=dry_run)
        # forced: the host runs one forced command for this key (the node agent, `fabric-node --ssh`) and the argv
        # is its request, sent as it is (no `env LC_ALL=C` in front, which the agent would refuse)
        self.forced = forced
        self.host = host
        self.ssh = ssh
        self.command_timeout = command_timeout
        self.timeout = timeout
        self.output_cap = output_cap
        self._client = None
        self._lock = threading.Lock()

    # ---- connection

    @property
    def name(self) -> str:
        return getattr(self.host, "name", str(self.host))

    @property
    def address(self) -> str:
        return getattr(self.host, "address", str(self.host))

    def _where(self) -> str:
        return f"{self.name} ({self.address}:{self.ssh.port})" if self.name != self.address else \
            f"{self.address}:{self.ssh.port}"

    def connect(self):
        """Open the connection now (otherwise the first command does). Returns the paramiko SSHClient."""
        with self._lock:
            if self._client is not None:
                transport = self._client.get_transport()
                if transport is not None and transport.is_active():
                    return self._client
                self._close_client()
            self._client = self._connect()
            return self._client

    def _connect(self):
        import paramiko

        if not os.path.isfile(self.ssh.known_hosts):
            raise HostKeyUnknown(
                f"cannot verify {self._where()}: fabricctl's known_hosts file {self.ssh.known_hosts} does not exist",
                f"re-run {FABRICCTL_PLAYBOOK}: it writes the GPU nodes' host keys there from facts gathered over "
                "Ansible's verified connection", host=self.name, address=self.address)
        client = paramiko.SSHClient()
        policy = _reject_policy_class()()
        try:
            client.load_host_keys(self.ssh.known_hosts)  # never load_system_host_keys(): no ~/.ssh
        except (OSError, paramiko.SSHException) as exc:
            raise HostKeyUnknown(f"cannot read fabricctl's known_hosts file {self.ssh.known_hosts}: {exc}",
                                 f"re-run {FABRICCTL_PLAYBOOK} to rewrite it", host=self.name,
                                 address=self.address) from None
        client.set_missing_host_key_policy(policy)
        timeout = self.ssh.connect_timeout
        try:
            client.connect(self.address, port=self.ssh.port, username=self.ssh.user, key_filename=self.ssh.key_file,
                           timeout=timeout, banner_timeout=timeout, auth_timeout=timeout, allow_agent=False,
                           look_for_keys=False)
        except paramiko.BadHostKeyException as exc:
            client.close()
            expected, got = fingerprint(exc.expected_key), fingerprint(exc.key)
            raise HostKeyMismatch(
                f"host key of {self._where()} CHANGED: known_hosts {self.ssh.known_hosts} has "
                f"{exc.expected_key.get_name()} {expected}, the host offered {exc.key.get_name()} {got}; "
                "refusing to connect",
                "find out why before anything else: a re-installed host has a new key, anything else may be a "
                "man in the middle. Once the new key is verified (compare `ssh-keygen -lf "
                "/etc/ssh/ssh_host_ed25519_key.pub` on the host's console), update known_hosts by re-running "
                f"{FABRICCTL_PLAYBOOK} (it rewrites it from Ansible's verified connection) or by editing "
                f"{self.ssh.known_hosts}", host=self.name, address=self.address, expected=expected, got=got) from None
        except paramiko.AuthenticationException as exc:
            client.close()
            raise AuthFailed(
                f"{self._where()} refused fabricctl's key {self.ssh.key_file} for user {self.ssh.user}: {exc}",
                f"re-run {FABRICCTL_PLAYBOOK}: it authorizes this storage node's key in "
                f"~{self.ssh.user}/.ssh/authorized_keys on every GPU node", host=self.name,
                address=self.address) from None
        except paramiko.SSHException as exc:
            client.close()
            if policy.refused is not None:
                _name, keytype, fp = policy.refused
                raise HostKeyUnknown(
                    f"host key of {self._where()} is not in fabricctl's known_hosts {self.ssh.known_hosts} "
                    f"(it offered {keytype} {fp}); refusing to connect (keys are never added automatically)",
                    f"re-run {FABRICCTL_PLAYBOOK}: it writes known_hosts from the host keys Ansible gathered over "
                    "its own verified connection; or check the fingerprint above on the host's console "
                    "(`ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub`) and add the key to "
                    f"{self.ssh.known_hosts} as `{known_hosts_name(self.address, self.ssh.port)} KEYTYPE KEY`",
                    host=self.name, address=self.address, fingerprint=fp) from None
            raise self._unreachable(exc) from None
        except (OSError, EOFError) as exc:  # timeout, refused, no route, DNS (NoValidConnectionsError is an OSError)
            client.close()
            if isinstance(exc, (FileNotFoundError, PermissionError)) and getattr(exc, "filename", None):
                raise AuthFailed(f"cannot read fabricctl's SSH key {exc.filename}: {exc.strerror}",
                                 f"re-run {FABRICCTL_PLAYBOOK} (it creates the key), and run fabricctl as root",
                                 host=self.name, address=self.address) from None
            raise self._unreachable(exc) from None
        transport = client.get_transport()
        if transport is not None:
            transport.set_keepalive(KEEPALIVE_SECONDS)
        return client

    def _unreachable(self, exc: BaseException) -> HostUnreachable:
        if isinstance(exc, (socket.timeout, TimeoutError)):
            why = f"no answer within {self.ssh.connect_timeout:g}s"
        elif isinstance(exc, socket.gaierror):
            why = f"the name does not resolve ({exc.strerror or exc})"
        else:
            why = str(exc) or type(exc).__name__
        return HostUnreachable(
            f"cannot reach {self._where()} over SSH: {why}",
            f"check that {self.name} is up and sshd listens on {self.address} port {self.ssh.port} "
            "(the address comes from the configuration's hosts section), and that no firewall is in between",
            host=self.name, address=self.address)

    def _close_client(self) -> None:
        if self._client is not None:
            try:
                self._client.close()
            finally:
                self._client = None

    def close(self) -> None:
        with self._lock:
            self._close_client()

    def __enter__(self) -> SSHRunner:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    # ---- commands

    def _run(self, argv: tuple, data: str | None) -> tuple[int, str, str]:
        client = self.connect()
        transport = client.get_transport()
        try:
            chan = transport.open_session(timeout=self.ssh.connect_timeout)
        except Exception as exc:  # noqa: BLE001 - paramiko raises SSHException, EOFError or OSError here
            self.close()
            raise self._lost(argv, exc, started=False) from None
        started = time.monotonic()
        deadline = started + self.timeout if self.timeout is not None else float("inf")
        last_output = [started]  # any output, on either stream, shows the command is alive
        errors: list[BaseException] = []
        stderr_chunks: list[bytes] = []
        over: list[str] = []  # the stream that printed more than output_cap
        too_long = f"still running after {self.timeout:g}s" if self.timeout is not None else ""

        def read_stderr():
            size = 0
            try:
                while True:
                    try:
                        chunk = chan.recv_stderr(65536)
                    except TimeoutError:  # the channel's slice: the main loop judges silence
                        if chan.closed:
                            return
                        continue
                    if not chunk:
                        return
                    last_output[0] = time.monotonic()
                    if size + len(chunk) > self.output_cap:
                        over.append("stderr")
                        chan.close()  # abandoned: the flood stops here
                        return
                    size += len(chunk)
                    stderr_chunks.append(chunk)
            except Exception as exc:  # noqa: BLE001 - reported by the main thread
                errors.append(exc)

        def write_stdin():
            try:
                if data:
                    chan.sendall(data.encode())
                chan.shutdown_write()
            except Exception as exc:  # noqa: BLE001
                # a command may exit without reading its input; only a broken connection is an error
                if not (chan.closed or chan.eof_received or chan.exit_status_ready()):
                    errors.append(exc)

        def left(cap: float) -> float:
            return max(0.0, min(cap, deadline - time.monotonic()))

        try:
            chan.settimeout(SLICE)
            chan.exec_command(shlex.join(str(a) for a in argv) if self.forced else command_line(argv))
            threads = [threading.Thread(target=read_stderr, daemon=True),
                       threading.Thread(target=write_stdin, daemon=True)]
            for t in threads:
                t.start()
            stdout_chunks = []
            size = 0
            while not over:
                if time.monotonic() >= deadline:
                    raise _Bounded(too_long)
                try:
                    chunk = chan.recv(65536)
                except TimeoutError:
                    now = time.monotonic()
                    if now >= deadline:
                        raise _Bounded(too_long) from None
                    if now - last_output[0] >= self.command_timeout:
                        raise _Bounded(f"no output for {self.command_timeout:g}s") from None
                    continue
                if not chunk:
                    break
                last_output[0] = time.monotonic()
                if size + len(chunk) > self.output_cap:
                    over.append("stdout")
                    chan.close()  # abandoned: the flood stops here, the stderr reader with it
                    break
                size += len(chunk)
                stdout_chunks.append(chunk)
            for t in threads:
                t.join(left(self.command_timeout))
            if over:
                raise _Bounded(f"printed more than {self.output_cap >> 10} KiB on {over[0]} (the rest was not kept)")
            if not chan.status_event.wait(left(self.command_timeout)):
                raise _Bounded(too_long or f"no exit status within {self.command_timeout:g}s of its output's end")
            rc = chan.recv_exit_status()
        except Exception as exc:  # noqa: BLE001 - timeouts, a dropped transport
            chan.close()
            raise self._lost(argv, exc, started=True) from None
        finally:
            chan.close()
        if errors:
            raise self._lost(argv, errors[0], started=True)
        return rc, b"".join(stdout_chunks).decode(errors="replace"), b"".join(stderr_chunks).decode(errors="replace")

    @contextlib.contextmanager
    def bounds(self, *, timeout: float | None, command_timeout: float):
        """Other bounds for the commands of the ``with`` block: a long read that reports its progress (verify on a
        GPU node) gets ``timeout=None`` (no total) and a silence bound instead."""
        saved = (self.timeout, self.command_timeout)
        self.timeout, self.command_timeout = timeout, command_timeout
        try:
            yield self
        finally:
            self.timeout, self.command_timeout = saved

    def _lost(self, argv, exc: BaseException, *, started: bool) -> ConnectionLost:
        cmd = " ".join(redact_argv(argv))  # the message may be shown anywhere: never a secret
        if isinstance(exc, (socket.timeout, TimeoutError)):
            why = f"no output for {self.command_timeout:g}s (abandoned)"
        elif isinstance(exc, _Bounded):
            why = f"{exc} (abandoned)"
        else:
            why = str(exc) or type(exc).__name__
        state = "while running" if started else "before starting"
        return ConnectionLost(f"SSH connection to {self._where()} failed {state} `{cmd}`: {why}",
                              "check the host and the network, then run the command again (it picks up from "
                              "the state it finds)" if started else "check the host and run the command again",
                              host=self.name, address=self.address)

    # ---- files

    def put_file(self, local: str | os.PathLike, remote: str, mode: int = 0o644, *, mutating: bool = True) -> None:
        """Copy a local file to ``remote`` over SFTP (written to a temporary name, then renamed into place).

        Marked like a command: with ``dry_run`` and ``mutating=True`` it is only recorded in ``planned``.
        """
        entry = ("sftp-put", os.fspath(local), remote, f"{mode:04o}")
        if mutating and self.dry_run:
            self.planned.append(entry)
            return
        client = self.connect()
        tmp = f"{remote}.fabricctl-tmp-{os.getpid()}-{threading.get_ident()}"
        try:
            import paramiko  # noqa: PLC0415

            chan = client.get_transport().open_session(timeout=self.ssh.connect_timeout)
            chan.settimeout(self.command_timeout)  # every SFTP request bounded like a command's silence
            chan.invoke_subsystem("sftp")
            sftp = paramiko.SFTPClient(chan)
        except Exception as exc:  # noqa: BLE001
            raise self._lost(entry, exc, started=False) from None
        try:
            sftp.put(os.fspath(local), tmp)
            sftp.chmod(tmp, mode)
            try:
                sftp.posix_rename(tmp, remote)
            except OSError:
                try:  # a server without the posix-rename extension: plain rename refuses to replace
                    sftp.remove(remote)
                except OSError:
                    pass
                sftp.rename(tmp, remote)
        except FileNotFoundError as exc:
            self._try_remove(sftp, tmp)
            raise FabricError(f"cannot copy {os.fspath(local)} to {self._where()}:{remote}: {exc}",
                              "check that the local file exists and the remote directory exists") from None
        except (OSError, EOFError) as exc:
            self._try_remove(sftp, tmp)
            raise self._lost(entry, exc, started=True) from None
        finally:
            sftp.close()
        if mutating:
            self.executed.append(entry)

    @staticmethod
    def _try_remove(sftp, path: str) -> None:
        try:
            sftp.remove(path)
        except (OSError, EOFError):
            pass
