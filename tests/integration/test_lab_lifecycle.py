"""The lab's own behaviour: Ansible reaches it, bad input is refused, lab-up converges."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from conftest import LABCTL, REPO, _status, run

ANSIBLE = Path(sys.executable).parent / "ansible"


def test_ansible_reaches_every_lab_host_through_the_generated_inventory(lab):
    proc = run([str(ANSIBLE), "all", "-i", str(lab.inventory), "-m", "ping", "-o"],
                          cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for name in lab.vms:
        assert f"{name} | SUCCESS" in proc.stdout
    groups = run([str(ANSIBLE), "storage_nodes", "-i", str(lab.inventory), "--list-hosts"],
                            cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert "storage1" in groups and "gpu1" not in groups


def test_lab_up_as_non_root_is_refused_and_touches_nothing(lab, tmp_path):
    state = tmp_path / "state"
    os.chmod(tmp_path, 0o777)
    # the system python: the virtualenv's interpreter may live under root's home (pyenv)
    python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
    proc = run(["runuser", "-u", "nobody", "--", python, *LABCTL[1:], "up"],
                          env=dict(os.environ, FABRIC_LAB_STATE=str(state)), capture_output=True, text=True)
    assert proc.returncode == 1
    assert "must run as root" in proc.stderr
    assert not state.exists()
    assert _status()["up"], "the running lab was disturbed"


def test_lab_up_refuses_another_labs_namespace(lab, tmp_path):
    """Each checkout has its own namespace; naming the running lab's namespace from another
    state directory (FABRIC_LAB_NETNS) is refused before anything is created."""
    state = tmp_path / "other-lab"
    proc = run([*LABCTL, "up"], env=dict(os.environ, FABRIC_LAB_STATE=str(state), FABRIC_LAB_NETNS=_status()["netns"]),
                          capture_output=True, text=True)
    assert proc.returncode == 1
    assert "already exists and belongs to the lab at" in proc.stderr
    assert not state.exists()


def test_lab_up_on_a_half_up_lab_converges(lab, hosts):
    """Kill gpu2's VM: lab-up restarts only gpu2 and leaves the others running."""
    before = {v["name"]: v["pid"] for v in _status()["vms"]}
    os.kill(before["gpu2"], signal.SIGTERM)  # QEMU flushes its disks and exits
    for _ in range(50):
        if not Path(f"/proc/{before['gpu2']}").exists():
            break
        time.sleep(0.1)
    half = {v["name"]: v for v in _status()["vms"]}
    assert not half["gpu2"]["running"] and half["storage1"]["running"]
    proc = run([*LABCTL, "up"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "gpu2: starting" in proc.stderr and "storage1: already running" in proc.stderr
    after = {v["name"]: v for v in _status()["vms"]}
    assert all(v["ssh"] for v in after.values())
    assert after["storage1"]["pid"] == before["storage1"] and after["gpu1"]["pid"] == before["gpu1"]
    assert after["gpu2"]["pid"] != before["gpu2"]
