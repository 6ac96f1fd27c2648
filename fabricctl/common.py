"""Helpers shared by the dataset commands: where things live, lookups with helpful errors."""

from __future__ import annotations

import os
import time

from fabric_core import lio, mounts, publish, versions, zfs
from fabric_core.errors import CommandError, NotFound, UserError


def zvol(cfg, name: str) -> str:
    return f"{cfg.dataset_root}/{name}"


def staging_dir(cfg, name: str) -> str:
    return os.path.join(cfg.staging_root, name)


def volumes(ctx) -> dict:
    return {v["name"].rsplit("/", 1)[-1]: v for v in versions.list_volumes(ctx.local, ctx.config.dataset_root)}


def require_volume(ctx, name: str) -> dict:
    vols = volumes(ctx)
    if name not in vols:
        known = ", ".join(sorted(vols)) or "none yet"
        raise NotFound(f"unknown dataset {name!r} (fabricctl datasets on this node: {known})",
                       f"create it with `fabricctl dataset create {name} --size SIZE`, or check the name")
    return vols[name]


def dataset_versions(ctx, name: str | None = None) -> list[dict]:
    rows = versions.list_snapshots(ctx.local, ctx.config.dataset_root)
    return [r for r in rows if name is None or r["name_short"] == name]


def require_version(ctx, name: str, version: str) -> dict:
    require_volume(ctx, name)
    rows = {r["snapshot"]: r for r in dataset_versions(ctx, name)}
    if version not in rows:
        known = ", ".join(rows) or "none sealed yet"
        raise NotFound(f"unknown version {name}@{version} (versions of {name}: {known})",
                       f"seal it first with `fabricctl dataset seal {name} {version}`, or check the version")
    return rows[version]


def export_of(ctx, name: str, version: str, fstype: str) -> publish.Export:
    cfg = ctx.config
    return publish.dataset_export(cfg.dataset_root, cfg.mount_root, name, version, fstype)


def wait_for(path: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise UserError(f"{path} did not appear within {timeout:g}s", "run `udevadm settle` and check `dmesg`")
        time.sleep(0.2)


def mount_staging(ctx, name: str, fstype: str) -> str:
    """Mount the staging volume read-write at STAGING_ROOT/NAME (idempotent); return the path."""
    cfg, run = ctx.config, ctx.local
    where = staging_dir(cfg, name)
    device = "/dev/zvol/" + zvol(cfg, name)
    if mounts.current_mount(run, where):
        return where
    if not run.dry_run:
        run.run(["udevadm", "settle"], check=False)
        wait_for(device)
    run.run(["mkdir", "-p", where], mutating=True)
    run.run(["mount", "-t", fstype, "-o", mounts.options(fstype, readonly=False), device, where], mutating=True)
    return where


def unmount_staging(ctx, name: str) -> bool:
    where = staging_dir(ctx.config, name)
    if not mounts.current_mount(ctx.local, where):
        return False
    ctx.local.run(["sync", "-f", where], mutating=True)
    ctx.local.run(["umount", where], mutating=True)
    return True


def live_lio(ctx) -> dict:
    return lio.read_live()


def host_by_initiator(cfg) -> dict:
    return {h.initiator: h for h in cfg.hosts.values()}


def published_to(cfg, live: dict, export: publish.Export) -> list[str]:
    """Host names (or raw initiator names for ACLs of unknown hosts) the export is published to."""
    by_init = host_by_initiator(cfg)
    inits = publish.acl_initiators(live, export.target_iqn(cfg.iqn_base))
    return [by_init[i].name if i in by_init else i for i in inits]


def volume_props(ctx, name: str) -> dict:
    props = zfs.get_props(ctx.local, zvol(ctx.config, name)).get(zvol(ctx.config, name), {})
    return {k: v[0] for k, v in props.items()}


def fan(ctx, hosts, fn, what: str, *, quiet: bool = False):
    """Run ``fn(host, step)`` on every host in parallel with a per-host progress display.

    Returns the FanoutResult; ``outcome_dict(result)`` gives its JSON form.
    """
    from .fanout import HostProgress, run_on_hosts  # noqa: PLC0415

    progress = None if quiet or not hosts else HostProgress(hosts, title=what)

    def call(host):
        return fn(host, (lambda text: progress.set(host, text)) if progress else (lambda text: None))

    try:
        result = run_on_hosts(hosts, call, parallel=ctx.config.defaults.parallel_hosts, progress=progress)
        ctx.record_outcomes(result)
        return result
    finally:
        if progress:
            progress.close()


def outcome_dict(result) -> dict:
    out = {}
    for o in result.outcomes:
        item = {"status": o.status}
        if o.ok:
            item["result"] = o.value
        elif o.error is not None:
            item["error"] = str(o.error)
        out[o.name] = item
    return out


def ok_names(result) -> list[str]:
    return [o.name for o in result.ok]


# --- checkpoints ----------------------------------------------------------------------------------

def ck_volume(cfg, job: str) -> str:
    return f"{cfg.checkpoint_root}/{job}"


def checkpoint_volumes(ctx) -> dict:
    vols = versions.list_volumes(ctx.local, ctx.config.checkpoint_root, kinds=("checkpoint-volume",))
    return {v["name"].rsplit("/", 1)[-1]: v for v in vols}


def require_job(ctx, job: str) -> dict:
    vols = checkpoint_volumes(ctx)
    if job not in vols:
        known = ", ".join(sorted(vols)) or "none yet"
        raise NotFound(f"unknown job {job!r} (jobs with a checkpoint volume: {known})",
                       f"create its volume with `fabricctl checkpoint volume create {job} --size SIZE --writer HOST`")
    return vols[job]


def metric_columns(cfg) -> tuple[str, ...]:
    """The user properties that hold the configured metrics, one per metric, for a snapshot listing."""
    return tuple(f"fabric:metric.{m}" for m in cfg.metrics)


def checkpoints(ctx, job: str) -> list[dict]:
    """The job's checkpoint snapshots, oldest first, with step (int), metrics and tags parsed."""
    columns = metric_columns(ctx.config)
    rows = versions.list_snapshots(ctx.local, ck_volume(ctx.config, job), kinds=("checkpoint",),
                                   extra_columns=columns)  # one listing, metrics included
    for r in rows:
        r["step"] = int(r["fabric:step"]) if (r.get("fabric:step") or "").isdigit() else None
        r["tags"] = [t for t in (r.get("fabric:tags") or "").split(",") if t]
        r["metrics"] = {}
        for column in columns:
            metric = _metric_value(r.pop(column, None))
            if metric is not None:
                r["metrics"][column.split(".", 1)[1]] = metric
    return rows


def _metric_value(text: str | None) -> float | None:
    if text in (None, "", "-"):
        return None
    try:
        return float(text)
    except ValueError:
        return None


def table(rows: list[list], headers: list[str]) -> None:
    """Print list rows under headers (output.print_table takes mappings)."""
    from .output import print_table  # noqa: PLC0415

    print_table([dict(zip(headers, row, strict=True)) for row in rows], [(h, h) for h in headers])


def destroy_volume(ctx, volume: str, attempts: int = 5) -> None:
    """`zfs destroy -r`, waiting out the moment a zvol stays busy after its LIO backstore or its mount
    went (udev's probe may still hold it open)."""
    for attempt in range(attempts):
        ctx.local.run(["udevadm", "settle"], check=False)
        res = ctx.local.run(["zfs", "destroy", "-r", volume], mutating=True, check=False)
        if res.rc == 0:
            return
        if "busy" not in res.stderr or attempt == attempts - 1:
            raise CommandError(res.argv, res.rc, res.stdout, res.stderr,
                               fix=f"see what still uses /dev/zvol/{volume} (`fuser -v`, `targetcli ls`), then "
                                   "run the command again")
        time.sleep(2 * (attempt + 1))
