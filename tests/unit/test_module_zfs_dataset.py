"""library/fabric_zfs_dataset.py as data: cases in tests/unit/data/module_zfs_dataset.yaml (recorded outputs)."""

from __future__ import annotations

import json

import pytest
import yaml
from support import DATA, ScriptedRunner, run_case  # (support puts module_utils on sys.path)

# isort: split

SPEC = yaml.safe_load((DATA / "module_zfs_dataset.yaml").read_text())




@pytest.mark.parametrize("case", SPEC["cases"], ids=[c["name"] for c in SPEC["cases"]])
def test_fabric_zfs_dataset(case, monkeypatch):
    stdin = []
    original = ScriptedRunner._run

    def recording(self, argv, data=None):
        stdin.append(data)
        return original(self, argv, data)

    monkeypatch.setattr(ScriptedRunner, "_run", recording)
    result = run_case("fabric_zfs_dataset", case)
    if "stdin" in case:
        assert stdin == case["stdin"]
    if "secret" in case:
        # the key reaches zfs on stdin only: never in argv, never in the result
        assert all(case["secret"] not in " ".join(argv) for argv in result["_commands"])
        assert case["secret"] not in json.dumps({k: v for k, v in result.items() if k != "invocation"})
    if case.get("diff") and not result.get("failed"):
        assert set(result["diff"]) == {"before", "after", "before_header", "after_header"}
    elif not case.get("diff"):
        assert "diff" not in result
