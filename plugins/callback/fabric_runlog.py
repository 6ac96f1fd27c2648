# Copyright: the gpu-storage-fabric authors. Apache-2.0.
# gpu-storage-fabric: callback plugin fabric_runlog (what a playbook run did and how long each task
# took on each host, as JSON lines for the tests and the site benchmark).

from __future__ import annotations

DOCUMENTATION = r"""
name: fabric_runlog
type: aggregate
short_description: Record every task result of a run (host, status, changed, seconds) as JSON lines
description:
  - Appends one JSON object per task result to the file named by C(FABRIC_RUNLOG), and one line with
    event C(run) at the end with the run's totals (wall time, check mode, the per-host and per-task
    time). Without C(FABRIC_RUNLOG) it records nothing.
  - It measures what the C(ansible.posix) C(profile_tasks) and C(timer) callbacks measure (time per
    task and per host, and the whole run), which ansible-core alone does not ship, and adds what
    the site tests compare, the list of changes a run made (or in check mode would make).
  - A task that would change something reports C(changed); a task that cannot know in check mode
    is recorded with C(check_unknown) when it says so (skipped in check mode without a prediction).
author: gpu-storage-fabric authors (!UNKNOWN)
requirements:
  - enable in ansible.cfg (callbacks_enabled = fabric_runlog) or ANSIBLE_CALLBACKS_ENABLED
options: {}
"""

import json
import os
import time

from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "fabric_runlog"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self.path = os.environ.get("FABRIC_RUNLOG")
        self.started = time.monotonic()
        self.task_started: dict = {}  # (task uuid, host) -> monotonic start
        self.task_first_start: dict = {}  # task uuid -> first start on any host
        self.per_host: dict = {}
        self.per_task: dict = {}
        self.check_mode = False
        self.playbook = ""
        self.records: list = []

    # ---- bookkeeping -------------------------------------------------------------------------

    def _write(self, obj: dict) -> None:
        if not self.path:
            return
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(obj, sort_keys=True) + "\n")

    def v2_playbook_on_start(self, playbook):
        self.playbook = os.path.basename(playbook._file_name)

    def v2_playbook_on_play_start(self, play):
        from ansible import context  # noqa: PLC0415 - CLIARGS is filled only once the CLI has parsed

        self.check_mode = bool(context.CLIARGS.get("check")) or bool(getattr(play, "check_mode", False))

    def _start(self, task, host_name: str) -> None:
        now = time.monotonic()
        self.task_started[(task._uuid, host_name)] = now
        self.task_first_start.setdefault(task._uuid, now)

    def v2_runner_on_start(self, host, task):
        self._start(task, host.get_name())

    def _record(self, result, status: str) -> None:
        task = result._task
        host = result._host.get_name()
        now = time.monotonic()
        begun = self.task_started.pop((task._uuid, host), self.task_first_start.get(task._uuid, now))
        seconds = round(now - begun, 3)
        res = result._result or {}
        role = task._role.get_name() if getattr(task, "_role", None) else ""
        name = task.get_name()
        changed = bool(res.get("changed")) and status not in ("skipped", "failed", "unreachable")
        loop_items = len(res["results"]) if isinstance(res.get("results"), list) else None
        rec = {"event": "task", "playbook": self.playbook, "role": role, "task": name, "action": task.action,
               "host": host, "status": status, "changed": changed, "seconds": seconds,
               "check_mode": self.check_mode, "delegated_to": res.get("_ansible_delegated_vars", {}).get(
                   "ansible_delegated_host") if isinstance(res.get("_ansible_delegated_vars"), dict) else None}
        if loop_items is not None:
            rec["items"] = loop_items
            rec["changed_items"] = sum(1 for r in res["results"] if isinstance(r, dict) and r.get("changed"))
        if status == "skipped" and self.check_mode and "check mode" in str(res.get("msg", "")):
            rec["check_unknown"] = True
        self.records.append(rec)
        self.per_host[host] = self.per_host.get(host, 0.0) + seconds
        key = f"{role}: {name}" if role else name
        self.per_task[key] = self.per_task.get(key, 0.0) + seconds
        self._write(rec)

    def v2_runner_on_ok(self, result):
        self._record(result, "changed" if (result._result or {}).get("changed") else "ok")

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._record(result, "ignored" if ignore_errors else "failed")

    def v2_runner_on_skipped(self, result):
        self._record(result, "skipped")

    def v2_runner_on_unreachable(self, result):
        self._record(result, "unreachable")

    def v2_playbook_on_stats(self, stats):
        summary = {host: stats.summarize(host) for host in sorted(stats.processed)}
        slowest = sorted(self.per_task.items(), key=lambda kv: kv[1], reverse=True)[:25]
        self._write({"event": "run", "playbook": self.playbook, "check_mode": self.check_mode,
                     "seconds": round(time.monotonic() - self.started, 3), "recap": summary,
                     "per_host_seconds": {h: round(s, 3) for h, s in sorted(self.per_host.items())},
                     "slowest_tasks": [[k, round(v, 3)] for k, v in slowest],
                     "tasks_run": len(self.records),
                     "remote_tasks": sum(1 for r in self.records if r["status"] != "skipped"
                                         and r["action"] not in LOCAL_ACTIONS)})


# Actions that run on the controller only (no module is sent to the host).
LOCAL_ACTIONS = frozenset({
    "ansible.builtin.assert", "assert", "ansible.builtin.set_fact", "set_fact", "ansible.builtin.debug", "debug",
    "ansible.builtin.meta", "meta", "ansible.builtin.include_role", "include_role", "ansible.builtin.import_role",
    "ansible.builtin.include_tasks", "include_tasks", "ansible.builtin.fail", "fail", "ansible.builtin.add_host",
    "ansible.builtin.group_by", "ansible.builtin.pause", "ansible.builtin.include_vars", "include_vars",
})
