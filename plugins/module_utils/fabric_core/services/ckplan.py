"""The checkpoint planner (`fabricctl plan checkpoint`): how big a training job's checkpoint is, the write
bandwidth that saving one needs and the read bandwidth that restoring it needs, against what the fabric
measured. Pure arithmetic, no I/O: the command reads the benchmarks' results files and passes their
documents in.

The model, kept simple on purpose:

- **Size** = parameters x bytes per parameter. The default, 14 bytes, is mixed-precision training with Adam:
  fp32 master weights (4) + Adam's first and second moments in fp32 (4 + 4) + the bf16 weights the
  model computes with (2). Gradients are not saved. A job that keeps only bf16 weights writes 2; one that
  also saves fp32 gradients writes 18.
- **Write**: a checkpoint may take at most ``budget_percent`` of the checkpoint interval (default 5 %: a
  one-hour interval leaves 3 minutes), so it needs size / window bytes per second, from all ranks
  together (how the job splits the writing among its ranks does not change the total).
- **Restore**: every one of the job's R ranks reads the whole checkpoint (no sharded restore), so a
  restore reads R x size bytes. It must finish within the restore budget, by default the same share of
  the interval as a write (a failure then costs no more time than a checkpoint does); an explicit
  duration can be given instead. A job that restores sharded (each rank its own 1/R) reads 1 x size:
  give ``ranks=1``.
- **Measured**: MB/s with MB = 10^6 bytes, as the benchmarks report them. The write figure comes from
  bench/results/checkpoint.json (``make bench-checkpoint``), the read figure from bench/results/read.json
  (``make bench-read``); see ``measured_from_results`` for the keys read. A side whose figure is missing
  is "not measured yet"; the bottleneck is the side (or sides) whose need exceeds its measured bandwidth.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..base.errors import UserError

# fp32 master weights + Adam m + Adam v (fp32 each) + bf16 weights
BYTES_PER_PARAM = 4 + 4 + 4 + 2
BUDGET_PERCENT = 5.0
MB = 1e6  # bandwidths in MB/s, MB = 10^6 bytes (as the benchmarks report them)

WRITE, RESTORE = "write", "restore"
# where each side's figure comes from: results file (bench/results/NAME.json) and the make target that writes it
SOURCES = {WRITE: ("checkpoint", "make bench-checkpoint"), RESTORE: ("read", "make bench-read")}


@dataclass(frozen=True)
class Need:
    """One side of the plan: ``bytes`` to move within ``seconds``."""

    side: str
    bytes: float
    seconds: float

    @property
    def bytes_per_second(self) -> float:
        return self.bytes / self.seconds

    @property
    def mb_s(self) -> float:
        return self.bytes_per_second / MB


@dataclass(frozen=True)
class Measured:
    """A bandwidth the fabric measured: MB/s, where it comes from (file, key) and the run (date, commit, lab)."""

    mb_s: float
    source: str
    run: str = ""


@dataclass(frozen=True)
class Verdict:
    need: Need
    measured: Measured | None
    command: str  # the make target that measures this side

    @property
    def headroom(self) -> float | None:
        """measured / needed (below 1: too slow); None when not measured."""
        return None if self.measured is None else self.measured.mb_s / self.need.mb_s

    @property
    def status(self) -> str:
        if self.measured is None:
            return "not measured"
        return "ok" if self.measured.mb_s >= self.need.mb_s else "too slow"

    def to_dict(self) -> dict[str, Any]:
        return {"bytes": self.need.bytes, "seconds": self.need.seconds, "needed_mb_s": round(self.need.mb_s, 3),
                "measured_mb_s": None if self.measured is None else self.measured.mb_s,
                "measured_from": None if self.measured is None else self.measured.source,
                "measured_run": None if self.measured is None else self.measured.run,
                "headroom": None if self.headroom is None else round(self.headroom, 4),
                "status": self.status, "measure_with": self.command}


@dataclass(frozen=True)
class Plan:
    params: float
    bytes_per_param: float
    ranks: int
    interval_seconds: float
    budget_percent: float
    restore_seconds: float
    restore_default: bool  # the restore budget is budget_percent of the interval (not given)
    write: Verdict
    restore: Verdict
    notes: tuple[str, ...] = field(default=())

    @property
    def checkpoint_bytes(self) -> float:
        return self.params * self.bytes_per_param

    @property
    def bottlenecks(self) -> list[str]:
        return [v.need.side for v in (self.write, self.restore) if v.status == "too slow"]

    @property
    def bottleneck(self) -> str:
        """'write bandwidth', 'restore bandwidth', both joined by 'and', 'none', or 'unknown' (a side that is
        not too slow as far as is known, but not measured)."""
        slow = self.bottlenecks
        if slow:
            return " and ".join(slow) + " bandwidth"
        if any(v.measured is None for v in (self.write, self.restore)):
            return "unknown"
        return "none"

    def to_dict(self) -> dict[str, Any]:
        return {"params": self.params, "bytes_per_param": self.bytes_per_param, "ranks": self.ranks,
                "interval_seconds": self.interval_seconds, "budget_percent": self.budget_percent,
                "checkpoint_bytes": self.checkpoint_bytes, "restore_seconds": self.restore_seconds,
                "restore_budget": "budget_percent of the interval" if self.restore_default else "given",
                "write": self.write.to_dict(), "restore": self.restore.to_dict(),
                "bottleneck": self.bottleneck, "notes": list(self.notes), "mb": MB}


def _positive(value: float, what: str, fix: str) -> float:
    if not value > 0:  # also NaN
        raise UserError(f"{what} must be more than 0, got {value:g}", fix)
    return value


def plan(params: float, interval_seconds: float, *, ranks: int = 1, bytes_per_param: float = BYTES_PER_PARAM,
         budget_percent: float = BUDGET_PERCENT, restore_seconds: float | None = None,
         measured: Mapping[str, Measured | None] | None = None, notes: tuple[str, ...] = ()) -> Plan:
    """The plan of a job with ``params`` parameters checkpointing every ``interval_seconds`` on ``ranks``
    ranks, against ``measured`` ({"write": Measured, "restore": Measured}, either may be missing)."""
    _positive(params, "the number of parameters (--params)", "give the model's parameter count, e.g. 175B or 7e9")
    _positive(interval_seconds, "the checkpoint interval (--interval)", "give a duration such as 1h or 30m")
    _positive(bytes_per_param, "the bytes per parameter (--bytes-per-param)",
              f"leave the default ({BYTES_PER_PARAM}: fp32 weights + Adam moments + bf16 weights) or give e.g. 2")
    if not 0 < budget_percent <= 100:
        raise UserError(f"the checkpoint budget (--budget-percent) must be more than 0 and at most 100, got "
                        f"{budget_percent:g}", f"give the share of the interval a checkpoint may take, e.g. "
                        f"{BUDGET_PERCENT:g}")
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1:
        raise UserError(f"the number of ranks (--ranks) must be a whole number of at least 1, got {ranks!r}",
                        "give how many ranks read the checkpoint on a restore, e.g. 8")
    default = restore_seconds is None
    if default:
        restore_seconds = interval_seconds * budget_percent / 100
    _positive(restore_seconds, "the restore budget (--restore-within)", "give a duration such as 3m or 10m")
    size = params * bytes_per_param
    measured = measured or {}
    write = Verdict(Need(WRITE, size, interval_seconds * budget_percent / 100), measured.get(WRITE), SOURCES[WRITE][1])
    restore = Verdict(Need(RESTORE, size * ranks, restore_seconds), measured.get(RESTORE), SOURCES[RESTORE][1])
    return Plan(params, bytes_per_param, ranks, interval_seconds, budget_percent, restore_seconds, default,
                write, restore, tuple(notes))


# ---- the benchmarks' figures ---------------------------------------------------------------------------

def _number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        return None
    return float(value)


def _run(doc: Mapping) -> str:
    parts = [str(doc[k]) for k in ("date", "commit") if doc.get(k)]
    lab = doc.get("lab")
    return ", ".join(parts) + (f" on {lab}" if lab else "")


def write_mb_s(doc: Mapping) -> tuple[float, str] | None:
    """The write bandwidth of bench/results/checkpoint.json: figures.write_mb_s when the benchmark states it;
    else its checkpoint writer runs (figures.freeze, each with mb_s: 1 GiB written with O_DIRECT): the run of
    the writer alone (step null, the baseline), else the median of the runs."""
    figures = doc.get("figures")
    if not isinstance(figures, Mapping):
        return None
    direct = _number(figures.get("write_mb_s"))
    if direct is not None:
        return direct, "figures.write_mb_s"
    runs = [r for r in figures.get("freeze") or [] if isinstance(r, Mapping) and _number(r.get("mb_s"))]
    alone = [r for r in runs if r.get("step") is None]
    if alone:
        return float(alone[0]["mb_s"]), "figures.freeze[writer alone].mb_s"
    if runs:
        return float(statistics.median(r["mb_s"] for r in runs)), "median of figures.freeze[].mb_s"
    return None


def read_mb_s(doc: Mapping) -> tuple[float, str] | None:
    """The read bandwidth of bench/results/read.json: figures.read_mb_s when the benchmark states it; else
    `make bench-read`'s shards (64-256 MiB files, checkpoint-like) read over iSCSI by 8 workers from a cold ARC
    and L2ARC; else the epochs of bench/read_loader.py's document (figures.epochs, or figures.loader.epochs,
    each with mb_s): the slowest epoch, the cold one, as a restore reads a checkpoint that is not in any
    cache."""
    figures = doc.get("figures")
    if not isinstance(figures, Mapping):
        return None
    direct = _number(figures.get("read_mb_s"))
    if direct is not None:
        return direct, "figures.read_mb_s"
    shards = figures.get("shards")  # make bench-read: checkpoint-sized files read cold over iSCSI, as a restore is
    cold = shards.get("iscsi-ext4", {}).get("8w_epoch1", {}) if isinstance(shards, Mapping) else {}
    if isinstance(cold, Mapping) and _number(cold.get("mb_s")) is not None:
        return float(cold["mb_s"]), "figures.shards.iscsi-ext4.8w_epoch1.mb_s (shards read cold over iSCSI)"
    for key in ("epochs", "loader"):
        epochs = figures.get(key)
        if isinstance(epochs, Mapping):
            epochs = epochs.get("epochs")
        rates = [_number(e.get("mb_s")) for e in epochs or [] if isinstance(e, Mapping)]
        rates = [r for r in rates if r is not None]
        if rates:
            where = "figures.epochs" if key == "epochs" else "figures.loader.epochs"
            return min(rates), f"slowest of {where}[].mb_s"
    return None


def measured_from_results(documents: Mapping[str, Any]) -> tuple[dict[str, Measured | None], list[str]]:
    """The measured write and restore bandwidths from the results documents by name ({"checkpoint": doc,
    "read": doc}; a missing one is None), and notes: what is not measured yet, and how to measure it."""
    measured: dict[str, Measured | None] = {}
    notes: list[str] = []
    for side, find in ((WRITE, write_mb_s), (RESTORE, read_mb_s)):
        name, command = SOURCES[side]
        doc = documents.get(name)
        found = find(doc) if isinstance(doc, Mapping) else None
        if found is None:
            measured[side] = None
            why = "no bench/results/" if doc is None else "no bandwidth figure in bench/results/"
            notes.append(f"{side} bandwidth not measured yet ({why}{name}.json): run {command}")
            continue
        mb_s, key = found
        measured[side] = Measured(mb_s, f"bench/results/{name}.json {key}", _run(doc))
    return measured, notes
