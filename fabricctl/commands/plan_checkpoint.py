"""Plan a training job's checkpoints: their size, the write bandwidth a checkpoint needs and the read
bandwidth a restore needs, against what the fabric measured; names the bottleneck.

The model (fabric_core/services/ckplan.py):
  size      = parameters x bytes per parameter. Default 14 bytes: mixed-precision training with Adam
              saves fp32 master weights (4) + Adam's two moments in fp32 (4 + 4) + the bf16 weights (2);
              gradients are not saved (--bytes-per-param 2 for bf16 weights only).
  write     a checkpoint may take at most --budget-percent of the interval (default 5 %: 3 minutes of
            an hour): it needs size / that window, from all ranks together.
  restore   each of the --ranks ranks reads the whole checkpoint (no sharded restore: with one, give
            --ranks 1), so R x size bytes, within --restore-within (default: the same --budget-percent
            of the interval).
Bandwidths are in decimal units (1 GB/s = 10^9 bytes/s). The measured figures come from the
benchmarks' results files, bench/results/checkpoint.json (make bench-checkpoint: the checkpoint
writer's MB/s) and bench/results/read.json (make bench-read: the coldest epoch of bench/read_loader.py);
a missing one is reported as not measured yet. Nothing on the node is read or changed; no config needed.

Examples:
  fabricctl plan checkpoint --params 175B --interval 1h
  fabricctl plan checkpoint --params 7B --interval 30m --ranks 64 --restore-within 10m
  fabricctl plan checkpoint --params 70e9 --interval 1h30m --budget-percent 2 --json
"""

from __future__ import annotations

import json
from pathlib import Path

from fabric_core.base.errors import UserError
from fabric_core.base.units import format_duration, parse_count, parse_duration, si_bytes
from fabric_core.services import ckplan

from ..output import print_rows

PATH = ("plan", "checkpoint")
HELP = "checkpoint size and the write/restore bandwidth it needs, against the measured (pure arithmetic)"
MUTATING = False  # reads nothing on the node: no node lock, no journal record

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"


def configure(p) -> None:
    p.add_argument("--params", required=True, metavar="N",
                   help="the model's parameters: 175e9, 175B (billions), 70M (millions), 1.5T")
    p.add_argument("--interval", required=True, metavar="DURATION",
                   help="time between checkpoints: 1h, 30m, 3600s, 1h30m")
    p.add_argument("--ranks", default="1", metavar="R",
                   help="ranks that each read the whole checkpoint on a restore (default 1; 1 for a sharded restore)")
    p.add_argument("--bytes-per-param", default=str(ckplan.BYTES_PER_PARAM), metavar="B",
                   help=f"checkpoint bytes per parameter (default {ckplan.BYTES_PER_PARAM}: fp32 master weights 4 + "
                        "Adam moments 4 + 4 + bf16 weights 2)")
    p.add_argument("--budget-percent", default=f"{ckplan.BUDGET_PERCENT:g}", metavar="P",
                   help=f"share of the interval a checkpoint may take (default {ckplan.BUDGET_PERCENT:g})")
    p.add_argument("--restore-within", metavar="DURATION",
                   help="time a restore may take (default: --budget-percent of the interval)")
    p.add_argument("--results", metavar="DIR", default=str(RESULTS),
                   help="the benchmarks' results directory (default: bench/results of this checkout)")


def _number(text: str, what: str, fix: str) -> float:
    try:
        return float(str(text).strip().removesuffix("%"))
    except ValueError:
        raise UserError(f"invalid {what} {text!r}", fix) from None


def _ranks(text: str) -> int:
    value = parse_count(text, "number of ranks (--ranks)")
    if value != int(value):
        raise UserError(f"the number of ranks (--ranks) must be a whole number, got {text!r}",
                        "give how many ranks read the checkpoint on a restore, e.g. 8")
    return int(value)


def load_results(directory: str | Path) -> tuple[dict, list[str]]:
    """The results documents by name (checkpoint, read), None when the file does not exist, and notes on
    files that exist but do not read as JSON (those count as not measured)."""
    docs: dict = {}
    notes: list[str] = []
    for name in {s[0] for s in ckplan.SOURCES.values()}:
        path = Path(directory) / f"{name}.json"
        try:
            docs[name] = json.loads(path.read_text())
        except FileNotFoundError:
            docs[name] = None
        except (OSError, ValueError) as exc:
            docs[name] = {}
            notes.append(f"{path} does not read as a results document ({exc})")
    return docs, notes


def build(args) -> ckplan.Plan:
    params = parse_count(args.params, "number of parameters (--params)")
    interval = parse_duration(args.interval, "checkpoint interval (--interval)")
    restore = None
    if args.restore_within is not None:
        restore = parse_duration(args.restore_within, "restore budget (--restore-within)")
    per_param = _number(args.bytes_per_param, "bytes per parameter (--bytes-per-param)",
                        "give a number such as 14 or 2")
    percent = _number(args.budget_percent, "checkpoint budget (--budget-percent)", "give a percentage such as 5")
    ranks = _ranks(args.ranks)
    docs, notes = load_results(args.results)
    measured, missing = ckplan.measured_from_results(docs)
    return ckplan.plan(params, interval, ranks=ranks, bytes_per_param=per_param, budget_percent=percent,
                       restore_seconds=restore, measured=measured, notes=(*notes, *missing))


def _rate(mb_s: float | None) -> str:
    return "-" if mb_s is None else si_bytes(mb_s * ckplan.MB) + "/s"


def lines(p: ckplan.Plan) -> list[list[str]]:
    interval = format_duration(p.interval_seconds)
    rows = []
    for v in (p.write, p.restore):
        share = f"{p.budget_percent:g}% of {interval}"
        within = format_duration(v.need.seconds)
        if v.need.side == ckplan.WRITE or p.restore_default:
            within += f" ({share})"
        rows.append([v.need.side, si_bytes(v.need.bytes), within, _rate(v.need.mb_s),
                     _rate(None if v.measured is None else v.measured.mb_s),
                     "-" if v.headroom is None else f"{v.headroom:.2f}x", v.status])
    return rows


def run(ctx, args) -> int:
    p = build(args)
    if args.json:
        ctx.emit({**p.to_dict(), "results_dir": args.results})
        return 0
    ranks = f"{p.ranks} rank{'s' if p.ranks != 1 else ''}"
    print(f"checkpoint: {p.params:,.0f} parameters x {p.bytes_per_param:g} bytes = {si_bytes(p.checkpoint_bytes)} "
          f"every {format_duration(p.interval_seconds)}; a restore reads it on {ranks} "
          f"({si_bytes(p.restore.need.bytes)})")
    print()
    print_rows(lines(p), ["SIDE", "BYTES", "WITHIN", "NEEDS", "MEASURED", "HEADROOM", "STATUS"])
    print()
    print(f"bottleneck: {p.bottleneck}")
    for v in (p.write, p.restore):
        if v.measured is not None:
            run_text = f" ({v.measured.run})" if v.measured.run else ""
            print(f"{v.need.side} measured: {v.measured.source}{run_text}")
    for note in p.notes:
        print(note)
    return 0
