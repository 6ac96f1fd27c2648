"""fabricctl.remote.SSHRunner against a real SSH server: paramiko's server side, in this process.

The server (127.0.0.1, a random port, one thread per connection) accepts one client key for user
root, runs "exec" requests with /bin/sh -c locally and serves SFTP on the local file system. No
paramiko internals are mocked: the client code under test does real key exchange, host key
checking and public key authentication.
"""

from __future__ import annotations

import io
import os
import socket
import subprocess
import threading
import time

import paramiko
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from fabric_core.base.errors import CommandError
from support import ends

from fabricctl.config import Host, SSHConfig
from fabricctl.remote import (
    AuthFailed,
    ConnectionLost,
    HostKeyMismatch,
    HostKeyUnknown,
    HostUnreachable,
    SSHRunner,
    command_line,
    fingerprint,
)


def new_key(path=None) -> paramiko.Ed25519Key:
    """A fresh ed25519 key (paramiko cannot generate one; cryptography can), written to ``path`` if given."""
    pem = ed25519.Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()).decode()
    if path is not None:
        path.write_text(pem)
        path.chmod(0o600)
    return paramiko.Ed25519Key.from_private_key(io.StringIO(pem))


# --------------------------------------------------------------------------------------------
# the in-process SSH server


class _SFTPHandle(paramiko.SFTPHandle):
    def stat(self):
        return paramiko.SFTPAttributes.from_stat(os.fstat(self.readfile.fileno()))

    def chattr(self, attr):
        return paramiko.SFTP_OK


class _SFTPServer(paramiko.SFTPServerInterface):
    def _stat(self, fn, path):
        try:
            return paramiko.SFTPAttributes.from_stat(fn(path))
        except OSError as exc:
            return paramiko.SFTPServer.convert_errno(exc.errno)

    def stat(self, path):
        return self._stat(os.stat, path)

    def lstat(self, path):
        return self._stat(os.lstat, path)

    def open(self, path, flags, attr):
        try:
            fd = os.open(path, flags, 0o600)
        except OSError as exc:
            return paramiko.SFTPServer.convert_errno(exc.errno)
        mode = "wb" if flags & os.O_WRONLY else ("rb+" if flags & os.O_RDWR else "rb")
        handle = _SFTPHandle(flags)
        handle.filename = path
        handle.readfile = handle.writefile = os.fdopen(fd, mode)
        return handle

    def _call(self, fn, *args):
        try:
            fn(*args)
        except OSError as exc:
            return paramiko.SFTPServer.convert_errno(exc.errno)
        return paramiko.SFTP_OK

    def chattr(self, path, attr):
        return self._call(os.chmod, path, attr.st_mode & 0o7777)

    def remove(self, path):
        return self._call(os.remove, path)

    def rename(self, oldpath, newpath):
        if os.path.exists(newpath):
            return paramiko.SFTP_FAILURE
        return self._call(os.rename, oldpath, newpath)

    def posix_rename(self, oldpath, newpath):
        return self._call(os.rename, oldpath, newpath)


class _ServerInterface(paramiko.ServerInterface):
    def __init__(self, server: SSHServer):
        self.server = server

    def get_allowed_auths(self, username):
        return "publickey"

    def check_auth_publickey(self, username, key):
        if username == "root" and key == self.server.client_key:
            return paramiko.AUTH_SUCCESSFUL
        return paramiko.AUTH_FAILED

    def check_channel_request(self, kind, chanid):
        if kind == "session":
            return paramiko.OPEN_SUCCEEDED
        return paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED_REQUEST

    def check_channel_exec_request(self, channel, command):
        self.server.commands.append(command.decode())
        threading.Thread(target=_execute, args=(channel, command.decode()), daemon=True).start()
        return True


def _execute(channel, command: str) -> None:
    """What sshd does for an exec request: the user's shell runs the command line."""
    proc = subprocess.Popen(["/bin/sh", "-c", command], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)

    def pump_stdin():
        try:
            while True:
                data = channel.recv(65536)
                if not data:
                    break
                proc.stdin.write(data)
        except (OSError, EOFError):
            pass
        finally:
            try:
                proc.stdin.close()
            except OSError:
                pass

    def pump_stderr():
        for chunk in iter(lambda: proc.stderr.read1(65536), b""):
            channel.sendall_stderr(chunk)

    threads = [threading.Thread(target=pump_stdin, daemon=True), threading.Thread(target=pump_stderr, daemon=True)]
    for t in threads:
        t.start()
    for chunk in iter(lambda: proc.stdout.read1(65536), b""):
        channel.sendall(chunk)
    threads[1].join()
    channel.send_exit_status(proc.wait())
    channel.shutdown_write()
    channel.close()


class SSHServer:
    def __init__(self, host_key, client_key):
        self.host_key = host_key
        self.client_key = client_key
        self.commands: list[str] = []
        self.transports: list[paramiko.Transport] = []
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            transport = paramiko.Transport(conn)
            transport.add_server_key(self.host_key)
            transport.set_subsystem_handler("sftp", paramiko.SFTPServer, _SFTPServer)
            self.transports.append(transport)
            try:
                transport.start_server(server=_ServerInterface(self))
            except (paramiko.SSHException, EOFError, OSError):
                pass  # the client refused the host key and hung up: that is what some tests want

    def known_hosts_line(self, key=None) -> str:
        key = key or self.host_key
        return f"[127.0.0.1]:{self.port} {key.get_name()} {key.get_base64()}\n"

    def close(self):
        self.sock.close()
        for t in self.transports:
            t.close()


@pytest.fixture(scope="module")
def client_key_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("sshkey") / "id_ed25519"
    return path, new_key(path)


@pytest.fixture(scope="module")
def server(client_key_file):
    srv = SSHServer(new_key(), client_key_file[1])
    yield srv
    srv.close()


def _runner(server, tmp_path, key_file, *, known_hosts_text=None, **kwargs) -> SSHRunner:
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(server.known_hosts_line() if known_hosts_text is None else known_hosts_text)
    ssh = SSHConfig(user="root", key_file=str(key_file), known_hosts=str(known_hosts), connect_timeout=3,
                    port=server.port)
    return SSHRunner(Host("gpu1", "127.0.0.1", "iqn.2026-11.io.fabric.lab:gpu1"), ssh, **kwargs)


@pytest.fixture
def runner(server, tmp_path, client_key_file):
    r = _runner(server, tmp_path, client_key_file[0])
    yield r
    r.close()


# --------------------------------------------------------------------------------------------
# commands


def test_a_command_returns_rc_stdout_and_stderr(runner):
    res = runner.run(["sh", "-c", "echo out; echo err >&2; exit 3"], check=False)
    assert (res.rc, res.stdout, res.stderr) == (3, "out\n", "err\n")
    with pytest.raises(CommandError) as exc:
        runner.run(["sh", "-c", "echo broken >&2; exit 5"])
    assert exc.value.rc == 5 and "broken" in str(exc.value)


def test_commands_run_with_the_c_locale(runner, server):
    res = runner.run(["sh", "-c", 'echo "$LC_ALL $LANG"'])
    assert res.stdout == "C C\n"
    assert server.commands[-1].startswith("env LC_ALL=C LANG=C LANGUAGE=C sh -c ")


def test_stdin_data_arrives(runner):
    assert runner.run(["cat"], data="line one\nline two\n").stdout == "line one\nline two\n"
    assert runner.run(["cat"]).stdout == ""  # no data: stdin is closed, cat does not wait


def test_large_stdin_stdout_and_stderr_at_once_do_not_deadlock(runner):
    data = "0123456789abcdef" * 65536  # 1 MiB in, 1 MiB out on each stream
    res = runner.run(["sh", "-c", "tee /dev/stderr"], data=data)
    assert res.stdout == data and res.stderr == data


def test_argv_with_spaces_quotes_and_shell_characters_round_trips(runner):
    args = ["a b", "it's", '"double"', "$HOME", "*", "semi;colon", "back\\slash", "new\nline", "", "ünï"]
    res = runner.run(["printf", "%s\\0", *args])
    assert res.stdout.split("\0")[:-1] == args
    assert command_line(["echo", "a b"]) == "env LC_ALL=C LANG=C LANGUAGE=C echo 'a b'"


def test_one_connection_per_runner_until_close(server, tmp_path, client_key_file):
    before = len(server.transports)
    with _runner(server, tmp_path, client_key_file[0]) as r:
        r.run(["true"])
        r.run(["true"])
        assert len(server.transports) == before + 1
        r.close()
        r.run(["true"])  # reconnects lazily
        assert len(server.transports) == before + 2
    assert r._client is None


def test_dry_run_skips_mutating_commands_without_connecting(server, tmp_path, client_key_file):
    before = len(server.transports)
    r = _runner(server, tmp_path, client_key_file[0], dry_run=True)
    res = r.run(["touch", str(tmp_path / "x")], mutating=True)
    assert res.rc == 0 and r.planned == [("touch", str(tmp_path / "x"))]
    assert not (tmp_path / "x").exists() and len(server.transports) == before


# --------------------------------------------------------------------------------------------
# host keys, authentication, reachability


def test_unknown_host_key_is_refused_and_known_hosts_is_not_modified(server, tmp_path, client_key_file):
    other = f"[127.0.0.1]:1 {server.host_key.get_name()} {server.host_key.get_base64()}\n"  # another host
    r = _runner(server, tmp_path, client_key_file[0], known_hosts_text=other)
    known_hosts = tmp_path / "known_hosts"
    before = (known_hosts.read_bytes(), known_hosts.stat().st_mtime_ns)
    commands = len(server.commands)
    with pytest.raises(HostKeyUnknown) as exc:
        r.run(["true"])
    err = exc.value
    assert err.fingerprint == fingerprint(server.host_key) and err.fingerprint in str(err)
    assert "playbooks/fabricctl.yml" in err.fix and err.host == "gpu1" and err.address == "127.0.0.1"
    assert (known_hosts.read_bytes(), known_hosts.stat().st_mtime_ns) == before
    assert len(server.commands) == commands  # nothing ran
    assert r._client is None


def test_missing_known_hosts_file_is_refused(server, tmp_path, client_key_file):
    r = _runner(server, tmp_path, client_key_file[0])
    (tmp_path / "known_hosts").unlink()
    with pytest.raises(HostKeyUnknown, match="does not exist"):
        r.run(["true"])
    assert not (tmp_path / "known_hosts").exists()


def test_changed_host_key_is_refused_with_both_fingerprints(server, tmp_path, client_key_file):
    old = new_key()
    r = _runner(server, tmp_path, client_key_file[0], known_hosts_text=server.known_hosts_line(old))
    commands = len(server.commands)
    with pytest.raises(HostKeyMismatch) as exc:
        r.run(["true"])
    err = exc.value
    assert err.expected == fingerprint(old) and err.got == fingerprint(server.host_key) and err.expected != err.got
    assert err.expected in str(err) and err.got in str(err)
    assert "man in the middle" in err.fix
    assert (tmp_path / "known_hosts").read_text() == server.known_hosts_line(old)
    assert len(server.commands) == commands


def test_fingerprint_is_openssh_sha256_form(server):
    fp = fingerprint(server.host_key)
    assert fp.startswith("SHA256:") and len(fp) == len("SHA256:") + 43 and not fp.endswith("=")


def test_wrong_client_key_is_auth_failed(server, tmp_path):
    wrong = tmp_path / "wrong_key"
    new_key(wrong)
    r = _runner(server, tmp_path, wrong)
    with pytest.raises(AuthFailed) as exc:
        r.run(["true"])
    assert str(wrong) in str(exc.value) and "authorized_keys" in exc.value.fix


def test_missing_client_key_file_is_auth_failed(server, tmp_path):
    r = _runner(server, tmp_path, tmp_path / "no_such_key")
    with pytest.raises(AuthFailed, match="no_such_key"):
        r.run(["true"])


def test_closed_port_is_host_unreachable_quickly(tmp_path, client_key_file):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text("")
    ssh = SSHConfig(key_file=str(client_key_file[0]), known_hosts=str(known_hosts), connect_timeout=3, port=port)
    r = SSHRunner(Host("gpu9", "127.0.0.1", "iqn.2026-11.io.fabric.lab:gpu9"), ssh)
    start = time.monotonic()
    with pytest.raises(HostUnreachable) as exc:
        r.run(["true"])
    assert time.monotonic() - start < 1.5
    assert "gpu9" in str(exc.value) and "127.0.0.1" in str(exc.value) and exc.value.exit_code == 1


# --------------------------------------------------------------------------------------------
# bounds: a host that hangs, trickles, floods or never answers fails that command, naming the host and the bound




@pytest.mark.parametrize("argv, bounds, words", [
    (["sleep", "20"], {"command_timeout": 1.0}, "no output for 1s"),
    (["sh", "-c", "for i in $(seq 100); do echo x; sleep 0.2; done"], {"command_timeout": 10.0, "timeout": 1.5},
     "still running after 1.5s"),
    (["timeout", "20", "yes"], {"output_cap": 64 << 10}, "printed more than 64 KiB on stdout"),
    (["sh", "-c", "timeout 20 yes >&2"], {"output_cap": 64 << 10}, "printed more than 64 KiB on stderr"),
], ids=["silent", "trickling", "flooding stdout", "flooding stderr"])
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # the test server's sends fail
def test_a_command_past_a_bound_is_abandoned_with_an_error_naming_the_host(server, tmp_path, client_key_file, argv,
                                                                            bounds, words):
    r = _runner(server, tmp_path, client_key_file[0], **bounds)
    try:
        _value, err = ends(lambda: r.run(argv))
        assert isinstance(err, ConnectionLost), err
        assert words in str(err) and "(abandoned)" in str(err)
        assert "gpu1 (127.0.0.1:" in str(err) and err.host == "gpu1" and "fix:" in str(err)
        assert r.run(["echo", "next"]).stdout == "next\n"  # the runner stays usable
    finally:
        r.close()


def test_a_long_command_reporting_progress_on_stderr_is_not_cut(server, tmp_path, client_key_file):
    """Silence is judged on both streams: a command whose progress goes to stderr (verify --on HOST's) runs past
    the silence bound on stdout; with bounds(timeout=None) it has no total bound either."""
    r = _runner(server, tmp_path, client_key_file[0], command_timeout=1.0, timeout=1.5)
    try:
        with r.bounds(timeout=None, command_timeout=1.0):
            value, err = ends(lambda: r.run(["sh", "-c", "for i in 1 2 3 4 5 6; do echo p >&2; sleep 0.4; done; "
                                             "echo done"]))
        assert err is None and value.stdout == "done\n" and value.stderr == "p\n" * 6
        assert (r.timeout, r.command_timeout) == (1.5, 1.0)  # the runner's own bounds again
    finally:
        r.close()


def test_the_default_bounds_are_the_runners_named_ones(server, tmp_path, client_key_file):
    from fabric_core.base import runner as core_runner

    r = _runner(server, tmp_path, client_key_file[0])
    assert (r.command_timeout, r.timeout, r.output_cap) == (core_runner.REMOTE_IDLE, core_runner.REMOTE_TIMEOUT,
                                                           core_runner.OUTPUT_CAP)


def test_a_host_that_accepts_and_never_answers_is_unreachable_within_the_connect_timeout(tmp_path, client_key_file):
    """A listener that never sends its SSH banner (a hung sshd, a half-open path): HostUnreachable naming the host."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(4)
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text("")
    ssh = SSHConfig(key_file=str(client_key_file[0]), known_hosts=str(known_hosts), connect_timeout=1,
                    port=sock.getsockname()[1])
    r = SSHRunner(Host("gpu9", "127.0.0.1", "iqn.2026-11.io.fabric.lab:gpu9"), ssh)
    try:
        _value, err = ends(lambda: r.run(["true"]))
    finally:
        sock.close()
    assert isinstance(err, HostUnreachable), err
    assert "cannot reach gpu9 (127.0.0.1:" in str(err) and "fix:" in str(err)


# --------------------------------------------------------------------------------------------
# files


def test_put_file_copies_content_and_mode(runner, tmp_path):
    local = tmp_path / "manifest.py"
    local.write_text("print('hello')\n")
    remote = tmp_path / "remote" / "manifest.py"
    remote.parent.mkdir()
    remote.write_text("old version\n")
    runner.put_file(local, str(remote), 0o750)
    assert remote.read_text() == "print('hello')\n"
    assert remote.stat().st_mode & 0o7777 == 0o750
    assert [p.name for p in remote.parent.iterdir()] == ["manifest.py"]  # no temporary file left
    assert runner.executed[-1] == ("sftp-put", str(local), str(remote), "0750")


def test_put_file_in_a_dry_run_is_only_planned(server, tmp_path, client_key_file):
    r = _runner(server, tmp_path, client_key_file[0], dry_run=True)
    local = tmp_path / "f"
    local.write_text("x")
    r.put_file(local, str(tmp_path / "g"))
    assert not (tmp_path / "g").exists() and r.planned == [("sftp-put", str(local), str(tmp_path / "g"), "0644")]


def test_a_lost_command_is_named_without_its_secrets(server, tmp_path, client_key_file):
    """An SSH error while a command that sets a secret runs names the command with the secret masked (the
    fabric never puts one on a command line; this is the net under that rule)."""
    r = _runner(server, tmp_path, client_key_file[0], command_timeout=0.5)
    try:
        with pytest.raises(Exception) as err:
            r.run(["sh", "-c", "sleep 3", "sh", "-n", "node.session.auth.password", "-v", "s3cret-s3cret"])
    finally:
        r.close()
    assert "s3cret-s3cret" not in str(err.value) and "********" in str(err.value)


def test_a_failed_command_error_masks_secrets():
    err = CommandError(["iscsiadm", "-m", "node", "-o", "update", "-n", "node.session.auth.password_in", "-v",
                        "s3cret-s3cret"], 1, "", "iscsiadm: boom")
    assert "s3cret-s3cret" not in str(err) and "********" in str(err) and err.argv[-1] == "s3cret-s3cret"
