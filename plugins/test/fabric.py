# gpu-storage-fabric: Jinja tests for the roles' preflights, backed by the core library's rules.
"""Jinja tests (``x is gpufabric.storage.fabric_iqn``) that the roles' preflight asserts use instead of regular
expressions.

Each test asks the rule of ``fabric_core`` (``names`` for names, ``rules`` for CHAP, paths and file
systems) that fabricctl and the modules apply to the same value, so a preflight can neither accept
what a module will refuse nor refuse what it accepts. The preflights keep only what spans several
variables (uniqueness, overlaps, the portal being one of the node's addresses) and their messages.

The tests belong to the collection gpufabric.storage: the roles call them by their fully qualified names
(``x is gpufabric.storage.fabric_iqn``), and the core library is the collection's module_utils, imported as the
modules import it.
"""

from __future__ import annotations

from ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core.base import names, rules
from ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core.base.errors import UserError
from ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core.node.iscsi import normalize_portal


def _passes(rule, value) -> bool:
    try:
        rule(value)
    except (UserError, TypeError, ValueError):
        return False
    return True


def _test(rule):
    return lambda value: _passes(rule, value)


# `value is fabric_X`: the rule of the core that the value follows
RULES = {
    "fabric_iqn": names.validate_iqn,  # iqn. with a dotted authority, lower case, no '_', at most 223 bytes; or eui.
    "fabric_iqn_base": names.validate_iqn_base,  # iqn.YYYY-MM.reversed.domain (no ':')
    "fabric_pool_name": names.validate_pool_name,
    "fabric_hostname": names.validate_hostname,  # a DNS label, as fabricctl knows GPU nodes
    "fabric_target_name": names.validate_target_name,  # the unique part of an LIO target's IQN
    "fabric_backstore_prefix": names.validate_backstore_prefix,
    "fabric_user_name": names.validate_user_name,
    "fabric_metric_name": names.validate_metric_name,
    "fabric_export_name": names.validate_export_name,  # an export a GPU node mounts
    "fabric_portal": normalize_portal,  # an IP address, optionally :PORT (IPv6 as [ADDRESS]:PORT)
    "fabric_path": rules.validate_path,  # absolute, normalised (no '..', '.', '//' or trailing '/')
    "fabric_mount_root": lambda value: rules.validate_path(value, mount_root=True),  # ... and not a system directory
    "fabric_filesystem": rules.validate_filesystem,  # ext4, xfs
}


def fabric_dataset_name(value, pool: str | None = None) -> bool:
    """A dataset name; with ``pool``, a dataset inside that pool (not the pool itself)."""
    return _passes(names.validate_dataset_name, value) and (pool is None or value.startswith(f"{pool}/"))


def fabric_chap(value, view: str = "lio") -> bool:
    """CHAP credentials, or none: ``view`` "lio" (userid, password, mutual_*; 12-16 character secrets) or
    "open-iscsi" (username, password, username_in, password_in)."""
    chap_view = {"lio": rules.LIO, "open-iscsi": rules.OPEN_ISCSI}[view]
    return _passes(lambda v: rules.parse_chap(v, chap_view), value)


class TestModule:
    """The fabric_* Jinja tests."""

    def tests(self) -> dict:
        return {**{name: _test(rule) for name, rule in RULES.items()}, "fabric_dataset_name": fabric_dataset_name,
                "fabric_chap": fabric_chap, "fabric_chap_secret": rules.chap_secret_ok}
