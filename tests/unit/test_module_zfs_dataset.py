"""plugins/modules/fabric_zfs_dataset.py as data: cases in tests/unit/data/module_zfs_dataset.yaml (recorded
outputs)."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace
from unittest import mock

import pytest
import yaml
from support import DATA, ScriptedRunner, load_module, run_case  # (support puts module_utils on sys.path)

# isort: split
# the module's copy of fabric_core.storage.blockfs
import ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core.storage.blockfs as mblockfs

SPEC = yaml.safe_load((DATA / "module_zfs_dataset.yaml").read_text())
DIFF_KEYS = {"before", "after", "before_header", "after_header"}


def _devices(case: dict) -> list:
    """blockfs waits for a volume's /dev/zvol node (udev makes it); a case's `devices` are the nodes that exist.
    Only blockfs's own view of the file system is replaced; every command still goes through the script."""
    present = set(case.get("devices", []))

    def sleep(seconds):
        pytest.fail(f"blockfs waited for a device node that the case does not list in `devices`: {case['name']}")

    return [mock.patch.object(mblockfs, "os", SimpleNamespace(path=SimpleNamespace(exists=present.__contains__))),
            mock.patch.object(mblockfs, "time", SimpleNamespace(monotonic=time.monotonic, sleep=sleep))]


@pytest.mark.parametrize("case", SPEC["cases"], ids=[c["name"] for c in SPEC["cases"]])
def test_fabric_zfs_dataset(case, monkeypatch):
    stdin = []
    original = ScriptedRunner._run

    def recording(self, argv, data=None):
        stdin.append(data)
        return original(self, argv, data)

    monkeypatch.setattr(ScriptedRunner, "_run", recording)
    result = run_case("fabric_zfs_dataset", case, extra_patches=_devices(case))
    if "stdin" in case:
        assert stdin == case["stdin"]
    if "secret" in case:
        # the key reaches zfs on stdin only: never in argv, never in the result
        assert all(case["secret"] not in " ".join(argv) for argv in result["_commands"])
        assert case["secret"] not in json.dumps({k: v for k, v in result.items() if k != "invocation"})
    if case.get("diff") and not result.get("failed"):
        if "datasets" in case["args"]:  # a list: one diff per changed dataset
            assert isinstance(result["diff"], list) and all(set(d) == DIFF_KEYS for d in result["diff"])
        else:
            assert set(result["diff"]) == DIFF_KEYS
    elif not case.get("diff"):
        assert "diff" not in result
    if "datasets" in case["args"] and not result.get("failed"):
        assert list(result["datasets"]) == [d["name"] for d in case["args"]["datasets"]]  # in order, all of them
        assert result["commands"] == [c for d in result["datasets"].values() for c in d["commands"]]


def test_module_documentation_parses_and_matches_the_argument_spec():
    module = load_module("fabric_zfs_dataset")
    doc = yaml.safe_load(module.DOCUMENTATION)
    assert doc["module"] == "fabric_zfs_dataset" and doc["author"] == "gpu-storage-fabric authors (!UNKNOWN)"
    assert set(doc["options"]) == {"name", "datasets", "filesystem", "properties", "encryption", "allow_dedup",
                                   "volume_size", "adopt"}
    assert doc["options"]["filesystem"]["choices"] == list(mblockfs.FILESYSTEMS)
    # each of O(datasets) takes a single dataset's options, documented as its suboptions
    one = doc["options"]["datasets"]["suboptions"]
    assert set(one) == {"name", "properties", "encryption", "volume_size", "filesystem"} and one["name"]["required"]
    assert one["filesystem"]["choices"] == list(mblockfs.FILESYSTEMS)
    assert one["encryption"]["suboptions"] == doc["options"]["encryption"]["suboptions"]
    assert any("O(datasets)" in line for line in doc["description"])
    examples = yaml.safe_load(module.EXAMPLES)
    assert all(task.get("name") for task in examples)
    assert any("datasets" in task["fabric_zfs_dataset"] for task in examples)
    returned = yaml.safe_load(module.RETURN)
    assert {"datasets", "filesystem", "diff"} <= set(returned)
