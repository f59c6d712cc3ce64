#!/bin/sh
# torpor sandbox: the root filesystem's /sbin/init (PID 1). Mounts the workspace disk, drops
# nothing of the host into the guest (there is nothing of it to drop: no shared folder, no
# network unless asked), and runs the guest agent on the virtio-serial port named
# torpor.agent. PID 1 must not exit: when the agent ends, the VM powers off.
export PATH=/bin:/sbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mkdir -p /dev/pts /dev/shm
mount -t tmpfs -o size=${TORPOR_TMP_MB:-64}m,mode=1777 tmpfs /tmp
mount -t tmpfs -o size=1m,mode=0755 tmpfs /run
hostname sandbox
ip link set lo up 2>/dev/null
mount -t ext4 /dev/vdb /ws || { echo "torpor-init: no workspace disk"; poweroff -f; }
mkdir -p /ws/ops /ws/files
# The disk's root and the ledger are root's whoever made the disk (uid 1000 owns only files/).
chown 0:0 /ws /ws/ops; chmod 0700 /ws /ws/ops; chown 1000:1000 /ws/files
mount --bind /ws/files /work
if grep -q 'torpor.net=1' /proc/cmdline; then
  ip link set eth0 up && ip addr add 10.0.2.15/24 dev eth0 && ip route add default via 10.0.2.2
fi
port=""
for p in /sys/class/virtio-ports/*; do
  [ "$(cat "$p/name" 2>/dev/null)" = "torpor.agent" ] && port=/dev/$(basename "$p")
done
[ -n "$port" ] || { echo "torpor-init: no agent port"; poweroff -f; }
chmod 0600 "$port"
echo "torpor-init: agent on $port"
/bin/sh /torpor/agent.sh "$port"
sync
poweroff -f
