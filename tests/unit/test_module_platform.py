"""plugins/modules/fabric_platform.py as data: cases in tests/unit/data/module_platform.yaml.

The node's /etc/os-release and /sys/module/zfs/version are files, not commands: fabric_core.base.platform.read
takes their paths as parameters (os_release, module_version), and the module calls it with the defaults. The
test points them at a recorded os-release (tests/unit/data/platform/) and at a version file in tmp_path (or at
a path that does not exist: the module is not loaded), by giving the module's copy of platform.read those two
arguments; read itself runs unchanged and every command goes through the case's script."""

from __future__ import annotations

import functools
import inspect
from pathlib import Path
from unittest import mock

import pytest
import yaml
from support import DATA, REPO, load_module, run_case  # (support puts module_utils on sys.path)

# isort: split
# the module's copy of fabric_core.base.platform
import ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core.base.platform as mplatform

SPEC = yaml.safe_load((DATA / "module_platform.yaml").read_text())


def _node(case: dict, tmp_path) -> list:
    version = tmp_path / "sys-module-zfs-version"
    if "zfs_module" in case:
        version.write_text(case["zfs_module"])
    read = functools.partial(mplatform.read, os_release=DATA / "platform" / case["os_release"],
                             module_version=version)
    return [mock.patch.object(mplatform, "read", read)]


@pytest.mark.parametrize("case", SPEC["cases"], ids=[c["name"] for c in SPEC["cases"]])
def test_fabric_platform(case, tmp_path):
    result = run_case("fabric_platform", case, extra_patches=_node(case, tmp_path))
    assert result["changed"] is False  # it only reads
    assert ("decision" in result) == (case["args"].get("zfs", False) and not result.get("failed", False))


def test_without_the_test_the_module_reads_the_nodes_own_files():
    """What the cases replace: the module calls read(runner) alone, whose defaults are the node's files."""
    parameters = inspect.signature(mplatform.read).parameters
    assert parameters["os_release"].default == Path("/etc/os-release")
    assert parameters["module_version"].default == Path("/sys/module/zfs/version")
    assert "platform.read(runner)" in (REPO / "plugins" / "modules" / "fabric_platform.py").read_text()


def test_module_documentation_parses_and_matches_the_argument_spec():
    module = load_module("fabric_platform")
    doc = yaml.safe_load(module.DOCUMENTATION)
    assert doc["module"] == "fabric_platform"
    assert set(doc["options"]) == {"zfs", "allow_upgrade", "allow_reboot", "packages", "files", "file_digests",
                                      "units"}
    assert doc["attributes"]["check_mode"]["support"] == "full"
    assert all(task.get("name") for task in yaml.safe_load(module.EXAMPLES))
    assert set(yaml.safe_load(module.RETURN)) == {"facts", "missing_packages", "present_files", "file_digests",
                                                  "units", "enabled_units", "active_units", "running_units",
                                                  "decision"}
