"""fabric_core.node.manifest: build and verify a dataset manifest (trees built in tmp_path)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fabric_core.base.errors import NotFound, UserError
from fabric_core.node import manifest

REPO = Path(__file__).resolve().parents[2]
MODULE_UTILS = REPO / "plugins" / "module_utils"
SCRIPT = [sys.executable, "-m", "fabric_core.node.manifest"]  # the command line, as a module of fabric_core
SCRIPT_ENV = {**os.environ, "PYTHONPATH": str(MODULE_UTILS)}
EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


def make_tree(root: Path, spec: dict) -> Path:
    """spec: name -> bytes (file) | dict (directory) | ("link", target)."""
    root.mkdir(parents=True, exist_ok=True)
    for name, value in spec.items():
        path = os.path.join(os.fsencode(root), os.fsencode(name))
        if isinstance(value, dict):
            os.mkdir(path)
            make_tree(Path(os.fsdecode(path)), value)
        elif isinstance(value, tuple):
            os.symlink(os.fsencode(value[1]), path)
        else:
            with open(path, "wb") as out:
                out.write(value)
    return root


def lines(path: Path) -> list[bytes]:
    return Path(path).read_bytes().splitlines()


def paths_of(path: Path) -> list[bytes]:
    """Raw relative paths of a manifest, in file order."""
    return [manifest.unescape(line.split(b"\t")[2]) for line in lines(path)[1:-1]]


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return make_tree(tmp_path / "t", {
        "top.txt": b"hello\n",
        "data": {"a.bin": b"\x00" * 5000, "b.bin": b"b" * 3, "deep": {"x": b"x"}},
        "empty.dat": b"",
        "emptydir": {},
        "link": ("link", "data/a.bin"),
    })


def test_empty_tree(tmp_path):
    root = make_tree(tmp_path / "empty", {})
    out = tmp_path / "m.tsv"
    summary = manifest.build(root, out, workers=1)
    assert out.read_bytes() == manifest.HEADER + b"# end files=0 bytes=0 dirs=0 symlinks=0\n"
    assert (summary.files, summary.bytes, summary.dirs, summary.symlinks) == (0, 0, 0, 0)
    assert summary.manifest_sha256 == hashlib.sha256(out.read_bytes()).hexdigest()
    assert manifest.verify(root, out, workers=1).ok


def test_nested_tree_lines_and_summary(tree, tmp_path):
    out = tmp_path / "m.tsv"
    summary = manifest.build(tree, out, workers=1)
    assert lines(out) == [
        b"# fabric-manifest v1 sha256",
        b"D\t-\tdata",
        hashlib.sha256(b"\x00" * 5000).hexdigest().encode() + b"\t5000\tdata/a.bin",
        hashlib.sha256(b"bbb").hexdigest().encode() + b"\t3\tdata/b.bin",
        b"D\t-\tdata/deep",
        hashlib.sha256(b"x").hexdigest().encode() + b"\t1\tdata/deep/x",
        EMPTY_SHA256.encode() + b"\t0\tempty.dat",
        b"D\t-\temptydir",
        b"L\t-\tlink\tdata/a.bin",
        hashlib.sha256(b"hello\n").hexdigest().encode() + b"\t6\ttop.txt",
        b"# end files=5 bytes=5010 dirs=3 symlinks=1",
    ]
    assert (summary.files, summary.bytes, summary.dirs, summary.symlinks) == (5, 5010, 3, 1)
    assert summary.path == str(out)
    assert summary.manifest_sha256 == hashlib.sha256(out.read_bytes()).hexdigest()
    assert summary.seconds >= 0


def test_directory_and_file_with_common_prefix_sort_bytewise(tmp_path):
    # '-' (0x2d) < '.' (0x2e) < '/' (0x2f) < '0' (0x30): the dir "a" itself comes first, its contents
    # ("a/...") after "a.txt" and before "a0"
    root = make_tree(tmp_path / "t", {
        "a": {"x": b"1", "z": {"q": b"2"}}, "a.txt": b"3", "a0": b"4", "a-b": {"y": b"5"}, "A": b"6", "a b": b"7",
    })
    out = tmp_path / "m.tsv"
    manifest.build(root, out, workers=1)
    got = paths_of(out)
    assert got == [b"A", b"a", b"a b", b"a-b", b"a-b/y", b"a.txt", b"a/x", b"a/z", b"a/z/q", b"a0"]
    assert got == sorted(got)
    assert [rel for rel, _ in manifest.walk(root)] == got


WEIRD = [b"tab\there", b"new\nline", b"back\\slash", b"cr\rx", b"bad\xff\xfebytes", "caf\u00e9 \u65e5\u672c".encode(),
         b"\\x41 literal", b"trailing\\", b" space ", b"\xed\xa0\x80surrogate-bytes", b"-dash", b"#hash"]


@pytest.mark.parametrize("raw", [*WEIRD, bytes(range(1, 256)).replace(b"/", b"")])
def test_escape_round_trips_and_leaves_one_line_of_valid_utf8(raw):
    escaped = manifest.escape(raw)
    assert manifest.unescape(escaped) == raw
    escaped.decode("utf-8")  # raises if not valid UTF-8
    assert b"\t" not in escaped and b"\n" not in escaped and b"\r" not in escaped


def test_escape_rules_are_the_documented_ones():
    assert manifest.escape(b"a\tb\nc\rd\\e") == b"a\\tb\\nc\\rd\\\\e"
    assert manifest.escape(b"x\xffy") == b"x\\xffy"
    assert manifest.escape("é".encode()) == "é".encode()
    assert manifest.escape(b"plain/name.txt") == b"plain/name.txt"
    with pytest.raises(ValueError):
        manifest.unescape(b"bad\\q")
    with pytest.raises(ValueError):
        manifest.unescape(b"short\\x4")


def test_weird_names_build_and_verify(tmp_path):
    spec = {os.fsdecode(name): name * 2 for name in WEIRD}
    spec["dir\twith\ttabs"] = {"in\nside": b"z"}
    root = make_tree(tmp_path / "t", spec)
    out = tmp_path / "m.tsv"
    summary = manifest.build(root, out, workers=1)
    assert summary.files == len(WEIRD) + 1
    text = out.read_bytes().decode("utf-8")  # the manifest is valid UTF-8 even with non-UTF-8 names
    assert all(len(line.split("\t")) == 3 for line in text.splitlines()[1:-1])
    got = paths_of(out)
    assert set(got) == {*WEIRD, b"dir\twith\ttabs", b"dir\twith\ttabs/in\nside"}
    assert got == sorted(got)
    assert manifest.verify(root, out, workers=1).ok


def test_symlinks_are_recorded_not_followed(tmp_path):
    root = make_tree(tmp_path / "t", {
        "d": {"f": b"data"}, "to_dir": ("link", "d"), "dangling": ("link", "nowhere/at all"),
        "outside": ("link", "/etc/passwd"),
    })
    out = tmp_path / "m.tsv"
    summary = manifest.build(root, out, workers=1)
    assert (summary.files, summary.symlinks) == (1, 3)
    assert b"L\t-\tdangling\tnowhere/at all" in lines(out)
    assert b"L\t-\tto_dir\td" in lines(out)
    assert b"L\t-\toutside\t/etc/passwd" in lines(out)
    assert not any(b"to_dir/" in line for line in lines(out))  # not followed into d


def test_empty_files_have_the_digest_of_nothing(tmp_path):
    root = make_tree(tmp_path / "t", {"e1": b"", "sub": {"e2": b""}})
    out = tmp_path / "m.tsv"
    summary = manifest.build(root, out, workers=1)
    assert (summary.files, summary.bytes) == (2, 0)
    assert lines(out)[1] == EMPTY_SHA256.encode() + b"\t0\te1"


def test_a_large_file_is_hashed_in_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(manifest.tree, "CHUNK", 1024)
    data = os.urandom(10_000)
    root = make_tree(tmp_path / "t", {"big": data, "exact": b"y" * 1024, "small": b"s" * 1023})
    out = tmp_path / "m.tsv"
    manifest.build(root, out, workers=1)
    assert lines(out)[1] == hashlib.sha256(data).hexdigest().encode() + b"\t10000\tbig"
    assert lines(out)[2] == hashlib.sha256(b"y" * 1024).hexdigest().encode() + b"\t1024\texact"
    assert manifest.verify(root, out, workers=1).ok


def test_a_fifo_is_refused_by_name_and_nothing_is_left(tmp_path):
    root = make_tree(tmp_path / "t", {"ok": b"1", "sub": {}})
    os.mkfifo(root / "sub" / "pipe")
    out = tmp_path / "out" / "m.tsv"
    with pytest.raises(UserError) as err:
        manifest.build(root, out, workers=1)
    assert "sub/pipe is a fifo" in str(err.value)
    assert err.value.fix
    assert not out.exists()
    assert os.listdir(out.parent) == []  # no temporary file left behind


def test_a_socket_is_refused(tmp_path):
    import socket

    root = make_tree(tmp_path / "t", {})
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(root / "s"))
        with pytest.raises(UserError, match="s is a socket"):
            manifest.build(root, tmp_path / "m.tsv", workers=1)
    finally:
        sock.close()


def many_files(root: Path, dirs: int = 6, per_dir: int = 7) -> Path:
    return make_tree(root, {f"d{d}": {f"f{f}": f"{d}-{f}".encode() * (f + 1) for f in range(per_dir)}
                            for d in range(dirs)} | {"top": b"t"})


def test_builds_are_deterministic_across_runs_and_worker_counts(tmp_path, monkeypatch):
    monkeypatch.setattr(manifest.tree, "BATCH", 2)  # many batches: the worker pool and its window are used
    root = many_files(tmp_path / "t")
    outputs = []
    for index, workers in enumerate((1, 1, 4, 2)):
        out = tmp_path / f"m{index}.tsv"
        summary = manifest.build(root, out, workers=workers)
        outputs.append((out.read_bytes(), summary.manifest_sha256))
    assert len(set(outputs)) == 1
    assert summary.files == 43


def test_the_pool_keeps_order_and_a_bounded_window(tmp_path, monkeypatch):
    import concurrent.futures

    pools = []

    class SpyPool(concurrent.futures.ProcessPoolExecutor):
        def __init__(self, *args, **kwargs):
            pools.append(kwargs)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", SpyPool)
    monkeypatch.setattr(manifest.tree, "BATCH", 3)
    root = many_files(tmp_path / "t")
    submitted = []
    records = list(manifest.walk(root))

    def counting():
        for record in records:
            submitted.append(record)
            yield record

    in_flight = []
    out = []
    for record, result in manifest.tree.pipeline(os.fsencode(root), counting(), lambda r: (r[0], -1)
                                             if r[1] == manifest.FILE else None, 2):
        in_flight.append(len(submitted) - len(out))
        out.append((record, result))
    assert [record for record, _ in out] == records
    assert len(pools) == 1 and pools[0]["max_workers"] == 2  # hashed by worker processes
    assert all(result[0] == manifest.tree.HASH_OK for record, result in out if record[1] == manifest.FILE)
    # at most workers * _WINDOW_PER_WORKER + 1 batches (of <= 4 * _BATCH records) read ahead
    assert max(in_flight) <= (2 * manifest.tree.WINDOW_PER_WORKER + 1) * 4 * 3


def test_the_walk_is_streamed(tmp_path, monkeypatch):
    root = make_tree(tmp_path / "t", {f"d{d}": {"f": b"1"} for d in range(5)})
    listed = []
    real = manifest.tree._listing
    monkeypatch.setattr(manifest.tree, "_listing", lambda r, rel, *more: listed.append(rel) or real(r, rel, *more))
    walker = manifest.walk(root)
    assert next(walker) == (b"d0", manifest.DIRECTORY)
    assert listed == [b""]  # only the root has been listed so far
    assert next(walker) == (b"d0/f", manifest.FILE)
    assert listed == [b"", b"d0"]


def test_the_fabric_directory_is_excluded(tmp_path):
    root = make_tree(tmp_path / "t", {"f": b"1", ".fabric": {"old": b"x"}, "sub": {".fabric": {"kept": b"k"}}})
    out = root / ".fabric" / "manifest.tsv"
    manifest.build(root, out, workers=1)
    assert paths_of(out) == [b"f", b"sub", b"sub/.fabric", b"sub/.fabric/kept"]
    (root / ".fabric" / "new").write_bytes(b"anything")
    (root / ".fabric" / "old").unlink()
    assert manifest.verify(root, out, workers=1).ok


def test_default_path_and_a_manifest_inside_the_tree_elsewhere_is_refused(tmp_path):
    root = make_tree(tmp_path / "t", {"f": b"1"})
    assert manifest.default_path(root) == str(root / ".fabric" / "manifest.tsv")
    with pytest.raises(UserError, match="inside the tree"):
        manifest.build(root, root / "manifest.tsv", workers=1)
    assert not (root / "manifest.tsv").exists()
    summary = manifest.build(root, manifest.default_path(root), workers=1)
    assert summary.files == 1


def test_bad_arguments(tmp_path):
    with pytest.raises(NotFound):
        manifest.build(tmp_path / "nope", tmp_path / "m.tsv")
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(UserError, match="not a directory"):
        manifest.build(tmp_path / "file", tmp_path / "m.tsv")
    with pytest.raises(UserError, match="workers"):
        manifest.build(tmp_path, tmp_path / "m.tsv", workers=0)
    with pytest.raises(NotFound, match="no manifest"):
        manifest.verify(tmp_path, tmp_path / "missing.tsv")


def test_verify_reports_every_kind_of_difference(tmp_path, monkeypatch):
    monkeypatch.setattr(manifest.tree, "BATCH", 2)
    root = make_tree(tmp_path / "t", {
        "same": b"same", "gone": b"g", "gone_dir": {"inside": b"i"}, "grow": b"12345", "flip": b"abc",
        "was_file": b"f", "was_dir": {"c": b"c"}, "link": ("link", "same"), "tab\tname": b"t", "untouched": {},
    })
    out = tmp_path / "m.tsv"
    manifest.build(root, out, workers=1)
    (root / "gone").unlink()
    (root / "gone_dir" / "inside").unlink()
    (root / "gone_dir").rmdir()
    (root / "grow").write_bytes(b"123456")
    (root / "flip").write_bytes(b"abd")
    (root / "was_file").unlink()
    (root / "was_file").mkdir()
    (root / "was_file" / "new").write_bytes(b"n")
    (root / "was_dir" / "c").unlink()
    (root / "was_dir").rmdir()
    (root / "was_dir").write_bytes(b"now a file")
    (root / "link").unlink()
    (root / "link").symlink_to("elsewhere")
    (root / "tab\tname").write_bytes(b"T")
    (root / "added").write_bytes(b"+")
    os.mkfifo(root / "pipe")

    for workers in (1, 2):
        report = manifest.verify(root, out, workers=workers)
        assert not report.ok
        as_tuples = {kind: [(d.path, d.expected, d.actual) for d in getattr(report, kind)] for kind in manifest.KINDS}
        assert as_tuples == {
            "missing": [("gone", "file", None), ("gone_dir", "directory", None), ("gone_dir/inside", "file", None),
                        ("was_dir/c", "file", None)],
            "extra": [("added", None, "file"), ("pipe", None, "fifo"), ("was_file/new", None, "file")],
            "type_changed": [("was_dir", "directory", "file"), ("was_file", "file", "directory")],
            "size_changed": [("grow", 5, 6)],
            "digest_changed": [("flip", hashlib.sha256(b"abc").hexdigest(), hashlib.sha256(b"abd").hexdigest()),
                               ("tab\\tname", hashlib.sha256(b"t").hexdigest(), hashlib.sha256(b"T").hexdigest())],
            "target_changed": [("link", "same", "elsewhere")],
        }
        assert report.count() == 13
        assert (report.files, report.bytes) == (8, 17)  # 4+1+1+5+3+1+1+1
        data = json.loads(json.dumps(report.to_dict()))
        assert data["ok"] is False and data["differences"] == 13
        assert data["size_changed"] == [{"path": "grow", "expected": 5, "actual": 6}]


def test_verify_of_an_unchanged_tree_is_ok_and_reports_progress(tree, tmp_path):
    out = tmp_path / "m.tsv"
    manifest.build(tree, out, workers=1)
    calls = []
    report = manifest.verify(tree, out, workers=1, progress=lambda files, size: calls.append((files, size)))
    assert report.ok and report.count() == 0
    assert report.to_dict()["ok"] is True
    assert (report.files, report.bytes) == (5, 5010)
    assert calls[-1] == (5, 5010)
    assert len(calls) <= 2  # rate-limited: a fast run reports at most once before the final call


def test_build_progress_is_rate_limited_and_ends_with_the_totals(tmp_path, monkeypatch):
    root = many_files(tmp_path / "t")
    calls = []
    clock = iter(range(0, 10_000))
    monkeypatch.setattr(manifest.tree.time, "monotonic", lambda: next(clock) * 0.04)  # 25 ticks per second
    summary = manifest.build(root, tmp_path / "m.tsv", workers=1, progress=lambda f, b: calls.append((f, b)))
    assert calls[-1] == (summary.files, summary.bytes)
    assert 2 <= len(calls) < summary.files / 2  # every ~3rd file at 0.04 s per clock reading, not every file
    assert [c[0] for c in calls] == sorted(c[0] for c in calls)


def test_read_summary_streams_and_checks(tree, tmp_path):
    out = tmp_path / "m.tsv"
    built = manifest.build(tree, out, workers=1)
    summary = manifest.read_summary(out)
    assert (summary.files, summary.bytes, summary.dirs, summary.symlinks, summary.manifest_sha256) == (
        built.files, built.bytes, built.dirs, built.symlinks, built.manifest_sha256)


@pytest.mark.parametrize("damage, message", [
    (lambda b: b[:-20], "cut short"),
    (lambda b: b.rsplit(b"\n", 2)[0] + b"\n", "truncated"),
    (lambda b: b.replace(b"# fabric-manifest v1", b"# fabric-manifest v9"), "header"),
    (lambda b: b.replace(b"\t5000\t", b"\t5001\t"), "trailer"),
    (lambda b: b.replace(b"data/deep/x", b"data/b.bin"), "out of order"),
    (lambda b: b.replace(b"data/deep/x", b"data/deep/../x"), "clean relative path"),
    (lambda b: b.replace(b"top.txt", b"top\\q.txt"), "escape"),
    (lambda b: b.replace(b"D\t-\tdata\n", b"X\t-\tdata\n"), "not a file"),
    (lambda b: b + b"more\n", "after the trailer"),
    (lambda b: b"", "empty"),
])
def test_a_damaged_manifest_is_refused(tree, tmp_path, damage, message):
    out = tmp_path / "m.tsv"
    manifest.build(tree, out, workers=1)
    out.write_bytes(damage(out.read_bytes()))
    with pytest.raises(UserError, match=message):
        manifest.read_summary(out)
    with pytest.raises(UserError, match=message):
        manifest.verify(tree, out, workers=1)


def run_script(*args: str, cwd: Path, app: Path | None = None) -> subprocess.CompletedProcess:
    """The command line from an unrelated directory with a clean environment: fabric_core's module (on
    PYTHONPATH alone), or with ``app`` the one file of ``manifest.zipapp`` run by an isolated interpreter."""
    argv = [sys.executable, "-I", str(app)] if app else SCRIPT
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **({} if app else {"PYTHONPATH": str(MODULE_UTILS)})}
    return subprocess.run([*argv, *args], cwd=cwd, capture_output=True, text=True, env=env, timeout=120)


def test_standalone_cli_build_and_verify(tree, tmp_path):
    ok = run_script("build", str(tree), "--json", "--workers", "2", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    summary = json.loads(ok.stdout)
    assert (summary["files"], summary["bytes"]) == (5, 5010)
    default = tree / ".fabric" / "manifest.tsv"
    assert summary["manifest_sha256"] == hashlib.sha256(default.read_bytes()).hexdigest()

    good = run_script("verify", str(tree), str(default), cwd=tmp_path)
    assert good.returncode == 0, good.stderr
    assert good.stdout.startswith("OK:")

    (tree / "top.txt").write_bytes(b"changed")
    (tree / "extra").write_bytes(b"")
    bad = run_script("verify", str(tree), "--json", cwd=tmp_path)
    assert bad.returncode == 1
    report = json.loads(bad.stdout)
    assert report["ok"] is False
    assert report["size_changed"] == [{"path": "top.txt", "expected": 6, "actual": 7}]
    assert report["extra"] == [{"path": "extra", "expected": None, "actual": "file"}]
    text = run_script("verify", str(tree), cwd=tmp_path)
    assert text.returncode == 1
    assert "size_changed\ttop.txt\texpected=6\tactual=7" in text.stdout
    assert "2 differences" in text.stdout


def test_standalone_cli_bad_input_exits_1_with_a_message(tmp_path):
    missing = run_script("verify", str(tmp_path / "nope"), str(tmp_path / "m.tsv"), cwd=tmp_path)
    assert missing.returncode == 1
    assert "does not exist" in missing.stderr and "Traceback" not in missing.stderr
    (tmp_path / "t").mkdir()
    os.mkfifo(tmp_path / "t" / "fifo")
    special = run_script("build", str(tmp_path / "t"), str(tmp_path / "m.tsv"), cwd=tmp_path)
    assert special.returncode == 1
    assert "fifo is a fifo" in special.stderr and "fix:" in special.stderr
    usage = run_script("frobnicate", cwd=tmp_path)
    assert usage.returncode != 0


def test_the_one_file_imports_nothing_outside_the_stdlib_and_its_package():
    import ast

    here = Path(manifest.__file__).parent
    for name in manifest.cli.ZIPAPP_MODULES:
        tree = ast.parse((here / f"{name}.py").read_text())
        absolute = {a.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names}
        absolute |= {node.module.split(".")[0] for node in ast.walk(tree)
                     if isinstance(node, ast.ImportFrom) and not node.level}
        assert absolute <= set(sys.stdlib_module_names) | {"__future__"}, name
        outside = [node for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level > 1]
        guarded = [node for t in ast.walk(tree) if isinstance(t, ast.Try)
                   and any(isinstance(h.type, ast.Name) and h.type.id == "ImportError" for h in t.handlers)
                   for node in t.body]
        assert all(node in guarded for node in outside), name  # fabric_core's own, only where it may be missing
    assert sorted(p.stem for p in here.glob("*.py") if p.stem != "__main__") == sorted(manifest.cli.ZIPAPP_MODULES)


def test_the_one_file_verifies_alone_with_workers_and_refuses_to_build(tmp_path):
    app = tmp_path / "elsewhere" / "manifest.pyz"
    app.parent.mkdir()
    manifest.zipapp(app)
    root = make_tree(tmp_path / "t", {f"d{d}": {f"f{f}": bytes([d, f]) * f for f in range(30)} for d in range(12)})
    manifest.build(root, manifest.default_path(root), workers=1)
    ok = run_script("verify", str(root), "--json", "--workers", "2", cwd=app.parent, app=app)  # 360 files: 2 batches
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["files"] == 360
    (root / "d3" / "f3").write_bytes(b"x")
    bad = run_script("verify", str(root), cwd=app.parent, app=app)
    assert bad.returncode == 1 and "digest_changed\td3/f3" in bad.stdout or "size_changed\td3/f3" in bad.stdout
    refused = run_script("build", str(root), str(tmp_path / "m.tsv"), cwd=app.parent, app=app)
    assert refused.returncode == 1 and "needs fabric_core" in refused.stderr and "Traceback" not in refused.stderr
    assert not (tmp_path / "m.tsv").exists()


def test_errors_are_fabric_core_errors_when_imported_as_the_package(tmp_path):
    from fabric_core.base import errors

    assert manifest.UserError is errors.UserError
    with pytest.raises(errors.FabricError) as err:
        manifest.verify(tmp_path / "nope", tmp_path / "m.tsv")
    assert err.value.exit_code == errors.EXIT_USER
