"""fabricctl as a package (issue 17): the fabricctl role installs a wheel with pip into a virtualenv,
upgrades it from one built version to the next (and `fabricctl --version` follows), removes it cleanly,
and installs it again; fabricctl's changes are in the journal without any secret.

Read back through pip's own record (`pip show`), the files, systemd and journald."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
from conftest import REPO, ansible_playbook, step

BUILD = REPO / "roles" / "fabricctl" / "files" / "build-wheel.sh"
VENV = "/opt/fabricctl"


def built_version() -> str:
    text = (REPO / "plugins" / "module_utils" / "fabric_core" / "__init__.py").read_text()
    return re.search(r'__version__ = "([^"]+)"', text).group(1)


@pytest.fixture(scope="module")
def next_wheel(tmp_path_factory) -> tuple[Path, str]:
    """A wheel of this checkout with the next version (a copy of the sources, version bumped)."""
    src = tmp_path_factory.mktemp("src")
    # every package directory pyproject.toml names (fabric_node and fabric_csi came with issues 29 and 30)
    dirs = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"].values()
    tops = sorted(d for d in dirs if not any(d.startswith(f"{other}/") for other in dirs))  # not fabricctl/commands
    for part in ("pyproject.toml", "README.md", *tops):
        target = src / part
        target.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if (REPO / part).is_dir() else shutil.copy2)(REPO / part, target)
    version = built_version() + ".post1"
    init = src / "plugins" / "module_utils" / "fabric_core" / "__init__.py"
    init.write_text(re.sub(r'__version__ = "[^"]+"', f'__version__ = "{version}"', init.read_text()))
    cache = tmp_path_factory.mktemp("wheels")
    out = subprocess.run([str(BUILD), str(src), str(cache), str(REPO / ".venv" / "bin" / "python")],
                         capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stderr[-3000:]
    wheel = Path(out.stdout.strip().splitlines()[-1])
    assert wheel.name == f"gpu_storage_fabric-{version}-py3-none-any.whl"
    return wheel, version


def installed(storage) -> dict:
    show = storage.run(f"{VENV}/bin/python -m pip show gpu-storage-fabric")
    fields = dict(line.split(": ", 1) for line in show.stdout.splitlines() if ": " in line)
    return {"rc": show.rc, "version": fields.get("Version"), "requires": fields.get("Requires", ""),
            "cli": storage.run("fabricctl --version").stdout.splitlines()[:1]}


def role(lab, **extra):
    res = ansible_playbook(lab, "playbooks/fabricctl.yml", "--limit", "storage1,gpu_nodes", extra_vars=extra or None)
    assert res.rc == 0, res.output[-5000:]
    return res


def test_the_installed_fabricctl_is_a_pip_package_of_this_checkout(storage):
    got = installed(storage)
    assert got["rc"] == 0 and got["version"] == built_version()
    assert got["cli"] == [f"fabricctl {built_version()}"]
    assert set(got["requires"].replace(" ", "").split(",")) == {"paramiko", "PyYAML"}
    assert storage.run("test -e /usr/local/lib/fabricctl").rc != 0  # no copy-based install left
    assert storage.check_output(f"ls {VENV}/wheel") == f"gpu_storage_fabric-{built_version()}-py3-none-any.whl"


def test_the_role_upgrades_then_removes_cleanly_and_a_reinstall_restores_it(lab, storage, hosts, next_wheel):
    """One sequence, three role runs: an upgrade in place (pip --force-reinstall of the named wheel, the path a
    downgrade takes too), removal, and a fresh install of this checkout, which leaves the lab as it was."""
    wheel, version = next_wheel
    # the upgrade also switches rotation to cron and turns the metrics off: both timers stop and their units go
    step(f"role with fabricctl_wheel={wheel.name}, rotation by cron, no metrics")
    up = role(lab, fabricctl_wheel=str(wheel), fabricctl_rotation_scheduler="cron", fabricctl_metrics_enabled=False)
    assert up.changed()["storage1"] > 0
    assert installed(storage)["version"] == version
    assert storage.check_output("fabricctl --version").splitlines()[0] == f"fabricctl {version}"
    assert storage.check_output(f"ls {VENV}/wheel") == wheel.name  # the older wheel is gone
    for timer in ("fabricctl-rotate.timer", "fabricctl-metrics.timer"):
        assert storage.run(f"systemctl is-active --quiet {timer}").rc != 0
        assert storage.run(f"test -e /etc/systemd/system/{timer}").rc != 0
    assert "fabricctl rotate" in storage.check_output("cat /etc/cron.d/fabricctl-rotate")
    # (the role's second run changing nothing is the converged site's idempotence run)

    key = storage.check_output("cut -d' ' -f2 /etc/fabricctl/id_ed25519.pub")
    step("fabricctl_state=absent")
    role(lab, fabricctl_state="absent")
    assert storage.run(f"test -e {VENV}").rc != 0 and storage.run("command -v fabricctl").rc != 0
    assert storage.run("systemctl cat fabricctl-rotate.timer").rc != 0
    assert storage.run("test -s /etc/fabricctl/config.yml && test -s /etc/fabricctl/id_ed25519").rc == 0  # kept
    for gpu in ("gpu1", "gpu2"):
        assert key not in hosts[gpu].check_output("cat /root/.ssh/authorized_keys")

    step("fabricctl_state=present (this checkout's wheel)")
    role(lab)
    assert installed(storage)["version"] == built_version()
    assert storage.check_output("fabricctl --version").splitlines()[0] == f"fabricctl {built_version()}"
    for timer in ("fabricctl-rotate.timer", "fabricctl-metrics.timer"):  # the defaults: both back, and running
        assert storage.check_output(f"systemctl is-enabled {timer}") == "enabled"
        assert storage.check_output(f"systemctl is-active {timer}") == "active"
    assert storage.run("test -e /etc/cron.d/fabricctl-rotate").rc != 0
    for gpu in ("gpu1", "gpu2"):
        assert key in hosts[gpu].check_output("cat /root/.ssh/authorized_keys")


def test_a_change_is_in_the_journal_without_any_lab_secret(storage, fctl, lab_secrets):
    since = storage.check_output("date +%s")
    name = "journaltest"
    fctl.json("dataset", "create", name, "--size", "64M")
    fctl("dataset", "destroy", name, "--yes")
    out = storage.check_output(f"journalctl -t fabricctl -o json --no-pager --since @{since}")
    records = [json.loads(line) for line in out.splitlines() if line.strip()]
    commands = {r.get("FABRIC_COMMAND") for r in records}
    assert {"dataset create", "dataset destroy"} <= commands, records
    assert all(r.get("SYSLOG_IDENTIFIER") == "fabricctl" for r in records)
    everything = storage.check_output("journalctl -o cat --no-pager -b")
    leaked = [s for s in lab_secrets if s in everything]
    assert not leaked, f"{len(leaked)} lab secret(s) found in storage1's journal"
