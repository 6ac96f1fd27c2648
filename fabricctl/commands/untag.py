"""Remove a tag of a dataset (the version it named stays).

The tag's property goes from the staging volume in one `zfs inherit`. Refused, changing nothing: a tag the
dataset does not have (its tags are named).

Examples:
  fabricctl untag imagenet prod
"""

from __future__ import annotations

from fabric_core.base.names import validate_fabric_name
from fabric_core.services import history

from .. import datasets

PATH = ("untag",)
HELP = "remove a tag of a dataset"
MUTATING = True  # logs a journal record (not with --dry-run); the node lock for its short run


def OBJECT_LOCKS(ctx, args):  # noqa: N802,ARG001 - the command modules' declaration (main.py)
    return [("dataset", validate_fabric_name(args.name), True)]


def configure(p) -> None:
    p.add_argument("name", metavar="NAME", help="the dataset")
    p.add_argument("tag", metavar="TAG", help="the tag to remove")


def run(ctx, args) -> int:
    name = validate_fabric_name(args.name)
    datasets.require(ctx, name)
    plan = history.plan_untag(name, datasets.tags(ctx, name), args.tag)
    ctx.local.run(["zfs", "inherit", history.TAG_PREFIX + args.tag, datasets.volume(ctx.config, name)], mutating=True)
    plan.update(dry_run=ctx.dry_run, planned=ctx.planned())
    ctx.report(plan, ctx.tense("would remove", "removed") + f" tag {name}@{args.tag} (it named {plan['previous']})")
    return 0
