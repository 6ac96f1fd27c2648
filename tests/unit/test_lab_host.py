"""Lab preflight refusals, recipe hashing and mirror discovery: no root, no VMs needed."""

from pathlib import Path

import pytest
from fabric_lab import host, image
from fabric_lab.errors import LabError

GIB = 1024 ** 3


@pytest.fixture
def tun():
    """A path that is a character device (/dev/null), as /dev/net/tun is."""
    return Path("/dev/null")


def ok_args(tmp_path, tun_path, **over):
    args = dict(state_dir=tmp_path / "state", cache_dir=tmp_path / "cache", image_cached=True,
                netns="fabriclab-test", euid=0, tun=tun_path, free=lambda p: 100 * GIB,
                memory=lambda: 20000, netns_present=lambda ns: False, owner_of=lambda ns: None)
    args.update(over)
    return args


def test_preflight_passes_on_a_good_host(tmp_path, tun):
    host.preflight(**ok_args(tmp_path, tun))


def test_preflight_refuses_non_root(tmp_path, tun):
    with pytest.raises(LabError, match="must run as root") as exc:
        host.preflight(**ok_args(tmp_path, tun, euid=1000, memory_needed=pytest.fail))
    assert "sudo make lab-up" in exc.value.fix  # and the state directory was not read (memory_needed)


def test_preflight_refuses_without_tun(tmp_path, tun):
    with pytest.raises(LabError, match="no-such-tun is missing"):
        host.preflight(**ok_args(tmp_path, tmp_path / "no-such-tun"))
    regular = tmp_path / "regular-file"
    regular.write_text("")
    with pytest.raises(LabError, match="regular-file is missing"):
        host.preflight(**ok_args(tmp_path, regular))


@pytest.mark.parametrize("cached,free_gib,ok",
                         [(True, 5, True), (True, 3, False), (False, 11, False), (False, 13, True)])
def test_preflight_disk_space(tmp_path, tun, cached, free_gib, ok):
    args = ok_args(tmp_path, tun, image_cached=cached, free=lambda p: free_gib * GIB)
    if ok:
        host.preflight(**args)
    else:
        with pytest.raises(LabError, match="not enough free disk space"):
            host.preflight(**args)


def test_preflight_refuses_another_labs_namespace(tmp_path, tun):
    args = ok_args(tmp_path, tun, netns_present=lambda ns: ns == "fabriclab-test",
                   owner_of=lambda ns: "/other/checkout/.lab")
    with pytest.raises(LabError, match="'fabriclab-test' already exists and belongs to the lab at "
                                       "/other/checkout/.lab") as exc:
        host.preflight(**args)
    assert "ip netns delete fabriclab-test" in exc.value.fix and "FABRIC_LAB_NETNS" in exc.value.fix
    with pytest.raises(LabError, match="not this lab"):
        host.preflight(**ok_args(tmp_path, tun, netns_present=lambda ns: True, owner_of=lambda ns: None))


def test_preflight_accepts_its_own_namespace(tmp_path, tun):
    state = tmp_path / "state"
    host.preflight(**ok_args(tmp_path, tun, netns_present=lambda ns: True, owner_of=lambda ns: str(state)))


@pytest.mark.parametrize("available,ok", [(9000, True), (5000, False), (0, True)])
def test_preflight_memory(tmp_path, tun, available, ok):
    """The VMs' memory must be available (0: /proc/meminfo unreadable, not checked)."""
    args = ok_args(tmp_path, tun, memory_needed=lambda: 7168, memory=lambda: available)
    if ok:
        host.preflight(**args)
    else:
        with pytest.raises(LabError, match="need 7168 MiB, the host has 5000 MiB available") as exc:
            host.preflight(**args)
        assert "another checkout's lab" in exc.value.fix


def test_recipe_hash_is_stable_and_tracks_content(tmp_path):
    (tmp_path / "build.sh").write_text("echo one\n")
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "a").write_text("a\n")
    first = image.recipe_hash(tmp_path)
    assert first == image.recipe_hash(tmp_path) and len(first) == 16
    (tmp_path / "files" / "a").write_text("b\n")
    assert image.recipe_hash(tmp_path) != first
    (tmp_path / "files" / "a").write_text("a\n")
    (tmp_path / "build.sh").chmod(0o755)
    assert image.recipe_hash(tmp_path) != first  # the executable bit is part of the recipe


def test_real_recipe_hash_covers_the_image_files():
    assert image.recipe_hash() == image.recipe_hash(image.RECIPE_DIR)
    assert (image.RECIPE_DIR / "build.sh").is_file() and (image.RECIPE_DIR / "packages.txt").is_file()


DEB822 = """\
Types: deb
# http://snapshot.example/archive/debian/20250520T000000Z
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://mirror.example/debian-security
Suites: bookworm-security
Components: main
"""

ONE_LINE = """\
# comment
deb [arch=amd64] http://local.example/debian bookworm main contrib
deb http://local.example/security bookworm-security main
deb https://packages.other.example/apt cloud-sdk-bookworm main
"""


def test_parse_mirrors_deb822():
    assert image.parse_debian_mirrors([DEB822]) == ("http://mirror.example/debian",
                                                    "http://mirror.example/debian-security")


def test_parse_mirrors_one_line_and_unrelated_repos():
    assert image.parse_debian_mirrors([ONE_LINE]) == ("http://local.example/debian",
                                                      "http://local.example/security")
    assert image.parse_debian_mirrors(["deb https://x.example/apt cloud-sdk-bookworm main\n"]) == (None, None)


def test_parse_mirrors_of_a_debian_13_host():
    trixie = DEB822.replace("bookworm", "trixie")
    assert image.parse_debian_mirrors([trixie]) == ("http://mirror.example/debian",
                                                    "http://mirror.example/debian-security")


def test_release_names_and_refusal():
    assert image.release_name("13") == "trixie" and image.release_name("12") == "bookworm"
    assert image.release_name("bookworm") == "bookworm"
    assert image.RELEASES[image.DEFAULT_DEBIAN] == "trixie"  # Debian 13 is the primary platform
    with pytest.raises(LabError) as exc:
        image.release_name("11")
    assert "DEBIAN=13" in exc.value.fix and "'11'" in str(exc.value)


def test_each_release_has_its_own_image_key():
    assert image.image_key("trixie").startswith("trixie-")
    assert image.image_key("bookworm").startswith("bookworm-")
    assert image.image_key("trixie").split("-", 1)[1] != image.image_key("bookworm").split("-", 1)[1]


def test_pruning_keeps_the_other_releases_image(tmp_path, monkeypatch):
    monkeypatch.setenv("FABRIC_LAB_CACHE", str(tmp_path))
    images = tmp_path / "images"
    for name in ("trixie-old", "trixie-new", "bookworm-kept", "0123456789abcdef", "trixie-x.building"):
        (images / name).mkdir(parents=True)
    image.prune_old_images(keep="trixie-new", log=lambda msg: None)
    assert sorted(p.name for p in images.iterdir()) == ["bookworm-kept", "trixie-new", "trixie-x.building"]


def test_a_guest_that_panicked_while_booting_is_started_again_and_its_console_kept(tmp_path, monkeypatch):
    """Seen on the lab: storage1's kernel hit "Oops: int3" under TCG at boot and panicked; labctl waited 600 s.
    Now wait_for_ssh notices the panic on the console, keeps it, and starts the VM again (at most twice)."""
    from fabric_lab import lab as labmod
    from fabric_lab.topology import plan

    lab = labmod.Lab(state_dir=tmp_path / "state", inventory_dir=tmp_path / "inv")
    vm = plan(with_storage2=False)[0]
    lab.vmdir(vm).mkdir(parents=True)
    console = lab.vmdir(vm) / "console.log"
    console.write_text("[   30.567136] Kernel panic - not syncing: Fatal exception in interrupt\n")
    up = {"now": False}
    restarted = []

    def restart(v):
        restarted.append(v.name)
        console.write_text("booting again\n")
        up["now"] = True

    monkeypatch.setattr(lab, "keyscan", lambda v: "x ssh-ed25519 AAAA" if up["now"] else "")
    monkeypatch.setattr(lab, "pid", lambda v: 4242)
    monkeypatch.setattr(lab, "stop", lambda v: None)
    monkeypatch.setattr(labmod.time, "sleep", lambda s: None)
    lab.wait_for_ssh((vm,), restart=restart)
    assert restarted == [vm.name] and lab.host_keys == {vm.name: "ssh-ed25519 AAAA"}
    assert "Kernel panic" in (lab.vmdir(vm) / "console.panic-1.log").read_text()
    assert not lab.panicked(vm)
