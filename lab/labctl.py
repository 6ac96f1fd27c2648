#!/usr/bin/env python3
"""labctl: the fabric lab of QEMU VMs (real ZFS, LIO and open-iscsi) on a private bridge.

  labctl.py up [--storage2] [--debian 13|12]
                              boot the lab (builds or reuses the cached image); converges
  labctl.py down              stop every VM, delete taps, bridge and namespace
  labctl.py status [--json]   what is up
  labctl.py ssh VM [CMD...]   a shell or a command on a lab VM
  labctl.py image [--debian 13|12]
                              build (or find) the guest image only

Guests run Debian 13 (trixie) with OpenZFS 2.3 unless --debian 12 (or FABRIC_LAB_DEBIAN=12) asks
for Debian 12 (bookworm) with OpenZFS 2.3 from bookworm-backports. A running lab keeps its release.

Environment: FABRIC_LAB_DEBIAN (13 or 12), FABRIC_LAB_CACHE (image cache, default
/var/cache/fabric-lab), FABRIC_LAB_STATE (per-checkout state, default .lab/), FABRIC_LAB_ACCEL
(auto|tcg|kvm), FABRIC_LAB_MIRROR,
FABRIC_LAB_BOOT_TIMEOUT (seconds, default 600), FABRIC_LAB_NETNS (network namespace, default
fabriclab-<hash of the state directory>: one per checkout); the emulation profile (docs/lab.md):
FABRIC_LAB_STORAGE_CPUS (1 or 2), FABRIC_LAB_TCG_THREAD (single or multi), FABRIC_LAB_TCG_CPU (QEMU's -cpu, default
max).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fabric_lab import host, image  # noqa: E402
from fabric_lab.errors import LabError  # noqa: E402
from fabric_lab.lab import Lab, log  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="labctl", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_up = sub.add_parser("up", help="boot the lab (converges a half-up lab)")
    p_up.add_argument("--storage2", action="store_true", help="also boot storage2 (replication, multipath)")
    p_up.add_argument("--debian", choices=sorted(image.RELEASES, reverse=True),
                      help="the guests' Debian release (default: the running lab's, else 13)")
    sub.add_parser("down", help="stop the lab and remove its namespace, bridge, taps and VM disks")
    p_status = sub.add_parser("status", help="report what is up")
    p_status.add_argument("--json", action="store_true", help="machine-readable output")
    p_ssh = sub.add_parser("ssh", help="run a command (or a shell) on a lab VM")
    p_ssh.add_argument("vm")
    p_ssh.add_argument("command", nargs=argparse.REMAINDER)
    p_image = sub.add_parser("image", help="build or find the cached guest image")
    p_image.add_argument("--debian", choices=sorted(image.RELEASES, reverse=True),
                         help="the guests' Debian release (default 13)")
    args = parser.parse_args(argv)

    lab = Lab()
    try:
        if args.cmd == "up":
            lab.up(storage2=args.storage2, debian=args.debian)
        elif args.cmd == "down":
            if os.geteuid() != 0:
                raise LabError("the lab must be stopped as root", "run it as root, for example `sudo make lab-down`")
            lab.down()
        elif args.cmd == "status":
            report = lab.status()
            if args.json:
                print(json.dumps(report, indent=2))
            else:
                print_status(report)
            return 0 if report["up"] else 1
        elif args.cmd == "ssh":
            os.execvp("ssh", ["ssh", "-F", str(lab.ssh_config_path), args.vm, *args.command])
        elif args.cmd == "image":
            release = lab.release(args.debian)
            host.preflight(state_dir=lab.state_dir, cache_dir=image.cache_root(),
                           image_cached=image.is_complete(image.image_dir(release)), netns=lab.netns)
            host.ensure_packages(log)
            print(image.ensure_image(log, release))
    except LabError as exc:
        print(f"labctl: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("labctl: interrupted; run the same command again to converge", file=sys.stderr)
        return 130
    return 0


def print_status(report: dict) -> None:
    ns = "present" if report["netns_present"] else "absent"
    print(f"namespace {report['netns']}: {ns}" + (f" (owner {report['owner']})" if report["owner"] else ""))
    print(f"image {report['image']} (Debian {report['release']}): "
          f"{'cached' if report['image_cached'] else 'not built'}")
    print(f"{'VM':<10} {'ROLE':<8} {'ADDRESS':<12} {'PID':>8}  {'SSH':<4} DISKS")
    for vm in report["vms"]:
        print(f"{vm['name']:<10} {vm['role']:<8} {vm['address']:<12} {vm['pid'] or '-':>8}  "
              f"{'up' if vm['ssh'] else 'down':<4} {len(vm['disks'])}")
    print("lab is up" if report["up"] else "lab is not (fully) up: run `make lab-up`")


if __name__ == "__main__":
    sys.exit(main())
