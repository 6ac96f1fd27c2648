"""fabric_core.services.ingest: only what is inside the source tree is copied, or nothing; every refusal names the path.
Real files in tmp_path (the walk and the copy are system calls on descriptors)."""

from __future__ import annotations

import os

import pytest
from fabric_core.services import ingest


@pytest.fixture
def tree(tmp_path):
    src = tmp_path / "src"
    (src / "train" / "a").mkdir(parents=True)
    (src / "val").mkdir()
    for i, rel in enumerate(("train/a/1.jpg", "train/a/2.jpg", "val/3.jpg", "labels.txt")):
        (src / rel).write_bytes(bytes([i]) * (100 + i))
    os.chmod(src / "labels.txt", 0o640)
    return src


def copy_pairs(pairs, dest):
    """Copy each (file, opener) pair that is not up to date under dest, as the command does; the names copied."""
    copied = []
    for file, open_file in pairs:
        target = os.path.join(dest, file.rel)
        if not ingest.up_to_date(target, file):
            ingest.copy(open_file(), target, file)
            copied.append(file.rel)
    return copied


def copy_all(sources, dest):
    return copy_pairs(ingest.walk(sources, complete=False), dest)


def test_a_tree_is_planned_whole_and_copied_with_mode_and_times(tree, tmp_path):
    files = ingest.plan([f"{tree}/"])
    assert [f.rel for f in files] == ["labels.txt", "train/a/1.jpg", "train/a/2.jpg", "val/3.jpg"]
    dest = tmp_path / "dest"
    assert copy_all([f"{tree}/"], dest) == [f.rel for f in files]
    for f in files:
        got = dest / f.rel
        assert got.read_bytes() == (tree / f.rel).read_bytes()
        assert got.stat().st_mtime_ns == (tree / f.rel).stat().st_mtime_ns
    assert (dest / "labels.txt").stat().st_mode & 0o777 == 0o640
    assert copy_all([f"{tree}/"], dest) == []  # resumed: everything is up to date
    assert [f.rel for f in ingest.plan([str(tree)])][0] == "src/labels.txt"  # without the slash: the directory


def test_symlinks_are_refused_every_one_named_before_anything_is_copied(tree, tmp_path):
    os.symlink("/etc", tree / "train" / "etc")
    os.symlink("../labels.txt", tree / "val" / "labels")
    with pytest.raises(ingest.IngestRefused) as err:
        ingest.plan([f"{tree}/"])
    assert err.value.paths == [f"{tree}/train/etc -> /etc", f"{tree}/val/labels -> ../labels.txt"]
    assert "2 symbolic link(s)" in err.value.problem and "cp -rL" in err.value.fix


def test_a_file_swapped_for_a_symlink_after_the_plan_is_not_copied(tree, tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("root's secret")
    ingest.plan([f"{tree}/"])
    walked = ingest.walk([f"{tree}/"], complete=False)
    file, open_file = next(walked)  # labels.txt, listed as a regular file
    os.unlink(tree / "labels.txt")
    os.symlink(secret, tree / "labels.txt")  # swapped between the listing and the open
    with pytest.raises(ingest.IngestRefused) as err:
        ingest.copy(open_file(), str(tmp_path / "dest" / file.rel), file)
    assert f"{tree}/labels.txt became a symbolic link" in err.value.problem
    assert not (tmp_path / "dest" / "labels.txt").exists()


def test_a_file_replaced_by_another_after_the_listing_is_not_copied(tree, tmp_path):
    walked = ingest.walk([f"{tree}/"], complete=False)
    file, open_file = next(walked)
    os.rename(tree / "labels.txt", tree / "labels.old")  # kept, so the new file cannot reuse its inode
    (tree / "labels.txt").write_text("another file")
    with pytest.raises(ingest.IngestRefused, match="was replaced during the ingest"):
        open_file()


def test_a_directory_swapped_for_a_symlink_during_the_walk_is_refused(tree, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x").write_text("outside")
    walked = ingest.walk([f"{tree}/"], complete=False)
    next(walked)  # labels.txt: train/ and val/ are listed, not opened yet
    os.rename(tree / "train", tmp_path / "train-moved")
    os.symlink(outside, tree / "train")
    with pytest.raises(ingest.IngestRefused, match="train became a symbolic link"):
        list(walked)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a mode-000 directory (the lab test drops the capability)")
def test_an_unreadable_directory_fails_with_its_path(tree):
    os.chmod(tree / "val", 0)
    try:
        with pytest.raises(ingest.IngestRefused) as err:
            ingest.plan([f"{tree}/"])
        assert f"cannot read {tree}/val/" in err.value.problem and "resumes" in err.value.fix
    finally:
        os.chmod(tree / "val", 0o755)


def test_an_unreadable_directory_fails_with_its_path_also_as_root(tree, monkeypatch):
    real = os.listdir

    def listdir(fd):
        if isinstance(fd, int) and os.path.basename(os.readlink(f"/proc/self/fd/{fd}")) == "val":
            raise PermissionError(13, "Permission denied")
        return real(fd)

    monkeypatch.setattr(os, "listdir", listdir)
    with pytest.raises(ingest.IngestRefused) as err:
        ingest.plan([f"{tree}/"])
    assert err.value.problem.startswith(f"cannot read {tree}/val/: Permission denied")


def test_a_source_that_is_a_broken_link_or_a_loop_is_refused_and_a_good_link_is_followed(tree, tmp_path):
    os.symlink(tmp_path / "nowhere", tmp_path / "broken")
    os.symlink(tmp_path / "loop", tmp_path / "loop")
    with pytest.raises(ingest.IngestRefused, match="is a broken symbolic link"):
        ingest.plan([str(tmp_path / "broken")])
    with pytest.raises(ingest.IngestRefused, match="is a symbolic link loop"):
        ingest.plan([str(tmp_path / "loop")])
    os.symlink(tree, tmp_path / "import")  # the operator's own link to the source: resolved once
    assert len(ingest.plan([f"{tmp_path / 'import'}/"])) == 4


def test_special_files_are_refused(tree):
    os.mkfifo(tree / "val" / "pipe")
    with pytest.raises(ingest.IngestRefused, match="not a regular file"):
        ingest.plan([f"{tree}/"])
    with pytest.raises(ingest.IngestRefused, match="not a regular file or a directory"):
        ingest.plan([str(tree / "val" / "pipe")])


def test_a_single_file_source_and_a_failed_copy_leaves_no_partial_file(tree, tmp_path):
    walked = ingest.walk([str(tree / "labels.txt")])  # its descriptors live while the walk does
    file, open_file = next(walked)
    assert file.rel == "labels.txt"
    dest = tmp_path / "dest"
    dest.mkdir()
    fd = open_file()
    os.close(fd)  # a read error: the descriptor is gone
    with pytest.raises(OSError):
        ingest.copy(fd, str(dest / "labels.txt"), file)
    assert list(dest.iterdir()) == []


# ---- issue 26, item 7: the copy takes exactly what the walk checked; hard links ---------------------------

def copy_planned(files, dest):
    return copy_pairs(ingest.opened(files), dest)


def test_a_file_added_after_the_walk_is_not_copied(tree, tmp_path):
    """Between the walk (the check) and the copy, a file is added to the source (here, in a directory the
    copy has not reached yet, and at the top): the copy takes the plan's files only."""
    files = ingest.plan([f"{tree}/"])
    (tree / "val" / "added-later.jpg").write_text("never checked")
    (tree / "0-added").write_text("never checked")
    dest = tmp_path / "dest"
    assert copy_planned(files, dest) == ["labels.txt", "train/a/1.jpg", "train/a/2.jpg", "val/3.jpg"]
    assert not (dest / "val" / "added-later.jpg").exists() and not (dest / "0-added").exists()
    assert (dest / "val" / "3.jpg").read_bytes() == (tree / "val" / "3.jpg").read_bytes()


def test_a_planned_file_replaced_or_removed_after_the_walk_fails_the_copy(tree, tmp_path):
    files = ingest.plan([f"{tree}/"])
    os.rename(tree / "val" / "3.jpg", tree / "val" / "3.old")  # kept: the new file cannot reuse its inode
    (tree / "val" / "3.jpg").write_text("another file")
    with pytest.raises(ingest.IngestRefused, match=f"{tree}/val/3.jpg was replaced during the ingest"):
        copy_planned(files, tmp_path / "dest")
    os.unlink(tree / "val" / "3.jpg")
    with pytest.raises(ingest.IngestRefused, match="cannot read"):
        copy_planned(files, tmp_path / "dest2")


def test_a_directory_of_the_plan_swapped_for_a_link_is_not_followed_by_the_copy(tree, tmp_path):
    files = ingest.plan([f"{tree}/"])
    outside = tmp_path / "outside" / "a"
    outside.mkdir(parents=True)
    (outside / "1.jpg").write_text("outside the source")
    os.rename(tree / "train", tree / "train.old")
    os.symlink(tmp_path / "outside", tree / "train")
    with pytest.raises(ingest.IngestRefused, match=f"{tree}/train became a symbolic link"):
        copy_planned(files, tmp_path / "dest")
    assert not (tmp_path / "dest" / "train").exists()


def test_a_single_file_source_is_reopened_and_checked(tree, tmp_path):
    files = ingest.plan([str(tree / "labels.txt")])
    assert copy_planned(files, tmp_path / "dest") == ["labels.txt"]
    files = ingest.plan([str(tree / "labels.txt")])
    os.rename(tree / "labels.txt", tree / "labels.old")
    (tree / "labels.txt").write_text("another")
    with pytest.raises(ingest.IngestRefused, match="was replaced"):
        copy_planned(files, tmp_path / "dest2")


def test_a_hard_link_to_a_file_outside_the_source_is_refused_and_named(tree, tmp_path):
    """A file of the node hard-linked into the source (a hard link shows no target: st_nlink does): refused
    before anything is copied, its path named."""
    secret = tmp_path / "secret"
    secret.write_text("root's secret")
    os.link(secret, tree / "val" / "innocent.jpg")
    with pytest.raises(ingest.IngestRefused) as err:
        ingest.plan([f"{tree}/"])
    assert err.value.paths == [f"{tree}/val/innocent.jpg"]
    assert "1 file(s) with hard links outside it" in err.value.problem and "cp --preserve" in err.value.fix
    # the directory holding the other link given as a source too: every link is inside the sources
    assert {f.rel for f in ingest.plan([f"{tree}/", str(secret)])} >= {"val/innocent.jpg", "secret"}


def test_hard_links_inside_the_source_are_copied_as_files_of_their_own(tree, tmp_path):
    os.link(tree / "val" / "3.jpg", tree / "train" / "3-again.jpg")
    files = ingest.plan([f"{tree}/"])
    dest = tmp_path / "dest"
    copy_planned(files, dest)
    one, two = dest / "val" / "3.jpg", dest / "train" / "3-again.jpg"
    assert one.read_bytes() == two.read_bytes() and one.stat().st_ino != two.stat().st_ino
    # the same tree given twice (overlapping sources) counts each link once: still inside
    assert len(ingest.plan([f"{tree}/", f"{tree}/train"])) == len(files) + 3


def test_a_hard_link_counted_twice_through_overlapping_sources_is_still_outside(tree, tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("root's secret")
    os.link(secret, tree / "val" / "innocent.jpg")
    with pytest.raises(ingest.IngestRefused, match="hard links outside"):
        ingest.plan([f"{tree}/", f"{tree}/val", f"{tree}/val/innocent.jpg"])
