#!/bin/sh
# `make demo`, last part (issue 29): a Slurm job on both GPU nodes asks for the newest version of the sample dataset
# (`sbatch --fabric-dataset=sample@VERSION`), reads it where it runs and verifies it against the tree it was
# ingested from. The lab's Slurm (playbooks/lab-slurm.yml, run just before by `make demo`) and the SPANK plugin of
# the slurm_fabric role do the rest: the version is attached on each node before the job's tasks start there, and
# released by the job's epilog.
set -eu
cd "$(dirname "$0")/.."
. lab/demo-lib.sh

VERSION=$($LAB storage1 "fabricctl list sample --json" | python3 -c 'import json, sys
d = [x for x in json.load(sys.stdin)["datasets"] if x["name"] == "sample"][0]
print(d["versions"][-1]["version"])')
REF="sample@$VERSION"
# the patterns escaped with a backslash, not quoted: they also run inside the job script's single-quoted bash -c;
# lost+found (the version's ext4, root only) is not the dataset's
DIGEST="find . -path ./lost+found -prune -o -type f -not -path ./.fabric/\* -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-64"

say "the version a job may attach: $REF granted to the GPU nodes (storage1 grants, the nodes attach)"
on storage1 "fabricctl grant $REF --to gpu_nodes"

say "the tree $REF was sealed from, on storage1: its digest"
on storage1 "cd /srv/demo && $DIGEST"

say "a job on gpu1 and gpu2 as the user fabricjob: sbatch --fabric-dataset=$REF --nodes=2"
on gpu1 "cat > /home/fabricjob/demo-job.sh <<'JOB'
#!/bin/bash
set -eu
echo \"job \$SLURM_JOB_ID: FABRIC_DATASET=\$FABRIC_DATASET FABRIC_DATASET_PATH=\$FABRIC_DATASET_PATH\"
srun --nodes=2 --ntasks-per-node=1 --label bash -c 'findmnt -n -o TARGET,SOURCE,OPTIONS \"\$FABRIC_DATASET_PATH\"; cd \"\$FABRIC_DATASET_PATH\" && echo \"\$(hostname): \$(find train -type f | wc -l) files, digest \$($DIGEST)\"'
JOB
chown fabricjob: /home/fabricjob/demo-job.sh"
on gpu1 "cd /home/fabricjob && runuser -u fabricjob -- sbatch --wait --quiet --nodes=2 --nodelist=gpu1,gpu2 --output=/tmp/demo-job-%j.out --fabric-dataset=$REF demo-job.sh; cat \$(ls -t /tmp/demo-job-*.out | head -n 1)"

say "the check: both nodes read the same tree as the one ingested on storage1"
want=$($LAB storage1 "cd /srv/demo && $DIGEST")
got=$($LAB gpu1 "cat \$(ls -t /tmp/demo-job-*.out | head -n 1)" | sed -n 's/.*digest //p' | sort -u)
if [ "$got" = "$want" ] && [ "$($LAB gpu1 "grep -c 'digest $want' \$(ls -t /tmp/demo-job-*.out | head -n 1)")" = 2 ]; then
  echo "verified: gpu1 and gpu2 read $REF as sealed (digest $want)"
else
  echo "NOT verified: storage1 $want, the job read: $got" >&2
  exit 1
fi

say "after the job: released by its epilog (sample stays mounted where fabricctl publish attached it for 'manual')"
for gpu in gpu1 gpu2; do on $gpu "fabric-node list"; done
on gpu1 "sinfo --Node"
