#!/bin/sh
# What check mode must leave as it found (issue 18), read on a lab host: the kernel modules, configfs,
# open-iscsi's records, the state of the services the roles manage, and the fabric's mounts.
echo "== modules"; cut -d' ' -f1 /proc/modules | sort
echo "== configfs"; find /sys/kernel/config -maxdepth 4 2>/dev/null | sort
echo "== iscsi"; find /etc/iscsi -type f 2>/dev/null | sort | xargs -r md5sum
echo "== services"
for u in iscsid.service iscsid.socket open-iscsi.service rtslib-fb-targetctl.service \
         fabricctl-rotate.timer sys-kernel-config.mount multipathd.service; do
    echo "$u $(systemctl is-active "$u") $(systemctl is-enabled "$u" 2>/dev/null)"
done
echo "== mounts"; findmnt -rn -o TARGET | grep -E '^/(datasets|checkpoints|srv/fabricctl)' | sort
exit 0
