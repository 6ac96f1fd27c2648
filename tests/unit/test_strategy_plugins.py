"""plugins/strategy: the Mitogen-accelerated strategies fall back to ansible-core's own; the project's modules
(collection module_utils) run through Mitogen in the host's interpreter."""

from __future__ import annotations

import types
from pathlib import Path

from support import load_file

REPO = Path(__file__).resolve().parents[2]


def load(name: str):
    return load_file(REPO / "plugins" / "strategy" / f"{name}.py", f"test_{name}")


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


def test_mitogen_finds_no_custom_module_utils_for_the_project_modules():
    """The modules import the core as the collection's module_utils: Mitogen's scanner (which follows only
    ansible.module_utils imports) reports ansible-core's own module_utils and nothing else, so the planner
    neither pushes nor forks for them (custom is empty); the core comes over Mitogen's importer."""
    import ansible.executor.module_common as module_common
    import ansible_mitogen.module_finder as finder
    import ansible_mitogen.planner as planner

    builtin = module_common._MODULE_UTILS_PATH
    for path in sorted((REPO / "plugins" / "modules").glob("fabric_*.py")):
        found = finder.scan(f"ansible_module_{path.stem}", str(path), (builtin,))
        assert all(name.startswith("ansible.module_utils.") for name, _path, _pkg in found), path.name
        assert not [n for n, p, _ in found if not p.startswith(builtin)], path.name
        assert "fabric_core" not in " ".join(n for n, _p, _k in found)

    def plan(custom, task_vars=None, wrap_async=False, name="gpufabric.storage.fabric_zpool"):
        p = planner.NewStylePlanner.__new__(planner.NewStylePlanner)
        p._inv = types.SimpleNamespace(task_vars=task_vars or {}, wrap_async=wrap_async, module_name=name)
        p.get_module_map = lambda: {"custom": custom, "builtin": []}
        return p.should_fork()

    assert plan([]) is False  # the project's modules: in the host's interpreter
    assert plan([], task_vars={"mitogen_task_isolation": "fork"}) is True
    assert plan([], wrap_async=True) is True
