"""The guest image: a recipe (lab/image/), its hash, and the cache keyed by that hash."""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

from .errors import LabError

RECIPE_DIR = Path(__file__).resolve().parent.parent / "image"
IMAGE_FILES = ("disk.raw", "vmlinuz", "initrd.img", "manifest.txt")

# The Debian releases the lab builds guests of: Debian 13 is the primary platform (OpenZFS 2.3 from
# trixie contrib), Debian 12 the supported older one (OpenZFS 2.3 from bookworm-backports).
RELEASES = {"13": "trixie", "12": "bookworm"}
DEFAULT_DEBIAN = "13"


def release_name(debian: str) -> str:
    """'13' -> 'trixie' (a codename is accepted as well); anything else is refused."""
    if debian in RELEASES.values():
        return debian
    try:
        return RELEASES[debian]
    except KeyError:
        raise LabError(f"the lab builds Debian {' or '.join(sorted(RELEASES, reverse=True))} guests, "
                       f"not {debian!r}",
                       "use DEBIAN=13 (the default) or DEBIAN=12 (FABRIC_LAB_DEBIAN for labctl)") from None


def recipe_hash(recipe_dir: Path = RECIPE_DIR, release: str = "") -> str:
    """A stable hash over every file of the recipe (relative path, mode bit x, content) and the release."""
    h = hashlib.sha256()
    if release:
        h.update(b"release=" + release.encode() + b"\0")
    for path in sorted(p for p in recipe_dir.rglob("*") if p.is_file()):
        rel = path.relative_to(recipe_dir).as_posix()
        h.update(rel.encode() + b"\0")
        h.update(b"x" if os.access(path, os.X_OK) else b"-")
        h.update(path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def cache_root() -> Path:
    return Path(os.environ.get("FABRIC_LAB_CACHE", "/var/cache/fabric-lab"))


def image_key(release: str) -> str:
    """The cache entry of a release's image: '<codename>-<recipe hash>'."""
    return f"{release}-{recipe_hash(release=release)}"


def image_dir(release: str) -> Path:
    return cache_root() / "images" / image_key(release)


def is_complete(path: Path) -> bool:
    return all((path / name).is_file() for name in IMAGE_FILES)


# The suites of a host's Debian archive source (any release: the host may be Debian 12 or 13).
DEBIAN_SUITES = ("bookworm", "trixie", "forky", "sid", "stable", "oldstable", "testing", "unstable")


def parse_debian_mirrors(sources_texts: list[str]) -> tuple[str | None, str | None]:
    """Find the Debian archive and security mirrors in apt sources (one-line or deb822 form).

    Returns (archive, security); either may be None. The lab uses the host's own mirrors,
    so that a machine behind a local mirror builds its guests from the same place; the guest's
    release need not be the host's (the archive serves every release).
    """
    archive = security = None
    for text in sources_texts:
        # deb822: paragraphs with URIs: and Suites:
        for para in re.split(r"\n\s*\n", text):
            fields = {}
            for line in para.splitlines():
                if line.startswith("#") or ":" not in line:
                    continue
                key, _, value = line.partition(":")
                fields[key.strip().lower()] = value.strip()
            if "uris" in fields and "suites" in fields and "deb" in fields.get("types", "deb").split():
                uri = fields["uris"].split()[0]
                suites = fields["suites"].split()
                if any(s.endswith("-security") for s in suites):
                    security = security or uri
                elif any(suite in DEBIAN_SUITES for suite in suites):
                    archive = archive or uri
        for line in text.splitlines():
            m = re.match(r"^\s*deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)", line)
            if not m:
                continue
            uri, suite = m.groups()
            if suite.endswith("-security"):
                security = security or uri
            elif suite in DEBIAN_SUITES:
                archive = archive or uri
    return archive, security


def host_mirrors() -> tuple[str, str | None]:
    if os.environ.get("FABRIC_LAB_MIRROR"):
        return os.environ["FABRIC_LAB_MIRROR"], os.environ.get("FABRIC_LAB_SECURITY_MIRROR") or None
    texts = []
    for path in [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]:
        if path.is_file() and path.suffix in ("", ".list", ".sources"):
            texts.append(path.read_text(errors="replace"))
    archive, security = parse_debian_mirrors(texts)
    if not archive:
        raise LabError(
            "cannot find a Debian archive mirror in /etc/apt/sources.list{,.d/*}",
            "set FABRIC_LAB_MIRROR to a Debian mirror URL and run again")
    return archive, security


def ensure_image(log, release: str) -> Path:
    """Return the cached image of release for the current recipe, building it first if needed.

    One build at a time per cache: a second checkout's lab-up waits for the first one's build
    and then finds the image cached, instead of removing the half-built tree as stale."""
    digest = image_key(release)
    target = image_dir(release)
    if is_complete(target):
        log(f"image {digest}: cached at {target}")
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / ".build.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"image {digest}: another lab is building it; waiting")
            fcntl.flock(lock, fcntl.LOCK_EX)
        if is_complete(target):
            log(f"image {digest}: cached at {target}")
            return target
        return _build(digest, target, log, release)


def _build(digest: str, target: Path, log, release: str) -> Path:
    archive, security = host_mirrors()
    building = target.with_name(f"{digest}.building")
    if building.exists():
        shutil.rmtree(building)  # a build that was interrupted: start over
    building.mkdir(parents=True)
    log(f"image {digest}: building (debootstrap + DKMS, about 5-10 minutes) into {building}")
    env = dict(os.environ, FABRIC_LAB_MIRROR=archive, FABRIC_LAB_SECURITY_MIRROR=security or "")
    started = time.monotonic()
    proc = subprocess.run(["bash", str(RECIPE_DIR / "build.sh"), str(building), release], env=env,
                          stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise LabError(f"image build failed (exit {proc.returncode}); logs are in {building}",
                       "fix the cause shown above and run `make lab-up` again")
    if target.exists():
        shutil.rmtree(target)
    (building / "mirror").write_text(archive + "\n")  # the Debian 12 image's backports source names it
    building.rename(target)
    (target / "build-seconds").write_text(f"{time.monotonic() - started:.0f}\n")
    log(f"image {digest}: built in {time.monotonic() - started:.0f} s")
    prune_old_images(keep=digest, log=log)
    return target


def image_mirror(path: Path) -> str | None:
    """The Debian mirror an image was built from (recorded beside it), or None for an older image."""
    try:
        return (path / "mirror").read_text().strip() or None
    except FileNotFoundError:
        return None


def prune_old_images(keep: str, log) -> None:
    """Drop older recipes' images of the same release from the cache (each is several GiB). The
    other release's image stays: a machine that tests both keeps one of each."""
    release = keep.split("-", 1)[0]
    for path in (cache_root() / "images").iterdir():
        if (path.name != keep and path.is_dir() and not path.name.endswith(".building")
                and (path.name.split("-", 1)[0] == release or "-" not in path.name)):
            log(f"removing outdated image {path.name}")
            shutil.rmtree(path, ignore_errors=True)
