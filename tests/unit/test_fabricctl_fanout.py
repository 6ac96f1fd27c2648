"""fabricctl.fanout (per-host thread pool, outcomes, Ctrl-C, HostProgress) with plain functions, no SSH;
and the progress/result helpers of fabricctl.output (ProgressBar, tables, JSON, sizes)."""

from __future__ import annotations

import datetime as dt
import io
import json
import re
import signal
import threading
import time
from dataclasses import dataclass

import pytest
from fabric_core.base.errors import NotFound, UserError

from fabricctl import fanout
from fabricctl.config import Host
from fabricctl.errors import EXIT_PARTIAL, EXIT_USER, PartialFailure
from fabricctl.fanout import HostProgress, Interrupted, checkpoint, run_on_hosts
from fabricctl.output import ProgressBar, human_bytes, human_duration, print_json, print_table

HOSTS = [Host(f"gpu{i}", f"10.77.0.{20 + i}", f"iqn.2026-11.io.fabric.lab:gpu{i}") for i in range(1, 7)]


def test_every_host_runs_and_outcomes_keep_the_given_order():
    result = run_on_hosts(HOSTS, lambda h: h.address, parallel=4)
    assert [o.name for o in result.outcomes] == [h.name for h in HOSTS]
    assert result.all_ok and not result.interrupted
    assert result.values == {h.name: h.address for h in HOSTS}
    result.raise_for_partial("publish")  # nothing failed: no error


def test_hosts_really_run_in_parallel():
    barrier = threading.Barrier(3, timeout=2)  # only passes if three calls are inside fn at once
    result = run_on_hosts(HOSTS[:3], lambda h: barrier.wait(), parallel=3)
    assert result.all_ok


def test_no_more_than_parallel_hosts_at_once():
    lock = threading.Lock()
    state = {"now": 0, "max": 0}

    def fn(host):
        with lock:
            state["now"] += 1
            state["max"] = max(state["max"], state["now"])
        time.sleep(0.02)
        with lock:
            state["now"] -= 1

    result = run_on_hosts(HOSTS, fn, parallel=2, poll=0.01)
    assert result.all_ok and state["max"] == 2


def test_one_failed_host_does_not_stop_the_others_and_is_named():
    def fn(host):
        if host.name == "gpu2":
            raise NotFound("target iqn.x:imagenet-v1 not offered", "publish it first")
        return "mounted"

    result = run_on_hosts(HOSTS[:3], fn)
    assert [o.status for o in result.outcomes] == ["ok", "failed", "ok"]
    assert isinstance(result.failed[0].error, NotFound)
    with pytest.raises(PartialFailure) as exc:
        result.raise_for_partial("publish imagenet@v1")
    err = exc.value
    assert err.exit_code == EXIT_PARTIAL == 3
    text = str(err)
    assert "publish imagenet@v1 failed on 1 of 3 hosts (succeeded on gpu1, gpu3)" in text
    assert "gpu2: target iqn.x:imagenet-v1 not offered" in text and "publish it first" in text
    assert "(gpu2)" in err.fix and err.result is result


def test_all_hosts_failing_with_the_same_user_error_raise_that_error():
    def fn(host):
        raise NotFound("version imagenet@v9 does not exist", "list versions with fabricctl list")

    result = run_on_hosts(HOSTS[:3], fn)
    with pytest.raises(NotFound) as exc:
        result.raise_for_partial("publish imagenet@v9")
    assert exc.value.exit_code == EXIT_USER and "imagenet@v9" in str(exc.value)


def test_all_hosts_failing_differently_is_a_partial_failure_naming_each():
    def fn(host):
        raise UserError(f"{host.name} is unhappy") if host.name == "gpu1" else ValueError("bug")

    result = run_on_hosts(HOSTS[:2], fn)
    with pytest.raises(PartialFailure) as exc:
        result.raise_for_partial("unpublish", fix="call the lead")
    text = str(exc.value)
    assert "failed on 2 of 2 hosts:" in text and "succeeded" not in text
    assert "gpu1: gpu1 is unhappy" in text and "gpu2: unexpected error: ValueError('bug')" in text
    assert exc.value.fix == "call the lead"


def test_progress_shows_steps_done_and_failed_on_a_plain_stream():
    out = io.StringIO()
    progress = HostProgress(HOSTS[:2], title="publish imagenet@v1", stream=out, tty=False)

    def fn(host):
        progress.update(host, "discovery")
        progress.update(host, "login")
        if host.name == "gpu2":
            raise UserError("login refused: authorization failure\nmore detail")
        progress.update(host, "mount")

    result = run_on_hosts(HOSTS[:2], fn, parallel=1, progress=progress)
    lines = out.getvalue().splitlines()
    assert "\x1b" not in out.getvalue()
    took = result.outcomes[0].seconds
    assert lines == ["publish imagenet@v1",
                     "gpu1: starting", "gpu1: discovery", "gpu1: login", "gpu1: mount", f"gpu1: done in {took:.1f} s",
                     "gpu2: starting", "gpu2: discovery", "gpu2: login",
                     "gpu2: FAILED: login refused: authorization failure"]
    # each host's wall time, in the command's JSON too
    hosts = result.to_dict()
    assert hosts["gpu1"]["seconds"] == took and hosts["gpu2"]["seconds"] >= 0 and hosts["gpu2"]["status"] == "failed"


def _screen(text: str) -> list[str]:
    """What a terminal shows after our output: the block after the last cursor-up, escapes removed."""
    last = re.split(r"\x1b\[\d+A", text)[-1]
    return re.sub(r"\r|\x1b\[2K", "", last).split("\n")[:-1]


def test_progress_redraws_in_place_on_a_terminal():
    out = io.StringIO()
    progress = HostProgress(HOSTS[:2], title="publish", stream=out, tty=True)
    progress.update(HOSTS[0], "login")
    progress.update(HOSTS[1], "mount")
    progress.failed(HOSTS[1], UserError("no space left"))
    assert "\x1b[3A" in out.getvalue()  # title + two hosts: up three lines before each redraw
    assert _screen(out.getvalue()) == ["publish", "  gpu1  login", "  gpu2  FAILED: no space left"]


def test_progress_is_thread_safe():
    out = io.StringIO()
    progress = HostProgress([f"h{i}" for i in range(8)], stream=out, tty=False)

    def hammer(i):
        for n in range(200):
            progress.update(f"h{i}", f"step {n}")

    threads = [threading.Thread(target=hammer, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lines = out.getvalue().splitlines()
    assert len(lines) == 8 * 200 and all(re.fullmatch(r"h\d: step \d+", line) for line in lines)
    assert progress.steps == {f"h{i}": "step 199" for i in range(8)}


@pytest.fixture
def sigint_raises():
    """Ctrl-C raises KeyboardInterrupt, as in a terminal. A process started in the background by a
    non-interactive shell (as a CI runner may start the tests) inherits SIGINT ignored, and Python
    then leaves it ignored."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_ctrl_c_starts_no_new_host_and_lets_running_ones_finish_their_step(sigint_raises):
    main = threading.main_thread().ident
    started, finished_step1, reached_step2 = [], [], []
    progress = HostProgress(HOSTS, stream=io.StringIO(), tty=False)
    both_running = threading.Barrier(2, timeout=30)

    def stopping() -> bool:  # whether the fan-out was told to stop (the public probe of a step boundary)
        try:
            checkpoint()
        except Interrupted:
            return True
        return False

    def fn(host):
        started.append(host.name)
        progress.update(host, "step1")
        both_running.wait()
        if host.name == "gpu1":
            signal.pthread_kill(main, signal.SIGINT)  # the user presses Ctrl-C during step1
        # the rest of step1 lasts until the main thread has handled Ctrl-C, however long a loaded machine takes
        # (a fixed sleep raced with it): it is not cut short
        deadline = time.monotonic() + 30
        while not stopping() and time.monotonic() < deadline:
            time.sleep(0.01)
        finished_step1.append(host.name)
        progress.update(host, "step2")  # the step boundary: Interrupted is raised here
        reached_step2.append(host.name)

    with pytest.raises(KeyboardInterrupt) as exc:
        run_on_hosts(HOSTS, fn, parallel=2, progress=progress, poll=0.05)
    result = exc.value.fanout_result
    assert sorted(started) == ["gpu1", "gpu2"] and sorted(finished_step1) == ["gpu1", "gpu2"]
    assert reached_step2 == []
    assert [o.status for o in result.outcomes] == ["interrupted"] * 2 + ["skipped"] * 4
    assert result.interrupted
    assert progress.steps["gpu1"] == "interrupted" and progress.steps["gpu6"] == "not started (interrupted)"


def test_after_ctrl_c_no_host_runs_on_whenever_it_lands(sigint_raises):
    """Ctrl-C while the main thread is still starting hosts (here: sent by the first host as it starts): when
    run_on_hosts raises, no host's thread is left running and no outcome changes afterwards."""
    main = threading.main_thread().ident
    for _ in range(20):
        def fn(host):
            if host.name == "gpu1":
                signal.pthread_kill(main, signal.SIGINT)
            time.sleep(0.02)
            checkpoint()

        with pytest.raises(KeyboardInterrupt) as exc:
            run_on_hosts(HOSTS, fn, parallel=6, poll=0.05)
        assert not [t for t in threading.enumerate() if t.name.startswith("fabricctl-host")]
        seen = [o.status for o in exc.value.fanout_result.outcomes]
        time.sleep(0.05)
        assert [o.status for o in exc.value.fanout_result.outcomes] == seen
        assert "failed" not in seen and exc.value.fanout_result.interrupted


def test_checkpoint_outside_a_fanout_does_nothing():
    checkpoint()
    assert getattr(fanout._worker, "stop", None) is None


def test_parallel_must_be_positive():
    with pytest.raises(UserError, match="parallel"):
        run_on_hosts(HOSTS, lambda h: None, parallel=0)


# --------------------------------------------------------------------------------------------
# fabricctl.output


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_progress_bar_on_a_plain_stream_prints_a_line_every_interval():
    out, clock = io.StringIO(), FakeClock()
    bar = ProgressBar(10, 10 * 1024 ** 2, label="ingest", stream=out, tty=False, interval=5, clock=clock)
    for _ in range(10):
        clock.now += 1
        bar.advance(files=1, nbytes=1024 ** 2)
    bar.close()
    bar.close()  # idempotent
    lines = out.getvalue().splitlines()
    assert len(lines) == 3  # at 5 s and 10 s, and the final line
    assert lines[0].startswith("ingest [############............]  50.0%  5.0 MiB/10.0 MiB  5/10 files  1.0 MiB/s")
    assert "ETA 0:05" in lines[0]
    assert "100.0%" in lines[-1] and "10/10 files" in lines[-1] and "elapsed 0:10" in lines[-1]
    assert "\x1b" not in out.getvalue() and "\r" not in out.getvalue()


def test_progress_bar_on_a_terminal_redraws_one_line():
    out, clock = io.StringIO(), FakeClock()
    with ProgressBar(4, 4000, stream=out, tty=True, refresh=0.1, clock=clock) as bar:
        bar.advance(1, 1000)
        bar.advance(1, 1000)  # same instant: not redrawn
        clock.now += 1
        bar.advance(1, 1000)
    text = out.getvalue()
    assert text.count("\r\x1b[2K") == 3 and text.endswith("\n") and text.count("\n") == 1
    assert " 75.0%" in text.split("\r\x1b[2K")[2]


def test_progress_bar_is_thread_safe():
    bar = ProgressBar(8000, 8000, stream=io.StringIO(), tty=False)
    threads = [threading.Thread(target=lambda: [bar.advance(1, 1) for _ in range(1000)]) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert (bar.files, bar.bytes) == (8000, 8000)


@pytest.mark.parametrize("n, text", [(0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (1536, "1.5 KiB"),
                                     (150 * 1024 ** 3, "150 GiB"), (3 * 1024 ** 4, "3.0 TiB"), (None, "-"),
                                     (-2048, "-2.0 KiB")])
def test_human_bytes(n, text):
    assert human_bytes(n) == text


def test_human_duration():
    assert [human_duration(s) for s in (0, 75, 3725, None, float("inf"))] == ["0:00", "1:15", "1:02:05", "--:--",
                                                                              "--:--"]


@dataclass
class Version:
    name: str
    created: dt.datetime


def test_print_json_sorts_keys_and_writes_iso_datetimes():
    out = io.StringIO()
    when = dt.datetime(2026, 11, 22, 9, 30, tzinfo=dt.UTC)
    print_json({"b": {2, 1}, "a": Version("v1", when), "c": dt.datetime(2026, 1, 2, 3, 4, 5)}, stream=out)
    text = out.getvalue()
    assert json.loads(text) == {"a": {"created": "2026-11-22T09:30:00Z", "name": "v1"}, "b": [1, 2],
                                "c": "2026-01-02T03:04:05"}
    assert text.index('"a"') < text.index('"b"') < text.index('"c"')


def test_print_table_aligns_columns_and_right_aligns_numbers():
    out = io.StringIO()
    rows = [{"name": "imagenet", "version": "v1", "bytes": 1234, "published": ["gpu1", "gpu2"]},
            {"name": "coco", "version": "v12", "bytes": 5, "published": None}]
    print_table(rows, ["name", "version", ("bytes", "SIZE"), "published"], stream=out)
    assert out.getvalue().splitlines() == [
        "NAME      VERSION  SIZE  PUBLISHED",
        "imagenet  v1       1234  gpu1,gpu2",
        "coco      v12         5  -",
    ]
    empty = io.StringIO()
    print_table([], ["name"], stream=empty, empty="no datasets")
    assert empty.getvalue() == "no datasets\n"
