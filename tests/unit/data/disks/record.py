"""Record the commands disks.discover() runs on a storage node, with their real output.

Run ON the node (as root), with plugins/module_utils/fabric_core copied to /tmp/fabric_core:

    scp -F .lab/ssh_config -r plugins/module_utils/fabric_core tests/unit/data/disks/record.py storage1:/tmp/
    python3 lab/labctl.py ssh storage1 'python3 /tmp/record.py /tmp/rec/STATE'
    scp -F .lab/ssh_config -r storage1:/tmp/rec/STATE tests/unit/data/disks/

It writes STATE/commands.json (argv, rc, stdout file, stderr of every command, in order), one
file per stdout (NN-<command>.txt/.json) and STATE/discover.json (what discover() returned there).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, "/tmp")

from fabric_core.base.runner import LocalRunner  # noqa: E402
from fabric_core.storage import disks  # noqa: E402


class RecordingRunner(LocalRunner):
    def __init__(self, out: Path):
        super().__init__()
        self.out = out
        self.steps = []

    def _run(self, argv, data):
        rc, stdout, stderr = super()._run(argv, data)
        ext = ".json" if "--json" in argv or "-j" in argv else ".txt"
        fname = f"{len(self.steps) + 1:02d}-{argv[0]}{ext}"
        (self.out / fname).write_text(stdout)
        self.steps.append({"command": list(argv), "rc": rc, "stdout_file": fname, "stderr": stderr})
        return rc, stdout, stderr


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    runner = RecordingRunner(out)
    found = disks.discover(runner)
    (out / "commands.json").write_text(json.dumps(runner.steps, indent=1) + "\n")
    (out / "discover.json").write_text(json.dumps([d.to_dict() for d in found], indent=1) + "\n")
    for d in found:
        print(f"{d.name:8} {d.by_id:55} {d.disk_class:4} {d.size:>12} in_use={d.in_use} {d.reasons}")


if __name__ == "__main__":
    main()
