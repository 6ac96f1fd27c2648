# Copyright: the gpu-storage-fabric authors. Apache-2.0.
# gpu-storage-fabric: strategy plugin fabric_free (ansible-core's free strategy, run through Mitogen
# when it is installed; see fabric_linear.py, which holds the shared code).

from __future__ import annotations

DOCUMENTATION = r"""
name: fabric_free
short_description: The free strategy, executed through Mitogen when it is available
description:
  - Behaves as C(ansible.builtin.free) (each host runs its tasks as fast as it can), executed
    through Mitogen when it is installed, exactly as C(fabric_linear) does for C(linear).
  - Without Mitogen, or with C(FABRIC_MITOGEN=0) in the environment, it is plain C(free).
author: gpu-storage-fabric authors (!UNKNOWN)
"""

import importlib.util
import os

from ansible.plugins.strategy.free import StrategyModule as _Free

_spec = importlib.util.spec_from_file_location(
    "fabric_strategy_linear", os.path.join(os.path.dirname(os.path.abspath(__file__)), "fabric_linear.py"))
_linear = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_linear)

StrategyModule = _linear.accelerated(_Free)
