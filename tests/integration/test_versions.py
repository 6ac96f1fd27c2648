"""Dataset versions as an ML team expects them (issue 31), on the lab: provenance stored on the snapshot and
read back with `zfs get`, `log`/`show`/`diff` against what the test changed, tags moved atomically and
resolved when a command runs (a tag's publish mounts the version's path on gpu1, never the tag's), and a
seal that hashes only what changed since its parent (the seal's own count, checked against the files the
test touched).

One dataset of its own (``hist``), a few hundred small files: the suite's minutes are counted.
"""

from __future__ import annotations

import json
import time

import pytest
from conftest import assert_refused_and_nothing_changed, step

NAME = "hist"
POOL_ROOT = "tank/datasets"
VOLUME = f"{POOL_ROOT}/{NAME}"
STAGING = f"/srv/fabricctl/staging/{NAME}"
SOURCE = "/srv/hist-src/"
FILES = 240  # 3 directories of 80


def zget(storage, prop: str, name: str) -> str:
    return storage.check_output(f"zfs get -H -o value {prop} {name}")


@pytest.fixture(scope="module")
def v1(storage, fctl):
    """hist@v1: a staging volume, one ingest, one seal with a message and an author."""
    storage.check_output(
        f"rm -rf {SOURCE} && mkdir -p {SOURCE}a {SOURCE}b {SOURCE}c && "
        f"for d in a b c; do for i in $(seq 1 {FILES // 3}); do "
        f"head -c $((500 + i * 13)) /dev/urandom > {SOURCE}$d/f$i.bin; done; done")
    fctl.json("dataset", "create", NAME, "--size", "128M")
    fctl.json("dataset", "ingest", NAME, SOURCE)
    out = fctl.json("dataset", "seal", NAME, "v1", "-m", "first cut", "--author", "Ada <ada@example.org>")
    yield out
    fctl("unpublish", f"{NAME}@v2", "--force")
    fctl("dataset", "destroy", NAME, "--yes")
    storage.run(f"rm -rf {SOURCE}")


def test_seal_stores_its_provenance_on_the_snapshot(storage, v1):
    step("issue 31: provenance at seal")
    snap = f"{VOLUME}@v1"
    assert v1["hashed"] == FILES and v1["incremental"] is False, v1  # the first seal has no parent to reuse
    assert zget(storage, "fabric:note", snap) == "first cut"
    assert zget(storage, "fabric:author", snap) == "Ada <ada@example.org>"
    assert zget(storage, "fabric:parent", snap) == "-"
    assert json.loads(zget(storage, "fabric:sources", snap)) == [SOURCE]  # as the ingest was given it
    assert zget(storage, "fabric:manifest-sha256", snap) == v1["manifest_sha256"]
    # the manifest's recorded hash is the hash of the manifest inside the snapshot (read through the staging
    # volume's own copy, which the seal leaves in place)
    assert storage.check_output(f"sha256sum {STAGING}/.fabric/manifest.tsv").split()[0] == v1["manifest_sha256"]


@pytest.mark.parametrize("args, words", [
    (["dataset", "seal", NAME, "v9", "-m", "bell\x07 and escape\x1b[2J"], ["control character"]),
    (["dataset", "seal", NAME, "v9", "--author", "Eve\x1b[2J"], ["control character"]),
    (["tag", f"{NAME}@v1", "v7"], ["tag"]),
    (["tag", f"{NAME}@v1", "v1"], ["tag"]),
    (["tag", f"{NAME}@nosuch", "prod"], ["nosuch"]),
    (["untag", NAME, "nosuch"], ["nosuch"]),
])
def test_bad_provenance_and_tags_are_refused_and_change_nothing(storage, fctl, v1, args, words):
    props = storage.check_output(f"zfs get -H -o property,value all {VOLUME} | grep '^fabric:' | md5sum")
    assert_refused_and_nothing_changed(storage, fctl, args, words)
    assert storage.check_output(f"zfs get -H -o property,value all {VOLUME} | grep '^fabric:' | md5sum") == props


@pytest.fixture(scope="module")
def v2(storage, fctl, v1):
    """hist@v2: two files rewritten, one added, one removed in the staging volume, then sealed incrementally."""
    storage.check_output(
        f"head -c 4096 /dev/urandom > {STAGING}/a/f1.bin && head -c 2048 /dev/urandom > {STAGING}/b/f2.bin && "
        f"head -c 777 /dev/urandom > {STAGING}/c/new.bin && rm {STAGING}/c/f3.bin && sync")
    return fctl.json("dataset", "seal", NAME, "v2", "-m", "relabelled")


def test_an_incremental_seal_hashes_only_what_changed(storage, fctl, v2):
    step("issue 31: incremental seal")
    assert v2["incremental"] is True and v2["parent"] == "v1", v2
    # 2 rewritten + 1 added; the other files keep their digests unread (the removed one is simply gone)
    assert v2["hashed"] == 3, v2
    assert v2["reused"] == FILES - 3, v2
    assert v2["files"] == FILES
    assert zget(storage, "fabric:parent", f"{VOLUME}@v2") == "v1"
    # what the seal trusted is still checked byte for byte by verify (it reads every file)
    out = fctl.json("verify", f"{NAME}@v2")
    assert out["ok"] is True, out


def test_a_full_seal_hashes_every_file_and_gives_the_same_manifest(storage, fctl, v2):
    out = fctl.json("dataset", "seal", NAME, "v3", "--full", "-m", "same bytes, all hashed")
    assert out["hashed"] == FILES and out["incremental"] is False, out
    assert out["manifest_sha256"] == v2["manifest_sha256"]  # nothing changed since v2: the same manifest
    fctl.json("dataset", "destroy", f"{NAME}@v3", "--yes")
    assert storage.run(f"zfs list {VOLUME}@v3").rc != 0


def test_log_show_and_diff_tell_what_the_test_did(storage, fctl, v2):
    step("issue 31: log, show, diff")
    log = fctl.json("log", NAME)
    assert [(v["version"], v["parent"], v["message"]) for v in log["versions"]] == [
        ("v2", "v1", "relabelled"), ("v1", None, "first cut")], log
    assert log["versions"][1]["author"] == "Ada <ada@example.org>"
    written = int(zget(storage, "-p written", f"{VOLUME}@v2"))
    assert log["versions"][0]["written"] == written

    show = fctl.json("show", f"{NAME}@v2")
    assert show["version"] == "v2" and show["parent"] == "v1" and show["files"] == FILES
    assert show["granted_to"] == [] and show["logged_in"] == []

    diff = fctl.json("diff", f"{NAME}@v1", f"{NAME}@v2")
    t = diff["totals"]
    # the manifest lists directories too (the fabric's own .fabric/ aside): they are unchanged entries
    dirs = int(storage.check_output(f"find {STAGING} -mindepth 1 -type d -not -path '{STAGING}/.fabric*' | wc -l"))
    assert (t["added"], t["removed"], t["changed"], t["unchanged"]) == (1, 1, 2, FILES - 3 + dirs), (t, dirs)
    by_kind = {(c["status"], c["path"]) for c in diff["changes"]}
    assert by_kind == {("added", "c/new.bin"), ("removed", "c/f3.bin"), ("changed", "a/f1.bin"),
                       ("changed", "b/f2.bin")}, diff["changes"]
    assert t["added_bytes"] == 777
    assert fctl.json("diff", f"{NAME}@v1", f"{NAME}@v2", "--stat").keys() >= {"totals"}
    res = fctl("diff", f"{NAME}@v1", "sample@v1")
    assert res.rc == 1 and "two datasets" in res.stderr and "fix:" in res.stderr


def test_a_tag_moves_atomically_and_resolves_when_a_command_runs(hosts, storage, fctl, v2):
    step("issue 31: tags")
    since = int(time.time()) - 1
    planned = fctl.json("tag", f"{NAME}@v1", "prod", "--dry-run")
    assert planned["action"] == "create" and planned["dry_run"] is True
    assert zget(storage, "fabric:tag:prod", VOLUME) == "-"  # a dry run changes nothing
    assert fctl.json("tag", f"{NAME}@v1", "prod")["action"] == "create"
    assert zget(storage, "fabric:tag:prod", VOLUME) == "v1"
    moved = fctl.json("tag", f"{NAME}@prod", "latest")  # a tag names a version wherever a version is named
    assert moved["action"] == "create" and zget(storage, "fabric:tag:latest", VOLUME) == "v1"
    assert fctl.json("tag", f"{NAME}@v2", "prod")["action"] == "move"
    assert zget(storage, "fabric:tag:prod", VOLUME) == "v2"
    assert fctl.json("tag", f"{NAME}@v2", "prod")["action"] == "unchanged"
    journal = storage.check_output(f"journalctl -t fabricctl -o cat --no-pager -q --since @{since}")
    assert "tag" in journal and "prod" in journal

    # publish by tag: the version's own mount path and target on gpu1, never the tag's
    fctl.json("publish", f"{NAME}@prod", "--to", "gpu1")
    gpu1 = hosts["gpu1"]
    assert gpu1.run(f"findmnt -n -o OPTIONS /datasets/{NAME}/v2").stdout.split(",")[0] == "ro"
    assert gpu1.run(f"test -e /datasets/{NAME}/prod").rc != 0
    assert f"ds.{NAME}.v2" in gpu1.check_output("iscsiadm -m session")
    show = fctl.json("show", f"{NAME}@prod")
    assert show["version"] == "v2" and "gpu1" in show["granted_to"] and "prod" in show["tags"]

    log = fctl.json("log", NAME)
    assert {v["version"]: sorted(v["tags"]) for v in log["versions"]} == {"v2": ["prod"], "v1": ["latest"]}
    fctl.json("untag", NAME, "latest")
    assert zget(storage, "fabric:tag:latest", VOLUME) == "-"
