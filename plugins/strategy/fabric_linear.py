# Copyright: the gpu-storage-fabric authors. Apache-2.0.
# gpu-storage-fabric: strategy plugin fabric_linear (ansible-core's linear strategy, run through
# Mitogen when it is installed). fabric_free does the same for the free strategy.

from __future__ import annotations

DOCUMENTATION = r"""
name: fabric_linear
short_description: The linear strategy, executed through Mitogen when it is available
description:
  - "Behaves as C(ansible.builtin.linear). When the C(mitogen) Python package is installed on the
    controller (the project's virtualenv pins it), tasks run through Mitogen's connection
    multiplexer: one Python interpreter per host for the whole run instead of one per task, which
    on the lab's emulated nodes cuts a converged site run from about 200 s to about 20 s."
  - Without Mitogen, or with C(FABRIC_MITOGEN=0) in the environment, it is plain C(linear).
  - "The project's modules import the core library as the collection's module_utils
    (C(ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core)). Mitogen's module_utils
    scanner only follows C(ansible.module_utils) imports, so it finds no custom module_utils for them: the
    modules run in the host's interpreter (no fork per task, like ansible-core's own modules) and the core
    reaches the node through Mitogen's importer, package by package, once per run (its relative imports
    are ordinary imports there). fabric_core keeps no state between calls (no module-level caches; every
    call builds its own objects), so running in place is safe. C(mitogen_task_isolation=fork) and async
    tasks still fork."
author: gpu-storage-fabric authors (!UNKNOWN)
"""

import os

from ansible.plugins.strategy.linear import StrategyModule as _Linear


def accelerated(base: type) -> type:
    """base, run through Mitogen when it is installed and not switched off (FABRIC_MITOGEN=0)."""
    if os.environ.get("FABRIC_MITOGEN", "1") == "0":
        return base
    try:
        import ansible_mitogen.loaders  # noqa: F401, PLC0415 - checks the ansible-core version first
        import ansible_mitogen.strategy  # noqa: PLC0415
    except ImportError:
        return base
    return type("StrategyModule", (ansible_mitogen.strategy.StrategyMixin, base), {})


StrategyModule = accelerated(_Linear)
