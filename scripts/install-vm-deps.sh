#!/usr/bin/env bash
# Install what the VM test tier needs on a Debian 12 (bookworm) machine, as root:
#   QEMU 10 (bookworm-backports), the guest-side tools (ndctl, daxctl, numactl, udev, kmod),
#   Debian's 6.12 and 6.1 kernels and the newest 7.x of Debian 13's backports (extracted, not
#   installed: the host keeps its own kernel),
#   and virtme-ng.  Idempotent: reruns only do what is missing.  Downloads are cached in
#   $CXLCTL_VM_CACHE (default /var/cache/cxlctl-vm) so a second run costs nothing.
# Why a script and not docs: CI runs on a fresh machine and must install everything itself.
set -euo pipefail

CACHE=${CXLCTL_VM_CACHE:-/var/cache/cxlctl-vm}
VENV=${1:-}
mkdir -p "$CACHE"
export DEBIAN_FRONTEND=noninteractive

# The Debian mirror this machine is configured with (never a host name written here): the URI of
# the apt source that serves bookworm itself, from deb822 .sources files or one-line sources.list.
debian_mirror() {
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk 'BEGIN{RS=""; FS="\n"}
         { u=""; s=0
           for (i=1;i<=NF;i++) {
             if ($i ~ /^URIs:/) { sub(/^URIs:[ \t]*/, "", $i); split($i, a, /[ \t]+/); u=a[1] }
             if ($i ~ /^Suites:/ && $i ~ /(^|[ \t])bookworm([ \t]|$)/) s=1 }
           if (s && u != "") { print u; exit } }' "$f"
  done
  if [ -f /etc/apt/sources.list ]; then
    awk '$1=="deb" { i=2; if ($2 ~ /^\[/) { while (i<=NF && $i !~ /\]$/) i++; i++ }
                     if ($(i+1)=="bookworm") { print $i; exit } }' /etc/apt/sources.list
  fi
}
if [ ! -f /etc/apt/sources.list.d/backports.sources ] && ! grep -rqs bookworm-backports /etc/apt/sources.list /etc/apt/sources.list.d/; then
  MIRROR=$(debian_mirror | head -n1)
  [ -n "$MIRROR" ] || { echo "no apt source for bookworm found: add bookworm-backports to apt's sources by hand" >&2; exit 1; }
  printf 'Types: deb\nURIs: %s\nSuites: bookworm-backports\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
    "$MIRROR" > /etc/apt/sources.list.d/backports.sources
fi

need_apt=0
for cmd in qemu-system-x86_64 cxl daxctl numactl udevadm modprobe busybox systemd-analyze; do
  command -v "$cmd" >/dev/null 2>&1 || need_apt=1
done
if [ "$need_apt" = 1 ] || ! qemu-system-x86_64 --version 2>/dev/null | grep -q 'version 1[0-9]'; then
  apt-get update -qq
  apt-get install -y -qq -t bookworm-backports qemu-system-x86 >/dev/null
  # systemd: systemd-analyze verify/security for the daemon unit (tests/test_daemon_systemd.py)
  apt-get install -y -qq kmod ndctl daxctl numactl udev busybox-static systemd >/dev/null
fi

# Kernels: newest 6.12 and newest 6.1 Debian builds, unsigned flavour.
fetch_kernel() {  # $1 = name pattern for apt-cache search
  local pkg deb k
  pkg=$(apt-cache search --names-only "$1" | awk '{print $1}' | grep -v -e cloud -e '-rt-' -e dbg | sort -V | tail -n1)
  if [ -z "$pkg" ]; then apt-get update -qq; pkg=$(apt-cache search --names-only "$1" | awk '{print $1}' | grep -v -e cloud -e '-rt-' -e dbg | sort -V | tail -n1); fi
  [ -n "$pkg" ] || { echo "no kernel package matches $1" >&2; return 1; }
  k=${pkg#linux-image-}; k=${k%-unsigned}
  if [ ! -f "$CACHE/kernels/$k/vmlinuz" ] || [ ! -d "/lib/modules/$k/kernel" ]; then
    deb=$(ls "$CACHE"/"${pkg}"_*.deb 2>/dev/null | head -n1 || true)
    if [ -z "$deb" ]; then (cd "$CACHE" && apt-get download -qq "$pkg"); deb=$(ls "$CACHE"/"${pkg}"_*.deb | head -n1); fi
    rm -rf "$CACHE/kroot-$k"; dpkg -x "$deb" "$CACHE/kroot-$k"
    mkdir -p "$CACHE/kernels/$k" "/lib/modules/$k"
    cp "$CACHE/kroot-$k/boot/vmlinuz-$k" "$CACHE/kernels/$k/vmlinuz"
    cp -a "$CACHE/kroot-$k/lib/modules/$k/." "/lib/modules/$k/"
    depmod "$k"
    rm -rf "$CACHE/kroot-$k"
  fi
  # the kernel's build config, for `cxlctl doctor` in the guest (tests/vm/test_vm_doctor.py mounts it at /boot)
  if [ ! -f "$CACHE/kernels/$k/config" ]; then
    deb=$(ls "$CACHE"/"${pkg}"_*.deb 2>/dev/null | head -n1 || true)
    if [ -z "$deb" ]; then (cd "$CACHE" && apt-get download -qq "$pkg"); deb=$(ls "$CACHE"/"${pkg}"_*.deb | head -n1); fi
    dpkg-deb --fsys-tarfile "$deb" | tar -xO "./boot/config-$k" > "$CACHE/kernels/$k/config.tmp"
    mv "$CACHE/kernels/$k/config.tmp" "$CACHE/kernels/$k/config"
  fi
  echo "$k"
}
K612=$(fetch_kernel 'linux-image-6.12.*-amd64-unsigned')
K61=$(fetch_kernel 'linux-image-6.1.0-.*-amd64-unsigned')
printf '%s\n' "$K612" > "$CACHE/kernel-6.12"
printf '%s\n' "$K61" > "$CACHE/kernel-6.1"

# The newest Linux 7.x of Debian 13's backports (trixie-backports).  Its packaging is new: the
# kernel is in linux-binary-VER (/usr/lib/modules/VER/vmlinuz), the modules in linux-modules-VER,
# config and System.map in linux-base-VER (/usr/lib/modules/VER/config).  A bookworm host fetches
# them through a private apt state under $CACHE/apt-trixie (its own sources.list, lists and
# archive cache), from the same mirror that serves bookworm, so the host's apt sources stay as
# they were.  The modules tree lands in /lib/modules/VER with its config beside it, as Debian 13
# installs it (cxlctl doctor reads it there); vmlinuz and a copy of the config go to
# $CACHE/kernels/VER like the other kernels.
fetch_kernel7() {
  local st mirror ver d pkg deb
  st="$CACHE/apt-trixie"
  mirror=$(debian_mirror | head -n1)
  [ -n "$mirror" ] || { echo "no apt source for bookworm found: cannot derive the mirror for trixie-backports" >&2; return 1; }
  mkdir -p "$st/lists/partial" "$st/cache/archives/partial"
  printf 'deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] %s trixie-backports main\n' "$mirror" > "$st/sources.list"
  local A=(-o "Dir::State::Lists=$st/lists" -o "Dir::Etc::SourceList=$st/sources.list"
           -o "Dir::Etc::SourceParts=/dev/null" -o "Dir::Cache=$st/cache")
  newest7() {
    apt-cache "${A[@]}" search --names-only '^linux-modules-7\.[0-9.]*\+deb13-amd64$' \
      | awk '{print $1}' | sed 's/^linux-modules-//' | sort -V | tail -n1
  }
  ver=$(newest7 || true)
  # a fresh state (or a week-old one on CI's cache) is refreshed once before giving up
  if [ -z "$ver" ] || [ -z "$(find "$st/lists" -maxdepth 1 -name '*Packages*' -mtime -7 2>/dev/null | head -n1)" ]; then
    apt-get "${A[@]}" update -qq
    ver=$(newest7 || true)
  fi
  [ -n "$ver" ] || { echo "no linux-modules-7.* package in trixie-backports" >&2; return 1; }
  if [ ! -f "$CACHE/kernels/$ver/vmlinuz" ] || [ ! -f "$CACHE/kernels/$ver/config" ] \
     || [ ! -d "/lib/modules/$ver/kernel" ] || [ ! -f "/lib/modules/$ver/config" ]; then
    for pkg in linux-binary-$ver linux-modules-$ver linux-base-$ver; do
      deb=$(ls "$CACHE"/"${pkg}"_*.deb 2>/dev/null | head -n1 || true)
      [ -n "$deb" ] || (cd "$CACHE" && apt-get "${A[@]}" download -qq "$pkg")
    done
    d="$CACHE/kroot-$ver"; rm -rf "$d"
    for pkg in linux-binary-$ver linux-modules-$ver linux-base-$ver; do
      dpkg -x "$(ls "$CACHE"/"${pkg}"_*.deb | head -n1)" "$d"
    done
    mkdir -p "$CACHE/kernels/$ver" "/lib/modules/$ver"
    cp "$d/usr/lib/modules/$ver/vmlinuz" "$CACHE/kernels/$ver/vmlinuz"
    cp "$d/usr/lib/modules/$ver/config" "$CACHE/kernels/$ver/config"
    cp -a "$d/usr/lib/modules/$ver/." "/lib/modules/$ver/"
    depmod "$ver"
    rm -rf "$d"
  fi
  echo "$ver"
}
K7=$(fetch_kernel7)
printf '%s\n' "$K7" > "$CACHE/kernel-7.x"

PY=${VENV:+$VENV/bin/}python3
PIP=${VENV:+$VENV/bin/}pip
if ! ${VENV:+$VENV/bin/}vng --version >/dev/null 2>&1; then
  "$PIP" install -q 'virtme-ng==1.42'
fi
echo "vm deps ready: kernels $K612 $K61 $K7 in $CACHE/kernels"
