"""Every file fabricctl and the core write goes through one writer (fabric_core.base.atomic; issue 26, item 5): a link
planted at a temporary name (the old predictable ones, or the writer's own) or at the final name is never followed
nor written through; the file lands whole, with its mode; fabricctl rotate's textfile is rendered by
prometheus_client and written like `fabricctl metrics`' (not by prometheus_client's write_to_textfile, whose
temporary name is predictable and opened without O_EXCL or O_NOFOLLOW)."""

from __future__ import annotations

import os
import re
import stat
import tempfile
import threading
from pathlib import Path

import pytest
from fabric_core.base import atomic
from fabric_core.services import metrics as fm

from fabricctl import readings
from fabricctl.commands import rotate

REPO = Path(__file__).resolve().parents[2]
SECRET = b"root-only content that must stay as it is\n"


@pytest.fixture
def victim(tmp_path):
    """A file a planted link points at (as /etc/shadow would be)."""
    path = tmp_path / "victim"
    path.write_bytes(SECRET)
    path.chmod(0o600)
    return path


def untouched(victim: Path) -> bool:
    st = victim.lstat()
    return stat.S_ISREG(st.st_mode) and victim.read_bytes() == SECRET and stat.S_IMODE(st.st_mode) == 0o600


def leftovers(directory: Path, keep: set[str]) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name not in keep)


def test_a_link_at_the_final_name_is_replaced_not_followed(tmp_path, victim):
    out = tmp_path / "out"
    out.mkdir()
    target = out / "fabricctl.prom"
    target.symlink_to(victim)
    atomic.write_file(target, b"new\n", mode=0o644)
    st = target.lstat()
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o644 and target.read_bytes() == b"new\n"
    assert untouched(victim)
    assert leftovers(out, {"fabricctl.prom"}) == []


def test_links_at_the_writers_own_temporary_names_are_skipped(tmp_path, victim, monkeypatch):
    """mkstemp's names cannot be guessed; were one guessed and planted, O_EXCL|O_NOFOLLOW refuses it and the next
    name is used: the planted link and what it points at stay as they were."""
    out = tmp_path / "out"
    out.mkdir()
    target = out / "state.json"
    planted = out / ".state.json.guessed"
    planted.symlink_to(victim)
    names = iter(["guessed", "guessed", "fresh"])
    monkeypatch.setattr(tempfile, "_get_candidate_names", lambda: names)
    atomic.write_file(target, "content", mode=0o600)
    assert target.read_text() == "content" and stat.S_IMODE(target.stat().st_mode) == 0o600
    assert planted.is_symlink() and os.readlink(planted) == str(victim) and untouched(victim)
    assert leftovers(out, {"state.json", planted.name}) == []


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "f"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic.replacing(target, mode=0o644) as fh:
        fh.write(b"half")
        raise RuntimeError("interrupted")
    assert target.read_text() == "old" and leftovers(tmp_path, {"f"}) == []


def test_owner_and_mode_are_set_through_the_descriptor(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(os, "chown", lambda *a, **k: calls.append(("chown", a)))  # by name: never
    real_fchown = os.fchown
    monkeypatch.setattr(os, "fchown", lambda fd, uid, gid: (calls.append(("fchown", uid, gid)),
                                                            real_fchown(fd, uid, gid)))
    target = tmp_path / "owned"
    atomic.write_file(target, b"x", mode=0o640, owner=(os.getuid(), os.getgid()))
    assert calls == [("fchown", os.getuid(), os.getgid())]
    assert stat.S_IMODE(target.stat().st_mode) == 0o640


def test_rotate_metrics_do_not_follow_links_at_any_predictable_name(tmp_path, victim, monkeypatch):
    """The names the old writer (PATH.PID.tmp) and prometheus_client's write_to_textfile (PATH.PID.THREAD) used,
    and PATH.tmp, all planted with links to the victim: rotate writes its file and none of them is followed."""
    textfile_dir = tmp_path / "node-exporter"
    textfile_dir.mkdir()
    path = textfile_dir / "fabricctl.prom"
    plants = [f"{path}.{os.getpid()}.tmp", f"{path}.{os.getpid()}.{threading.get_ident()}", f"{path}.tmp"]
    for plant in plants:
        os.symlink(victim, plant)
    monkeypatch.setattr(rotate.time, "time", lambda: 1764216123.4)
    rotate.write_metrics(str(path), kept=7, destroyed=2, seconds=1.25)
    assert untouched(victim)
    assert all(os.path.islink(p) and os.readlink(p) == str(victim) for p in plants)
    st = path.lstat()
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o644
    text = path.read_text()
    from prometheus_client.parser import text_string_to_metric_families
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for fam in text_string_to_metric_families(text) for s in fam.samples}
    assert samples == {("fabric_rotate_last_success_timestamp_seconds", ()): 1764216123.0,
                       ("fabric_rotate_snapshots", (("action", "kept"),)): 7.0,
                       ("fabric_rotate_snapshots", (("action", "destroyed"),)): 2.0,
                       ("fabric_rotate_duration_seconds", ()): 1.25}
    # status reads it back (the rotation check): an hour after the run, rotation is OK
    check = readings.rotation_check(str(path), 1764216123.0 + 3600)
    assert check.state == "OK", check
    assert leftovers(textfile_dir, {path.name, *(Path(p).name for p in plants)}) == []


def current_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def test_a_missing_textfile_directory_is_made_0755(tmp_path):
    path = tmp_path / "a" / "b" / "fabric.prom"
    fm.write_textfile(str(path), b"# nothing\n")
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o755 & ~current_umask()
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


# Every write of a file by fabricctl or the core, outside the one writer, is one of these (file, what, why).
ALLOWED = {
    ("plugins/module_utils/fabric_core/base/lock.py", "O_CREAT"):
        "the lock file: opened O_NOFOLLOW, never written to (flock only)",
    ("plugins/module_utils/fabric_core/storage/tunables.py", 'open(path, "w")'):
        "a ZFS module parameter in /sys/module/zfs/parameters (sysfs: no file to replace)",
    ("plugins/module_utils/fabric_core/node/iscsi.py", "O_CREAT"):
        "the node-record editor sent to a GPU node as a standalone script (no package there): "
        "O_CREAT|O_EXCL|O_NOFOLLOW, in root's /etc/iscsi",
    ("plugins/module_utils/fabric_core/node/iscsi.py", "os.replace("): "the same script's rename",
    ("plugins/module_utils/fabric_core/services/ingest.py", "O_CREAT"):
        "a dataset file copied in (streamed, with the source's mode and times): O_NOFOLLOW, in the version's own "
        "root-owned tree",
    ("plugins/module_utils/fabric_core/services/ingest.py", "os.replace("): "the same copy's rename",
}
WRITES = re.compile(r"""(?<!fd)open\([^)]*["'](?:w|wb|a|ab|x|w\+|r\+)["']|write_text\(|write_bytes\(|os\.rename\(|"""
                    r"""os\.replace\(|NamedTemporaryFile|mkstemp\(|write_to_textfile\(|O_CREAT|shutil\.(?:copy|move)""")


def test_every_file_write_goes_through_the_atomic_writer():
    found = set()
    for base in ("fabricctl", "plugins/module_utils/fabric_core"):
        for path in sorted((REPO / base).rglob("*.py")):
            rel = str(path.relative_to(REPO))
            if rel.endswith("fabric_core/base/atomic.py"):
                continue
            for line in path.read_text().splitlines():
                code = line.split("#", 1)[0]
                for m in WRITES.finditer(code):
                    what = "O_CREAT" if m.group(0) == "O_CREAT" else m.group(0)
                    key = next((k for k in ALLOWED if k[0] == rel and k[1] in code), (rel, what))
                    found.add(key)
    unexplained = sorted(k for k in found if k not in ALLOWED)
    assert not unexplained, f"files written outside fabric_core.base.atomic: {unexplained}"
