"""A GPU node simulated for the agent's unit tests: the commands fabric_core.node runs (iscsiadm, mount,
systemctl, findmnt, ...) change and answer a small model of the node (sessions, node records, mounts, unit
files), and the storage nodes it reaches say which targets they grant it (iscsiadm's exit 24 otherwise) and
whether they answer at all. The output formats are the ones the core's parsers read (recorded from open-iscsi
and util-linux in tests/unit/data)."""

from __future__ import annotations

import json

from fabric_core.base.runner import Runner

UNIT_DIR = "/etc/systemd/system"


class FakeNode(Runner):
    def __init__(self, initiator: str, *, grants: dict | None = None, down: tuple = (), dry_run: bool = False,
                 unknown_rc: int = 24):
        super().__init__(dry_run=dry_run)
        # a login to a target the portal does not grant: 24 (LIO: no ACL for this host), or what LIO's "target error
        # (03/01)" for a target it does not have ends as after open-iscsi's retries (5, or 8 when it timed out)
        self.unknown_rc = unknown_rc
        self.initiator = initiator
        self.grants = {p: set(t) for p, t in (grants or {}).items()}  # portal -> targets granted to this host
        self.down = set(down)  # portals that do not answer
        self.records: dict = {}  # (target, portal) -> {key: value}
        self.sessions: dict = {}  # (target, portal) -> "sdX"
        self.mounts: dict = {}  # mountpoint -> (source, fstype, options)
        self.files: dict = {}  # unit files and links: path -> text
        self.busy: dict = {}  # mountpoint -> ["PID COMMAND"]
        self.transient: set = set()  # mount points of runtime mounts (mount -t)
        self.loaded: dict = {}  # unit -> the unit file's text when systemd loaded it (start, show; daemon-reload)
        self.seen: list = []
        self.disks = 0

    # ---- helpers
    def _disk(self, target, portal):
        return self.sessions.get((target, portal))

    def _by_path(self, target, portal):
        return f"/dev/disk/by-path/ip-{portal}-iscsi-{target}-lun-0"

    def _session_text(self):
        lines = [f"tcp: [{i}] {p},1 {t} (non-flash)" for i, (t, p) in enumerate(sorted(self.sessions), 1)]
        return "\n".join(lines) + "\n"

    def _mount(self, source, point, fstype, options):
        self.mounts[point] = (source, fstype, options)

    # ---- the commands
    def _run(self, argv, data):  # noqa: C901 - one branch per command, as a node would answer
        argv = list(argv)
        self.seen.append(argv)
        a = argv
        if a[:2] == ["cat", "/etc/iscsi/initiatorname.iscsi"]:
            return 0, f"InitiatorName={self.initiator}\n", ""
        if a[:3] == ["systemctl", "is-active", "multipathd.service"]:
            return 3, "inactive\n", ""
        if a[:3] == ["iscsiadm", "-m", "session"]:
            return (0, self._session_text(), "") if self.sessions else (21, "", "iscsiadm: No active sessions.\n")
        if a == ["iscsiadm", "-m", "node"]:
            if not self.records:
                return 21, "", "iscsiadm: No records found\n"
            return 0, "".join(f"{p},1 {t}\n" for t, p in sorted(self.records)), ""
        if a[:3] == ["iscsiadm", "-m", "node"] and "-T" in a:
            # the portal with or without a TPG tag (ADDRESS:PORT,TAG) names the same record, as in iscsiadm
            target, portal = a[a.index("-T") + 1], a[a.index("-p") + 1].split(",")[0]
            key = (target, portal)
            rest = a[7:]
            if rest in ([], ["-S"]):
                if key not in self.records:
                    return 21, "", "iscsiadm: No records found\n"
                return 0, "".join(f"{k} = {v}\n" for k, v in self.records[key].items()), ""
            if rest == ["-o", "new"]:
                self.records[key] = {"node.startup": "automatic"}
                return 0, "New iSCSI node [tcp:[hw=,ip=,net_if=,iscsi_if=default] ...] added\n", ""
            if rest[:2] == ["-o", "update"]:  # any number of -n NAME -v VALUE pairs
                pairs = rest[2:]
                assert pairs and len(pairs) % 4 == 0 and pairs[0::4] == ["-n"] * (len(pairs) // 4), a
                self.records[key].update(zip(pairs[1::4], pairs[3::4], strict=True))
                return 0, "", ""
            if rest == ["--login"]:
                if portal in self.down:
                    return 8, "", "iscsiadm: Could not login: transport timeout\n"
                if target not in self.grants.get(portal, ()):
                    if self.unknown_rc != 24:
                        return self.unknown_rc, "", "iscsiadm: Could not log into all portals\n"
                    return 24, "", "iscsiadm: Login failed due to authorization failure\n"
                self.disks += 1
                self.sessions[key] = f"sd{chr(ord('a') + self.disks)}"
                return 0, "Login successful.\n", ""
            if rest == ["--logout"]:
                self.sessions.pop(key, None)
                return 0, "Logout successful.\n", ""
            if rest == ["-o", "delete"]:
                self.records.pop(key, None)
                return 0, "", ""
            raise AssertionError(f"unexpected iscsiadm {a}")
        if a[:2] == ["python3", "-c"]:  # the node record writer: secrets from stdin
            target, address, port = a[3], a[4], a[5]
            key = (target, f"{address}:{port}")
            if key not in self.records:
                return 2, "", "no node record\n"
            self.records[key].update(json.loads(data))
            return 0, "1\n", ""
        if a[:2] in (["udevadm", "settle"], ["udevadm", "wait"]):
            return 0, "", ""
        if a[:3] == ["timeout", "3", "bash"] and a[4] == 'exec 3<>"/dev/tcp/$0/$1"':  # the agent's TCP probe
            return (1, "", "") if f"{a[5]}:{a[6]}" in self.down else (0, "", "")
        if a[:2] == ["readlink", "-e"]:
            for (t, p), disk in self.sessions.items():
                if self._by_path(t, p) == a[2]:
                    return 0, f"/dev/{disk}\n", ""
            return 1, "", ""
        if a[:1] == ["readlink"]:
            return (0, self.files[a[1]] + "\n", "") if a[1] in self.files else (1, "", "")
        if a[:1] == ["lsblk"]:
            dev = a[-1]
            points = [p for p, (src, _f, _o) in self.mounts.items() if self._dev_of(src) == dev]
            return 0, "".join(p + "\n" for p in points), ""
        if a[:1] == ["blkid"]:
            return 0, "ext4\n", ""
        if a[:1] == ["findmnt"]:
            if "--mountpoint" in a:
                point = a[a.index("--mountpoint") + 1]
                if point not in self.mounts:
                    return 1, "", ""
                src, fstype, options = self.mounts[point]
                return 0, f"{self._dev_of(src)} {fstype} {options}\n", ""
            return 0, "".join(p + "\n" for p in sorted(self.mounts)), ""
        if a[:3] == ["mount", "--mkdir", "-t"]:  # a runtime mount: mount --mkdir -t FSTYPE -o OPTIONS DEVICE POINT
            assert a[4] == "-o" and len(a) == 8, a
            device, point = a[6], a[7]
            if device not in self._devices():
                return 32, "", f"mount: {point}: special device {device} does not exist.\n"
            self._mount(device, point, a[3], a[5])
            self.transient.add(point)
            return 0, "", ""
        if a[:2] == ["bash", "-c"] and a[3] == "fabric-disk":  # devices.wait_for_disk: sysfs, the session's disk
            target, address, port = a[4], a[5], a[6]
            disk = self.sessions.get((target, f"{address}:{port}"))
            return (0, f"/dev/{disk}\n", "") if disk else (1, "", "")
        if a[:1] == ["cat"]:
            return (0, self.files[a[1]], "") if a[1] in self.files else (1, "", "No such file or directory\n")
        if a[:4] == ["install", "-D", "-m", "0644"]:
            self.files[a[5]] = data
            return 0, "", ""
        if a[:2] == ["systemctl", "is-enabled"]:
            return (0, "enabled\n", "") if f"{UNIT_DIR}/remote-fs.target.wants/{a[2]}" in self.files else \
                (1, "disabled\n", "")
        if a[:2] == ["systemctl", "enable"]:
            self.files[f"{UNIT_DIR}/remote-fs.target.wants/{a[2]}"] = f"{UNIT_DIR}/{a[2]}"
            return 0, "", ""
        if a[:2] == ["systemctl", "disable"]:
            self.files.pop(f"{UNIT_DIR}/remote-fs.target.wants/{a[-1]}", None)
            return 0, "", ""
        if a[:2] == ["systemctl", "show"]:
            path = f"{UNIT_DIR}/{a[-1]}"
            if path not in self.files:
                return 0, "LoadState=not-found\nNeedDaemonReload=no\n", ""
            stale = self.loaded.setdefault(a[-1], self.files[path]) != self.files[path]
            return 0, f"LoadState=loaded\nNeedDaemonReload={'yes' if stale else 'no'}\n", ""
        if a[:2] == ["systemctl", "daemon-reload"]:
            self.loaded = {u: self.files[f"{UNIT_DIR}/{u}"] for u in self.loaded if f"{UNIT_DIR}/{u}" in self.files}
            return 0, "", ""
        if a[:2] == ["systemctl", "start"]:
            # systemd starts the copy it loaded (a unit file changed since is not seen without a reload)
            text = self.loaded.setdefault(a[2], self.files[f"{UNIT_DIR}/{a[2]}"])
            field = {k: v for k, _s, v in (line.partition("=") for line in text.splitlines())}
            self._mount(field["What"], field["Where"], field["Type"], field["Options"])
            return 0, "", ""
        if a[:2] == ["systemctl", "stop"]:
            for point in [p for p in self.mounts if _unit(p) == a[2]]:
                del self.mounts[point]
                self.transient.discard(point)
            return 0, "", ""
        if a[:2] in (["systemctl", "daemon-reload"], ["systemctl", "restart"]):
            return 0, "", ""
        if a[:2] == ["umount", "-l"]:
            self.mounts.pop(a[2], None)
            return 0, "", ""
        if a[:1] == ["test"]:
            if a[1] == "-e":
                return (0, "", "") if a[2] in self.files or a[2] in self._devices() else (1, "", "")
            if a[1] == "-d":
                return (0, "", "") if a[2] in self.mounts else (1, "", "")
        if a[:2] == ["rm", "-f"]:
            self.files.pop(a[2], None)
            return 0, "", ""
        if a[:1] in (["rmdir"], ["mkdir"]):
            return 0, "", ""
        if a[:2] == ["ln", "-sfn"]:
            self.files[a[3]] = a[2]
            return 0, "", ""
        if a[:2] == ["mv", "-T"]:
            self.files[a[3]] = self.files.pop(a[2])
            return 0, "", ""
        if a[:2] == ["fuser", "-m"]:
            users = self.busy.get(a[2], [])
            return (0, " ".join(u.split()[0] for u in users) + "\n", "") if users else (1, "", "")
        if a[:1] == ["ps"]:
            wanted = a[-1].split(",")
            return 0, "".join(u + "\n" for users in self.busy.values() for u in users if u.split()[0] in wanted), ""
        if a[:2] == ["grep", "-r"]:
            out = []
            for path, text in sorted(self.files.items()):
                if path.endswith(".mount") and path.count("/") == UNIT_DIR.count("/") + 1:
                    out += [f"{path}:{line}" for line in text.splitlines()
                            if line.startswith(("# fabric-owner: ", "What=", "Where="))]
            return (0, "\n".join(out) + "\n", "") if out else (1, "", "")
        if a[:2] == ["multipathd", "show"]:
            return 1, "", "multipathd not running\n"
        raise AssertionError(f"unexpected command {a}")

    def _devices(self):  # udev's links and the kernel's disks
        return {self._by_path(t, p) for t, p in self.sessions} | {f"/dev/{d}" for d in self.sessions.values()}

    def _dev_of(self, src):
        for (t, p), disk in self.sessions.items():
            if src == self._by_path(t, p):
                return f"/dev/{disk}"
        return src


def _unit(point: str) -> str:
    from fabric_core.node import mounts  # noqa: PLC0415

    return mounts.unit_name(point)
