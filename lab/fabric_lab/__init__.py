"""The fabric lab: QEMU VMs with real ZFS, LIO and open-iscsi on a private bridge in a netns."""
