#!/bin/sh
# `make demo`, part 2 (issue 4): a dataset version's life on the lab, through fabricctl on storage1.
# A small sample dataset is created (once), ingested, sealed as a new version, published read-only
# to gpu1 and gpu2, read there, and verified against its manifest on the storage node and on gpu1.
# Each run seals a new version (versions are immutable) and /datasets/sample/current moves to it.
set -eu
cd "$(dirname "$0")/.."
. lab/demo-lib.sh
VERSION="v$(date -u +%Y%m%d%H%M%S)"

say "a sample image dataset on storage1 (500 files in 5 classes)"
on storage1 'mkdir -p /srv/demo && cd /srv/demo && for c in cat dog owl fox elk; do mkdir -p train/$c; for i in $(seq 1 100); do [ -e train/$c/$i.jpg ] || head -c $((2000 + i * 53)) /dev/urandom > train/$c/$i.jpg; done; done; date -u > README'
on storage1 'fabricctl list sample >/dev/null 2>&1 || fabricctl dataset create sample --size 512M'

say "ingest (resumable: files already present are skipped)"
on storage1 'fabricctl dataset ingest sample /srv/demo/'

say "seal $VERSION: manifest, snapshot, metadata"
on storage1 "fabricctl dataset seal sample $VERSION --note 'make demo'"
on storage1 "zfs get -H -o property,value fabric:version,fabric:files,fabric:bytes,fabric:manifest-sha256 tank/datasets/sample@$VERSION"

say "publish sample@$VERSION read-only to gpu1 and gpu2"
on storage1 "fabricctl publish sample@$VERSION --to gpu_nodes"
on storage1 'fabricctl list sample'

say "read it on the GPU nodes"
for gpu in gpu1 gpu2; do
  on $gpu "findmnt -n -o TARGET,SOURCE,OPTIONS /datasets/sample/$VERSION; readlink /datasets/sample/current; cat /datasets/sample/current/README; find /datasets/sample/current/train -type f | wc -l"
  on $gpu "touch /datasets/sample/current/x 2>&1 || true"
done

say "verify against the manifest: on the storage node and as mounted on gpu1"
on storage1 "fabricctl verify sample@$VERSION"
on storage1 "fabricctl verify sample@$VERSION --on gpu1"

say "status"
on storage1 'fabricctl status'

say "an attack that must fail: gpu2 poses as gpu1 (sets gpu1's initiator name; without gpu1's CHAP secret it is refused)"
# a separate iSCSI interface on gpu2 that presents gpu1's initiator name; gpu2's own sessions are untouched
on gpu2 "T=\$(iscsiadm -m session | grep -o 'iqn[^ ]*:ds\\.sample\\.$VERSION' | head -1); P=\$(iscsiadm -m session | grep ds.sample.$VERSION | grep -o '[0-9.]*:3260' | head -1)
iscsiadm -m iface -I spoof -o new >/dev/null; iscsiadm -m iface -I spoof -o update -n iface.initiatorname -v \$(sed -n 's/^InitiatorName=//p' /etc/iscsi/initiatorname.iscsi | sed 's/gpu2\$/gpu1/') >/dev/null
iscsiadm -m node -T \$T -p \$P,1 -I spoof -o new >/dev/null
iscsiadm -m node -T \$T -p \$P -I spoof --login; echo \"login as gpu1 from gpu2: exit \$? (24: refused, authentication failed)\"
iscsiadm -m node -T \$T -p \$P -I spoof -o delete; iscsiadm -m iface -I spoof -o delete"
