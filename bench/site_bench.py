#!/usr/bin/env python3
"""`make bench-site`: what a site run costs on the lab, first and converged, measured in one run.

For each of two executions of Ansible's tasks (the project's default since issue 32, ansible-core's own
strategies; and the opt-in through Mitogen's connection multiplexer, ANSIBLE_STRATEGY=fabric_linear, which
site.yml's free plays follow with fabric_free), on a freshly booted lab with the fact cache emptied:

1. `site.yml` on the bare VMs (the first run);
2. `site.yml` again on the converged fabric (changed=0 required);
3. `site.yml --check --diff` on the converged fabric (changed=0 required).

Every run is recorded by the fabric_runlog callback: wall time, time per host (the sum of the
host's task results) and the number of module executions on the nodes (loop items counted; tasks
that run on the controller only, such as assert and set_fact, are not). The ratios asked by issue
10 (re-run / first, check on converged / first) are of the Mitogen execution, the builtin_* ones (issue 32:
builtin_rerun_over_first) of the default; the speed-ups show what Mitogen buys. Writes its section of
docs/benchmarks.md and bench/results/site.json.

Absolute figures depend on the emulated lab (TCG, two host cores shared by the VMs and Ansible);
the ratios are what to compare. Run as root; it boots the lab fresh (twice) and leaves it up.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lab"))
from fabric_lab.lab import use_lab_vault  # noqa: E402
from report import write_json, write_section  # noqa: E402

use_lab_vault()  # the site runs open the lab's vault (ansible.cfg loads none)

REPO = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
LABCTL = [sys.executable, str(REPO / "lab" / "labctl.py")]
SECTION = "site"
WORK = REPO / ".lab-bench"
LOCAL_ACTIONS = {"assert", "set_fact", "debug", "meta", "include_role", "import_role", "include_tasks", "fail",
                 "add_host", "group_by", "pause", "include_vars"}


def sh(*argv, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), cwd=REPO, text=True, capture_output=True, stdin=subprocess.DEVNULL,
                          env={**os.environ, **(env or {})})


def fresh_lab() -> None:
    for step in (["down"], ["up"]):
        proc = sh(*LABCTL, *step)
        if proc.returncode != 0:
            raise SystemExit(f"labctl {step[0]} failed:\n{proc.stderr[-3000:]}")
    shutil.rmtree(REPO / ".ansible" / "facts", ignore_errors=True)


def site(name: str, *args: str, mitogen: bool) -> dict:
    """One site.yml run; its figures from the runlog."""
    log = WORK / f"{name}.jsonl"
    log.unlink(missing_ok=True)
    env = {"ANSIBLE_NOCOLOR": "1", "FABRIC_RUNLOG": str(log),
           "ANSIBLE_STRATEGY": "fabric_linear" if mitogen else "linear"}
    started = time.monotonic()
    proc = sh(str(VENV_BIN / "ansible-playbook"), "playbooks/site.yml", *args, env=env)
    wall = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"{name}: site.yml {' '.join(args)} failed:\n{proc.stdout[-4000:]}")
    tasks, summary = [], None
    for line in log.read_text().splitlines():
        rec = json.loads(line)
        if rec["event"] == "task":
            tasks.append(rec)
        else:
            summary = rec
    remote = [t for t in tasks if t["status"] != "skipped" and t["action"].rsplit(".", 1)[-1] not in LOCAL_ACTIONS]
    executions = sum(t.get("items", 1) for t in remote)
    changed = {h: c["changed"] for h, c in summary["recap"].items()}
    return {"wall_seconds": round(wall, 1), "ansible_seconds": summary["seconds"],
            "per_host_seconds": summary["per_host_seconds"], "changed": changed,
            "remote_module_executions": executions,
            "remote_executions_per_host": {h: sum(t.get("items", 1) for t in remote if t["host"] == h)
                                           for h in sorted(changed)},
            "slowest_tasks": summary["slowest_tasks"][:8]}


def sequence(mitogen: bool) -> dict:
    fresh_lab()
    tag = "mitogen" if mitogen else "builtin"
    out = {"first": site(f"{tag}-first", mitogen=mitogen),
           "rerun": site(f"{tag}-rerun", mitogen=mitogen),
           "check_converged": site(f"{tag}-check", "--check", "--diff", mitogen=mitogen)}
    for name in ("rerun", "check_converged"):
        if any(out[name]["changed"].values()):
            raise SystemExit(f"{tag} {name} changed something: {out[name]['changed']}")
    return out


LAB = "trixie lab, TCG: storage1 (2 vCPU, 2.5 GiB), gpu1 and gpu2 (1 vCPU, 1.25 GiB); 2 host cores"
MITOGEN = "Mitogen (opt-in: ANSIBLE_STRATEGY=fabric_linear)"
BUILTIN = "default (ansible-core's strategies)"


def ratios_of(mitogen: dict, builtin: dict) -> dict:
    first = mitogen["first"]["wall_seconds"]
    ratios = {"rerun_over_first": round(mitogen["rerun"]["wall_seconds"] / first, 3),
              "check_converged_over_first": round(mitogen["check_converged"]["wall_seconds"] / first, 3)}
    extra = {f"builtin_{k}": round(builtin[r]["wall_seconds"] / builtin["first"]["wall_seconds"], 3)
             for k, r in (("rerun_over_first", "rerun"), ("check_converged_over_first", "check_converged"))}
    speedup = {f"mitogen_speedup_{r}": round(builtin[r]["wall_seconds"] / mitogen[r]["wall_seconds"], 2)
               for r in ("first", "rerun", "check_converged")}
    return {**ratios, **extra, **speedup}


def render(result: dict) -> list[str]:
    """docs/benchmarks.md's section from bench/results/site.json's content."""
    mitogen, builtin, ratios = result["figures"][MITOGEN], result["figures"][BUILTIN], result["ratios"]
    when = datetime.datetime.fromisoformat(result["date"])
    rows = ["## Issue 10: a site run, first and converged (lab, TCG)", "",
            f"Measured in one run by `make bench-site` on {when:%Y-%m-%d %H:%M} UTC at commit {result['commit']}, "
            "each execution on a freshly booted lab with an empty fact cache: the first `site.yml` on bare VMs, the "
            "converged re-run, and check mode on the converged fabric (both changed=0). Figures also in "
            "`bench/results/site.json`.", "",
            "| run | Mitogen (opt-in, `ANSIBLE_STRATEGY=fabric_linear`) | default: ansible-core's own strategies | "
            "Mitogen speedup |",
            "|---|---|---|---|"]
    for name, label in (("first", "first run"), ("rerun", "converged re-run"),
                        ("check_converged", "check mode, converged")):
        d, b = mitogen[name], builtin[name]
        rows.append(f"| {label} | {d['wall_seconds']} s ({d['remote_module_executions']} module executions) | "
                    f"{b['wall_seconds']} s ({b['remote_module_executions']}) | "
                    f"{ratios['mitogen_speedup_' + name]}x |")
    hosts = sorted(mitogen["first"]["per_host_seconds"])
    rows += ["", f"Ratios through Mitogen (issue 10's target 0.25): re-run / first **{ratios['rerun_over_first']}**, "
             f"check on converged / first **{ratios['check_converged_over_first']}**. The default, without Mitogen "
             f"(issue 32's target for the re-run: 0.35): **{ratios['builtin_rerun_over_first']}** and "
             f"{ratios['builtin_check_converged_over_first']}.", "",
             "Per host (the sum of the host's task times, seconds; hosts work in parallel, so these add up to "
             "more than the wall time):", "", "| run | " + " | ".join(hosts) + " |", "|---" * (1 + len(hosts)) + "|"]
    for execution, figures in (("Mitogen", mitogen), ("default", builtin)):
        for name in ("first", "rerun", "check_converged"):
            per = figures[name]["per_host_seconds"]
            rows.append(f"| {execution} {name} | " + " | ".join(f"{per[h]:.1f}" for h in sorted(per)) + " |")
    for execution, figures in (("default (ansible-core's strategies)", builtin), ("Mitogen", mitogen)):
        rows += ["", f"Slowest tasks of the converged re-run, {execution} (summed over hosts, seconds): "
                 + "; ".join(f"{t} {s:.1f}" for t, s in figures["rerun"]["slowest_tasks"]) + "."]
    rows += ["", "Absolute numbers are bound by software emulation on two shared host cores; compare ratios."]
    return rows


def main(argv: list[str]) -> int:
    if argv == ["--render"]:  # the section again from bench/results/site.json (no lab)
        write_section(SECTION, render(json.loads((REPO / "bench" / "results" / "site.json").read_text())))
        return 0
    WORK.mkdir(exist_ok=True)
    builtin = sequence(mitogen=False)
    mitogen = sequence(mitogen=True)  # the opt-in (the default before issue 32); last: leaves the lab converged
    when = datetime.datetime.now(datetime.UTC)
    commit = sh("git", "rev-parse", "--short", "HEAD").stdout.strip()
    result = {"date": when.isoformat(timespec="seconds"), "commit": commit, "lab": LAB,
              "figures": {MITOGEN: mitogen, BUILTIN: builtin}, "ratios": ratios_of(mitogen, builtin)}
    write_json("site", result)
    write_section(SECTION, render(result))
    print(json.dumps(result["ratios"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
