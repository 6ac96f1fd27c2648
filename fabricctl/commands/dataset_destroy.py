"""Destroy a sealed version, or a whole dataset with its staging volume and every version.

Refused while the version (or any version of the dataset) is published or held: unpublish
first. A version a tag names is refused too (move or remove the tag first), and a version is named by
itself, never by a tag. Destroying is permanent, so it needs --yes (or --dry-run to see what would
go). Only what fabricctl created (fabric:managed=true) is ever destroyed.

Examples:
  fabricctl dataset destroy imagenet@v1 --yes
  fabricctl dataset destroy imagenet --dry-run
"""

from __future__ import annotations

from fabric_core.base.errors import Busy, UnsafeOperation, UserError
from fabric_core.base.names import parse_ref
from fabric_core.services import history
from fabric_core.storage import lzc, versions

from .. import datasets, zvols

PATH = ("dataset", "destroy")
HELP = "destroy a version or a whole dataset (refused while published or held)"
MUTATING = True  # takes the node lock and logs a journal record (not with --dry-run)


def OBJECT_LOCKS(ctx, args):  # noqa: N802,ARG001 - the command modules' declaration (main.py)
    return [("dataset", parse_ref(args.ref, version_required=False)[0], False)]  # destroyed: exclusive


def configure(p) -> None:
    p.add_argument("ref", metavar="NAME[@VERSION]", help="a version, or a dataset with all its versions")
    p.add_argument("--yes", action="store_true", help="confirm: this is permanent")


def run(ctx, args) -> int:
    name, version = parse_ref(args.ref, version_required=False)
    cfg = ctx.config
    vol = datasets.require(ctx, name)
    rows = datasets.sealed(ctx, name)
    if version is not None:
        rows = [datasets.require_version(ctx, name, version)]
        if rows[0].get("tag"):
            raise UserError(f"{name}@{version} is a tag (it names {rows[0]['snapshot']} now): a destroy names the "
                            "version itself", f"run `fabricctl dataset destroy {name}@{rows[0]['snapshot']}` if that "
                            "is the version to destroy")
        tagged = history.tags_by_version(datasets.tags(ctx, name)).get(rows[0]["snapshot"])
        if tagged:
            raise Busy(f"refused: {name}@{rows[0]['snapshot']} is tagged {', '.join(tagged)}",
                       f"move the tags to another version (`fabricctl tag {name}@VERSION TAG`) or remove them "
                       f"(`fabricctl untag {name} TAG`); then destroy")
    index = ctx.publisher.index()
    blocked = []
    for r in rows:
        export = datasets.export_of(ctx, r)
        to = index.published_to(export)
        holds = lzc.holds(r["name"]) if r.get("userrefs") else []
        if to or holds or index.exists(export):
            blocked.append(f"{name}@{r['snapshot']} (published to {', '.join(to) or 'no host'}; "
                           f"holds: {', '.join(holds) or 'none'})")
    if blocked:
        raise Busy("refused: " + "; ".join(blocked),
                   "unpublish first (`fabricctl unpublish NAME@VERSION`); then destroy")
    if version is None:
        # fabric:kind, not fabric:managed: a snapshot taken by hand inherits the volume's user properties
        checked = versions.list_all_snapshots(ctx.local, vol["name"])  # exactly these go with the volume
        foreign = [r["name"] for r in checked if not versions.owned(r)]
        if foreign:
            raise UnsafeOperation(f"{vol['name']} has snapshots fabricctl did not create: {', '.join(foreign)}",
                                  "destroy or keep them yourself; fabricctl only destroys what it created")
    what = [r["name"] for r in rows] + ([vol["name"]] if version is None else [])
    if not args.yes and not ctx.dry_run:
        raise UserError(f"destroying {', '.join(what)} is permanent and needs --yes",
                        f"run `fabricctl dataset destroy {args.ref} --yes` (or --dry-run to look first)")
    if not ctx.dry_run:
        if version is not None:
            lzc.destroy_snapshots(what, runner=ctx.local)
        else:
            datasets.unmount_staging(ctx, name)
            zvols.destroy(ctx, vol["name"], [r["name"] for r in checked])
            ctx.local.run(["rmdir", datasets.staging_dir(cfg, name)], check=False, mutating=True)
    out = {"destroyed" if not ctx.dry_run else "would_destroy": what, "dry_run": ctx.dry_run}
    ctx.report(out, ctx.tense("would destroy: ", "destroyed: ") + ", ".join(what))
    return 0
