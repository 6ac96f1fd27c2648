# ruff: noqa: I001  (support must be imported first: it puts module_utils on the import path)
"""fabric_core.base.lock: the one per-node lock of every change. Two holders (a second open file in this
process, another thread, another process), the bounded wait on an injected clock, the timeout naming
the holder, no wait when free, the file modes, release on an exception; and the Ansible modules that
change LIO and ZFS take it outside check mode (conftest.py puts the lock file in tmp_path)."""

from __future__ import annotations

import fcntl
import json
import os
import stat
import subprocess
import sys
import textwrap
import threading
import time
from unittest import mock

import pytest
import yaml
from support import DATA, REPO, run_case, run_module

import ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core.storage.disks as fabric_disks
# the modules' copy of fabric_core.base.lock
import ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core.base.lock as module_lock
from fabric_core.base import lock
from fabric_core.base.errors import EXIT_LOCKED, FabricError, LockHeld, UserError
from fabric_core.base.lock import node_lock
from fabric_core.base.model import DiskInfo


class FakeClock:
    """time.monotonic and time.sleep together: sleeping moves the clock."""

    def __init__(self):
        self.now = 1000.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def content(path) -> str:
    with open(path) as fh:
        return fh.read()


def test_a_free_lock_is_taken_at_once_and_names_its_holder_while_held(tmp_path):
    path = tmp_path / "fabric" / "node.lock"
    fake = FakeClock()
    with node_lock("fabricctl publish imagenet@v1 --to gpu_nodes", str(path), wait=60, clock=fake.clock,
                   sleep=fake.sleep) as info:
        held = json.loads(content(path))
        assert held == info
        assert held["command"] == "fabricctl publish imagenet@v1 --to gpu_nodes" and held["pid"] == os.getpid()
        assert held["since"][:4].isdigit() and "T" in held["since"]
    assert fake.sleeps == []  # no wait when free
    assert content(path) == ""  # released: the file names nobody


def test_the_default_path_is_looked_up_at_call_time(node_lock_in_tmp):
    assert lock.DEFAULT_PATH == node_lock_in_tmp != "/run/fabric/node.lock"
    with node_lock("fabricctl rotate"):
        assert json.loads(content(node_lock_in_tmp))["command"] == "fabricctl rotate"


def test_modes_directory_0700_and_file_0600_even_under_a_harsh_umask(tmp_path):
    path = tmp_path / "run" / "fabric" / "node.lock"
    old = os.umask(0o277)  # would make the directory 0500 and the file 0400
    try:
        with node_lock("x", str(path), wait=0):
            pass
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_a_lock_file_made_by_someone_else_gets_mode_0600(tmp_path):
    path = tmp_path / "node.lock"
    path.write_text("")
    path.chmod(0o644)
    with node_lock("x", str(path), wait=0):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_a_second_holder_waits_the_bounded_time_then_gets_the_holders_name(tmp_path):
    path = str(tmp_path / "node.lock")
    fake = FakeClock()
    told = []
    with node_lock("fabricctl unpublish imagenet@v1", path) as first:
        with pytest.raises(LockHeld) as err:
            with node_lock("fabricctl rotate", path, wait=5, clock=fake.clock, sleep=fake.sleep, poll=0.5,
                           waiting=told.append):
                pytest.fail("the second holder got the lock")
        assert json.loads(content(path)) == first  # the failed taker did not touch the description
    e = err.value
    assert e.exit_code == EXIT_LOCKED == 4 and isinstance(e, FabricError) and not isinstance(e, UserError)
    assert e.problem == (f"another fabric command is running: fabricctl unpublish imagenet@v1, pid {os.getpid()}, "
                         f"since {first['since']}")
    assert "waited 5 s" in e.fix and path in e.fix
    assert sum(fake.sleeps) == pytest.approx(5.0) and max(fake.sleeps) <= 0.5  # polled, for the whole wait
    assert told == [{"command": "fabricctl unpublish imagenet@v1", "pid": os.getpid(), "since": first["since"]}]


def test_wait_zero_tries_once(tmp_path):
    path = str(tmp_path / "node.lock")
    fake = FakeClock()
    with node_lock("first", path), pytest.raises(LockHeld, match="running: first, pid"):
        with node_lock("second", path, wait=0, clock=fake.clock, sleep=fake.sleep):
            pass
    assert fake.sleeps == []


def test_the_lock_is_released_on_an_exception(tmp_path):
    path = str(tmp_path / "node.lock")
    with pytest.raises(RuntimeError, match="boom"), node_lock("fabricctl publish x@v1", path):
        raise RuntimeError("boom")
    fake = FakeClock()
    with node_lock("next", path, wait=0, clock=fake.clock, sleep=fake.sleep) as info:
        assert info["command"] == "next"
    assert fake.sleeps == [] and content(path) == ""


def test_a_waiting_thread_gets_the_lock_when_the_holder_lets_go(tmp_path):
    path = str(tmp_path / "node.lock")
    held, release = threading.Event(), threading.Event()

    def holder():
        with node_lock("fabricctl dataset seal imagenet@v2", path):
            held.set()
            release.wait(10)

    thread = threading.Thread(target=holder)
    thread.start()
    assert held.wait(10)
    told = []
    threading.Timer(0.3, release.set).start()
    started = time.monotonic()
    with node_lock("fabricctl publish imagenet@v2", path, wait=10, poll=0.05, waiting=told.append) as info:
        waited = time.monotonic() - started
        assert json.loads(content(path)) == info
    thread.join(10)
    assert 0.2 < waited < 9
    assert told and told[0]["command"] == "fabricctl dataset seal imagenet@v2"


HOLDER = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[1])
    from fabric_core.base.lock import node_lock
    with node_lock(sys.argv[3], sys.argv[2], wait=0):
        print("locked", flush=True)
        sys.stdin.read()  # until the test closes our stdin
""")


def test_a_holder_in_another_process_is_named_and_its_exit_releases_the_lock(tmp_path):
    path = str(tmp_path / "node.lock")
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(REPO / "plugins" / "module_utils"), path,
                             "ansible fabric_zpool tank"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "locked"
        with pytest.raises(LockHeld) as err, node_lock("fabricctl rotate", path, wait=0):
            pass
        assert err.value.problem.startswith(f"another fabric command is running: ansible fabric_zpool tank, "
                                            f"pid {proc.pid}, since ")
    finally:
        proc.stdin.close()
        proc.wait(10)
    fake = FakeClock()
    with node_lock("fabricctl rotate", path, wait=0, clock=fake.clock, sleep=fake.sleep):
        assert fake.sleeps == []


def test_a_holder_that_does_not_describe_itself_is_named_by_the_kernels_pid(tmp_path):
    """flock(1), say, over a file a killed holder left its description in: the stale name is not shown."""
    path = tmp_path / "node.lock"
    path.write_text(json.dumps({"command": "fabricctl publish old@v1", "pid": 999999999, "since": "yesterday"}))
    with open(path, "a") as other:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(LockHeld) as err, node_lock("fabricctl rotate", str(path), wait=0):
            pass
    assert err.value.problem == (f"another fabric command is running: unknown (it did not describe itself), "
                                 f"pid {os.getpid()}, since unknown")


def test_a_lock_path_that_cannot_be_opened_is_an_error_with_a_fix(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(FabricError) as err, node_lock("x", str(blocker / "node.lock"), wait=0):
        pass
    assert "cannot open the node lock" in err.value.problem and err.value.fix


# --------------------------------------------------------------------------------------------
# the Ansible modules that change LIO and ZFS


def spec(name: str) -> list[dict]:
    return yaml.safe_load((DATA / f"module_{name}.yaml").read_text())["cases"]


def first_case(name: str, *, check_mode: bool) -> dict:
    return next(c for c in spec(name) if bool(c.get("check_mode")) == check_mode and not c.get("failed")
                and c.get("expect", {}).get("changed", True) is not False)


MODULE_ARGS = {
    "fabric_zfs_dataset": lambda: first_case("zfs_dataset", check_mode=False)["args"],
    "fabric_zpool": lambda: first_case("zpool", check_mode=False)["args"],
    "fabric_lio_target": lambda: {"base_iqn": "iqn.2026-11.io.fabric.lab", "targets": []},
}


@pytest.mark.parametrize("module", sorted(MODULE_ARGS))
def test_a_module_fails_naming_the_holder_and_runs_nothing_while_the_lock_is_held(module, monkeypatch,
                                                                                  node_lock_in_tmp):
    monkeypatch.setattr(module_lock, "DEFAULT_WAIT", 0)
    with node_lock("fabricctl publish imagenet@v1 --to gpu_nodes"):
        result = run_module(module, MODULE_ARGS[module]())  # no scripted command: running one would fail
    assert result["failed"] and result["_commands"] == []
    assert result["msg"].startswith(f"another fabric command is running: fabricctl publish imagenet@v1 --to gpu_nodes, "
                                    f"pid {os.getpid()}, since ")
    assert "fix: wait for it to end" in result["msg"]


def patches(module: str) -> list:
    """fabric_zpool's disk discovery from the recorded disks, as test_module_zpool.py does."""
    if module != "zpool":
        return []
    disks = [DiskInfo.from_dict(d) for d in yaml.safe_load((DATA / "module_zpool.yaml").read_text())["disks"]]
    for d in disks:
        d.in_use = bool(d.in_use)
    return [mock.patch.object(fabric_disks, "discover", lambda runner: disks)]


@pytest.mark.parametrize("module", ["zfs_dataset", "zpool"])
def test_a_module_takes_the_lock_for_a_change_and_lets_it_go(module, node_lock_in_tmp):
    assert not os.path.exists(node_lock_in_tmp)
    run_case(f"fabric_{module}", first_case(module, check_mode=False), extra_patches=patches(module))
    assert os.path.exists(node_lock_in_tmp) and content(node_lock_in_tmp) == ""  # taken, then released
    with node_lock("after", wait=0):
        pass


@pytest.mark.parametrize("module", ["zfs_dataset", "zpool"])
def test_check_mode_takes_no_lock(module, monkeypatch, node_lock_in_tmp):
    monkeypatch.setattr(module_lock, "DEFAULT_WAIT", 0)
    with node_lock("fabricctl rotate"):
        # its expected result, as without the lock (which a change would have waited for, and failed)
        run_case(f"fabric_{module}", first_case(module, check_mode=True), extra_patches=patches(module))


# --------------------------------------------------------------------------------------------
# object locks: one per volume (shared or exclusive) and the sub-locks; their order with the node lock

HOLD_IN_CHILD = textwrap.dedent("""\
    import sys, time
    sys.path.insert(0, {module_utils!r})
    from fabric_core.base import lock
    kind, name, shared = sys.argv[1], sys.argv[2], sys.argv[3] == "shared"
    with lock.object_lock(kind, name, "fabricctl dataset ingest " + name, shared=shared, wait=0,
                          node_path={node!r}):
        print("held", flush=True)
        time.sleep(60)
""")


class ChildHolder:
    """Another process holding one object's lock (as another fabricctl would), until close()."""

    def __init__(self, tmp_path, kind: str, name: str, shared: bool = False):
        script = tmp_path / "hold.py"
        script.write_text(HOLD_IN_CHILD.format(module_utils=str(REPO / "plugins" / "module_utils"),
                                               node=str(tmp_path / "run" / "node.lock")))
        self.proc = subprocess.Popen([sys.executable, str(script), kind, name, "shared" if shared else "exclusive"],
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "held"

    def close(self):
        self.proc.kill()
        self.proc.wait()


def node_path(tmp_path) -> str:
    return str(tmp_path / "run" / "node.lock")


def test_the_lock_file_of_an_object_sits_beside_the_node_lock_with_its_name_escaped(tmp_path):
    assert lock.object_path("dataset", "imagenet", "/run/fabric/node.lock") == \
        "/run/fabric/locks/dataset-imagenet.lock"
    assert lock.object_path("checkpoint", "../x y", "/run/fabric/node.lock") == \
        "/run/fabric/locks/checkpoint-%2E.%2Fx%20y.lock"
    with pytest.raises(ValueError, match="unknown lock kind"):
        lock.object_path("pool", "tank")


def test_two_objects_do_not_block_each_other_and_the_same_object_does(tmp_path):
    other = ChildHolder(tmp_path, "dataset", "imagenet")
    try:
        with lock.object_lock("dataset", "coco", "fabricctl dataset ingest coco", wait=0,
                              node_path=node_path(tmp_path)):
            pass  # another dataset: free
        with pytest.raises(LockHeld) as err:
            with lock.object_lock("dataset", "imagenet", "fabricctl dataset destroy imagenet", wait=0,
                                  node_path=node_path(tmp_path)):
                pytest.fail("got a lock another process holds")
        assert f"fabricctl dataset ingest imagenet, pid {other.proc.pid}" in err.value.problem
        assert "dataset-imagenet.lock" in err.value.fix
        with node_lock("fabricctl publish imagenet@v1 --to gpu1", node_path(tmp_path), wait=0):
            pass  # the node lock is free while the object's is held
    finally:
        other.close()
    with lock.object_lock("dataset", "imagenet", "next", wait=0, node_path=node_path(tmp_path)):
        pass  # released when its holder died


def test_shared_holders_go_together_and_keep_an_exclusive_taker_out_naming_each(tmp_path):
    other = ChildHolder(tmp_path, "checkpoint", "llama", shared=True)
    try:
        with lock.object_lock("checkpoint", "llama", "fabricctl checkpoint snapshot llama", shared=True, wait=0,
                              node_path=node_path(tmp_path)):
            pass  # a snapshot beside a replicate (both shared)
        with pytest.raises(LockHeld) as err:
            with lock.object_lock("checkpoint", "llama", "fabricctl checkpoint rollback llama", wait=0,
                                  node_path=node_path(tmp_path)):
                pytest.fail("an exclusive taker got a lock held shared")
        assert f"pid {other.proc.pid}" in err.value.problem and "hold.py checkpoint llama shared" in err.value.problem
    finally:
        other.close()


def test_locks_go_volume_then_sub_lock_then_node_never_the_reverse(tmp_path):
    path = node_path(tmp_path)
    with lock.object_lock("dataset", "imagenet", "x", shared=True, wait=0, node_path=path), \
            lock.object_lock("staging", "imagenet", "x", wait=0, node_path=path), node_lock("x", path, wait=0):
        pass  # the order
    with node_lock("x", path, wait=0), pytest.raises(lock.LockOrderError, match="while holding the node lock"):
        with lock.object_lock("dataset", "imagenet", "x", wait=0, node_path=path):
            pass
    with lock.object_lock("writer", "llama", "x", wait=0, node_path=path), \
            pytest.raises(lock.LockOrderError, match="checkpoint-llama taken while holding the lock writer-llama"):
        with lock.object_lock("checkpoint", "llama", "x", wait=0, node_path=path):
            pass
    with lock.object_lock("dataset", "b", "x", wait=0, node_path=path), \
            pytest.raises(lock.LockOrderError, match="dataset-a taken while holding the lock dataset-b"):
        with lock.object_lock("dataset", "a", "x", wait=0, node_path=path):
            pass
    with lock.object_lock("dataset", "a", "x", wait=0, node_path=path), \
            lock.object_lock("dataset", "b", "x", wait=0, node_path=path):
        pass  # two volumes in name order
    with lock.object_lock("dataset", "imagenet", "x", wait=0, node_path=path):
        pass  # nothing left on the books after the errors: the order check starts clean


def test_another_thread_keeps_its_own_order(tmp_path):
    """The order is per thread: a thread holding the node lock does not stop another from taking a volume's."""
    path = node_path(tmp_path)
    held, release = threading.Event(), threading.Event()

    def holder():
        with node_lock("fabricctl publish x@v1", path):
            held.set()
            release.wait(10)

    thread = threading.Thread(target=holder)
    thread.start()
    try:
        assert held.wait(10)
        with lock.object_lock("dataset", "imagenet", "x", wait=0, node_path=path):
            pass
    finally:
        release.set()
        thread.join(10)
