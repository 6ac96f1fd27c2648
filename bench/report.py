"""Write one benchmark's section of docs/benchmarks.md (between BEGIN/END markers), keeping the others, and its
results file bench/results/NAME.json (its own, or one several benchmarks share, keeping their figures)."""

from __future__ import annotations

import datetime
import json
import re
import subprocess
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"
FOLDER = Path(__file__).resolve().parent / "results"  # bench/results/NAME.json, one per benchmark or shared
LAB = "QEMU TCG lab (docs/lab.md)"
HEADER = """# Benchmarks

Each section is written by one benchmark script in `bench/`, measured in one run on the lab (QEMU
with software emulation, TCG) or on the host, and names its baseline. This machine is shared and
noisy and the lab is emulated: compare the ratios, not the absolute times.
"""


def write_section(name: str, rows: list[str], results: Path = RESULTS) -> None:
    text = results.read_text() if results.exists() else HEADER
    begin, end = f"<!-- BEGIN {name} -->", f"<!-- END {name} -->"
    block = "\n".join([begin, *rows, end])
    if begin in text:
        text = re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: block, text, flags=re.S)
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    results.write_text(text)


def commit() -> str:
    """The checkout's commit (short), recorded with each run's figures."""
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[1]).stdout.strip()


def now() -> str:
    """The time of a run, UTC, as the results files record it."""
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def write_json(name: str, document: dict, folder: Path = FOLDER) -> Path:
    """bench/results/NAME.json: date, commit, lab, figures and ratios of one benchmark run."""
    missing = {"date", "commit", "lab", "figures", "ratios"} - set(document)
    if missing:
        raise ValueError(f"bench/results/{name}.json lacks {sorted(missing)}")
    path = folder / f"{name}.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
    return path


def merge_json(name: str, run: str, figures: dict, ratios: dict, record: dict, *, measured: str | None = None,
               lab: str = LAB, folder: Path = FOLDER) -> Path:
    """One benchmark's run merged into bench/results/NAME.json, a file several benchmarks share (attach.json,
    issue 29), which is written again with write_json.

    The file's figures and ratios that this run did not give (other benchmarks', or its own it did not measure
    this time) are kept, the ones it gave replaced; its other keys are kept. runs[RUN] becomes RECORD with this
    run's date and commit. date and commit become this run's (``measured``: the checkout measured, by default
    the current one); lab stays the file's, ``lab`` when it has none."""
    path = folder / f"{name}.json"
    doc = json.loads(path.read_text()) if path.exists() else {}
    when, checkout = now(), commit() if measured is None else measured
    runs = dict(doc.get("runs", {}))
    runs[run] = {**record, "date": when, "commit": checkout}
    doc.update({"date": when, "commit": checkout, "lab": doc.get("lab") or lab,
                "figures": {**doc.get("figures", {}), **figures}, "ratios": {**doc.get("ratios", {}), **ratios},
                "runs": runs})
    return write_json(name, doc, folder)
