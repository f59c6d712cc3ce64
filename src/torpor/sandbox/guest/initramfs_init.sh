#!/bin/busybox sh
# torpor sandbox: the initramfs's /init. Loads the virtio modules the stock Debian cloud kernel
# builds as modules (virtio_mmio for microvm's devices, virtio_blk, virtio_console; virtio_net
# only when the host opted into a network), mounts the read-only root disk and hands over.
/bin/busybox mkdir -p /proc /sys /dev /newroot
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sysfs /sys
/bin/busybox mount -t devtmpfs devtmpfs /dev
for m in virtio_ring virtio virtio_mmio virtio_blk virtio_console; do
  /bin/busybox insmod /lib/modules/$m.ko || echo "torpor-init: insmod $m failed"
done
if /bin/busybox grep -q 'torpor.net=1' /proc/cmdline; then
  for m in failover net_failover virtio_net; do /bin/busybox insmod /lib/modules/$m.ko; done
fi
i=0
while [ ! -b /dev/vda ] && [ $i -lt 200 ]; do /bin/busybox usleep 20000; i=$((i+1)); done
/bin/busybox mount -t ext4 -o ro /dev/vda /newroot || { echo "torpor-init: no root disk"; /bin/busybox poweroff -f; }
/bin/busybox umount /proc /sys
/bin/busybox mount --move /dev /newroot/dev
exec /bin/busybox switch_root /newroot /sbin/init
