# gpu-storage-fabric: Jinja tests for the roles' preflights, backed by the core library's rules.
"""Jinja tests (``x is fabric_iqn``) that the roles' preflight asserts use instead of regular expressions.

Each test asks the rule of ``fabric_core`` (``names`` for names, ``rules`` for CHAP, paths and file
systems) that fabricctl and the modules apply to the same value, so a preflight can neither accept
what a module will refuse nor refuse what it accepts. The preflights keep only what spans several
variables (uniqueness, overlaps, the portal being one of the node's addresses) and their messages.

ansible.cfg names this directory (``test_plugins``) and the core library's (``module_utils``): the
library is imported from there as ``ansible.module_utils.fabric_core``, as the modules import it.
"""

from __future__ import annotations

import ansible.module_utils
from ansible import constants

for _path in constants.DEFAULT_MODULE_UTILS_PATH or []:  # the controller does not add them itself
    if _path not in ansible.module_utils.__path__:
        ansible.module_utils.__path__.append(_path)

from ansible.module_utils.fabric_core import names, rules  # noqa: E402
from ansible.module_utils.fabric_core.errors import UserError  # noqa: E402
from ansible.module_utils.fabric_core.iscsi import normalize_portal  # noqa: E402


def _passes(rule, value) -> bool:
    try:
        rule(value)
    except (UserError, TypeError, ValueError):
        return False
    return True


def fabric_iqn(value) -> bool:
    """An iSCSI name (iqn. with a dotted naming authority, lower case, no '_', at most 223 bytes; or eui.)."""
    return _passes(names.validate_iqn, value)


def fabric_iqn_base(value) -> bool:
    """An IQN without its unique part: iqn.YYYY-MM.reversed.domain (no ':')."""
    return _passes(names.validate_iqn_base, value)


def fabric_pool_name(value) -> bool:
    return _passes(names.validate_pool_name, value)


def fabric_dataset_name(value, pool: str | None = None) -> bool:
    """A dataset name; with ``pool``, a dataset inside that pool (not the pool itself)."""
    if not _passes(names.validate_dataset_name, value):
        return False
    return pool is None or value.startswith(f"{pool}/")


def fabric_hostname(value) -> bool:
    """A host name as fabricctl knows GPU nodes: a DNS label."""
    return _passes(names.validate_hostname, value)


def fabric_target_name(value) -> bool:
    """The unique part of an LIO target's IQN."""
    return _passes(names.validate_target_name, value)


def fabric_backstore_prefix(value) -> bool:
    return _passes(names.validate_backstore_prefix, value)


def fabric_user_name(value) -> bool:
    return _passes(names.validate_user_name, value)


def fabric_metric_name(value) -> bool:
    return _passes(names.validate_metric_name, value)


def fabric_export_name(value) -> bool:
    """The name of an export a GPU node mounts."""
    return _passes(names.validate_export_name, value)


def fabric_portal(value) -> bool:
    """An iSCSI portal: an IP address, optionally with :PORT (IPv6 as [ADDRESS]:PORT)."""
    return _passes(normalize_portal, value)


def fabric_chap(value, view: str = "lio") -> bool:
    """CHAP credentials, or none: ``view`` "lio" (userid, password, mutual_*; 12-16 character secrets) or
    "open-iscsi" (username, password, username_in, password_in)."""
    chap_view = {"lio": rules.LIO, "open-iscsi": rules.OPEN_ISCSI}[view]
    return _passes(lambda v: rules.parse_chap(v, chap_view), value)


def fabric_chap_secret(value) -> bool:
    """A target-side CHAP secret: 12-16 printable ASCII characters without spaces."""
    return rules.chap_secret_ok(value)


def fabric_path(value) -> bool:
    """An absolute, normalised path (no '..', '.', '//' or trailing '/')."""
    return _passes(rules.validate_path, value)


def fabric_mount_root(value) -> bool:
    """An absolute, normalised path that is not a system directory (mounting there would hide it)."""
    return _passes(lambda v: rules.validate_path(v, mount_root=True), value)


def fabric_filesystem(value) -> bool:
    """A file system the fabric formats and mounts (ext4, xfs)."""
    return _passes(rules.validate_filesystem, value)


class TestModule:
    """The fabric_* Jinja tests."""

    def tests(self) -> dict:
        return {f.__name__: f for f in (
            fabric_iqn, fabric_iqn_base, fabric_pool_name, fabric_dataset_name, fabric_hostname, fabric_target_name,
            fabric_backstore_prefix, fabric_user_name, fabric_metric_name, fabric_export_name, fabric_portal,
            fabric_chap, fabric_chap_secret, fabric_path, fabric_mount_root, fabric_filesystem)}
