import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "lab"))
sys.path.insert(0, str(REPO / "plugins" / "module_utils"))  # `import fabric_core`, as fabricctl imports it
sys.path.insert(0, str(REPO / "collections"))  # `import ansible_collections.gpufabric.storage...`, as the modules do
sys.path.insert(0, str(REPO))


@pytest.fixture(autouse=True)
def node_lock_in_tmp(tmp_path, monkeypatch):
    """fabric_core.base.lock's default file (/run/fabric/node.lock) lives in the test's tmp_path, under both
    names the core library is imported by (fabric_core for fabricctl, the collection's
    ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core for the modules and plugins): no unit
    test touches the real node lock, even when run as root."""
    from ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core.base import lock as module_lock
    from fabric_core.base import lock

    path = str(tmp_path / "run-fabric" / "node.lock")
    for module in (lock, module_lock):
        monkeypatch.setattr(module, "DEFAULT_PATH", path)
    return path
