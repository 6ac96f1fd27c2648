import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "lab"))
sys.path.insert(0, str(REPO / "module_utils"))
sys.path.insert(0, str(REPO))


@pytest.fixture(autouse=True)
def node_lock_in_tmp(tmp_path, monkeypatch):
    """fabric_core.lock's default file (/run/fabric/node.lock) lives in the test's tmp_path, under both
    names the core library is imported by (fabric_core for fabricctl, ansible.module_utils.fabric_core
    for the modules): no unit test touches the real node lock, even when run as root."""
    import ansible.module_utils

    if str(REPO / "module_utils") not in ansible.module_utils.__path__:
        ansible.module_utils.__path__.append(str(REPO / "module_utils"))
    from ansible.module_utils.fabric_core import lock as module_lock
    from fabric_core import lock

    path = str(tmp_path / "run-fabric" / "node.lock")
    for module in (lock, module_lock):
        monkeypatch.setattr(module, "DEFAULT_PATH", path)
    return path
