"""Slurm on the lab (issue 29, item 4): `--fabric-dataset=NAME@VERSION` through the slurm_fabric role's SPANK plugin
and the real node agent (fabric-node) on gpu1 and gpu2, with the lab's Slurm (playbooks/lab-slurm.yml: slurmctld on
gpu1, slurmd on both, munge).

Jobs run as the lab's job user (`fabricjob`), who cannot run the agent: the plugin does, as root. A version of this
file's own dataset (`slurmdata@v1`) is granted to the GPU nodes; `slurmdata@v2` is sealed and not granted.
"""

from __future__ import annotations

import shlex
import time

import pytest
from conftest import Fctl, ansible_playbook, step, wait_for

DATA = "slurmdata"
GRANTED, NOT_GRANTED = f"{DATA}@v1", f"{DATA}@v2"
MOUNT = f"/datasets/{DATA}/v1"
USER = "fabricjob"
PLUGIN = "/usr/local/lib/slurm-fabric/fabric_dataset.so"
AGENT = "/usr/local/sbin/fabric-node"
# The tree's digest: every file's SHA-256 in path order, .fabric/ (the version's own records) left out.
DIGEST = ("find . -path ./lost+found -prune -o -type f -not -path './.fabric/*' -print0 | LC_ALL=C sort -z "
          "| xargs -0 sha256sum | sha256sum | cut -c1-64")


# ---- set-up ----------------------------------------------------------------------------------------------------

def _slurm_ready(gpu1) -> bool:
    res = gpu1.run(f"test -s {PLUGIN} && sinfo --noheader --Node --format='%N %T'")
    return res.rc == 0 and sorted(set(res.stdout.split("\n")) - {""}) == ["gpu1 idle", "gpu2 idle"]


@pytest.fixture(scope="module")
def slurm(lab, hosts, converged):
    """The lab's Slurm with the plugin, after site.yml: lab-slurm.yml once per lab (reused when Slurm answers with
    both nodes idle and the plugin installed)."""
    gpu1 = hosts["gpu1"]
    if _slurm_ready(gpu1):
        step("lab Slurm: up earlier on this lab (reused)")
        return gpu1
    step("playbooks/lab-slurm.yml (munge, slurmctld on gpu1, slurmd on gpu1+gpu2, the SPANK plugin)")
    started = time.monotonic()
    res = ansible_playbook(lab, "playbooks/lab-slurm.yml")
    assert res.rc == 0, res.output[-6000:]
    step(f"lab-slurm.yml converged in {time.monotonic() - started:.0f} s")
    assert _slurm_ready(gpu1), gpu1.run("sinfo; scontrol show nodes").stdout
    return gpu1


@pytest.fixture(scope="module")
def versions(hosts, converged) -> str:
    """slurmdata@v1 (granted to gpu_nodes) and @v2 (sealed, not granted); returns v1's digest."""
    storage = hosts["storage1"]
    fctl = Fctl(storage)
    have = {d["name"]: {v["version"] for v in d["versions"]} for d in fctl.json("list")["datasets"]}
    src = f"/srv/{DATA}-src"
    if DATA not in have:
        step(f"{DATA}: create, ingest, seal v1 and v2")
        fctl.json("dataset", "create", DATA, "--size", "64M")
        storage.check_output(f"rm -rf {src} && mkdir -p {src}/train && for i in $(seq 1 24); do "
                             f"head -c $((3000 * i)) /dev/urandom > {src}/train/f$i; done && date -u > {src}/README")
        fctl.json("dataset", "ingest", DATA, f"{src}/")
        have[DATA] = set()
    if "v1" not in have[DATA]:
        fctl.json("dataset", "seal", DATA, "v1", "--note", "test_slurm")
    digest = storage.check_output(f"cd {src} && {DIGEST}")
    if "v2" not in have[DATA]:
        storage.check_output(f"cp -a {src} {src}-v2 && echo changed > {src}-v2/README")
        fctl.json("dataset", "ingest", DATA, f"{src}-v2/")
        fctl.json("dataset", "seal", DATA, "v2", "--note", "test_slurm, never granted")
    res = fctl("grant", GRANTED, "--to", "gpu_nodes")
    assert res.rc == 0, f"fabricctl grant {GRANTED} --to gpu_nodes failed ({res.rc}): {res.stderr}"
    return digest


# ---- jobs ------------------------------------------------------------------------------------------------------

def submit(gpu1, script: str, *opts: str, check: bool = True):
    """sbatch as the job user on gpu1 (the script in the user's home); returns the job id, or the result when
    sbatch refused (check=False)."""
    name = f"job-{time.monotonic_ns()}.sh"
    gpu1.check_output(f"printf %s {shlex.quote(script)} > /home/{USER}/{name} && chown {USER}: /home/{USER}/{name}")
    argv = " ".join(shlex.quote(o) for o in opts)
    # sbatch exits 255 when it refuses an option, which testinfra takes for a failed ssh connection: said as 1
    res = gpu1.run(f"cd /home/{USER} && runuser -u {USER} -- timeout 120 sbatch --parsable "
                   f"--output=/tmp/fabric-job-%j.out {argv} {name} || exit 1")
    if not check:
        return res
    assert res.rc == 0, f"sbatch {argv} failed ({res.rc}): {res.stderr}"
    return res.stdout.strip().split(";")[0]


def job_info(gpu1, job: str) -> dict:
    out = gpu1.check_output(f"scontrol show job -o {job}")
    return dict(field.split("=", 1) for field in out.split() if "=" in field)


def finished(gpu1, job: str, timeout: float = 600) -> dict:
    """The job's record once it has ended and its epilog has run on every node (no longer COMPLETING)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = job_info(gpu1, job)
        if info["JobState"] not in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING") and \
                gpu1.run(f"squeue --noheader --jobs {job} --states=CG").stdout.strip() == "":
            return info
        time.sleep(1)
    raise AssertionError(f"job {job} did not end within {timeout:.0f} s: {job_info(gpu1, job)}")


def running(gpu1, job: str, timeout: float = 300) -> dict:
    assert wait_for(gpu1, f"test \"$(squeue --noheader --jobs {job} --format=%T)\" = RUNNING", timeout), \
        job_info(gpu1, job)
    return job_info(gpu1, job)


def output(hosts, info: dict) -> str:
    return hosts[info["BatchHost"]].file(f"/tmp/fabric-job-{info['JobId']}.out").content_string


def node_state(gpu1, node: str) -> str:
    return job_state_field(gpu1.check_output(f"scontrol show node -o {node}"), "State")


def job_state_field(record: str, key: str) -> str:
    return dict(field.split("=", 1) for field in record.split() if "=" in field)[key]


def assert_idle_and_released(hosts, gpu1, nodes, job: str) -> None:
    for node in nodes:
        state = node_state(gpu1, node)
        assert state == "IDLE", f"{node} is {state} after job {job}, not IDLE (a healthy node is never drained)"
        host = hosts[node]
        assert wait_for(host, f"! findmnt -n {MOUNT}", 60), f"{MOUNT} is still mounted on {node} after job {job}"
        listing = host.check_output(f"{AGENT} list --json")
        assert f"job:{job}" not in listing, f"{node} still holds {DATA} for job {job}: {listing}"
        assert host.run(f"test -e /run/fabric-slurm/job-{job}").rc != 0


def gpu_nodes(hosts):
    return sorted(n for n in hosts if n.startswith("gpu"))


CHECK = f"""#!/bin/bash
set -eu
mountpoint -q "$FABRIC_DATASET_PATH" && echo "mounted $FABRIC_DATASET_PATH on $(hostname) for $FABRIC_DATASET"
findmnt -n -o OPTIONS --mountpoint "$FABRIC_DATASET_PATH" | tr , '\\n' | grep -qx ro && echo "read-only"
touch "$FABRIC_DATASET_PATH/written" 2>/dev/null && echo WRITABLE
cd "$FABRIC_DATASET_PATH" && echo "digest $({DIGEST})"
"""


# ---- tests -----------------------------------------------------------------------------------------------------

def test_the_lab_slurm_playbook_changes_nothing_the_second_time(lab, slurm):
    res = ansible_playbook(lab, "playbooks/lab-slurm.yml")
    assert res.rc == 0, res.output[-6000:]
    assert set(res.changed().values()) == {0}, res.output[-6000:]
    res = ansible_playbook(lab, "playbooks/lab-slurm.yml", "--check")
    assert res.rc == 0, res.output[-6000:]
    assert set(res.changed().values()) == {0}, res.output[-6000:]


def test_a_job_on_one_node_reads_the_version_mounted_before_its_first_task(hosts, slurm, versions):
    gpu1 = slurm
    job = submit(gpu1, CHECK, f"--fabric-dataset={GRANTED}", "--nodelist=gpu2")
    info = finished(gpu1, job)
    out = output(hosts, info)
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", f"{info}\n{out}"
    assert f"mounted {MOUNT} on gpu2 for {GRANTED}" in out
    assert "read-only" in out and "WRITABLE" not in out
    assert f"digest {versions}" in out, out
    assert_idle_and_released(hosts, gpu1, ["gpu2"], job)
    # what the plugin measured, in slurmd's log (the benchmark reads the same lines)
    log = hosts["gpu2"].check_output(f"grep -h 'fabric_dataset: job {job}[ :]' /var/log/slurm/slurmd.log")
    assert f"{GRANTED} attached at {MOUNT} in " in log and f"job {job}: released in " in log, log
    step(" / ".join(line.split("fabric_dataset: ", 1)[-1] for line in log.splitlines()))


def test_a_job_on_two_nodes_has_the_version_on_both_before_their_tasks(hosts, slurm, versions):
    gpu1 = slurm
    script = ("#!/bin/bash\nset -eu\necho \"batch $FABRIC_DATASET_PATH\"\n"
              "srun --nodes=2 --ntasks=2 --ntasks-per-node=1 --label bash -c " + shlex.quote(CHECK.split("\n", 2)[2])
              + "\n")
    job = submit(gpu1, script, f"--fabric-dataset={GRANTED}", "--nodes=2", "--nodelist=gpu1,gpu2")
    info = finished(gpu1, job)
    out = output(hosts, info)
    assert info["JobState"] == "COMPLETED", f"{info}\n{out}"
    for node in ("gpu1", "gpu2"):
        assert f"mounted {MOUNT} on {node} for {GRANTED}" in out, out
    assert out.count(f"digest {versions}") == 2, out
    assert out.count("read-only") == 2 and "WRITABLE" not in out
    assert_idle_and_released(hosts, gpu1, ["gpu1", "gpu2"], job)


def test_two_jobs_on_one_node_share_one_mount_and_the_last_one_out_detaches(hosts, slurm, versions, uid):
    gpu1 = slurm
    flag = f"/tmp/fabric-flag-{uid}"
    script = f"#!/bin/bash\nwhile [ ! -e {flag}-$SLURM_JOB_ID ]; do sleep 1; done\ncat $FABRIC_DATASET_PATH/README\n"
    first = submit(gpu1, script, f"--fabric-dataset={GRANTED}", "--nodelist=gpu1")
    second = submit(gpu1, script, f"--fabric-dataset={GRANTED}", "--nodelist=gpu1")
    try:
        running(gpu1, first)
        running(gpu1, second)
        assert wait_for(gpu1, f"findmnt -n {MOUNT}", 120)
        assert len(gpu1.check_output(f"findmnt -n -o TARGET {MOUNT}").splitlines()) == 1
        listing = gpu1.check_output(f"{AGENT} list --json")
        assert f"job:{first}" in listing and f"job:{second}" in listing, listing
        gpu1.check_output(f"touch {flag}-{first}")
        assert finished(gpu1, first)["JobState"] == "COMPLETED"
        assert gpu1.run(f"findmnt -n {MOUNT}").rc == 0, "the second job's mount went with the first job"
        listing = gpu1.check_output(f"{AGENT} list --json")
        assert f"job:{first}" not in listing and f"job:{second}" in listing, listing
    finally:
        gpu1.run(f"touch {flag}-{first} {flag}-{second}")
    assert finished(gpu1, second)["JobState"] == "COMPLETED"
    assert_idle_and_released(hosts, gpu1, ["gpu1"], second)
    gpu1.run(f"rm -f {flag}-*")


@pytest.mark.parametrize(("case", "ref", "words"), [
    ("not granted", NOT_GRANTED, ["fabricctl grant"]),
    ("missing", "nosuchdata@v1", ["nosuchdata"]),
    ("malformed (a name the agent refuses)", "x" * 300 + "@v1", ["invalid"]),
])
def test_a_request_the_node_cannot_satisfy_fails_the_job_before_it_runs_and_drains_nothing(
        hosts, slurm, versions, uid, case, ref, words):
    gpu1 = slurm
    ran = f"/tmp/fabric-ran-{uid}"
    job = submit(gpu1, f"#!/bin/bash\ntouch {ran}\n", f"--fabric-dataset={ref}", "--nodelist=gpu2")
    info = finished(gpu1, job)
    out = output(hosts, info)
    assert info["JobState"] == "FAILED" and info["ExitCode"] != "0:0", f"{case}: {info}\n{out}"
    assert hosts["gpu2"].run(f"test -e {ran}").rc != 0, f"{case}: the job's script ran"
    assert f"fabric_dataset: {ref} could not be attached on gpu2: " in out, f"{case}: {out}"
    for word in words:
        assert word in out, f"{case}: the agent's message ({word!r}) is not in the job's output:\n{out}"
    assert_idle_and_released(hosts, gpu1, ["gpu2"], job)


@pytest.mark.parametrize("ref", ["../x@v1", "a b@v1", "imagenet", f"{GRANTED},{GRANTED}"])
def test_a_malformed_request_is_refused_at_submission_and_nothing_is_queued(slurm, ref):
    gpu1 = slurm
    before = gpu1.check_output(f"squeue --noheader --user={USER} --format=%i | sort")
    res = submit(gpu1, "#!/bin/bash\ntrue\n", f"--fabric-dataset={ref}", check=False)
    assert res.rc != 0, res.stdout
    assert "--fabric-dataset" in res.stderr and ("NAME@VERSION" in res.stderr or "twice" in res.stderr), res.stderr
    assert gpu1.check_output(f"squeue --noheader --user={USER} --format=%i | sort") == before


def test_a_job_keeps_its_version_when_slurmd_restarts_and_releases_it_after(hosts, slurm, versions, uid):
    gpu1, gpu2 = slurm, hosts["gpu2"]
    flag = f"/tmp/fabric-flag-{uid}"
    script = (f"#!/bin/bash\nset -eu\nwhile [ ! -e {flag} ]; do sleep 1; done\n"
              f"cd \"$FABRIC_DATASET_PATH\" && echo \"digest $({DIGEST})\"\n")
    job = submit(gpu1, script, f"--fabric-dataset={GRANTED}", "--nodelist=gpu2")
    try:
        running(gpu1, job)
        assert wait_for(gpu2, f"findmnt -n {MOUNT}", 60)
        gpu2.check_output("systemctl restart slurmd")
        assert wait_for(gpu1, "sinfo --noheader --nodes=gpu2 --format=%T | grep -Eqx 'mixed|allocated'", 120)
        assert job_info(gpu1, job)["JobState"] == "RUNNING"
        assert gpu2.run(f"findmnt -n {MOUNT}").rc == 0
    finally:
        gpu2.run(f"touch {flag}")
    info = finished(gpu1, job)
    out = output(hosts, info)
    assert info["JobState"] == "COMPLETED", f"{info}\n{out}"
    assert f"digest {versions}" in out
    assert_idle_and_released(hosts, gpu1, ["gpu2"], job)
    gpu2.run(f"rm -f {flag}")


def test_the_plugin_leaves_jobs_without_a_request_alone(hosts, slurm):
    gpu1 = slurm
    job = submit(gpu1, "#!/bin/bash\necho \"path=${FABRIC_DATASET_PATH:-none}\"\n", "--nodelist=gpu1")
    info = finished(gpu1, job)
    assert info["JobState"] == "COMPLETED"
    assert "path=none" in output(hosts, info)
    assert gpu1.run(f"test -e /run/fabric-slurm/job-{job}").rc != 0
    # the agent was not asked: slurmd's log has no attach or release for the job
    log = gpu1.check_output(f"grep -h 'fabric_dataset: job {job}[ :]' /var/log/slurm/slurmd.log || true")
    assert log == "", log
