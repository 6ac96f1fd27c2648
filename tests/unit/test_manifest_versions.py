"""Issue 31 in fabric_core.node.manifest: a seal that costs the change (the stat cache, reuse of unchanged files'
digests) and the diff of two manifests, streamed (trees built in tmp_path)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from fabric_core.base.errors import NotFound, UserError
from fabric_core.node import manifest
from test_manifest import SCRIPT, SCRIPT_ENV, make_tree


@pytest.fixture
def settled(monkeypatch):
    """Files made by the test count as settled at once (the stat cache leaves out what changed within RACY_NS
    of a build's start; that rule has its own test)."""
    monkeypatch.setattr(manifest.builder, "RACY_NS", 0)


def tree_of(tmp_path: Path) -> Path:
    return make_tree(tmp_path / "t", {"a.txt": b"alpha\n", "b": {"c.bin": b"c" * 3000, "d.bin": b"d" * 10},
                                      "e": {}, "l": ("link", "a.txt"), "z.txt": b"zed"})


def seal(root: Path, name: str, reuse: Path | None = None, **kw) -> manifest.Summary:
    fabric = root / ".fabric"
    return manifest.build(root, fabric / f"{name}.tsv", workers=1, cache_out=fabric / f"{name}.cache", reuse=reuse,
                          **kw)


def test_a_full_build_writes_the_cache_and_a_reuse_reads_nothing_unchanged(tmp_path, settled):
    root = tree_of(tmp_path)
    first = seal(root, "v1")
    assert (first.hashed, first.reused, first.files) == (4, 0, 4)
    cache = root / ".fabric" / "v1.cache"
    assert first.cache_sha256 == hashlib.sha256(cache.read_bytes()).hexdigest()
    # one group per directory, in the manifest's order of the directories
    assert [rel for rel, _ident, _sha in manifest.read_cache(cache)] == [b"a.txt", b"z.txt", b"b/c.bin", b"b/d.bin"]
    again = seal(root, "v2", reuse=cache)
    assert (again.hashed, again.reused) == (0, 4)
    assert (root / ".fabric" / "v2.tsv").read_bytes() == (root / ".fabric" / "v1.tsv").read_bytes()
    assert again.manifest_sha256 == first.manifest_sha256


def test_only_changed_files_are_hashed_and_the_manifest_is_a_full_ones(tmp_path, settled, monkeypatch):
    root = tree_of(tmp_path)
    seal(root, "v1")
    time.sleep(0.05)  # past the file system's timestamp tick
    with open(root / "b" / "c.bin", "r+b") as fh:  # in place, same size: only the ctime (and mtime) move
        fh.write(b"C")
    os.utime(root / "b" / "c.bin", ns=(0, os.stat(root / "b" / "c.bin").st_mtime_ns))
    replacement = root / "b" / ".d.tmp"  # replaced by rename, same size and mtime: another inode
    replacement.write_bytes(b"D" * 10)
    st = os.stat(root / "b" / "d.bin")
    os.utime(replacement, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.rename(replacement, root / "b" / "d.bin")
    (root / "new.txt").write_bytes(b"new")
    (root / "z.txt").unlink()
    hashed = []
    real = manifest.builder.hash_batch
    monkeypatch.setattr(manifest.builder, "hash_batch",
                        lambda r, jobs: (hashed.extend(rel for rel, _ in jobs), real(r, jobs))[1])
    inc = seal(root, "v2", reuse=root / ".fabric" / "v1.cache")
    assert sorted(hashed) == [b"b/c.bin", b"b/d.bin", b"new.txt"]
    assert (inc.hashed, inc.reused) == (3, 1)
    full = manifest.build(root, tmp_path / "full.tsv", workers=1)
    assert (root / ".fabric" / "v2.tsv").read_bytes() == (tmp_path / "full.tsv").read_bytes()
    assert manifest.verify(root, root / ".fabric" / "v2.tsv", workers=1).ok
    assert full.manifest_sha256 == inc.manifest_sha256


def test_reuse_through_worker_processes_gives_the_same_manifest(tmp_path, settled):
    root = make_tree(tmp_path / "t", {f"d{i}": {f"f{j}": bytes([i, j]) * 7 for j in range(200)} for i in range(4)})
    seal(root, "v1")
    time.sleep(0.05)
    (root / "d2" / "f7").write_bytes(b"changed")
    inc = manifest.build(root, root / ".fabric" / "v2.tsv", workers=2, reuse=root / ".fabric" / "v1.cache",
                         cache_out=root / ".fabric" / "v2.cache")
    assert (inc.hashed, inc.reused) == (1, 799)
    manifest.build(root, tmp_path / "full.tsv", workers=2)
    assert (root / ".fabric" / "v2.tsv").read_bytes() == (tmp_path / "full.tsv").read_bytes()


def test_files_changed_just_before_a_build_are_left_out_of_its_cache(tmp_path):
    root = tree_of(tmp_path)  # made now: within RACY_NS of the build's start
    first = seal(root, "v1")
    assert first.hashed == 4
    assert list(manifest.read_cache(root / ".fabric" / "v1.cache")) == []  # none trusted: all hashed next time
    assert seal(root, "v2", reuse=root / ".fabric" / "v1.cache").hashed == 4


@pytest.mark.parametrize("damage, words", [
    (lambda b: b.replace(b"# fabric-stat-cache v2", b"# something else"), "header"),
    (lambda b: b[:-6], "truncated"),
    (lambda b: b[:b.index(b"# end")], "truncated"),
    (lambda b: b.replace(hashlib.sha256(b"d" * 10).hexdigest().encode(), b"X" * 64), "not stat cache lines"),
    (lambda b: b.replace(hashlib.sha256(b"d" * 10).hexdigest().encode(),
                         hashlib.sha256(b"d" * 10).hexdigest().upper().encode()), "not stat cache lines"),
    (lambda b: b.replace(hashlib.sha256(b"d" * 10).hexdigest().encode(),
                         "\u00e9".encode() + hashlib.sha256(b"d" * 10).hexdigest()[2:].encode()),
     "not stat cache lines"),  # as long in bytes, not in characters
    (lambda b: b.replace(b"P\tb\t", b"P\t\t"), "out of order"),
    (lambda b: b.replace(b"P\tb\t", b"Q\tb\t"), "not a group's header"),
    (lambda b: b.replace(b"dirs=2", b"dirs=3"), "counts 3 groups"),
])
def test_a_cache_that_is_not_intact_is_refused_naming_the_line(tmp_path, settled, damage, words):
    root = tree_of(tmp_path)
    seal(root, "v1")
    cache = root / ".fabric" / "v1.cache"
    cache.write_bytes(damage(cache.read_bytes()))
    with pytest.raises(UserError, match=words) as err:
        seal(root, "v2", reuse=cache)
    assert "--full" in err.value.fix
    assert not (root / ".fabric" / "v2.tsv").exists()  # nothing written


def test_a_cache_checked_against_its_recorded_sha256_while_the_build_runs(tmp_path, settled):
    root = tree_of(tmp_path)
    first = seal(root, "v1")
    cache = root / ".fabric" / "v1.cache"
    ok = seal(root, "v2", reuse=cache, reuse_sha256=first.cache_sha256)
    assert (ok.hashed, ok.reused) == (0, 4)
    with pytest.raises(manifest.StaleCache, match="not the 0+ its version recorded") as err:
        seal(root, "v3", reuse=cache, reuse_sha256="0" * 64)
    assert "--full" in err.value.fix
    assert not (root / ".fabric" / "v3.tsv").exists() and not (root / ".fabric" / "v3.cache").exists()


def test_the_cache_format_is_told_by_its_first_line(tmp_path, settled):
    root = tree_of(tmp_path)
    seal(root, "v1")
    assert manifest.cache_format(root / ".fabric" / "v1.cache") == "current"
    (tmp_path / "old").write_bytes(b"# fabric-stat-cache v1\n# end\n")
    assert manifest.cache_format(tmp_path / "old") == "older"
    (tmp_path / "junk").write_bytes(b"hello\n")
    assert manifest.cache_format(tmp_path / "junk") == "unknown"
    assert manifest.cache_format(tmp_path / "nope") is None


def test_odd_names_and_a_directory_with_many_files_to_hash_give_the_full_manifest(tmp_path, settled):
    """Names that sort differently as bytes than as text (invalid UTF-8, non-ASCII), names that need escaping, and
    a directory whose files to hash are more than one scan hashes itself (spread over the pool in batches)."""
    root = tmp_path / "t"
    big = root / "big"
    big.mkdir(parents=True)
    for i in range(600):
        (big / f"f{i:04d}").write_bytes(b"%d" % i)
    odd = root / "odd"
    odd.mkdir()
    for name in (b"caf\xc3\xa9", b"bad\xff", b"tab\there", b"z", b"a b", b"new\nline"):
        (Path(os.fsdecode(bytes(odd))) / os.fsdecode(name)).write_bytes(name)
    (odd / "sub").mkdir()
    (odd / "sub.txt").write_bytes(b"x")
    (odd / "sub" / "in").write_bytes(b"y")
    os.symlink("z", odd / "link")
    for workers in (1, 2):
        first = manifest.build(root, tmp_path / f"v1-{workers}.tsv", workers=workers, cache_out=tmp_path / "v1.cache")
        assert first.hashed == first.files == 608
        time.sleep(0.05)
        for i in range(0, 600, 2):
            (big / f"f{i:04d}").write_bytes(b"changed %d" % i)
        (odd / "bad\udcff").write_bytes(b"changed")
        inc = manifest.build(root, tmp_path / f"v2-{workers}.tsv", workers=workers, reuse=tmp_path / "v1.cache",
                             cache_out=tmp_path / "v2.cache")
        assert (inc.hashed, inc.reused) == (301, 307)
        full = manifest.build(root, tmp_path / f"full-{workers}.tsv", workers=workers)
        assert (tmp_path / f"v2-{workers}.tsv").read_bytes() == (tmp_path / f"full-{workers}.tsv").read_bytes()
        assert (full.files, full.dirs, full.symlinks) == (608, 3, 1)
        assert manifest.verify(root, tmp_path / f"v2-{workers}.tsv", workers=workers).ok


def test_a_special_file_met_by_a_scan_is_refused_naming_it(tmp_path):
    root = tree_of(tmp_path)
    os.mkfifo(root / "b" / "pipe")
    with pytest.raises(UserError, match=r"b/pipe is a fifo"):
        seal(root, "v1")
    assert not (root / ".fabric" / "v1.tsv").exists()


def test_a_missing_cache_is_not_found(tmp_path):
    root = tree_of(tmp_path)
    with pytest.raises(NotFound, match="no stat cache"):
        seal(root, "v1", reuse=tmp_path / "nope")


# --- diff ------------------------------------------------------------------------------------------------------


def build_pair(tmp_path: Path) -> tuple[Path, Path]:
    old = make_tree(tmp_path / "old", {"a.txt": b"alpha", "b": {"c.bin": b"c" * 30, "gone": b"g" * 5},
                                       "kind": b"file", "l": ("link", "a.txt"), "same": b"s"})
    new = make_tree(tmp_path / "new", {"a.txt": b"ALPHA", "b": {"c.bin": b"c" * 31, "added": b"n" * 7},
                                       "kind": {}, "l": ("link", "same"), "same": b"s"})
    manifest.build(old, tmp_path / "old.tsv", workers=1)
    manifest.build(new, tmp_path / "new.tsv", workers=1)
    return tmp_path / "old.tsv", tmp_path / "new.tsv"


def test_diff_names_added_removed_and_changed_with_counts_and_bytes(tmp_path):
    old, new = build_pair(tmp_path)
    totals: dict = {}
    changes = list(manifest.diff(old, new, totals))
    assert [(c.status, c.path) for c in changes] == [
        ("changed", b"a.txt"), ("added", b"b/added"), ("changed", b"b/c.bin"), ("removed", b"b/gone"),
        ("changed", b"kind"), ("changed", b"l")]
    assert [c.line() for c in changes] == ["M a.txt  (content)", "+ b/added", "M b/c.bin  (30 -> 31 bytes)",
                                           "- b/gone", "M kind/  (file -> directory)", "M l -> a.txt => same"]
    assert {k: totals[k] for k in ("added", "removed", "changed", "unchanged", "added_bytes", "removed_bytes",
                                   "changed_bytes_old", "changed_bytes_new")} == {
        "added": 1, "removed": 1, "changed": 4, "unchanged": 2, "added_bytes": 7, "removed_bytes": 5,
        "changed_bytes_old": 5 + 30 + 4, "changed_bytes_new": 5 + 31}
    assert totals["old"]["manifest_sha256"] == hashlib.sha256(old.read_bytes()).hexdigest()
    assert totals["new"]["files"] == 4
    assert changes[0].to_dict() == {"status": "changed", "path": "a.txt",
                                    "old": {"kind": "file", "size": 5, "sha256": hashlib.sha256(b"alpha").hexdigest()},
                                    "new": {"kind": "file", "size": 5, "sha256": hashlib.sha256(b"ALPHA").hexdigest()}}


def test_a_diff_of_a_manifest_with_itself_is_empty(tmp_path):
    old, _new = build_pair(tmp_path)
    totals: dict = {}
    assert list(manifest.diff(old, old, totals)) == []
    assert totals["unchanged"] == 7 and totals["changed"] == totals["added"] == totals["removed"] == 0


def test_the_diff_is_streamed_and_a_damaged_manifest_still_fails(tmp_path):
    old, new = build_pair(tmp_path)
    whole = new.read_bytes()
    new.write_bytes(whole[:whole.index(b"# end")])  # cut before its trailer
    changes = manifest.diff(old, new, {})
    assert next(changes).path == b"a.txt"  # found before either manifest was read whole
    with pytest.raises(UserError, match="no trailer"):
        list(changes)
    new.write_bytes(whole.replace(b"\t31\t", b"\tx\t"))  # a line that differs, garbled: parsed, refused
    with pytest.raises(UserError, match=r"new.tsv line \d+: not a file"):
        list(manifest.diff(old, new, {}))
    old.write_bytes(b"# fabric-manifest v2\n")
    with pytest.raises(UserError, match="header"):
        list(manifest.diff(old, new, {}))


def test_lines_out_of_order_where_they_differ_are_refused(tmp_path):
    old, new = build_pair(tmp_path)
    lines = new.read_bytes().split(b"\n")
    lines[1], lines[2] = lines[2], lines[1]  # a.txt and b swapped
    new.write_bytes(b"\n".join(lines))
    with pytest.raises(UserError, match="out of order"):
        list(manifest.diff(old, new, {}))


def test_the_diff_script_prints_changes_stat_and_json(tmp_path):
    old, new = build_pair(tmp_path)

    def script(*args):
        return subprocess.run([*SCRIPT, "diff", str(old), str(new), *args], capture_output=True,
                              text=True, check=True, env=SCRIPT_ENV).stdout

    text = script().splitlines()
    assert text[0] == "M a.txt  (content)" and text[-1].startswith("1 added (7 bytes), 1 removed (5 bytes), 4 changed")
    assert script("--stat").splitlines() == text[-1:]
    doc = json.loads(script("--json"))
    assert doc["totals"]["added"] == 1 and len(doc["changes"]) == 6
    assert "changes" not in json.loads(script("--json", "--stat"))


def test_the_build_script_writes_and_reuses_a_cache(tmp_path, settled):
    root = tree_of(tmp_path)
    out, cache = tmp_path / "m.tsv", tmp_path / "c.tsv"
    env = SCRIPT_ENV
    first = subprocess.run([*SCRIPT, "build", str(root), str(out), "--workers", "1", "--json",
                            "--cache", str(cache)], capture_output=True, text=True, check=True, env=env)
    assert json.loads(first.stdout)["cache_sha256"] == hashlib.sha256(cache.read_bytes()).hexdigest()
    second = subprocess.run([*SCRIPT, "build", str(root), str(tmp_path / "m2.tsv"), "--workers",
                             "1", "--json", "--reuse", str(cache)], capture_output=True, text=True, check=True,
                            env=SCRIPT_ENV)
    assert json.loads(second.stdout)["files"] == 4  # a script run has the default RACY_NS: a fresh tree is hashed
