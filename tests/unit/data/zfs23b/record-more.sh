#!/bin/bash
# More OpenZFS 2.3 recordings (run ON a lab storage node as root, like record.sh):
#   scp -F .lab/ssh_config tests/unit/data/zfs23b/{record-more.sh,record-lib.sh} storage1:/tmp/ && \
#   python3 lab/labctl.py ssh storage1 'bash /tmp/record-more.sh /tmp/zfs23b' && \
#   scp -F .lab/ssh_config -r 'storage1:/tmp/zfs23b/*' tests/unit/data/zfs23b/
# - zfs get/list in JSON WITHOUT --json-int (-j -p: numbers as strings, so user properties such as
#   fabric:note=0042 keep their text), for the states record.sh recorded with --json-int;
# - raidz expansion (OpenZFS 2.3 `zpool attach POOL raidzN-0 DEV`): before, during and after, and the
#   refusal on a pool whose raidz_expansion feature is disabled;
# - zpool create -n / add -n / zfs create -n -v text (2.3 has no JSON for dry runs).
# Only sparse files under /var/tmp (pools z23x_*), destroyed at the end.
set -u
out=${1:?usage: record-more.sh OUTDIR}
TSV=commands-more.tsv
. "$(dirname "$0")/record-lib.sh"
for f in a b c d e f g; do truncate -s 1G $T/z23x_$f.img; done

rec x_create_n txt zpool create -n -o ashift=12 -O fabric:managed=true z23x_rz raidz2 $T/z23x_a.img $T/z23x_b.img \
    $T/z23x_c.img $T/z23x_d.img
rec x_create txt zpool create -o ashift=12 -O fabric:managed=true -O compression=lz4 z23x_rz raidz2 \
    $T/z23x_a.img $T/z23x_b.img $T/z23x_c.img $T/z23x_d.img
rec x_zfs_create_n_v txt zfs create -n -v -p -o compression=zstd -o quota=2G z23x_rz/dry/a
rec x_zfs_create_vol txt zfs create -V 64M -o volblocksize=16K -o fabric:managed=true -o fabric:note=0042 \
    -o fabric:version=007 z23x_rz/vol
rec x_snap txt zfs snapshot -o fabric:version=007 -o fabric:note=0042 -o fabric:files=12 z23x_rz/vol@007
rec x_get_vol_p json zfs get -j -p all z23x_rz/vol
rec x_get_vol_int json zfs get -j --json-int -p all z23x_rz/vol
rec x_get_root_p json zfs get -j -p all z23x_rz
rec x_list_p json zfs list -j -p -o name,type,used,avail,fabric:managed,fabric:role -t filesystem,volume -r z23x_rz
rec x_list_snaps_p json zfs list -j -p -t snapshot -o name,createtxg,creation,used,fabric:version,fabric:note,fabric:files \
    -s createtxg -r z23x_rz
rec x_list_snaps_int json zfs list -j --json-int -p -t snapshot \
    -o name,createtxg,creation,used,fabric:version,fabric:note,fabric:files -s createtxg -r z23x_rz
rec x_get_missing_p json zfs get -j -p all z23x_rz/nope
dd if=/dev/urandom of=/dev/zvol/z23x_rz/vol bs=1M count=48 status=none 2>/dev/null || true
rec x_add_n_mismatch txt zpool add -n z23x_rz $T/z23x_e.img
rec x_status_before json zpool status -j --json-int -P z23x_rz
rec x_get_features json zpool get -j --json-int all z23x_rz
rec x_attach txt zpool attach z23x_rz raidz2-0 $T/z23x_e.img
rec x_status_expanding json zpool status -j --json-int -P z23x_rz
rec x_status_expanding txt zpool status -P z23x_rz
rec x_wait txt zpool wait -t raidz_expand z23x_rz
rec x_status_expanded json zpool status -j --json-int -P z23x_rz
rec x_status_expanded txt zpool status -P z23x_rz
rec x_list_expanded json zpool list -j --json-int -v -P z23x_rz
# a pool without the feature: created with every feature off (as an older ZFS would have left it)
truncate -s 1G $T/z23x_h.img $T/z23x_i.img $T/z23x_j.img
rec x_create_old txt zpool create -d -o ashift=12 z23x_old raidz1 $T/z23x_h.img $T/z23x_i.img $T/z23x_j.img
rec x_old_get_features json zpool get -j --json-int all z23x_old
rec x_old_attach txt zpool attach z23x_old raidz1-0 $T/z23x_f.img
rec x_old_status json zpool status -j --json-int -P z23x_old
for p in z23x_rz z23x_old; do zpool destroy -f $p; done
rm -f $T/z23x_*.img
echo "recorded $(wc -l <"$out/commands-more.tsv") commands into $out"
