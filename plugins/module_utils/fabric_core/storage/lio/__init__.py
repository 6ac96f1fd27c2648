"""The LIO iSCSI target as desired state: validation, a pure planner over rtslib dumps, an applier.

Three steps, each testable on its own, one module each:

* ``spec``: ``parse_desired(dict) -> DesiredState`` validates everything (IQNs, CHAP, LUN names, the
  one-writer rule) and raises ``UserError`` before anything is read or changed; LUN serials.
* ``planner``: ``plan(desired, live, purge=, force=) -> list[model.Step]``, a pure function. ``live`` is what
  ``read_live()`` returns: ``{"dump": RTSRoot().dump(), "sessions": [...], "devices": {...}}`` (unit tests
  feed it recorded dumps from the lab). Steps of kind ``"keep"`` are reports (foreign or unpurged
  objects left alone); every other step is a change. ``plan_removal`` and ``plan_access`` likewise.
* ``kernel``: ``read_live()``, and ``apply(steps)``, which runs the changes through rtslib-fb in the
  planned order and, when one fails, deletes what this run created (reverse order) before raising
  ``LioApplyError``; ``converge`` is the one applier of a plan (``reconcile``'s, and ``plan_removal``'s for
  the publishing service): it applies it, or in a dry run simulates it, and reports before and after.

``operations.OPERATIONS`` is the one table of LIO operations (a step's ``kind``): their order in a plan
(``RANK``), their simulation on a dump (a dry run's predicted after-state, ``simulate``) and their execution
through rtslib. A plan's steps are the core's one plan type, ``model.Step``, made by ``operations.step`` (op,
target, params, reason: its description one readable line, CHAP secrets redacted; the secret itself in the step's
``data`` only); ``step_dict`` is a step's JSON form ({op, target, params, reason}).
``persist`` writes the configuration the boot-time restore reads.

Ownership: targets whose IQN starts with ``BASE_IQN:`` and block backstores whose name starts
with the backstore prefix (``fabric_``) are the project's; nothing else is ever changed.
rtslib-fb is imported lazily (``kernel``) so that the package imports (and plans) without it.

What callers use is imported here (``lio.plan``, ``lio.reconcile``, ...); a test that replaces a function
that another one of the package calls replaces it in the module that calls it (``lio.kernel.read_live``).
"""

from ...base.names import TPG_TAG
from .kernel import (
    CONFIGFS,
    LioApplyError,
    apply,
    converge,
    device_facts,
    empty_live,
    ensure_kernel,
    kernel_ready,
    read_live,
    read_reservations,
    reconcile,
    run_plan,
    save_config,
)
from .operations import (
    KEEP,
    OPERATIONS,
    RANK,
    changes,
    discovery_closed,
    kept,
    ordered,
    simulate,
    step,
    step_dict,
    summarize,
)
from .persist import RESTORE_UNIT, SAVE_FILE, save
from .planner import plan, plan_access, plan_removal, revoked
from .spec import (
    DEFAULT_BACKSTORE_PREFIX,
    DISCOVERY_CREDENTIALS,
    PUBLISHED_TAG,
    REDACTED,
    DesiredState,
    emulate_pr,
    parse_desired,
    snapshot_serial,
    unit_serial,
)

__all__ = [
    "CONFIGFS", "DEFAULT_BACKSTORE_PREFIX", "DISCOVERY_CREDENTIALS", "KEEP", "OPERATIONS", "PUBLISHED_TAG", "RANK",
    "REDACTED", "RESTORE_UNIT", "SAVE_FILE", "TPG_TAG", "DesiredState", "LioApplyError", "apply", "changes",
    "converge", "device_facts", "discovery_closed", "empty_live", "emulate_pr", "ensure_kernel", "kept",
    "kernel_ready", "ordered", "parse_desired", "plan", "plan_access", "plan_removal", "read_live",
    "read_reservations", "reconcile", "revoked", "run_plan", "save", "save_config", "simulate", "snapshot_serial",
    "step", "step_dict", "summarize", "unit_serial",
]
