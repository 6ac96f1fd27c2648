#!/bin/bash
# Record OpenZFS 2.3 outputs, text and JSON, on a lab storage node (run ON the node as root):
#   scp -F .lab/ssh_config tests/unit/data/zfs23b/{record.sh,record-lib.sh} storage1:/tmp/ && \
#   python3 lab/labctl.py ssh storage1 'bash /tmp/record.sh /tmp/zfs23' && \
#   scp -F .lab/ssh_config -r 'storage1:/tmp/zfs23/*' tests/unit/data/zfs23b/
# Uses only sparse files under /var/tmp (pools z23_rec, z23_mir, z23_one, z23_unm) and reads the
# lab's pool tank (converged by site.yml) without changing it. Everything it creates is destroyed.
# zfs get/list are recorded twice: with --json-int (NAME.json) and without (NAME_s.json: -j -p only, numbers
# as strings, which is what the core reads, so that user properties such as fabric:note=0042 keep their text).
# Each NAME.txt/.json holds stdout, NAME.stderr stderr (when any), and commands.tsv lists
# NAME, exit status and the command.
set -u
out=${1:?usage: record.sh OUTDIR}
TSV=commands.tsv
. "$(dirname "$0")/record-lib.sh"
J="-j --json-int"
for f in r1 r2 r3 nvme1 nvme2 log1 log2 cache spare m1 m2 m3 m4 s1 unm; do truncate -s 1G $T/z23_$f.img; done
truncate -s 2G $T/z23_nvme1.img $T/z23_nvme2.img $T/z23_spare.img

# the lab's converged pool (read only)
rec tank_status txt zpool status -P tank
rec tank_status json zpool status $J -P tank
rec tank_list json zpool list $J tank
rec tank_list_v json zpool list $J -v -P tank
rec tank_get json zpool get $J all tank
rec tank_zfs_list json zfs list $J -t all -r tank
rec tank_zfs_list_s json zfs list -j -p -t all -r tank
rec tank_zfs_get_all json zfs get $J -p all tank/datasets
rec tank_zfs_get_all_s json zfs get -j -p all tank/datasets
rec tank_zfs_get_welcome json zfs get $J -p all tank/exports/welcome
rec tank_zfs_get_welcome_s json zfs get -j -p all tank/exports/welcome
rec zfs_version json zfs version -j
rec zfs_version txt zfs version

# z23_rec: raidz1 + special mirror + log mirror + cache + spare, as the 2.1 recordings did with disks
rec create_full txt zpool create -f -o ashift=12 -o autotrim=on -O compression=lz4 -O atime=off \
    -O fabric:managed=true z23_rec raidz1 $T/z23_r1.img $T/z23_r2.img $T/z23_r3.img \
    special mirror $T/z23_nvme1.img $T/z23_nvme2.img log mirror $T/z23_log1.img $T/z23_log2.img \
    cache $T/z23_cache.img spare $T/z23_spare.img
rec status_full txt zpool status -P z23_rec
rec status_full json zpool status $J -P z23_rec
rec list_full txt zpool list -H -p -o name,size,alloc,free,health z23_rec
rec list_full json zpool list $J z23_rec
rec list_v_full json zpool list $J -v -P z23_rec
rec get_all_full txt zpool get -H -p -o property,value,source all z23_rec
rec get_all_full json zpool get $J all z23_rec
rec list_missing json zpool list $J z23_nonexistent
rec status_missing json zpool status $J -P z23_nonexistent
rec create_ds txt zfs create -p -o compression=zstd -o quota=2G -o recordsize=1M -o special_small_blocks=64K \
    -o atime=off -o primarycache=metadata -o fabric:managed=true -o fabric:role=dataset z23_rec/datasets/imagenet
rec create_vol txt zfs create -V 256M -o volblocksize=16K -o fabric:managed=true z23_rec/vol1
rec get_all_imagenet txt zfs get -H -p -o name,property,value,source all z23_rec/datasets/imagenet
rec get_all_imagenet json zfs get $J -p all z23_rec/datasets/imagenet
rec get_all_imagenet_s json zfs get -j -p all z23_rec/datasets/imagenet
rec get_all_vol1 json zfs get $J -p all z23_rec/vol1
rec get_all_vol1_s json zfs get -j -p all z23_rec/vol1
rec get_all_root json zfs get $J -p all z23_rec
rec get_all_root_s json zfs get -j -p all z23_rec
rec get_missing json zfs get $J -p all z23_rec/nope
rec get_missing_s json zfs get -j -p all z23_rec/nope
rec get_root_managed json zfs get $J -p fabric:managed z23_rec
rec get_root_managed_s json zfs get -j -p fabric:managed z23_rec
rec list_managed json zfs list $J -p -o name,type,used,avail,fabric:managed,fabric:role -t filesystem,volume -r z23_rec
rec list_managed_s json zfs list -j -p -o name,type,used,avail,fabric:managed,fabric:role -t filesystem,volume -r z23_rec
rec snap txt zfs snapshot -o fabric:version=v1 -o fabric:note=first z23_rec/vol1@v1
rec hold txt zfs hold fabric:published z23_rec/vol1@v1
rec list_snaps json zfs list $J -p -t snapshot -o name,createtxg,creation,used,fabric:version,fabric:note -r z23_rec
rec list_snaps_s json zfs list -j -p -t snapshot -o name,createtxg,creation,used,fabric:version,fabric:note -r z23_rec
rec list_snaps txt zfs list -H -p -t snapshot -o name,createtxg,creation,used,fabric:version,fabric:note -r z23_rec
rec holds txt zfs holds -H z23_rec/vol1@v1
rec holds json zfs holds -j z23_rec/vol1@v1
rec release txt zfs release fabric:published z23_rec/vol1@v1
rec remove_cache txt zpool remove z23_rec $T/z23_cache.img
rec status_nocache json zpool status $J -P z23_rec
rec add_n_cache txt zpool add -n z23_rec cache $T/z23_cache.img
rec add_cache txt zpool add z23_rec cache $T/z23_cache.img
rec offline txt zpool offline z23_rec $T/z23_r3.img
rec status_degraded json zpool status $J -P z23_rec
rec status_degraded txt zpool status -P z23_rec
rec list_degraded json zpool list $J z23_rec
rec replace_spare txt zpool replace z23_rec $T/z23_r3.img $T/z23_spare.img
sleep 3
rec status_spare_inuse json zpool status $J -P z23_rec
rec status_spare_inuse txt zpool status -P z23_rec
rec detach_spare txt zpool detach z23_rec $T/z23_spare.img
rec online txt zpool online z23_rec $T/z23_r3.img
# checksum errors: garbage over part of one raidz member, then a scrub
dd if=/dev/urandom of=$T/z23_r2.img bs=1M seek=8 count=64 conv=notrunc status=none
rec scrub txt zpool scrub -w z23_rec
rec status_cksum json zpool status $J -P z23_rec
rec status_cksum txt zpool status -P z23_rec
rec clear txt zpool clear z23_rec
rec export txt zpool export z23_rec
rec import txt zpool import -d $T z23_rec
rec status_reimported json zpool status $J -P z23_rec

rec create_mirrors txt zpool create -o ashift=12 -O fabric:managed=true z23_mir mirror $T/z23_m1.img $T/z23_m2.img \
    mirror $T/z23_m3.img $T/z23_m4.img
rec status_mirrors json zpool status $J -P z23_mir
rec add_n_single_mismatch txt zpool add -n z23_mir $T/z23_s1.img
rec create_single txt zpool create -O fabric:managed=true z23_one $T/z23_s1.img
rec status_single json zpool status $J -P z23_one
rec status_all json zpool status $J -P
rec create_unm txt zpool create z23_unm $T/z23_unm.img
rec get_root_unmanaged json zfs get $J -p fabric:managed z23_unm
rec get_root_unmanaged_s json zfs get -j -p fabric:managed z23_unm
rec list_all json zpool list $J

for p in z23_rec z23_mir z23_one z23_unm; do zpool destroy -f $p; done
rm -f $T/z23_*.img
echo "recorded $(wc -l <"$out/commands.tsv") commands into $out"
