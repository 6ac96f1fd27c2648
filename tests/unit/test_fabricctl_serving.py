"""fabricctl.serving.ask_each: the one loop over other storage nodes for grant, revoke and publish --from-nodes."""

from __future__ import annotations

from types import SimpleNamespace

from fabricctl import serving
from fabricctl.replication import MAX_EXPORT_HOSTS, PeerError


def ctx(dry_run: bool = False):
    recorded = []
    return SimpleNamespace(dry_run=dry_run, hosts={}, local=SimpleNamespace(record=recorded.append)), recorded


def test_hosts_go_in_requests_the_peer_accepts_and_each_peers_reach_is_journalled():
    c, _ = ctx()
    names = [f"h{i}" for i in range(2 * MAX_EXPORT_HOSTS + 1)]
    asked = []
    ok, down = SimpleNamespace(name="storage2"), SimpleNamespace(name="storage3")

    def ask(peer, guid, chunk):
        if peer is down:
            raise PeerError("cannot reach storage node storage3", "check that it is up")
        asked.append(len(chunk))
        return {"portal": "10.77.0.12:3260"}

    answers, failed = serving.ask_each(c, [(ok, "1"), (down, "1")], names, lambda p, g: (), ask)
    assert asked == [MAX_EXPORT_HOSTS, MAX_EXPORT_HOSTS, 1] and len(answers["storage2"]) == 3
    assert failed == {"storage3": "cannot reach storage node storage3"}
    assert c.hosts == {"storage2": "ok", "storage3": "failed"}


def test_a_dry_run_asks_no_peer_and_records_each_request():
    c, recorded = ctx(dry_run=True)
    peer = SimpleNamespace(name="storage2")
    answers, failed = serving.ask_each(c, [(peer, "7")], ["gpu1"], lambda p, g: ("replica-serve", p.name, g),
                                       lambda *a: (_ for _ in ()).throw(AssertionError("asked in a dry run")))
    assert answers == {} and failed == {} and recorded == [("replica-serve", "storage2", "7")] and c.hosts == {}
