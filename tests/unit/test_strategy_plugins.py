"""plugins/strategy: the Mitogen-accelerated strategies fall back to ansible-core's own, and the one
correction they make to Mitogen's module_utils scanner sends a project package whole."""

from __future__ import annotations

import importlib.util
import types
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CORE = REPO / "module_utils" / "fabric_core"


def load(name: str):
    spec = importlib.util.spec_from_file_location(f"test_{name}", REPO / "plugins" / "strategy" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_without_mitogen_the_builtin_strategies_are_used(monkeypatch):
    from ansible.plugins.strategy.free import StrategyModule as Free
    from ansible.plugins.strategy.linear import StrategyModule as Linear

    monkeypatch.setenv("FABRIC_MITOGEN", "0")
    assert load("fabric_linear").StrategyModule is Linear
    assert load("fabric_free").StrategyModule is Free


def test_with_mitogen_the_strategy_runs_through_it(monkeypatch):
    import ansible_mitogen.strategy  # pinned in requirements/constraints.txt
    from ansible.plugins.strategy.linear import StrategyModule as Linear

    monkeypatch.delenv("FABRIC_MITOGEN", raising=False)
    cls = load("fabric_linear").StrategyModule
    assert issubclass(cls, ansible_mitogen.strategy.StrategyMixin) and issubclass(cls, Linear)


def test_scanner_sends_the_project_package_whole():
    builtin = "/usr/lib/python3/dist-packages/ansible/module_utils"
    found = [("ansible.module_utils.fabric_core", str(CORE / "__init__.py"), True),
             ("ansible.module_utils.fabric_core.disks", str(CORE / "disks.py"), False),
             ("ansible.module_utils.basic", f"{builtin}/basic.py", False)]
    finder = types.SimpleNamespace(scan=lambda name, path, search: list(found))
    load("fabric_linear")._send_project_packages_whole(finder)
    got = finder.scan("fabric_disk_info", "library/fabric_disk_info.py", (str(REPO / "module_utils"), builtin))
    names = [name for name, _path, _pkg in got]
    every = {f"ansible.module_utils.fabric_core.{p.stem}" for p in CORE.glob("*.py") if p.name != "__init__.py"}
    assert every <= set(names)  # model.py, runner.py, errors.py ... that disks.py imports relatively
    assert len(names) == len(set(names)) and names == sorted(names)
    assert "ansible.module_utils.basic" in names
    assert not any(n.startswith("ansible.module_utils.basic.") for n in names)  # ansible's own: as scanned
    # wrapping twice is a no-op
    before = finder.scan
    load("fabric_linear")._send_project_packages_whole(finder)
    assert finder.scan is before


def test_project_modules_run_in_the_hosts_interpreter_and_others_still_fork(monkeypatch):
    """Mitogen forks for every module with module_utils outside ansible-core; the project's own run in place
    (unless mitogen_task_isolation=fork, or FABRIC_MITOGEN_FORK=1); a third party's still fork."""
    import ansible_mitogen.planner as planner

    module = load("fabric_linear")
    monkeypatch.setattr(planner.NewStylePlanner, "should_fork", planner.NewStylePlanner.should_fork)
    monkeypatch.delattr(planner.NewStylePlanner, "_fabric_in_place", raising=False)
    module._run_project_modules_in_place(planner)

    def plan(custom, task_vars=None, wrap_async=False, name="fabric_zpool"):
        p = planner.NewStylePlanner.__new__(planner.NewStylePlanner)
        p._inv = types.SimpleNamespace(task_vars=task_vars or {}, wrap_async=wrap_async, module_name=name)
        p.get_module_map = lambda: {"custom": custom, "builtin": []}
        return p.should_fork()

    ours = [("ansible.module_utils.fabric_core", "/r/__init__.py", True),
            ("ansible.module_utils.fabric_core.zpool", "/r/zpool.py", False)]
    assert plan(ours) is False
    assert plan(ours, task_vars={"mitogen_task_isolation": "fork"}) is True
    assert plan(ours, wrap_async=True) is True
    assert plan([("ansible.module_utils.vendor_x", "/v/x.py", False)]) is True
    assert plan([]) is False  # ansible-core's own modules: Mitogen's rule, unchanged
