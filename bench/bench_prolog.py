#!/usr/bin/env python3
"""Benchmark of issue 29 on the lab: the seconds a dataset request adds to a Slurm job's start.

Issue 29 asks: "Job start: a job asking for a version on 1 node and on 2 nodes, against the same job without
one: seconds added by the prolog. Target <=3 s on the lab, the same on 2 nodes as on 1 (parallel by
construction). Keys prolog_added_s_1node, prolog_added_s_2nodes."

The job: `srun --nodes=K /bin/true` as the lab's job user on gpu1 (K = 1: gpu1; K = 2: gpu1 and gpu2), with
and without `--fabric-dataset=benchprolog@v1`, timed around srun by one Python process on gpu1 (no ssh in the
measured time). srun returns when the step has ended; the release runs in the job's epilog after that, and
the next job starts only once the previous one has left Slurm (epilog done on every node), so every job with
the request attaches from nothing: iSCSI login, multipath when there is more than one path, mount, as the
node agent does it. Rounds alternate the order (A B, B A, ...); each figure is the median of its runs and the
added seconds are median(with) - median(without). The plugin's own measure of each attach (slurmd's log:
"attached at ... in S s") is reported beside it.

The version is this benchmark's own (benchprolog@v1: 32 small files, granted to gpu_nodes, attached by no one
else), created when missing and destroyed at the end (`--keep` keeps it).

Precondition: the lab is up and converged (site.yml) with the lab's Slurm (playbooks/lab-slurm.yml) and the
node agent. Run as root on the lab's host: `make bench-prolog` (ROUNDS=N, default 5). It writes the
`attach-prolog` section of docs/benchmarks.md and the prolog_* figures of bench/results/attach.json (the
other figures there, from other benchmarks of issue 29, are kept).
"""

from __future__ import annotations

import json
import re
import shlex
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from labbench import BenchError, bench_args, fabricctl_facts, run_bench, say, ssh  # noqa: E402
from report import FOLDER, commit, merge_json  # noqa: E402

SECTION = "attach-prolog"
STORAGE = "storage1"
GPUS = ("gpu1", "gpu2")
DATA = "benchprolog"
REF = f"{DATA}@v1"
USER = "fabricjob"
SRC = f"/srv/{DATA}-src"

# Runs on gpu1 as root: the timed jobs. argv: rounds, ref, user.
LOOP = r'''
import json, subprocess, sys, time
rounds, ref, user = int(sys.argv[1]), sys.argv[2], sys.argv[3]

def quiet(timeout=600):
    """No job of the user is left in Slurm (its epilog has run on every node)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = subprocess.run(["squeue", "--noheader", f"--user={user}"], capture_output=True, text=True).stdout
        if not out.strip():
            return
        time.sleep(0.2)
    raise SystemExit(f"jobs of {user} still in Slurm after {timeout} s")

def job(nodes, with_ref):
    argv = ["runuser", "-u", user, "--", "srun", f"--nodes={len(nodes)}", f"--nodelist={','.join(nodes)}",
            "--ntasks-per-node=1"]
    if with_ref:
        argv.append(f"--fabric-dataset={ref}")
    argv.append("/bin/true")
    quiet()
    started = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, cwd="/tmp")
    seconds = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return round(seconds, 3)

runs = {f"{k}node_{m}": [] for k in (1, 2) for m in ("without", "with")}
for r in range(rounds):
    for k, nodes in ((1, ["gpu1"]), (2, ["gpu1", "gpu2"])):
        order = ("without", "with") if r % 2 == 0 else ("with", "without")
        for m in order:
            runs[f"{k}node_{m}"].append(job(nodes, m == "with"))
quiet()
print(json.dumps(runs))
'''


def preflight() -> dict:
    facts = fabricctl_facts(STORAGE, *GPUS)
    for gpu in GPUS:
        if ssh(gpu, "test -x /usr/local/sbin/fabric-node", check=False).returncode != 0:
            raise BenchError(f"{gpu} has no node agent (/usr/local/sbin/fabric-node): converge site.yml first")
    nodes = ssh("gpu1", "sinfo --noheader --Node --format='%N %T'", check=False)
    if nodes.returncode != 0 or sorted(set(nodes.stdout.split("\n")) - {""}) != ["gpu1 idle", "gpu2 idle"]:
        raise BenchError("the lab's Slurm is not up with gpu1 and gpu2 idle: run "
                         f"`ansible-playbook playbooks/lab-slurm.yml` (sinfo says: {nodes.stdout.strip()!r})")
    if ssh("gpu1", "test -s /usr/local/lib/slurm-fabric/fabric_dataset.so", check=False).returncode != 0:
        raise BenchError("the SPANK plugin is not installed on gpu1: run `ansible-playbook playbooks/lab-slurm.yml`")
    return facts


def fctl(*args: str, check: bool = True):
    return ssh(STORAGE, "fabricctl " + " ".join(shlex.quote(a) for a in args), check=check, timeout=900)


def datasets() -> dict:
    listing = json.loads(fctl("list", "--json").stdout)
    return {d["name"]: d for d in listing["datasets"]}


def ensure_version() -> None:
    have = datasets()
    if DATA not in have:
        say(f"{DATA}: create, ingest 32 files, seal v1")
        fctl("dataset", "create", DATA, "--size", "64M")
        ssh(STORAGE, f"rm -rf {SRC} && mkdir -p {SRC} && for i in $(seq 1 32); do head -c $((4096 * i)) "
                     f"/dev/urandom > {SRC}/f$i; done")
        fctl("dataset", "ingest", DATA, f"{SRC}/")
    if DATA not in have or not any(v["version"] == "v1" for v in have[DATA]["versions"]):
        fctl("dataset", "seal", DATA, "v1", "--note", "bench/bench_prolog.py")
    fctl("grant", REF, "--to", "gpu_nodes")


def cleanup(keep: bool) -> list[str]:
    left = []
    for gpu in GPUS:
        if ssh(gpu, f"findmnt -n /datasets/{DATA}/v1", check=False).returncode == 0:
            left.append(f"{REF} is still mounted on {gpu}")
    if keep or left:
        return left
    try:
        if DATA in datasets():
            fctl("revoke", REF, "--from", "gpu_nodes", check=False)
            fctl("dataset", "destroy", DATA, "--yes")
        ssh(STORAGE, f"rm -rf {SRC}")
    except BenchError as exc:
        left.append(str(exc))
    return left


def attach_seconds(since: str) -> dict[str, list[float]]:
    """The plugin's own measure of each attach since the run started, per node (slurmd's log)."""
    found: dict[str, list[float]] = {}
    for gpu in GPUS:
        text = ssh(gpu, "cat /var/log/slurm/slurmd.log", check=False).stdout
        for line in text.splitlines():
            stamp = line[1:20] if line.startswith("[") else ""
            m = re.search(rf"fabric_dataset: job \d+ step \S+: {re.escape(REF)} attached at \S+ in ([0-9.]+) s", line)
            if m and stamp >= since:
                found.setdefault(gpu, []).append(float(m.group(1)))
    return found


def measure(rounds: int) -> dict:
    ensure_version()
    since = ssh("gpu1", "date -u +%Y-%m-%dT%H:%M:%S").stdout.strip()
    say(f"{rounds} rounds of srun /bin/true on 1 and 2 nodes, with and without --fabric-dataset={REF}")
    ssh("gpu1", "cat > /tmp/.bench-prolog.py", input_text=LOOP)
    out = ssh("gpu1", f"python3 /tmp/.bench-prolog.py {rounds} {REF} {USER}", timeout=7200).stdout
    runs = json.loads(out.strip().splitlines()[-1])
    med = {key: statistics.median(values) for key, values in runs.items()}
    figures = {
        "prolog_added_s_1node": round(med["1node_with"] - med["1node_without"], 2),
        "prolog_added_s_2nodes": round(med["2node_with"] - med["2node_without"], 2),
        "job_s_1node_without": round(med["1node_without"], 2), "job_s_1node_with": round(med["1node_with"], 2),
        "job_s_2nodes_without": round(med["2node_without"], 2), "job_s_2nodes_with": round(med["2node_with"], 2),
    }
    plugin = attach_seconds(since)
    return {"figures": figures, "runs": runs, "rounds": rounds,
            "plugin_attach_s": {gpu: round(statistics.median(v), 2) for gpu, v in plugin.items() if v}}


def write_results(result: dict, folder: Path = FOLDER) -> Path:
    """The prolog figures into bench/results/attach.json, and their ratio when the 1-node figure is above 0 (else
    the file's ratio, if any, stays)."""
    one, two = result["figures"]["prolog_added_s_1node"], result["figures"]["prolog_added_s_2nodes"]
    ratios = {"prolog_2nodes_over_1node": round(two / one, 2)} if one > 0 else {}
    record = {"rounds": result["rounds"], "seconds": result["runs"], "plugin_attach_s": result["plugin_attach_s"]}
    return merge_json("attach", "prolog", result["figures"], ratios, record, folder=folder)


def rows(result: dict, when: str) -> list[str]:
    f = result["figures"]
    plugin = ", ".join(f"{gpu} {s} s" for gpu, s in sorted(result["plugin_attach_s"].items())) or "-"
    return [
        "## Job start with a dataset (issue 29, `make bench-prolog`)",
        "",
        f"{when}, commit {commit()}, {result['rounds']} rounds: `srun /bin/true` as the job user, with and without "
        f"`--fabric-dataset={REF}` (the version attached from nothing each time: the previous job's epilog had "
        "released it). Medians; target: at most 3 s added, the same on 2 nodes as on 1.",
        "",
        "| nodes | without | with | added by the request |",
        "|---|---|---|---|",
        f"| 1 (gpu1) | {f['job_s_1node_without']} s | {f['job_s_1node_with']} s | **{f['prolog_added_s_1node']} s** |",
        f"| 2 (gpu1, gpu2) | {f['job_s_2nodes_without']} s | {f['job_s_2nodes_with']} s | "
        f"**{f['prolog_added_s_2nodes']} s** |",
        "",
        f"The plugin's own measure of an attach (slurmd's log, median): {plugin}.",
    ]


def main() -> int:
    args = bench_args(__doc__, rounds=5, rounds_help="rounds of the four jobs", keep=REF)
    result: dict = {}

    def run(_lab) -> dict:
        result.update(measure(args.rounds))
        return result

    def report(done: dict, when: str) -> list[str]:
        write_results(done)  # only after a run that measured and cleaned up
        return rows(done, when)

    return run_bench("bench-prolog", SECTION, checking="up, converged, the lab's Slurm and the node agent",
                     preflight=preflight, leftovers=lambda _lab: [] if not args.cleanup_only else cleanup(False),
                     cleanup_only=args.cleanup_only, measure=run, cleanup=lambda _lab: cleanup(args.keep),
                     rows=lambda _lab, done, when: report(done, when), partial=lambda: result)


if __name__ == "__main__":
    sys.exit(main())
