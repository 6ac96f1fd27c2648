#!/usr/bin/env python3
"""Benchmark of issue 29 on the lab: a grant to 500 hosts against rtslib's floor, and a 501st host.

Issue 29 asks: "Grant to 500 hosts (synthetic initiator names, real LIO on storage1), against the floor measured
in the same run: rtslib creating the same 500 ACLs with CHAP and a mapped LUN plus one save of the configuration.
Target <=2x the floor (key grant500_over_floor). Then one more host on that target: nothing proportional to the
500 beyond the save (target <=1.5x one save, key grant_501st_over_save); what a full LIO read costs at that size
says why."

What runs, in one Python process on storage1 (fabricctl's virtualenv: its fabric_core and Debian's rtslib-fb),
against the node's real LIO:
- two throwaway targets, each with a read-only LUN on a 16 MiB fileio backstore of its own (named
  ``benchgrant*``: this benchmark's alone; a grant's cost does not depend on the backstore's kind);
- the floor: rtslib alone creating 500 ACLs on the first target, each with its LUN mapped read-only and its
  four CHAP fields, then one save of the whole configuration (``RTSRoot.save_to_file``);
- the grant: the fabric's grant path on the second target for the same 500 synthetic hosts
  (``lioacls.target_facts`` from configfs, ``grants.plan_grant``, ``lio.apply`` with its one save): the code
  ``fabricctl grant`` runs once it has resolved the hosts (the resolution of 500 inventory hosts and their
  credentials is not in it: the lab has two GPU nodes);
- a 501st host through the same path, against one save alone at that size, and a full rtslib read of LIO
  (every storage object, target, ACL and mapped LUN walked: what a grant avoids).
Rounds alternate the order of floor and grant (A B, B A); figures are medians. Everything is removed after
each round and the configuration saved again.

Run as root on the lab's host with the lab up and converged: `make bench-grant` (ROUNDS=N, default 3). It writes
the `attach-grant` section of docs/benchmarks.md and the grant figures of bench/results/attach.json (the
other figures there, from other benchmarks of issue 29, are kept).
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from labbench import BenchError, fabricctl_facts, run_bench, say, ssh  # noqa: E402
from report import FOLDER, commit, merge_json  # noqa: E402

SECTION = "attach-grant"
STORAGE = "storage1"
HOSTS = 500
PYTHON = "/opt/fabricctl/bin/python3"

# Runs on storage1 as root. argv: a JSON object {hosts, order, cleanup_only}. Prints one JSON object.
REMOTE = r'''
import json, os, sys, time
from rtslib_fb import RTSRoot, FabricModule, Target, TPG, LUN, NodeACL, MappedLUN, FileIOStorageObject
from fabric_core.base.rules import Chap
from fabric_core.services import grants
from fabric_core.storage import lio, lioacls

p = json.loads(sys.argv[1])
BASE = "iqn.2026-11.io.fabric.bench"
SAVE = "/etc/rtslib-fb-target/saveconfig.json"

def clean():
    root = RTSRoot()
    gone = []
    for t in list(FabricModule("iscsi").targets):
        if t.wwn.startswith(BASE + ":benchgrant"):
            t.delete()
            gone.append(t.wwn)
    for so in list(root.storage_objects):
        if so.name.startswith("benchgrant"):
            so.delete()
            gone.append(so.name)
    for n in ("floor", "grant"):
        path = f"/var/tmp/benchgrant-{n}.img"
        if os.path.exists(path):
            os.unlink(path)
            gone.append(path)
    if gone:
        root.save_to_file(SAVE)
    return gone

def target(name):
    path = f"/var/tmp/benchgrant-{name}.img"
    with open(path, "wb") as f:
        f.truncate(16 << 20)
    so = FileIOStorageObject(f"benchgrant{name}", path, size=16 << 20, write_back=False)
    t = Target(FabricModule("iscsi"), f"{BASE}:benchgrant.{name}")
    tpg = TPG(t, 1)
    lun = LUN(tpg, 0, so)
    tpg.enable = True
    return t.wwn, tpg, lun

def chap(i):
    return Chap(f"u{i:04d}", f"s{i:06d}benchgrA", f"t{i:04d}", f"m{i:06d}benchgrB")  # 15-character secrets

def initiator(i):
    return f"{BASE}:host{i:04d}"

def floor():
    _wwn, tpg, lun = target("floor")
    tpg.set_attribute("authentication", 1)
    started = time.monotonic()
    for i in range(p["hosts"]):
        acl = NodeACL(tpg, initiator(i))
        MappedLUN(acl, 0, lun, write_protect=True)
        c = chap(i)
        acl.chap_userid, acl.chap_password = c.userid, c.password
        acl.chap_mutual_userid, acl.chap_mutual_password = c.mutual_userid, c.mutual_password
    made = time.monotonic()
    RTSRoot().save_to_file(SAVE)
    saved = time.monotonic()
    return {"floor_acls_s": made - started, "floor_save_s": saved - made, "floor_s": saved - started}

def grant_path(wwn, first, count):
    wanted = {initiator(i): chap(i) for i in range(first, first + count)}
    started = time.monotonic()
    facts = lioacls.target_facts(wwn)
    actions = grants.plan_grant(wwn, facts, wanted, current_auth=lambda i: lioacls.acl_auth(wwn, i))
    lio.apply(actions)
    return time.monotonic() - started, len(actions)

def grant():
    wwn, _tpg, _lun = target("grant")
    seconds, actions = grant_path(wwn, 0, p["hosts"])
    one, one_actions = grant_path(wwn, p["hosts"], 1)
    started = time.monotonic()
    RTSRoot().save_to_file(SAVE)
    save = time.monotonic() - started
    started = time.monotonic()
    root = RTSRoot()
    walked = sum(1 for _ in root.storage_objects)
    for t in FabricModule("iscsi").targets:
        for tpg in t.tpgs:
            for acl in tpg.node_acls:
                walked += 1 + sum(1 for _ in acl.mapped_luns)
                _ = acl.chap_userid
    read = time.monotonic() - started
    acls = len(lioacls.target_facts(wwn)["acls"])
    return {"grant_s": seconds, "grant_actions": actions, "grant_501st_s": one, "grant_501st_actions": one_actions,
            "save_s": save, "full_read_s": read, "full_read_objects": walked, "acls_after": acls}

out = {"removed": clean()}
if not p["cleanup_only"]:
    try:
        for part in p["order"]:
            out.update(floor() if part == "floor" else grant())
    finally:
        clean()
print(json.dumps(out))
'''


def remote(hosts: int, order: list[str], cleanup_only: bool = False) -> dict:
    """The measuring script on storage1 (read from stdin; its argument is JSON without a secret)."""
    arg = json.dumps({"hosts": hosts, "order": order, "cleanup_only": cleanup_only})
    res = ssh(STORAGE, f"{PYTHON} - {shlex.quote(arg)}", timeout=1800, check=False, input_text=REMOTE)
    if res.returncode != 0:
        raise BenchError(f"the measuring script failed on {STORAGE}: {res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def clean(_lab=None) -> list[str]:
    """This benchmark's targets, backstores and files removed; returns what is left (nothing, or the failure)."""
    try:
        remote(0, [], cleanup_only=True)
    except BenchError as exc:
        return [str(exc)]
    return []


def preflight() -> dict:
    facts = fabricctl_facts(STORAGE)
    if ssh(STORAGE, f"{PYTHON} -c 'import rtslib_fb, fabric_core'", check=False).returncode != 0:
        raise BenchError(f"{STORAGE} has no fabricctl virtualenv with rtslib-fb ({PYTHON}): converge site.yml first")
    return facts


def measure(rounds: int, hosts: int) -> dict:
    runs: list[dict] = []
    for r in range(rounds):
        order = ["floor", "grant"] if r % 2 == 0 else ["grant", "floor"]
        say(f"round {r + 1}/{rounds}: {' then '.join(order)} ({hosts} hosts)")
        got = remote(hosts, order)
        if got["acls_after"] != hosts + 1:
            raise BenchError(f"the grant left {got['acls_after']} ACLs, not {hosts + 1}")
        runs.append({k: (round(v, 3) if isinstance(v, float) else v) for k, v in got.items() if k != "removed"})

    def med(key: str) -> float:
        return round(statistics.median(run[key] for run in runs), 3)

    figures = {"grant500_s": med("grant_s"), "grant500_floor_s": med("floor_s"),
               "grant500_floor_acls_s": med("floor_acls_s"), "grant500_floor_save_s": med("floor_save_s"),
               "grant_501st_s": med("grant_501st_s"), "lio_save_s_at_501": med("save_s"),
               "lio_full_read_s_at_501": med("full_read_s"), "grant500_lio_actions": runs[0]["grant_actions"],
               "grant_501st_lio_actions": runs[0]["grant_501st_actions"]}
    ratios = {"grant500_over_floor": round(figures["grant500_s"] / figures["grant500_floor_s"], 3),
              "grant_501st_over_save": round(figures["grant_501st_s"] / figures["lio_save_s_at_501"], 3)}
    return {"figures": figures, "ratios": ratios, "runs": runs, "rounds": rounds, "hosts": hosts}


def write_results(result: dict, folder: Path = FOLDER) -> Path:
    """The grant figures and ratios into bench/results/attach.json."""
    return merge_json("attach", "grant", result["figures"], result["ratios"],
                      {"rounds": result["rounds"], "hosts": result["hosts"], "seconds": result["runs"]}, folder=folder)


def rows(result: dict, when: str) -> list[str]:
    f, r = result["figures"], result["ratios"]
    return [
        f"## Grant to {result['hosts']} hosts (issue 29, `make bench-grant`)",
        "",
        f"{when}, commit {commit()}, {result['rounds']} rounds (floor and grant alternating), medians, storage1's "
        "real LIO. The grant path is the one `fabricctl grant` runs after resolving its hosts (configfs facts, the "
        "pure plan, rtslib, one save); the floor is rtslib alone making the same ACLs, mapped LUNs and CHAP, then "
        "one save.",
        "",
        "| | seconds | ratio | target |",
        "|---|---|---|---|",
        f"| floor: rtslib, {result['hosts']} ACLs + LUN + CHAP ({f['grant500_floor_acls_s']} s) and one save "
        f"({f['grant500_floor_save_s']} s) | {f['grant500_floor_s']} | | |",
        f"| grant to {result['hosts']} ({f['grant500_lio_actions']} LIO actions) | {f['grant500_s']} | "
        f"**{r['grant500_over_floor']}** of the floor | <= 2 |",
        f"| one save at {result['hosts'] + 1} ACLs | {f['lio_save_s_at_501']} | | |",
        f"| a 501st host ({f['grant_501st_lio_actions']} LIO actions) | {f['grant_501st_s']} | "
        f"**{r['grant_501st_over_save']}** of one save | <= 1.5 |",
        f"| a full rtslib read of LIO at that size (what a grant does not do) | {f['lio_full_read_s_at_501']} | | |",
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds (default 3)")
    parser.add_argument("--hosts", type=int, default=HOSTS, help=f"synthetic hosts (default {HOSTS})")
    parser.add_argument("--cleanup-only", action="store_true", help="remove this benchmark's leftovers and stop")
    args = parser.parse_args()
    if args.rounds < 1 or args.hosts < 1:
        parser.error("--rounds and --hosts must be at least 1")
    result: dict = {}

    def run(_lab) -> dict:
        result.update(measure(args.rounds, args.hosts))
        return result

    def report(done: dict, when: str) -> list[str]:
        write_results(done)
        return rows(done, when)

    return run_bench("bench-grant", SECTION, checking="up and converged (fabricctl's virtualenv on storage1)",
                     preflight=preflight, leftovers=clean, cleanup_only=args.cleanup_only, measure=run, cleanup=clean,
                     rows=lambda _lab, done, when: report(done, when), partial=lambda: result)


if __name__ == "__main__":
    sys.exit(main())
