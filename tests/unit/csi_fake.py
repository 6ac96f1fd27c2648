"""A GPU node simulated for the CSI plugin's unit tests: the agent's simulated node (node_fake.FakeNode) with a mount
table that also holds bind mounts, stacked per path as the kernel stacks them, and answers what
fabric_core.node.binds asks (findmnt with its columns, mount --bind, the read-only remount, umount of the top
layer, mkdir/rmdir of the kubelet's paths, df). Faults: ``fail_remount`` (the read-only remount fails),
``stale(path)`` (a mount of a device that went away left at a path, under whatever comes next)."""

from __future__ import annotations

from fabric_core.node.binds import COLUMNS
from node_fake import FakeNode

AGENT_VFS = ("ro", "nosuid", "nodev", "relatime")  # a read-only mount's per-mount flags, as findmnt shows them
USAGE = "     1B-blocks    Used Avail Inodes IUsed IFree\n  67108864 1048576 66060288 16384 12 16372\n"


class CsiNode(FakeNode):
    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.layers: dict = {}  # path -> [(device, root, options)], the bottom one first: the binds and strays
        self.dirs: set = set()
        self.fail_remount = False

    # ---- the model
    def device_of(self, point: str) -> str:
        """MAJ:MIN of the agent's mount at a point (its disk: /dev/sdX -> 8:16*X)."""
        source = self._dev_of(self.mounts[point][0])
        return f"8:{16 * (ord(source[-1]) - ord('a'))}"

    def stack(self, path: str) -> list:
        base = [(self.device_of(path), "/", AGENT_VFS)] if path in self.mounts else []
        return base + self.layers.get(path, [])

    def stale(self, path: str, device: str = "8:240") -> None:
        self.layers.setdefault(path, []).append((device, "/", AGENT_VFS))
        self.dirs.add(path)

    def _lines(self, paths) -> str:
        return "".join(f"{p.replace(' ', chr(92) + 'x20')} {d} {r} {','.join(o)}\n"
                       for p in paths for d, r, o in self.stack(p))

    # ---- the commands binds runs (the rest: the agent's simulated node)
    def _run(self, argv, data):  # noqa: C901 - one branch per command, as a node would answer
        a = list(argv)
        if a[:4] == ["findmnt", "-rn", "-o", COLUMNS]:
            self.seen.append(a)
            if "--mountpoint" in a:
                path = a[a.index("--mountpoint") + 1]
                text = self._lines([path])
                return (0, text, "") if text else (1, "", "")
            return 0, self._lines(sorted(set(self.mounts) | set(self.layers))), ""
        if a[:2] == ["mount", "--bind"]:
            self.seen.append(a)
            source, target = a[2], a[3]
            top = self.stack(source)[-1]
            self.layers.setdefault(target, []).append(top)
            return 0, "", ""
        if a[:2] == ["mount", "-o"] and a[2].startswith("remount,bind,"):
            self.seen.append(a)
            if self.fail_remount:
                return 32, "", "mount: /x: permission denied.\n"
            device, root, _old = self.layers[a[3]][-1]
            self.layers[a[3]][-1] = (device, root, tuple(a[2].split(",")[2:]))
            return 0, "", ""
        if a[:1] == ["umount"] and len(a) == 2:
            self.seen.append(a)
            if self.layers.get(a[1]):
                self.layers[a[1]].pop()
                if not self.layers[a[1]]:
                    del self.layers[a[1]]
                return 0, "", ""
            return 32, "", f"umount: {a[1]}: not mounted.\n"
        if a[:2] == ["mkdir", "-p"]:
            self.seen.append(a)
            self.dirs.add(a[2])
            return 0, "", ""
        if a[:1] == ["rmdir"] and a[1] in self.dirs:
            self.seen.append(a)
            if a[1] in self.layers:
                return 1, "", f"rmdir: failed to remove '{a[1]}': Device or resource busy\n"
            self.dirs.discard(a[1])
            return 0, "", ""
        if a[:2] == ["test", "-d"] and (a[2] in self.dirs or a[2] in self.layers):
            self.seen.append(a)
            return 0, "", ""
        if a[:1] == ["df"]:
            self.seen.append(a)
            return (0, USAGE, "") if self.stack(a[-1]) else (1, "", "df: no file system\n")
        return super()._run(argv, data)

    def binds(self) -> dict:
        """path -> [(device, root, options)] of every path holding a bind or a stray mount."""
        return {p: list(v) for p, v in self.layers.items()}
