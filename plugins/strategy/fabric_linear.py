# Copyright: the gpu-storage-fabric authors. Apache-2.0.
# gpu-storage-fabric: strategy plugin fabric_linear (ansible-core's linear strategy, run through
# Mitogen when it is installed). fabric_free does the same for the free strategy.

from __future__ import annotations

DOCUMENTATION = r"""
name: fabric_linear
short_description: The linear strategy, executed through Mitogen when it is available
description:
  - Behaves as C(ansible.builtin.linear). When the C(mitogen) Python package is installed on the
    controller (the project's virtualenv pins it), tasks run through Mitogen's connection
    multiplexer: one Python interpreter per host for the whole run instead of one per task, which
    on the lab's emulated nodes cuts a converged site run from about 200 s to about 20 s.
  - Without Mitogen, or with C(FABRIC_MITOGEN=0) in the environment, it is plain C(linear).
  - "Two adjustments to Mitogen 0.3. Its module_utils scanner does not follow relative imports inside a
    module_utils package (fabric_core uses them, so that fabricctl imports the same code as
    C(fabric_core)): every module of a project package (not ansible's own module_utils) is sent whole.
    And Mitogen forks a child for every module that uses module_utils from outside ansible-core (its
    rule for search paths that may differ between plays), which re-imports the core in every task: the
    project has one module_utils path and fabric_core keeps no state between calls (no module-level
    caches; every call builds its own objects), so the project's modules run in the host's interpreter
    like ansible-core's own. C(mitogen_task_isolation=fork), async tasks and C(FABRIC_MITOGEN_FORK=1)
    still fork. On the lab this halves a converged site run again (about 40 s forked, 20 s in place)."
author: gpu-storage-fabric
"""

import os

from ansible.plugins.strategy.linear import StrategyModule as _Linear


def _send_project_packages_whole(module_finder) -> None:
    """Wrap Mitogen's module_utils scanner: every module of a project's module_utils package goes
    with a module that imports any of them (the scanner misses `from .x import y`)."""
    if getattr(module_finder, "_fabric_whole_packages", False):
        return
    original = module_finder.scan

    def scan(module_name, module_path, search_path):
        found = list(original(module_name, module_path, search_path))
        builtin = os.path.abspath(search_path[-1]) if search_path else ""  # ansible's own module_utils
        names = {name for name, _path, _pkg in found}
        for name, path, is_pkg in list(found):
            package = name if is_pkg else name.rpartition(".")[0]
            directory = os.path.dirname(os.path.abspath(path))
            if package.count(".") < 2 or (builtin and directory.startswith(builtin)):
                continue
            for entry in sorted(os.listdir(directory)):
                full = f"{package}.{entry[:-3]}"
                if entry.endswith(".py") and entry != "__init__.py" and full not in names:
                    names.add(full)
                    found.append((full, os.path.join(directory, entry), False))
        return sorted(found)

    module_finder.scan = scan
    module_finder._fabric_whole_packages = True


def _run_project_modules_in_place(planner_module) -> None:
    """Mitogen forks a child for every module that uses module_utils from outside ansible-core (its rule
    for a search path that may differ between plays); each fork re-imports the project's modules in the
    child, about a second per task on an emulated node. The project has one module_utils path and its
    core keeps no state between calls, so its modules run in the host's interpreter like ansible-core's
    own (mitogen_task_isolation=fork still forks, and so do async tasks)."""
    cls = planner_module.NewStylePlanner
    if getattr(cls, "_fabric_in_place", False):
        return
    original = cls.should_fork

    def should_fork(self):
        custom = self.get_module_map()["custom"]  # [(full name, path, is package)]
        if custom and all(entry[0].startswith(PROJECT_PACKAGES) for entry in custom):
            return (planner_module.Planner.should_fork(self)
                    or self._inv.task_vars.get("mitogen_task_isolation") == "fork"
                    or self._inv.module_name in self.ALWAYS_FORK_MODULES)
        return original(self)

    cls.should_fork = should_fork
    cls._fabric_in_place = True


PROJECT_PACKAGES = ("ansible.module_utils.fabric_core",)


def accelerated(base: type) -> type:
    """base, run through Mitogen when it is installed and not switched off (FABRIC_MITOGEN=0)."""
    if os.environ.get("FABRIC_MITOGEN", "1") == "0":
        return base
    try:
        import ansible_mitogen.loaders  # noqa: F401, PLC0415 - checks the ansible-core version first
        import ansible_mitogen.module_finder  # noqa: PLC0415
        import ansible_mitogen.planner  # noqa: PLC0415
        import ansible_mitogen.strategy  # noqa: PLC0415
    except ImportError:
        return base
    _send_project_packages_whole(ansible_mitogen.module_finder)
    if os.environ.get("FABRIC_MITOGEN_FORK", "0") != "1":
        _run_project_modules_in_place(ansible_mitogen.planner)
    return type("StrategyModule", (ansible_mitogen.strategy.StrategyMixin, base), {})


StrategyModule = accelerated(_Linear)
