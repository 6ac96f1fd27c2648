"""Which shard of the integration run collects which test file (tests/run-shards, FABRIC_TEST_SHARD=K/N).

One lab keeps about one of the machine's two cores busy (its guests' emulated CPUs, one busy at a time while a
test waits on it), so two labs side by side use the other. Files are dealt by their seconds (measured on this
project's machine kind, docs/testing.md), the longest first, each to the shard with the fewest seconds so far; the
files that boot storage2 go together (one boot of it, not one per shard). A file not in the table counts
DEFAULT_SECONDS. Any file still runs alone and in any shard: this only decides which run collects it.
"""

from __future__ import annotations

# seconds per file on this project's machine kind with the other shard's lab running beside it (two labs on two
# cores run each file 1.3-1.9 times its one-lab seconds): `make test` on a clean clone at 84a33d3 (docs/testing.md),
# with the set-up every shard pays (the lab's boot and one converge, 744 s there) taken out of its first file
# (test_checkpoints.py, test_csi.py; pytest's seconds per file); test_site.py carries what Molecule's sequence costs
# beyond one converge (about 150 s; a shard that does not collect it converges its lab with one site run).
# test_reboot.py carries storage2's boot and converge. Files outside `make test` keep their one-lab seconds.
SECONDS = {
    "test_agent.py": 1320, "test_checkpoints.py": 369, "test_csi.py": 880, "test_fabricctl.py": 562,
    "test_health.py": 83, "test_iscsi_initiator.py": 300, "test_lab.py": 79, "test_lab_lifecycle.py": 120,
    "test_lio_target.py": 150, "test_packaging.py": 330, "test_read_bench.py": 90, "test_reboot.py": 732,
    "test_replication.py": 780, "test_security.py": 703, "test_security_leftovers.py": 160,
    "test_security_reservations.py": 194, "test_security_secrets.py": 40, "test_security_stall.py": 125,
    "test_site.py": 265, "test_site_invariants.py": 41, "test_slurm.py": 348, "test_storage2.py": 22,
    "test_versions.py": 390,
}
DEFAULT_SECONDS = 300
# the files that boot storage2 (the `storage2` fixture): one shard boots it for them all
TOGETHER = {"test_agent.py": "storage2", "test_reboot.py": "storage2", "test_replication.py": "storage2",
            "test_storage2.py": "storage2"}


def shard_of(files, count: int) -> dict:
    """File name -> its shard (1..count): the files (or groups of files that go together) dealt longest first,
    each to the shard with the fewest seconds so far (ties to the lower shard). Pure: every shard computes the
    same answer from the same collected files."""
    units: dict = {}
    for name in sorted(files):
        units.setdefault(TOGETHER.get(name, name), []).append(name)
    load = [0.0] * count
    out = {}
    weight = {key: sum(SECONDS.get(n, DEFAULT_SECONDS) for n in names) for key, names in units.items()}
    for key in sorted(units, key=lambda k: (-weight[k], k)):
        shard = min(range(count), key=lambda i: (load[i], i))
        load[shard] += weight[key]
        out.update({name: shard + 1 for name in units[key]})
    return out


def parse_shard(text: str | None) -> tuple[int, int] | None:
    """FABRIC_TEST_SHARD "K/N" -> (K, N); None when unset. Anything else is refused with the fix."""
    if not text:
        return None
    k, _, n = text.partition("/")
    if not (k.isdigit() and n.isdigit() and 1 <= int(k) <= int(n)):
        raise ValueError(f"FABRIC_TEST_SHARD={text!r} is not K/N with 1 <= K <= N (e.g. 1/2); "
                         "unset it to run every file in one run")
    return int(k), int(n)
