"""Name a version with a tag that moves (latest, prod, stable): NAME@TAG then works wherever a version is named.

One version per tag per dataset. The tag is the staging volume's user property fabric:tag:TAG=VERSION, set in
one `zfs set`: moving a tag to another version is atomic (a command that resolves it sees the old version or
the new one, never none). A tag is resolved when a command runs (`publish imagenet@prod` publishes the version
prod names then, at that version's own mount path and target; moving the tag later changes nothing already
published). Refused, changing nothing: a tag named like a version (a digit or v<digit> first) or as one of
the dataset's versions, a version that does not exist, more than 32 tags on one dataset.

Examples:
  fabricctl tag imagenet@v2 prod
  fabricctl tag imagenet@v3 prod --dry-run
"""

from __future__ import annotations

from fabric_core.base.names import parse_ref, validate_tag
from fabric_core.services import history

from .. import datasets

PATH = ("tag",)
HELP = "point a tag (latest, prod, ...) at a version; moves it atomically if it exists"
MUTATING = True  # logs a journal record (not with --dry-run); the node lock for its short run


def OBJECT_LOCKS(ctx, args):  # noqa: N802,ARG001 - the command modules' declaration (main.py)
    return [("dataset", parse_ref(args.ref)[0], True)]  # the volume kept meanwhile


def configure(p) -> None:
    p.add_argument("ref", metavar="NAME@VERSION", help="the version to tag (or NAME@OTHER_TAG)")
    p.add_argument("tag", metavar="TAG", help="the tag: a-z, 0-9, '.', '-', a letter first (e.g. prod)")


def run(ctx, args) -> int:
    name, version = parse_ref(args.ref)
    tag = validate_tag(args.tag)  # bad input: refused before anything is read
    rows = datasets.sealed(ctx, name)
    if version not in {r["snapshot"] for r in rows}:
        version = datasets.require_version(ctx, name, version)["snapshot"]  # another tag, or NotFound
    tags = datasets.tags(ctx, name)
    plan = history.plan_tag(name, tags, [r["snapshot"] for r in rows], version, tag)
    if plan["action"] != "unchanged":
        ctx.local.run(["zfs", "set", f"{history.tag_prop(tag)}={version}", datasets.volume(ctx.config, name)],
                      mutating=True)
    plan.update(dry_run=ctx.dry_run, planned=ctx.planned())
    text = {"create": ctx.tense("would tag", "tagged") + f" {name}@{version} {tag}",
            "move": ctx.tense("would move", "moved") + f" {name}@{tag} from {plan['previous']} to {version}",
            "unchanged": f"{name}@{tag} names {version} already: nothing to do"}[plan["action"]]
    ctx.report(plan, text)
    return 0
