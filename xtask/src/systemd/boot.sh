#!/bin/sh
# The container's first process, run by `unshare` in new PID, mount, UTS, IPC, network and
# cgroup namespaces: it builds the container's root and becomes its systemd (PID 1).
#
# $1: an empty directory; a tmpfs is mounted on it in this mount namespace only, holding the
# writable layer of an overlay of the host's root file system, so whatever the container
# installs or writes is gone with it and the host's files are never changed.
set -eu
state=$1
mount -t tmpfs -o mode=0700 dropscope-systemd "$state"
mkdir "$state/upper" "$state/work" "$state/root"
mount -t overlay -o "lowerdir=/,upperdir=$state/upper,workdir=$state/work" \
	dropscope-systemd "$state/root"
root=$state/root

mount -t proc proc "$root/proc"
# The kernel's settings are the host's: read-only, as systemd-nspawn makes them (and
# systemd-sysctl, systemd-binfmt skip themselves on a read-only /proc/sys).
for p in sys sysrq-trigger; do
	[ -e "$root/proc/$p" ] || continue
	mount --bind "$root/proc/$p" "$root/proc/$p"
	mount -o remount,bind,ro "$root/proc/$p"
done
# sysfs read-only (udev skips itself), with the cgroup namespace's own cgroup2 tree writable.
mount -t sysfs -o ro sysfs "$root/sys"
mount -t cgroup2 cgroup2 "$root/sys/fs/cgroup"

# A /dev of its own: the usual character devices and a private devpts; no /dev/console, so no
# getty is started on the host's.
mount -t tmpfs -o mode=0755 dev "$root/dev"
for d in null zero full random urandom tty; do
	touch "$root/dev/$d"
	mount --bind "/dev/$d" "$root/dev/$d"
done
mkdir "$root/dev/pts" "$root/dev/shm"
mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts "$root/dev/pts"
mount -t tmpfs -o mode=1777 shm "$root/dev/shm"
ln -s pts/ptmx "$root/dev/ptmx"
ln -s /proc/self/fd "$root/dev/fd"
ln -s /proc/self/fd/0 "$root/dev/stdin"
ln -s /proc/self/fd/1 "$root/dev/stdout"
ln -s /proc/self/fd/2 "$root/dev/stderr"

mount -t tmpfs -o mode=0755 run "$root/run"
mount -t tmpfs -o mode=1777 tmp "$root/tmp"

# A machine image built with Docker carries a policy-rc.d that forbids starting services on
# install (deb-systemd-invoke obeys it); a booted Debian has none, so neither has the container.
rm -f "$root/usr/sbin/policy-rc.d"

# Modules are the host kernel's: none is loaded from here (and the capability is dropped).
ln -sf /dev/null "$root/etc/systemd/system/systemd-modules-load.service"

# Every mount shared, as systemd makes them when the kernel starts it (in a container it leaves
# that to the container manager): a mount made later, such as `ip netns add`'s under /run/netns,
# reaches the services' own mount namespaces as on a booted machine. The peer groups are this
# mount namespace's own: `unshare` made every mount private first.
mount --make-rshared "$root"

exec setpriv --bounding-set=-sys_module chroot "$root" /lib/systemd/systemd --unit=basic.target
