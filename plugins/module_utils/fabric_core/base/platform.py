"""The platforms the fabric runs on, and what a node needs to get to OpenZFS 2.3 safely.

Supported: Debian 13 (trixie), whose contrib ships OpenZFS 2.3, and Debian 12 (bookworm) with
OpenZFS 2.3 from bookworm-backports (bookworm's own 2.1 is a release line upstream no longer
maintains; a node is never left on it). Everything else is refused, by name.

``read`` gathers a node's facts in one pass (os-release, the installed zfsutils-linux package, the
loaded module, the imported pools); ``zfs_decision`` is a pure function of those facts and the
operator's permissions, so every branch is unit-tested without a node.

An upgrade from 2.1 is never done behind the operator's back on a node that already uses ZFS (a
pool imported, or the 2.1 module loaded): the refusal lists the exact steps. The new module only
runs after a reboot when the old one is loaded; the role reboots only when allowed to. Pool
features are never upgraded here (see the zfs_pool role: a pool with 2.3 features cannot be
imported by an older ZFS, which is the way back).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .errors import UserError

SUPPORTED = {"13": "trixie", "12": "bookworm"}
ZFS_WANTED = (2, 3)
SUPPORTED_TEXT = "Debian 13 (trixie) or Debian 12 (bookworm, with OpenZFS 2.3 from bookworm-backports)"
ZFS_PACKAGES = ("zfs-dkms", "zfsutils-linux", "python3-pyzfs")

OS_RELEASE = Path("/etc/os-release")
ZFS_MODULE_VERSION = Path("/sys/module/zfs/version")


class UnsupportedPlatform(UserError):
    """The node runs an operating system or a ZFS the fabric does not support."""


@dataclass
class Facts:
    distribution: str = ""          # ID of os-release: "debian"
    major: str = ""                 # VERSION_ID: "13"
    codename: str = ""              # VERSION_CODENAME: "trixie"
    pretty: str = ""                # PRETTY_NAME, for messages
    zfs_package: str | None = None  # installed version of zfsutils-linux (Debian version string)
    zfs_module: str | None = None   # version of the loaded zfs module
    pools: list = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Decision:
    """What the storage_base role does about ZFS on this node.

    action: "ok" (2.3 installed and running or loadable), "install" (no ZFS yet: install 2.3),
    "upgrade" (2.1 installed, nothing uses it or the operator allowed it: install 2.3 over it),
    "reboot" (newer packages installed than the module still loaded, 2.1 -> 2.3 or a later release or point
    release: reboot, allowed by the operator).
    backports: the packages come from bookworm-backports (Debian 12).
    """

    action: str
    backports: bool
    explanation: str


def parse_os_release(text: str) -> dict:
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and not key.startswith("#"):
            out[key.strip()] = value.strip().strip('"').strip("'")
    return out


def version_tuple(version: str | None) -> tuple | None:
    """'2.3.2-2~bpo12+1' -> (2, 3, 2); '2.1.11-1+deb12u1' -> (2, 1, 11); None or junk -> None."""
    if not version:
        return None
    m = re.match(r"^(?:\d+:)?(\d+)\.(\d+)(?:\.(\d+))?", version.strip())
    if not m:
        return None
    return tuple(int(p) for p in m.groups(default="0"))


def read(runner, *, os_release: Path = OS_RELEASE, module_version: Path = ZFS_MODULE_VERSION) -> Facts:
    """One pass over the node: os-release, the zfsutils-linux package, the loaded module, pools."""
    rel = parse_os_release(os_release.read_text()) if os_release.exists() else {}
    facts = Facts(distribution=rel.get("ID", ""), major=rel.get("VERSION_ID", "").split(".")[0],
                  codename=rel.get("VERSION_CODENAME", ""), pretty=rel.get("PRETTY_NAME", "an unknown system"))
    pkg = runner.run(["dpkg-query", "-W", "-f=${db:Status-Abbrev}\t${Version}", "zfsutils-linux"],
                     check=False)
    if pkg.rc == 0:
        status, _tab, version = pkg.stdout.partition("\t")
        if status.startswith("ii"):
            facts.zfs_package = version.strip() or None
    try:
        facts.zfs_module = module_version.read_text().strip() or None
    except OSError:
        facts.zfs_module = None
    if facts.zfs_module:
        pools = runner.run(["zpool", "list", "-H", "-o", "name"], check=False)
        if pools.rc == 0:
            facts.pools = pools.stdout.split()
    return facts


def missing_packages(runner, names: list[str]) -> list[str]:
    """The Debian packages of names that are not installed, from one dpkg-query (a cheap read that
    lets a role skip apt, whose cache load costs seconds on a small node, when nothing is missing)."""
    if not names:
        return []
    res = runner.run(["dpkg-query", "-W", "-f=${Package}\t${db:Status-Abbrev}\n", *names], check=False)
    installed = set()
    for line in res.stdout.splitlines():
        package, _tab, status = line.partition("\t")
        if status.startswith("ii"):
            installed.add(package.split(":", 1)[0])
    return [name for name in names if name not in installed]


UNIT_PROPERTIES = "Id,LoadState,UnitFileState,ActiveState"


def unit_states(runner, names: list[str]) -> dict[str, dict]:
    """{unit: {load, file, active}} of systemd units, from one ``systemctl show`` (a unit that does not exist:
    load ``not-found``). A role skips a service task whose unit is already as the task wants it (each module
    execution costs seconds on a busy or emulated node); nothing found (no systemd, an unreadable answer) reads as
    {}, and the tasks run as they would without the read."""
    if not names:
        return {}
    res = runner.run(["systemctl", "show", f"--property={UNIT_PROPERTIES}", "--", *names], check=False)
    blocks = [dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
              for block in res.stdout.strip().split("\n\n")] if res.rc == 0 else []
    if len(blocks) != len(names):  # one block per unit, in the order given
        return {}
    return {name: {"load": b.get("LoadState", ""), "file": b.get("UnitFileState", ""),
                   "active": b.get("ActiveState", "")} for name, b in zip(names, blocks, strict=True)}


PRESENT_FILES = 'for p; do if [ -e "$p" ]; then printf "%s\\n" "$p"; fi; done'

# For each directory: every regular file directly in it (not a link), as "MODE OWNER GROUP SHA256 PATH".
FILE_DIGESTS = ('for d; do for f in "$d"/*; do if [ -f "$f" ] && [ ! -L "$f" ]; then '
                's=$(stat -c "%a %U %G" -- "$f") && h=$(sha256sum < "$f") && '
                'printf "%s %s %s\\n" "$s" "${h%% *}" "$f"; fi; done; done')


def file_digests(runner, directories: list[str]) -> dict[str, dict]:
    """{path: {sha256, mode, owner, group}} of the regular files directly in each directory, from one shell: a role
    copies a file (a wheel) only when the node's differs from the controller's (``copy`` costs two module executions
    even when nothing changed). A directory that does not exist has none."""
    if not directories:
        return {}
    res = runner.run(["sh", "-c", FILE_DIGESTS, "sh", *directories], check=False)
    found = {}
    for line in res.stdout.splitlines():
        parts = line.split(" ", 4)
        if len(parts) == 5 and len(parts[3]) == 64:
            mode, owner, group, digest, path = parts
            found[path] = {"sha256": digest, "mode": mode, "owner": owner, "group": group}
    return found


def present_files(runner, paths: list[str]) -> list[str]:
    """Which of paths exist on the node, from one shell (a role asks once instead of a task per file: each
    module execution costs seconds on a busy or emulated node). In the order given."""
    if not paths:
        return []
    res = runner.run(["sh", "-c", PRESENT_FILES, "sh", *paths], check=False)
    there = set(res.stdout.splitlines())
    return [p for p in paths if p in there]


def check_supported(facts: Facts) -> None:
    """Refuse anything but Debian 12 and 13, naming the two."""
    if facts.distribution != "debian" or facts.major not in SUPPORTED:
        raise UnsupportedPlatform(
            f"this node runs {facts.pretty}; the fabric supports {SUPPORTED_TEXT}",
            "install one of those two releases on the node, or leave it out of this inventory group")


def upgrade_steps(facts: Facts) -> str:
    """The exact steps an operator runs to move a Debian 12 node from OpenZFS 2.1 to 2.3 by hand."""
    return (
        "1) add bookworm-backports (main contrib) to the apt sources, for example "
        "/etc/apt/sources.list.d/fabric-bookworm-backports.sources; "
        "2) pin OpenZFS there: /etc/apt/preferences.d/fabric-zfs.pref with 'Package: src:zfs-linux', "
        "'Pin: release n=bookworm-backports', 'Pin-Priority: 990'; "
        "3) apt-get update && apt-get install -t bookworm-backports zfs-dkms zfsutils-linux python3-pyzfs; "
        "4) reboot (the running 2.1 module stays loaded until then; pools stay importable); "
        "5) do not run `zpool upgrade`: a pool with 2.3 features cannot be imported by 2.1 any more. "
        "Or let the role do steps 1-3 with storage_base_zfs_allow_upgrade: true, and step 4 with "
        "storage_base_zfs_allow_reboot: true")


def zfs_decision(facts: Facts, *, allow_upgrade: bool = False, allow_reboot: bool = False) -> Decision:
    """What to do about ZFS on a supported node; raises UnsupportedPlatform when it must stop."""
    check_supported(facts)
    backports = facts.major == "12"
    installed = version_tuple(facts.zfs_package)
    loaded = version_tuple(facts.zfs_module)
    where = "bookworm-backports" if backports else f"{facts.codename or 'Debian ' + facts.major} contrib"
    if installed is None:
        if loaded is not None and loaded[:2] < ZFS_WANTED:
            # a module without the package (built by hand?): installing over it needs the operator
            return _older_in_use(facts, allow_reboot, backports, where)
        return Decision("install", backports, f"OpenZFS is not installed: installing 2.3 from {where}")
    if installed[:2] < ZFS_WANTED:
        in_use = bool(facts.pools) or loaded is not None
        if in_use and not allow_upgrade:
            pools = ", ".join(facts.pools) or "none imported, but the module is loaded"
            raise UnsupportedPlatform(
                f"this node runs OpenZFS {facts.zfs_package} from Debian {facts.major} (pools: {pools}); the "
                f"fabric needs OpenZFS 2.3 from {where}, and the role does not upgrade ZFS under pools without "
                "being asked",
                upgrade_steps(facts))
        return Decision("upgrade", backports,
                        f"OpenZFS {facts.zfs_package} is installed"
                        + (" and in use; upgrading as allowed" if in_use else " and unused")
                        + f": installing 2.3 from {where}")
    if loaded is not None and loaded != installed:
        # another release stops until the reboot; a point release (apt upgrade; DKMS built its module) is left to
        # the running module until the next reboot, which the operator allowed or plans (docs/operations.md)
        if loaded[:2] != installed[:2] or allow_reboot:
            return _older_in_use(facts, allow_reboot, backports, where)
        return Decision("ok", backports, f"OpenZFS {facts.zfs_package} from {where}, module {facts.zfs_module} "
                        "loaded until the next reboot")
    return Decision("ok", backports, f"OpenZFS {facts.zfs_package} from {where}"
                    + (f", module {facts.zfs_module} loaded" if loaded else ", module not loaded yet"))


def _older_in_use(facts: Facts, allow_reboot: bool, backports: bool, where: str) -> Decision:
    if allow_reboot:
        return Decision("reboot", backports,
                        f"the loaded zfs module is {facts.zfs_module} but the installed packages are "
                        f"{facts.zfs_package or 'absent'}: rebooting to load {facts.zfs_package or '2.3'}, as allowed")
    raise UnsupportedPlatform(
        f"the loaded zfs module is {facts.zfs_module} but the installed OpenZFS is "
        f"{facts.zfs_package or 'not a Debian package'}: the node must reboot to run "
        f"{facts.zfs_package or '2.3'}",
        "reboot the node (its pools are imported again at boot), or set storage_base_zfs_allow_reboot: true "
        "to let the role reboot it")
