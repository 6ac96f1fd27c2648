"""The slurm_fabric role's SPANK plugin (roles/slurm_fabric/files/fabric_dataset.c), compiled on the host against
a stand-in of <slurm/spank.h> (tests/unit/data/spank_stub) and driven through its callbacks the way Slurm calls
them (data/spank_stub/driver.c), with a stand-in for the node agent. What Slurm itself does with the plugin
(a job's output, a node that is not drained) is tested on the lab (tests/integration/test_slurm.py)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PLUGIN = REPO / "roles" / "slurm_fabric" / "files" / "fabric_dataset.c"
STUB = Path(__file__).resolve().parent / "data" / "spank_stub"

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed on this host")

AGENT = textwrap.dedent("""\
    #!/usr/bin/env python3
    # Stand-in for fabric-node: records its argv and environment, then answers as the agent does.
    import json, os, sys, time
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "calls"), "a") as f:
        f.write(json.dumps({"argv": sys.argv[1:], "env": dict(os.environ)}) + "\\n")
    verb, rest = sys.argv[1], sys.argv[2:]
    ref = rest[0] if verb == "attach" else None
    if ref and ref.startswith("hang@"):
        open(os.path.join(here, "hang.pid"), "w").write(str(os.getpid()))
        time.sleep(60)
    if ref and ref.startswith("refused@"):  # as fabric-node answers under --json: one object, nothing on stderr
        problem = "refused@v1 is not granted to this host " + chr(0x2014) + ' "gpu1"' + chr(92) + "n"
        print(json.dumps({"exit": 1, "fix": "fabricctl grant refused@v1 --to gpu1 (on a storage node)",
                          "problem": problem}, sort_keys=True))
        sys.exit(1)
    if ref and ref.startswith("crash@"):
        print("Traceback (most recent call last): ...", file=sys.stderr)
        sys.exit(5)
    if ref and ref.startswith("nopath@"):
        print(json.dumps({"ref": ref})); sys.exit(0)
    if ref and ref.startswith("dotdot@"):
        print(json.dumps({"ref": ref, "path": "/datasets/../etc"})); sys.exit(0)
    if verb == "detach" and os.path.exists(os.path.join(here, "detach-fails")):
        print("fabric-node: /datasets/x/v1 is busy", file=sys.stderr); sys.exit(1)
    if verb == "attach":
        name, version = ref.split("@")
        print(json.dumps({"ref": ref, "name": name, "version": version, "path": f"/datasets/{name}/{version}",
                          "device": "/dev/dm-3", "holders": ["job:42"]}, indent=2))
    else:
        print(json.dumps({"released": []}))
""")


@pytest.fixture(scope="module")
def driver(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("spank") / "driver"
    proc = subprocess.run(["gcc", "-std=gnu11", "-O1", "-Wall", "-Wextra", "-Werror", "-Wno-format-truncation",
                           f"-I{STUB}", "-o", str(out), str(STUB / "driver.c"), str(PLUGIN)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.fixture
def agent(tmp_path) -> Path:
    path = tmp_path / "agent" / "fabric-node"
    path.parent.mkdir()
    path.write_text(AGENT)
    path.chmod(0o755)
    return path


def calls(agent: Path) -> list[dict]:
    import json  # noqa: PLC0415

    log = agent.parent / "calls"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def run(driver: Path, context: str, *args: str, env: dict | None = None) -> list[str]:
    proc = subprocess.run([str(driver), context, *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def remote(driver: Path, agent: Path, *args: str, env: dict | None = None) -> list[str]:
    return run(driver, "remote", "-a", f"agent={agent}", "-a", f"state_dir={agent.parent / 'state'}", *args,
               env=env)


# ---- the submit side: the request's shape --------------------------------------------------------------------

@pytest.mark.parametrize("value", ["imagenet@v3", "a@1", "imagenet-2026@v1.2,labels@2026-11-22",
                                   ",".join(f"d{i}@v1" for i in range(16)), "x" * 300 + "@v1"])
def test_the_submit_side_accepts_lists_of_name_at_version(driver, value):
    out = run(driver, "allocator", "-o", value)
    assert "cb 0" in out
    assert not [line for line in out if line.startswith("error:")]


@pytest.mark.parametrize(("value", "words"), [
    ("", "is empty"),
    ("../x@v1", "'../x@v1' is not NAME@VERSION"),
    ("a b@v1", "'a b@v1' is not NAME@VERSION"),
    ("imagenet", "'imagenet' is not NAME@VERSION"),
    ("@v1", "is not NAME@VERSION"),
    ("a@", "is not NAME@VERSION"),
    ("a@b@c", "is not NAME@VERSION"),
    ("Imagenet@v1", "is not NAME@VERSION"),
    ("-x@v1", "is not NAME@VERSION"),
    ("a@-v1", "is not NAME@VERSION"),
    ("a@v1,", "is not NAME@VERSION"),
    ("a@v1,,b@v1", "is not NAME@VERSION"),
    ("a@v1;id", "is not NAME@VERSION"),
    ("a@v1\nb@v1", "'a@v1?b@v1' is not NAME@VERSION"),
    ("a@v1,a@v1", "names 'a@v1' twice"),
    (",".join(f"d{i}@v1" for i in range(17)), "more than 16 versions"),
    ("x" * 1100 + "@v1", "more than 1024"),
])
def test_the_submit_side_refuses_what_is_not_a_list_of_name_at_version(driver, value, words):
    out = run(driver, "allocator", "-o", value)
    assert "cb -1" in out, out
    errors = [line for line in out if line.startswith("error:")]
    assert len(errors) == 1 and words in errors[0], out
    assert "--fabric-dataset=NAME@VERSION" in errors[0] or "name each version once" in errors[0] \
        or "at most 16" in errors[0]


def test_an_unknown_plugstack_argument_stops_sbatch_with_the_fix(driver):
    out = run(driver, "allocator", "-a", "agnet=/x", "-o", "a@v1")
    assert "init -1" in out
    assert any("'agnet=/x' is not understood" in line and "plugstack.conf" in line for line in out)


# ---- the node side: attach before the tasks, report from the tasks --------------------------------------------

def test_a_step_attaches_each_version_as_its_job_and_gives_every_task_the_paths(driver, agent):
    out = remote(driver, agent, "-o", "imagenet@v3,labels@v1", "-t", "2", "-j", "4711",
                 env={"SECRET_OF_SLURMD": "x"})
    assert [c["argv"] for c in calls(agent)] == [["attach", "imagenet@v3", "--holder", "job:4711", "--json"],
                                                 ["attach", "labels@v1", "--holder", "job:4711", "--json"]]
    # the agent runs with a clean environment of its own
    assert set(calls(agent)[0]["env"]) <= {"PATH", "LANG", "FABRIC_CALLER", "LC_CTYPE"}
    assert out.count("setenv FABRIC_DATASET=imagenet@v3,labels@v1") == 2
    assert out.count("setenv FABRIC_DATASET_PATH=/datasets/imagenet/v3:/datasets/labels/v1") == 2
    assert "task 0 0" in out and "task 1 0" in out
    state = agent.parent / "state"
    marker = state / "job-4711"
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    assert stat.S_IMODE(marker.stat().st_mode) == 0o600
    assert marker.read_text() == "imagenet@v3,labels@v1"


def test_a_refusal_fails_every_task_with_the_agents_message_shown_once(driver, agent):
    out = remote(driver, agent, "-o", "ok@v1,refused@v1,never@v1", "-t", "3")
    assert "post_opt 0" in out  # never an error where Slurm would drain the node
    assert ["task 0 -1", "task 1 -1", "task 2 -1"] == [line for line in out if line.startswith("task ")]
    task_errors = out[out.index("post_opt 0") + 1:]
    shown = [line for line in task_errors if line.startswith("error:")]
    assert len(shown) == 1, out
    assert "refused@v1 could not be attached on" in shown[0]
    # the agent's problem and fix, unescaped from its JSON answer
    assert 'refused@v1 is not granted to this host \u2014 "gpu1"\\n' in shown[0]
    assert "  fix: fabricctl grant refused@v1 --to gpu1 (on a storage node)" in "\n".join(task_errors)
    assert not [line for line in out if line.startswith("setenv")]
    # it stopped at the refusal; what was attached before stays held by the job until its epilog
    assert [c["argv"][1] for c in calls(agent)] == ["ok@v1", "refused@v1"]
    assert (agent.parent / "state" / "job-42").exists()


def test_an_agent_that_fails_without_an_answer_is_quoted_from_its_stderr(driver, agent):
    out = remote(driver, agent, "-o", "crash@v1")
    assert "task 0 -1" in out
    assert any("crash@v1 could not be attached on" in line and "Traceback" in line for line in out)


def test_a_step_without_the_option_inherits_the_jobs_request(driver, agent):
    out = remote(driver, agent, "-e", "imagenet@v3")
    assert [c["argv"][:2] for c in calls(agent)] == [["attach", "imagenet@v3"]]
    assert "setenv FABRIC_DATASET_PATH=/datasets/imagenet/v3" in out


def test_an_inherited_request_is_checked_like_the_option(driver, agent):
    out = remote(driver, agent, "-e", "../../etc@v1")
    assert calls(agent) == []
    assert "task 0 -1" in out
    assert any("'../../etc@v1' is not NAME@VERSION" in line for line in out)


def test_steps_without_a_request_and_the_extern_step_do_nothing(driver, agent):
    out = remote(driver, agent)
    assert calls(agent) == [] and "task 0 0" in out and not [x for x in out if x.startswith("setenv")]
    out = remote(driver, agent, "-o", "imagenet@v3", "-s", str(0xFFFFFFFC))
    assert calls(agent) == [] and "task 0 0" in out


def test_a_missing_agent_fails_the_job_naming_it(driver, tmp_path):
    missing = tmp_path / "nowhere" / "fabric-node"
    out = run(driver, "remote", "-a", f"agent={missing}", "-a", f"state_dir={tmp_path / 'state'}", "-o", "a@v1")
    assert "task 0 -1" in out
    assert any(f"the node agent {missing} is not installed" in line for line in out)


def test_an_agent_that_hangs_is_stopped_at_the_timeout_and_fails_the_job(driver, agent):
    started = time.monotonic()
    out = remote(driver, agent, "-a", "attach_timeout=2", "-o", "hang@v1")
    assert time.monotonic() - started < 30
    assert "task 0 -1" in out
    assert any("did not answer within 2 s and was stopped" in line for line in out)
    pid = int((agent.parent / "hang.pid").read_text())
    for _ in range(50):  # killed with its process group; reaped by the plugin
        if not Path(f"/proc/{pid}").exists():
            break
        time.sleep(0.1)
    assert not Path(f"/proc/{pid}").exists()


@pytest.mark.parametrize("ref", ["nopath@v1", "dotdot@v1"])
def test_an_answer_without_a_usable_path_fails_the_job(driver, agent, ref):
    out = remote(driver, agent, "-o", ref)
    assert "task 0 -1" in out
    assert any('answered without a usable "path"' in line for line in out)


def test_a_bad_plugstack_argument_in_slurmstepd_fails_the_task_not_the_step(driver, agent):
    out = remote(driver, agent, "-a", "attach_timeout=soon", "-o", "a@v1")
    assert "init 0" in out and "post_opt 0" in out and "task 0 -1" in out
    assert any("'attach_timeout=soon' is not understood" in line for line in out)
    assert calls(agent) == []


# ---- the epilog: release where something was attached; never fail -------------------------------------------

def epilog(driver: Path, agent: Path, job: int) -> list[str]:
    return run(driver, "epilog", "-a", f"agent={agent}", "-a", f"state_dir={agent.parent / 'state'}", "-j", str(job))


def test_the_epilog_releases_what_the_job_holds_and_forgets_it(driver, agent):
    remote(driver, agent, "-o", "imagenet@v3", "-j", "7")
    out = epilog(driver, agent, 7)
    assert "epilog 0" in out
    assert calls(agent)[-1]["argv"] == ["detach", "--holder", "job:7", "--all", "--json"]
    assert not (agent.parent / "state" / "job-7").exists()


def test_the_epilog_of_a_job_that_attached_nothing_here_runs_no_agent(driver, agent):
    assert "epilog 0" in epilog(driver, agent, 8)
    assert calls(agent) == []


def test_a_failed_release_is_logged_never_an_epilog_failure(driver, agent):
    remote(driver, agent, "-o", "imagenet@v3", "-j", "9")
    (agent.parent / "detach-fails").touch()
    out = epilog(driver, agent, 9)
    assert "epilog 0" in out
    assert any("release failed" in line and "is busy" in line and "detach --holder job:9 --all" in line
               for line in out)
    assert (agent.parent / "state" / "job-9").exists()
