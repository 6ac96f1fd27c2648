#!/bin/sh
# `make demo`, part 3 (issue 5): a training job's checkpoints on the lab, through fabricctl on storage1.
# A checkpoint volume for job `demo-job` written by gpu1 (created once), a few checkpoint snapshots
# taken while gpu1 writes (each freezes gpu1's file system for a moment), a rotation dry-run with
# its explanation, and the newest checkpoint restored read-only to gpu1 and gpu2.
set -eu
cd "$(dirname "$0")/.."
. lab/demo-lib.sh
JOB=demo-job

say "a checkpoint volume for $JOB, read-write on its one writer gpu1"
on storage1 "fabricctl checkpoint volume create $JOB --size 512M --writer gpu1"
on storage1 "fabricctl checkpoint volume create $JOB --size 512M --writer gpu2 || true   # a second writer is refused"

say "three checkpoints: gpu1 writes, fabricctl freezes, snapshots, thaws"
last=$($LAB storage1 "fabricctl checkpoint list $JOB --json" | python3 -c 'import json,sys; c=json.load(sys.stdin)["checkpoints"]; print(max([x["step"] for x in c], default=0))')
for i in 1 2 3; do
  step=$((last + i * 1000))
  on gpu1 "head -c 8M /dev/urandom > /checkpoints/$JOB/model.pt && echo $step > /checkpoints/$JOB/STEP"
  on storage1 "fabricctl checkpoint snapshot $JOB --step $step --metric loss=0.$((9 - i))$i --tag demo"
done
on storage1 "fabricctl checkpoint list $JOB"

say "rotation: what would be kept or destroyed, and why"
on storage1 "fabricctl rotate --dry-run --explain"

say "restore step $step read-only to gpu1 and gpu2"
on storage1 "fabricctl checkpoint restore $JOB --step $step --to gpu_nodes"
for gpu in gpu1 gpu2; do
  on $gpu "findmnt -n -o TARGET,OPTIONS /checkpoints/$JOB/restore/$step; cat /checkpoints/$JOB/restore/$step/STEP"
done
