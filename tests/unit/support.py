"""Shared unit-test helpers: a scripted command runner, an in-process Ansible module runner, and the
OpenZFS 2.3 JSON the lab did not record, derived from what it did.

Module tests are data: each case lists the module input, the exact commands the module must run
(with the recorded rc/stdout/stderr they get back) and the expected result. ``run_module`` runs
the module in-process with ``AnsibleModule.run_command`` replaced by the script, and checks
that every scripted command was consumed, in order.

Recorded outputs are used as they are wherever the lab recorded the situation (tests/unit/data/zfs23/ and
zfs23b/ for OpenZFS 2.3; `zfs get`/`zfs list` from zfs23b's *_s.json, read without --json-int as the core
reads them). Where it did not, ``derive_json`` makes the JSON from a 2.3 recording by a minimal, stated
edit (names replaced, named properties set): the format is always one zpool/zfs printed.
"""

from __future__ import annotations

import copy
import importlib.machinery
import importlib.util
import json
import sys
import threading
from pathlib import Path
from unittest import mock

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parent / "data"

sys.path.insert(0, str(REPO / "plugins" / "module_utils"))  # `import fabric_core`
# `ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core`, as the modules import it: the committed
# symlink collections/ansible_collections/gpufabric/storage -> the repository root (ansible.cfg's collections_path)
sys.path.insert(0, str(REPO / "collections"))

from ansible.module_utils import basic  # noqa: E402
from ansible.module_utils.testing import patch_module_args  # noqa: E402
from fabric_core.base.runner import Runner  # noqa: E402


def data(*parts: str) -> str:
    """The text of a recorded output file under tests/unit/data/."""
    return DATA.joinpath(*parts).read_text()


def _replace(value, rename: dict):
    if isinstance(value, dict):
        return {_replace(k, rename): _replace(v, rename) for k, v in value.items()}
    if isinstance(value, list):
        return [_replace(v, rename) for v in value]
    if isinstance(value, str):
        for old, new in rename.items():
            value = value.replace(old, new)
    return value


def derive_json(source: str, *, rename: dict | None = None, properties: dict | None = None,
                remove: list | None = None, edit=None) -> str:
    """A recorded OpenZFS 2.3 JSON output under tests/unit/data/ (``source``), minimally edited for a
    situation the lab did not record. Each caller says what it edits and why.

    rename: {old: new} replaced in every key and string value (pool, dataset and device names).
    properties: {object name: {property: [value, source type, source data]}}: set in the object's
    "properties" (of `zpool get`/`zfs get`/`zfs list` -j) in the shape the recording uses, e.g.
    {"z23_rec/secret": {"encryption": ["aes-256-gcm", "NONE", "-"]}}.
    remove: key paths (lists of keys, after rename) deleted from the document, e.g. a device the
    situation's pool does not have: [["pools", "tank", "l2cache"]]. A path that is not there fails.
    edit: a function changing the parsed document in place (after rename, properties and remove).
    """
    doc = _replace(json.loads(data(source)), dict(rename or {}))
    for name, props in (properties or {}).items():
        obj = next(o for key in ("datasets", "pools") for o in (doc.get(key) or {}).values() if o["name"] == name)
        for prop, (value, kind, where) in props.items():
            obj["properties"][prop] = {"value": value, "source": {"type": kind, "data": where}}
    for path in remove or []:
        node = doc
        for key in path[:-1]:
            node = node[key]
        del node[path[-1]]
    if edit is not None:
        edit(doc)
    return json.dumps(doc)


def derive_text(source: str, *, rename: dict | None = None, drop_lines: list | None = None) -> str:
    """A recorded text output under tests/unit/data/ (``source``: stdout or stderr of zpool/zfs), minimally
    edited for a situation the lab did not record: ``rename`` {old: new} replaced everywhere (pool and
    device names), then each line of ``drop_lines`` (exactly as it is in the file after rename, without
    its newline) removed once: a part of the output the situation does not have. A line that is not
    there fails."""
    text = data(source)
    for old, new in (rename or {}).items():
        text = text.replace(old, new)
    lines = text.splitlines(keepends=True)
    for drop in drop_lines or []:
        index = next(i for i, line in enumerate(lines) if line.rstrip("\n") == drop)
        del lines[index]
    return "".join(lines)


def _derived(spec: dict) -> str:
    if spec["from"].endswith(".json"):
        return derive_json(spec["from"], rename=spec.get("rename"), properties=spec.get("properties"),
                           remove=spec.get("remove"))
    return derive_text(spec["from"], rename=spec.get("rename"), drop_lines=spec.get("drop_lines"))


def script_of(case: dict) -> list[dict]:
    """A YAML case's `commands` as a ScriptedRunner script; `stdout_file`/`stderr_file` name
    recorded outputs under tests/unit/data/; `stdout_derived`/`stderr_derived` are the arguments of
    derive_json ({from: FILE.json, rename: {...}, properties: {...}, remove: [...]}) or derive_text
    ({from: FILE, rename: {...}, drop_lines: [...]}) for an output the lab did not record.
    A case with `state` (a directory of tests/unit/data/disks/) starts with that state's recorded disk
    discovery (disk_state_script), as a module that discovers the disks itself runs it."""
    def output(step: dict, stream: str) -> str:
        if f"{stream}_derived" in step:
            return _derived(step[f"{stream}_derived"])
        return data(step[f"{stream}_file"]) if f"{stream}_file" in step else step.get(stream, "")

    discovery = disk_state_script(case["state"]) if case.get("state") else []
    return discovery + [{"command": [str(a) for a in step["command"]], "rc": step.get("rc", 0),
                         "stdout": output(step, "stdout"), "stderr": output(step, "stderr")}
                        for step in case.get("commands", [])]


def snapshot_listing(rows: list[dict]) -> str:
    """`zfs list -j -p -t snapshot -o COLUMNS ...` of snapshots the lab did not record (fabricctl's versions and
    checkpoints with all their properties), derived from the one it did (zfs23b/list_snaps_s.json:
    z23_rec/vol1@v1, read without --json-int as the core reads it). Each row ({"name", "createtxg", column:
    text value or "-"}) becomes that recorded snapshot object with name, dataset, snapshot_name and createtxg
    replaced and "properties" holding the row's columns: values as strings, as `-j -p` prints every value
    (digits included, unset ones "-"), sources as recorded (user properties LOCAL, the others NONE)."""
    recorded = json.loads(data("zfs23b", "list_snaps_s.json"))
    template = next(iter(recorded["datasets"].values()))
    listed = {}
    for row in rows:
        obj = copy.deepcopy(template)
        dataset, _, snap = row["name"].partition("@")
        obj.update(name=row["name"], dataset=dataset, snapshot_name=snap, createtxg=str(row["createtxg"]))
        obj["properties"] = {}
        for column, value in row.items():
            if column in ("name", "createtxg"):
                continue
            kind = "LOCAL" if ":" in column and value != "-" else "NONE"
            obj["properties"][column] = {"value": str(value), "source": {"type": kind, "data": "-"}}
        listed[row["name"]] = obj
    recorded["datasets"] = listed
    return json.dumps(recorded)


# --- disk discovery states ----------------------------------------------------------------------
#
# tests/unit/data/disks/STATE/commands.json lists what disks.discover() ran on storage1, with its
# output. The states recorded on Debian 12 with ZFS 2.1 (all but tank-zfs23) ran the text
# `zpool status -P`, which discover() no longer reads: their zpool step is marked "derived" and its
# 2.3 JSON is made here from 2.3 recordings of the same pool topology, with only the pool names and
# device paths replaced by the ones the 2.1 text listed (see tests/unit/data/disks/README.md).
# The 2.3 recordings are of file-backed pools: the replaced device paths keep `"vdev_type": "file"`
# (discovery reads only the paths).

BY_ID = "/dev/disk/by-id/"


def _single(pool: str, device: str) -> dict:
    # a pool of one device: z23_one (`zpool create z23_one /var/tmp/z23_s1.img`), renamed
    return {"from": "zfs23/status_single.json", "rename": {"z23_one": pool, "/var/tmp/z23_s1.img": device}}


# hb_rec, another helper's pool in those states: the topology of zfs23's z23_rec (record.sh built it
# "as the 2.1 recordings did with disks"), on these devices
_HB_REC = {"z23_rec": "hb_rec", "/var/tmp/z23_r1.img": BY_ID + "ata-LAB_HDD_8TB_7200_HDD1002-part1",
           "/var/tmp/z23_r2.img": BY_ID + "ata-LAB_HDD_8TB_7200_HDD1003-part1",
           "/var/tmp/z23_r3.img": BY_ID + "ata-LAB_HDD_8TB_7200_HDD1004-part1",
           "/var/tmp/z23_nvme1.img": BY_ID + "nvme-QEMU_NVMe_Ctrl_NVME1000-part1",
           "/var/tmp/z23_nvme2.img": "/var/tmp/hb_nvme.img",
           "/var/tmp/z23_log1.img": BY_ID + "ata-LAB_SSD_960GB_SSD1000-part1",
           "/var/tmp/z23_log2.img": BY_ID + "ata-LAB_SSD_960GB_SSD1001-part1",
           "/var/tmp/z23_cache.img": "/var/tmp/hb_cache.img", "/var/tmp/z23_spare.img": "/var/tmp/hb_spare.img"}
_HB_ONLINE = {"from": "zfs23/status_full.json", "rename": _HB_REC}
# inuse-fs: HDD1004 offline and the spare standing in for it (status_spare_inuse: r3 offline, spare in use)
_HB_SPARED = {"from": "zfs23/status_spare_inuse.json", "rename": _HB_REC}
_HC, _HD = _single("hc_pool", "/var/tmp/hc_pool.img"), _single("hd_pool", "/var/tmp/hd_pool.img")
# the pools each 2.1 state's `zpool status -P` listed, in its order
DERIVED_POOLS = {
    "clean": [_HC, _HD],
    "shared": [_HB_ONLINE, _HC, _HD],
    "inuse-fs": [_HB_SPARED, _HC, _HD],
    # ha_test: `zpool create -f ha_test /dev/disk/by-id/ata-LAB_HDD_8TB_7200_HDD1005` (ZFS uses its part1)
    "inuse-zpool": [_single("ha_test", BY_ID + "ata-LAB_HDD_8TB_7200_HDD1005-part1"), _HB_ONLINE, _HC, _HD],
    "exported-pool": [_HC, _HD],
}


def derived_zpool_status(state: str) -> str:
    """`zpool status -j --json-int -P` of a 2.1 disk state: its pools, each derived as DERIVED_POOLS says,
    in one document as zpool prints several pools (tests/unit/data/zfs23/status_all.json)."""
    docs = [json.loads(derive_json(spec["from"], rename=spec["rename"])) for spec in DERIVED_POOLS[state]]
    merged = copy.deepcopy(docs[0])
    merged["pools"] = {name: pool for doc in docs for name, pool in doc["pools"].items()}
    return json.dumps(merged)


def disk_state_script(state: str) -> list[dict]:
    """The recorded commands of a disk discovery state as a ScriptedRunner script."""
    steps = json.loads((DATA / "disks" / state / "commands.json").read_text())
    return [{"command": s["command"], "rc": s["rc"], "stderr": s["stderr"],
             "stdout": derived_zpool_status(state) if s.get("derived") else
             (DATA / "disks" / state / s["stdout_file"]).read_text()} for s in steps]


class ScriptedRunner(Runner):
    """A Runner that expects exactly the scripted commands, in order, and returns their output.

    script: list of {"command": [argv...], "rc": 0, "stdout": "", "stderr": ""}.
    """

    def __init__(self, script: list[dict], dry_run: bool = False):
        super().__init__(dry_run=dry_run)
        self.script = list(script)
        self.calls: list[list[str]] = []
        self.stdin: list = []  # what each command got on stdin (None: nothing), in the order of calls

    def _run(self, argv, data):
        self.calls.append(list(argv))
        self.stdin.append(data)
        assert self.script, f"unexpected command (script exhausted): {list(argv)}"
        step = self.script.pop(0)
        assert list(argv) == [str(a) for a in step["command"]], \
            f"command mismatch:\n  expected {step['command']}\n  got      {list(argv)}"
        if "data" in step:
            assert data == step["data"], f"stdin of {list(argv)[:3]}: expected {step['data']!r}, got {data!r}"
        return step.get("rc", 0), step.get("stdout", ""), step.get("stderr", "")

    def assert_done(self) -> None:
        assert not self.script, f"commands expected but not run: {[s['command'] for s in self.script]}"


class AnsweringRunner(Runner):
    """A Runner answering commands from a table of argv prefixes (the first that matches; a callable answer
    gets the argv), recording every command in ``seen``. A command no prefix matches gets ``default``
    ((rc, stdout, stderr)), or fails the test when there is none."""

    def __init__(self, answers: dict, dry_run: bool = False, default: tuple | None = (0, "", "")):
        super().__init__(dry_run=dry_run)
        self.answers = answers
        self.default = default
        self.seen: list = []

    def _run(self, argv, data):
        self.seen.append(argv)
        for prefix, answer in self.answers.items():
            if tuple(argv[: len(prefix)]) == prefix:
                return answer(argv) if callable(answer) else answer
        assert self.default is not None, f"unexpected command {list(argv)}"
        return self.default


class _Exit(Exception):
    def __init__(self, result: dict):
        self.result = result


def load_file(path: Path, name: str, *, register: bool = False):
    """Import the Python file at ``path`` as the module ``name`` (any file name: a script without `.py` too).
    ``register``: put it in sys.modules first, where dataclasses and pickling look a module up by its name."""
    loader = importlib.machinery.SourceFileLoader(name, str(path))
    module = importlib.util.module_from_spec(importlib.util.spec_from_file_location(name, path, loader=loader))
    if register:
        sys.modules[name] = module
    loader.exec_module(module)
    return module


def load_module(name: str):
    """Import plugins/modules/<name>.py as a Python module."""
    return load_file(REPO / "plugins" / "modules" / f"{name}.py", f"_fabric_test_{name}")


def load_bench(name: str):
    """Import bench/<name>.py as the module ``name`` (bench/ on sys.path for its own imports; registered in
    sys.modules, where dataclasses look their module up)."""
    sys.path.insert(0, str(REPO / "bench"))
    return load_file(REPO / "bench" / f"{name}.py", name, register=True)


def run_module(name: str, args: dict, script: list[dict] | None = None, *, check_mode: bool = False,
               diff: bool = False, extra_patches: list | None = None) -> dict:
    """Run plugins/modules/<name>.py in-process; return its result dict with `failed` set on fail_json.

    Every command goes through the script (see ScriptedRunner); leftover scripted commands fail.
    Messages given to ``module.warn`` come back as ``warnings``, as Ansible reports them.
    """
    module = load_module(name)
    runner = ScriptedRunner(script or [])
    warnings: list[str] = []
    full_args = dict(args, _ansible_check_mode=check_mode, _ansible_diff=diff)

    def exit_json(self, **kwargs):
        kwargs.setdefault("changed", False)
        raise _Exit(kwargs)

    def fail_json(self, msg, **kwargs):
        kwargs["failed"] = True
        kwargs["msg"] = msg
        raise _Exit(kwargs)

    def run_command(self, args, **kwargs):
        return runner._run(args, kwargs.get("data"))

    patches = [
        mock.patch.object(basic.AnsibleModule, "exit_json", exit_json),
        mock.patch.object(basic.AnsibleModule, "fail_json", fail_json),
        mock.patch.object(basic.AnsibleModule, "run_command", run_command),
        mock.patch.object(basic.AnsibleModule, "get_bin_path", lambda self, name, *a, **k: f"/usr/sbin/{name}"),
        mock.patch.object(basic.AnsibleModule, "warn", lambda self, msg, **kw: warnings.append(msg)),
        *(extra_patches or []),
    ]
    with patch_module_args(full_args):
        for p in patches:
            p.start()
        try:
            module.main()
        except _Exit as exc:
            result = exc.result
        else:
            raise AssertionError("module returned without exit_json/fail_json")
        finally:
            for p in reversed(patches):
                p.stop()
    runner.assert_done()
    result["_commands"] = runner.calls
    result["warnings"] = warnings
    return json.loads(json.dumps(result, default=str))


def run_case(name: str, case: dict, *, extra_patches: list | None = None) -> dict:
    """Run plugins/modules/<name>.py on one YAML case and check what every module's cases declare alike:
    `failed`, words of `msg`, exact `expect` values and `prepared_starts`. Returns the result for the
    module's own checks."""
    result = run_module(name, case["args"], script_of(case), check_mode=case.get("check_mode", False),
                        diff=case.get("diff", False), extra_patches=extra_patches)
    assert result.get("failed", False) == case.get("failed", False), result
    for words in case.get("msg", []):
        assert words in result["msg"]
    for key, value in case.get("expect", {}).items():
        assert result[key] == value, key
    if "prepared_starts" in case:
        assert result["prepared"].startswith(case["prepared_starts"])
    return result


# ---- a storage node's fabricctl as the command tests see it (test_publishing, test_health, test_metrics)

FCTL_IQN_BASE = "iqn.2026-11.io.fabric.lab.fabricctl"
GPU1, GPU2, GPU9 = (f"iqn.2026-11.io.fabric.lab:{h}" for h in ("gpu1", "gpu2", "gpu9"))


def fabricctl_config(*, node: str = "", groups: bool = True) -> str:
    """fabricctl's configuration with gpu1 and gpu2, each with its own CHAP (and the gpu_nodes group)."""
    return "".join([
        f"pool: tank\niqn_base: {FCTL_IQN_BASE}\nportal: {{ip: 10.77.0.11}}\n",
        f"node: {node}\n" if node else "",
        "hosts:\n",
        f'  gpu1: {{address: 10.77.0.21, initiator: "{GPU1}", chap: {{userid: gpu1, password: gpu1-s3cret-1}}}}\n',
        f'  gpu2: {{address: 10.77.0.22, initiator: "{GPU2}", chap: {{userid: gpu2, password: gpu2-s3cret-1}}}}\n',
        "groups:\n  gpu_nodes: [gpu1, gpu2]\n" if groups else ""])


def lio_target(name: str, *initiators: str, lun: str | None = None, tagged: tuple = ()) -> dict:
    """A fabricctl target in rtslib's dump: one read-only LUN (of backstore fctl_LUN, by default fctl_NAME; ""
    none) mapped to an ACL per initiator; those of ``tagged`` with a publish's tag (``lio.PUBLISHED_TAG``)."""
    lun = name if lun is None else lun
    return {"wwn": f"{FCTL_IQN_BASE}:{name}", "fabric": "iscsi", "tpgs": [{
        "tag": 1, "enable": True, "attributes": {}, "portals": [{"ip_address": "10.77.0.11", "port": 3260}],
        "luns": [{"index": 0, "storage_object": f"/backstores/block/fctl_{lun}"}] if lun else [],
        "node_acls": [{"node_wwn": i, "mapped_luns": [{"index": 0, "tpg_lun": 0, "write_protect": True}],
                       **({"tag": "fabric-published"} if i in tagged else {})} for i in initiators]}]}


def ends(fn, limit: float = 60.0):
    """``fn()`` in a thread: (returned, raised) once it ended; fails the test if it is still running after ``limit``
    seconds (a liveness net far above every bound the tests use, not a measure of speed)."""
    out: dict = {}

    def call():
        try:
            out["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            out["error"] = exc

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(limit)
    assert not thread.is_alive(), f"still running after {limit} s: the bound did not hold"
    return out.get("value"), out.get("error")
