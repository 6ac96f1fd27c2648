"""Issue 31: dataset versions as an ML team expects them. The pure parts (fabric_core.services.history, the tag rule of
fabric_core.base.names) and the commands through fabricctl's main on a storage node whose zfs is answered (a dataset
imagenet with versions v1 and v2, tags kept in a dict that `zfs set`/`zfs inherit` change): tag, untag, log,
show's provenance, seal's refusals, destroy of a tagged version, diff across datasets, and a tag resolved where a
version is named (datasets.require_version)."""

from __future__ import annotations

import json
import tempfile

import pytest
from fabric_core.base import names
from fabric_core.base.errors import AlreadyExists, InvalidName, NotFound, UserError
from fabric_core.services import history
from support import AnsweringRunner, fabricctl_config, snapshot_listing

from fabricctl import context, datasets, main
from fabricctl.commands import diff as diff_command

VOLUME = "tank/datasets/imagenet"


# --- the rules --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("tag", ["latest", "prod", "stable", "exp-3", "rc.1", "a"])
def test_tags_that_are_names_for_a_use(tag):
    assert names.validate_tag(tag) == tag
    assert names.parse_ref(f"imagenet@{tag}") == ("imagenet", tag)  # usable wherever a version is named


@pytest.mark.parametrize("tag, words", [
    ("v1", "named like a version"), ("v2.1", "named like a version"), ("7", "named like a version"),
    ("2026-11-22", "named like a version"), ("Prod", "invalid tag"), ("pr_od", "invalid tag"),
    ("p" * 17, "invalid tag"), ("current", "reserved"), ("rw", "reserved"), ("s12", "reserved"), ("", "invalid tag"),
])
def test_a_tag_named_like_a_version_or_badly_is_refused(tag, words):
    with pytest.raises(InvalidName, match=words) as err:
        names.validate_tag(tag)
    assert err.value.fix


@pytest.mark.parametrize("author", ["ada\x1b[31m", "ada\nmallory", "ada\x00", "ada\u2028x", "ada\x7f", "\t"])
def test_an_author_with_control_characters_is_refused(author):
    with pytest.raises(UserError) as err:
        history.validate_author(author)
    assert err.value.fix


def test_an_author_and_a_message_that_are_fine():
    assert history.validate_author(" Ada Lovelace <ada@example.org> ") == "Ada Lovelace <ada@example.org>"
    assert history.validate_message("relabelled\n\tval: 1%") == "relabelled\n\tval: 1%"
    with pytest.raises(UserError, match="control characters"):
        history.validate_message("bell\x07")
    with pytest.raises(UserError, match="8191"):
        history.validate_message("é" * 4096)  # 8192 bytes
    with pytest.raises(UserError, match="longer|more than"):
        history.validate_author("a" * 257)


def test_sources_are_cut_to_what_a_property_holds_and_say_how_many_more():
    sources = [f"/import/shard-{i:05d}/" for i in range(1000)]
    value = history.sources_value(sources)
    assert len(value.encode()) <= history.MAX_VALUE_BYTES
    parsed = history.parse_sources(value)
    assert parsed[0] == sources[0] and parsed[-1].startswith("... and ") and parsed[-1].endswith(" more")
    assert len(parsed) - 1 + int(parsed[-1].split()[2]) == 1000
    assert history.parse_sources("-") == [] and history.parse_sources(None) == []


def test_ingest_sources_are_recorded_once_each_and_cleared_by_a_seal(tmp_path):
    assert history.read_sources(str(tmp_path)) == []
    history.add_sources(str(tmp_path), [history.source_label("/import/a/"), history.source_label("/import/b", "raw")])
    assert history.add_sources(str(tmp_path), ["/import/a/"]) == ["/import/a/", "/import/b -> raw"]
    history.clear_sources(str(tmp_path))
    assert history.read_sources(str(tmp_path)) == []


def test_plan_tag_creates_moves_or_leaves_and_refuses_what_would_mislead():
    plan = history.plan_tag("imagenet", {}, ["v1", "v2"], "v2", "prod")
    assert (plan["action"], plan["previous"]) == ("create", None)
    assert history.plan_tag("imagenet", {"prod": "v1"}, ["v1", "v2"], "v2", "prod")["action"] == "move"
    assert history.plan_tag("imagenet", {"prod": "v2"}, ["v1", "v2"], "v2", "prod")["action"] == "unchanged"
    with pytest.raises(AlreadyExists, match="a version named 'old'"):
        history.plan_tag("imagenet", {}, ["old", "v2"], "v2", "old")
    with pytest.raises(NotFound, match="unknown version imagenet@v9"):
        history.plan_tag("imagenet", {}, ["v1"], "v9", "prod")
    many = {f"t{i}": "v1" for i in range(history.MAX_TAGS)}
    with pytest.raises(UserError, match="tags already"):
        history.plan_tag("imagenet", many, ["v1"], "v1", "prod")
    assert history.plan_tag("imagenet", many, ["v1"], "v1", "t3")["action"] == "unchanged"  # a move never counts


def test_untag_of_an_unknown_tag_names_the_tags():
    with pytest.raises(NotFound, match="its tags: prod -> v1"):
        history.plan_untag("imagenet", {"prod": "v1"}, "latest")


def test_only_the_volumes_own_tag_values_count():
    props = {"fabric:tag:prod": ("v2", "local"), "fabric:tag:old": ("v1", "inherited from tank/datasets"),
             "fabric:tag:gone": ("-", "local"), "fabric:managed": ("true", "local"),
             "fabric:tag:rx": ("v1", "received")}
    assert history.tags_of(props) == {"prod": "v2", "rx": "v1"}


# --- a storage node -------------------------------------------------------------------------------------------

def version_row(version: str, txg: int, **props) -> dict:
    return {"name": f"{VOLUME}@{version}", "createtxg": str(txg), "creation": str(1000 + txg), "used": "4096",
            "referenced": "1048576", "userrefs": "0", "written": str(txg * 1000), "fabric:managed": "true",
            "fabric:kind": "dataset-version", "fabric:version": version, "fabric:fs": "ext4",
            "fabric:created-at": f"2026-11-2{txg}T10:00:00Z", "fabric:created-by": "root@storage1",
            "fabric:files": "3", "fabric:bytes": "300", "fabric:manifest-sha256": "ab" * 32, **props}


@pytest.fixture
def node(monkeypatch, tmp_path):
    """fabricctl on a storage node with imagenet (v1, v2: v2's parent v1, with an author, a message and
    sources). run(*args) -> exit status; run.tags: the volume's tags; run.seen: what ran."""
    volumes = [{"name": VOLUME, "createtxg": "1", "fabric:managed": "true", "fabric:kind": "dataset",
                "fabric:fs": "ext4", "volsize": str(1 << 30)}]
    versions = [version_row("v1", 2, **{"fabric:author": "root@storage1", "fabric:note": "first"}),
                version_row("v2", 3, **{"fabric:author": "Ada <ada@example.org>", "fabric:parent": "v1",
                                        "fabric:note": "relabelled\nval 1%", "fabric:sources": '["/import/a/"]'})]
    tags: dict[str, str] = {}

    def listing(rows):
        return lambda argv: (0, snapshot_listing([r for r in rows if r["name"].startswith((argv[-1] + "/",
                                                                                            argv[-1] + "@"))]), "")

    def get_all(argv):
        props = {f"fabric:tag:{t}": {"value": v, "source": {"type": "LOCAL", "data": "-"}} for t, v in tags.items()}
        return 0, json.dumps({"datasets": {VOLUME: {"name": VOLUME, "properties": props}}}), ""

    def zfs_set(argv):
        prop, _eq, value = argv[2].partition("=")
        tags[prop.removeprefix("fabric:tag:")] = value
        return 0, "", ""

    def zfs_inherit(argv):
        tags.pop(argv[2].removeprefix("fabric:tag:"), None)
        return 0, "", ""

    answers = {("zfs", "list", "-j", "-p", "-t", "volume"): listing(volumes),
               ("zfs", "list", "-j", "-p", "-t", "snapshot"): listing(versions),
               ("zfs", "get", "-j", "-p", "all", VOLUME): get_all,
               ("zfs", "set"): zfs_set, ("zfs", "inherit"): zfs_inherit}
    runners = []

    def local_runner(dry_run):
        runner = AnsweringRunner(answers, dry_run=dry_run, default=None)
        runners.append(runner)
        return runner

    monkeypatch.setattr(context, "LocalRunner", local_runner)
    config = tmp_path / "config.yml"
    config.write_text(fabricctl_config())
    records = []

    def run(*args):
        return main.main(["--config", str(config), *args], sink=records.append)

    run.tags, run.records, run.versions = tags, records, versions
    run.seen = lambda: [a for r in runners for a in r.seen]
    return run


def changes(run) -> list:
    return [list(a) for a in run.seen() if tuple(a[:2]) in (("zfs", "set"), ("zfs", "inherit"))]


def test_tag_sets_one_property_and_moves_it_atomically(node, capsys):
    assert node("tag", "imagenet@v1", "prod") == 0
    assert changes(node) == [["zfs", "set", "fabric:tag:prod=v1", VOLUME]]
    assert "tagged imagenet@v1 prod" in capsys.readouterr().out
    assert node("tag", "imagenet@v2", "prod", "--json") == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["action"], out["previous"], out["version"]) == ("move", "v1", "v2")
    assert changes(node)[-1] == ["zfs", "set", "fabric:tag:prod=v2", VOLUME]  # one set: never two tags, never none
    assert node.tags == {"prod": "v2"}
    assert node("tag", "imagenet@prod", "latest") == 0  # a tag given as the version: the version it names
    assert node.tags == {"prod": "v2", "latest": "v2"}
    assert [r["FABRIC_COMMAND"] for r in node.records] == ["tag", "tag", "tag"]


def test_a_tag_dry_run_changes_nothing_and_plans_the_set(node, capsys):
    assert node("tag", "imagenet@v1", "prod", "--dry-run", "--json") == 0
    out = json.loads(capsys.readouterr().out)
    assert out["planned"] == [f"zfs set fabric:tag:prod=v1 {VOLUME}"] and out["dry_run"]
    assert changes(node) == [] and node.tags == {}


@pytest.mark.parametrize("argv, words", [
    (["tag", "imagenet@v1", "v3"], "named like a version"),
    (["tag", "imagenet@v9", "prod"], "unknown version imagenet@v9 (versions of imagenet: v1, v2)"),
    (["tag", "nope@v1", "prod"], "unknown dataset 'nope'"),
    (["untag", "imagenet", "prod"], "imagenet has no tag 'prod'"),
])
def test_bad_tags_are_refused_and_change_nothing(node, capsys, argv, words):
    assert node(*argv) == 1
    assert words in capsys.readouterr().err
    assert changes(node) == [] and node.tags == {}


def test_untag_inherits_the_property_away(node, capsys):
    node.tags["prod"] = "v1"
    assert node("untag", "imagenet", "prod") == 0
    assert changes(node) == [["zfs", "inherit", "fabric:tag:prod", VOLUME]]
    assert node.tags == {} and "removed tag imagenet@prod (it named v1)" in capsys.readouterr().out


def test_log_is_newest_first_with_parents_messages_sizes_and_tags(node, capsys):
    node.tags.update(prod="v1", latest="v2", gone="v0")
    assert node("log", "imagenet", "--json") == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert [v["version"] for v in out["versions"]] == ["v2", "v1"]
    v2 = out["versions"][0]
    assert (v2["parent"], v2["author"], v2["message"], v2["tags"], v2["written"], v2["sources"]) == (
        "v1", "Ada <ada@example.org>", "relabelled\nval 1%", ["latest"], 3000, ["/import/a/"])
    assert out["versions"][1]["parent"] is None and out["versions"][1]["tags"] == ["prod"]
    assert out["dangling_tags"] == {"gone": "v0"} and "tag imagenet@gone names v0" in captured.err
    assert node("log", "imagenet") == 0
    text = capsys.readouterr().out.splitlines()
    assert text[0].split()[:3] == ["VERSION", "TAGS", "PARENT"]
    assert text[1].split()[:3] == ["v2", "latest", "v1"] and text[1].endswith("relabelled")


def test_log_of_an_unknown_dataset_names_the_ones_there_are(node, capsys):
    assert node("log", "nope") == 1
    assert "unknown dataset 'nope' (fabricctl datasets on this node: imagenet)" in capsys.readouterr().err


def test_a_tag_resolves_where_a_version_is_named_and_a_stale_one_says_so(node, monkeypatch, tmp_path):
    from fabricctl.context import Context

    args = main.build_parser().parse_args(["--config", str(tmp_path / "config.yml"), "list"])
    ctx = Context(args)
    node.tags.update(prod="v1", gone="v0")
    row = datasets.require_version(ctx, "imagenet", "prod")
    assert (row["snapshot"], row["tag"], row["name"]) == ("v1", "prod", f"{VOLUME}@v1")
    assert datasets.export_of(ctx, row).mountpoint.endswith("/imagenet/v1")  # the version's path, never the tag's
    assert "tag" not in datasets.require_version(ctx, "imagenet", "v2")
    with pytest.raises(NotFound, match="tag imagenet@gone names version v0, which is not on this node"):
        datasets.require_version(ctx, "imagenet", "gone")
    with pytest.raises(NotFound, match=r"versions of imagenet: v1, v2; tags: gone -> v0, prod -> v1"):
        datasets.require_version(ctx, "imagenet", "nope")


def test_destroy_refuses_a_tagged_version_and_a_version_named_by_its_tag(node, capsys, monkeypatch):
    node.tags["prod"] = "v1"

    class Index:
        def published_to(self, export):
            return []

        def exists(self, export):
            return False

    monkeypatch.setattr(context.Context, "publisher", property(lambda self: type("P", (), {
        "index": lambda s: Index(), "settings": None})()), raising=False)
    assert node("dataset", "destroy", "imagenet@v1", "--yes") == 1
    assert "imagenet@v1 is tagged prod" in capsys.readouterr().err
    assert node("dataset", "destroy", "imagenet@prod", "--yes") == 1
    assert "is a tag (it names v1 now)" in capsys.readouterr().err


@pytest.mark.parametrize("argv, words", [
    (["dataset", "seal", "imagenet", "v3", "--author", "ada\x1b]0;x\x07"], "control characters"),
    (["dataset", "seal", "imagenet", "v3", "-m", "bell\x07"], "control characters"),
    (["dataset", "seal", "imagenet", "v2"], "exists already"),
    (["dataset", "seal", "imagenet", "prod"], "has a tag named 'prod'"),
])
def test_seal_refuses_bad_provenance_and_a_version_named_as_a_tag_before_anything(node, capsys, argv, words):
    node.tags["prod"] = "v1"
    assert node(*argv) == 1
    assert words in capsys.readouterr().err
    assert not [a for a in node.seen() if a[0] in ("mount", "umount", "mkdir")]  # nothing mounted or changed


def test_a_diff_of_two_datasets_is_refused_clearly(node, capsys):
    assert node("diff", "imagenet@v1", "cifar@v1") == 1
    err = capsys.readouterr().err
    assert "versions of two datasets (imagenet, cifar)" in err and "fabricctl diff imagenet@v1 imagenet@v1" in err
    assert node.seen() == []  # refused before anything was read
    assert diff_command.check_same_dataset("a@v1", "a@prod") == (("a", "v1"), ("a", "prod"))


def test_show_prints_the_provenance_of_a_version_asked_by_tag(node, capsys, monkeypatch):
    node.tags["prod"] = "v2"

    class Index:
        def published_to(self, export):
            return ["gpu1"]

        def sessions(self):
            return {"gpu1": ["iqn.x:ds.imagenet.v2"], "gpu2": ["iqn.x:ds.other.v1"]}

        def exists(self, export):
            return True

    class Settings:
        def target_iqn(self, export):
            return f"iqn.x:ds.{export.name}.{export.version}"

        def dataset(self, name, version, fstype):
            from fabric_core.services import publish
            return publish.dataset_export("tank/datasets", "/datasets", name, version, fstype)

    publisher = type("P", (), {"index": lambda s: Index(), "settings": Settings()})()
    monkeypatch.setattr(context.Context, "publisher", property(lambda self: publisher), raising=False)
    assert node("show", "imagenet@prod", "--json") == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["version"], out["parent"], out["author"], out["sources"], out["tags"]) == (
        "v2", "v1", "Ada <ada@example.org>", ["/import/a/"], ["prod"])
    assert (out["granted_to"], out["logged_in"], out["nodes"], out["written"]) == (["gpu1"], ["gpu1"],
                                                                                   ["this node"], 3000)
    assert out["mountpoint"] == "/datasets/imagenet/v2"
    assert node("show", "imagenet@v2") == 0
    text = capsys.readouterr().out
    assert "parent:     v1" in text and "    relabelled" in text and "granted to: gpu1" in text


@pytest.mark.parametrize("fstype, options", [("ext4", "ro,noload,nodev,nosuid,_netdev"),
                                             ("xfs", "ro,norecovery,nodev,nosuid,_netdev,nouuid")])
def test_a_version_is_mounted_read_only_through_a_loop_device_and_always_let_go(monkeypatch, tmp_path, fstype,
                                                                               options):
    from fabric_core.services import publish

    def mkdtemp(prefix, dir):  # noqa: A002 - tempfile's own keyword
        assert dir == "/run"
        made = tmp_path / (prefix + "x")
        made.mkdir()
        return str(made)

    monkeypatch.setattr(tempfile, "mkdtemp", mkdtemp)  # datasets imports it where it mounts
    runner = AnsweringRunner({("losetup", "--find"): (0, "/dev/loop7\n", "")})
    ctx = type("Ctx", (), {"local": runner})()
    monkeypatch.setattr(datasets, "readable_device", lambda ctx, export: export.device)
    export = publish.dataset_export("tank/datasets", "/datasets", "imagenet", "v1", fstype)
    with pytest.raises(RuntimeError), datasets.mounted_readonly(ctx, export) as where:
        assert where == str(tmp_path / "fabricctl-imagenet-v1-x")
        raise RuntimeError("the read failed")
    assert [list(a) for a in runner.seen] == [
        ["losetup", "--find", "--show", "--read-only", "/dev/zvol/tank/datasets/imagenet@v1"],
        ["mount", "-t", fstype, "-o", options, "/dev/loop7", where], ["umount", where],
        ["losetup", "-d", "/dev/loop7"]]
    assert not (tmp_path / "fabricctl-imagenet-v1-x").exists()


def test_diff_through_main_streams_the_changes_and_checks_each_manifest(node, capsys, monkeypatch, tmp_path):
    import contextlib

    from fabric_core.node import manifest
    from test_manifest import make_tree

    roots = {"v1": make_tree(tmp_path / "v1", {"a": b"1", "b": b"22", "gone": b"x"}),
             "v2": make_tree(tmp_path / "v2", {"a": b"1", "b": b"23", "new": b"444"})}
    for version, root in roots.items():
        summary = manifest.build(root, root / ".fabric" / "manifest.tsv", workers=1)
        next(r for r in node.versions if r["name"].endswith("@" + version))["fabric:manifest-sha256"] = \
            summary.manifest_sha256
    mounted = []

    @contextlib.contextmanager
    def mounted_readonly(ctx, export):
        mounted.append(export.mountpoint)
        yield str(roots[export.version])

    monkeypatch.setattr(datasets, "mounted_readonly", mounted_readonly)
    node.tags["prod"] = "v2"
    assert node("diff", "imagenet@v1", "imagenet@prod") == 0
    assert capsys.readouterr().out.splitlines() == [
        "M b  (content)", "- gone", "+ new",
        "imagenet@v1 -> imagenet@v2: 1 added (3 bytes), 1 removed (1 bytes), 1 changed (2 -> 2 bytes), 1 unchanged"]
    assert mounted == ["/datasets/imagenet/v1", "/datasets/imagenet/v2"]  # the versions', never the tag's
    assert node("diff", "imagenet@v1", "imagenet@v2", "--stat", "--json") == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["old"], out["new"], out["totals"]["changed"]) == ("v1", "v2", 1) and "changes" not in out
    node.versions[0]["fabric:manifest-sha256"] = "cd" * 32  # not what its seal recorded: a damaged version
    assert node("diff", "imagenet@v1", "imagenet@v2", "--stat") == 1
    assert "the manifest of imagenet@v1 is not the one its seal recorded" in capsys.readouterr().err


def test_verify_by_tag_mounts_through_the_one_helper_and_reports_the_version(node, capsys, monkeypatch, tmp_path):
    import contextlib

    from fabric_core.node import manifest
    from test_manifest import make_tree

    root = make_tree(tmp_path / "v2", {"a": b"1", "b": {"c": b"22"}})
    summary = manifest.build(root, root / ".fabric" / "manifest.tsv", workers=1)
    node.versions[1]["fabric:manifest-sha256"] = summary.manifest_sha256
    node.versions[1]["fabric:fs"] = "xfs"
    mounted = []

    @contextlib.contextmanager
    def mounted_readonly(ctx, export):  # the one read-only mount of a version (nouuid for XFS: its own test)
        mounted.append((export.version, export.fstype))
        yield str(root)

    monkeypatch.setattr(datasets, "mounted_readonly", mounted_readonly)
    node.tags["prod"] = "v2"
    assert node("verify", "imagenet@prod", "--json") == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["ref"], out["tag"], out["ok"]) == ("imagenet@v2", "prod", True)
    assert mounted == [("v2", "xfs")]
    assert node("verify", "imagenet@prod") == 0
    assert capsys.readouterr().out.splitlines()[-1] == "imagenet@v2 on the storage node: OK (tag prod)"
    (root / "a").write_bytes(b"2")
    assert node("verify", "imagenet@prod") == 1
    assert "imagenet@v2 on the storage node differs from its manifest" in capsys.readouterr().err
