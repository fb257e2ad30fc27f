#!/bin/bash
# setup-host.sh - install every host package the kernel-rxe interop rig needs.
#
# Idempotent, non-interactive, for Debian 12 as root. Packages already present
# are not touched. `apt-get update` is run only when an install fails (a fresh
# machine whose package lists are empty or stale).
#
#   sudo tests/interop/setup-host.sh          # or just run it as root
set -euo pipefail

# What each package is for:
#   qemu-system-x86       runs the guests (TCG; no KVM on these machines)
#   kmod                  depmod/modprobe against the extracted guest kernel
#   cpio                  builds the initramfs
#   iproute2              ip netns / bridge / tuntap on the host
#   iputils-ping          host-side ping from the netns
#   python3               vmctl.py (guest control channel client)
#   gcc libc6-dev         compiles the guest tools (labpeer)
#   libibverbs-dev        verbs headers + libibverbs.so for linking labpeer
#   tcpdump               capture-start/capture-stop on br0 inside the netns
#   tshark                decode captures (rig.sh decode)
#   nftables              optional belt-and-braces isolation helpers / debugging
#   bc                    timing arithmetic
#   ca-certificates       apt-get download over https mirrors, if configured
#   procps                ps/pgrep for status checks
PKGS=(qemu-system-x86 kmod cpio iproute2 iputils-ping python3 gcc libc6-dev libibverbs-dev
      tcpdump tshark nftables bc ca-certificates procps)

log() { echo "[setup-host] $*" >&2; }

[ "$(id -u)" = 0 ] || { log "must run as root"; exit 1; }

missing=()
for p in "${PKGS[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
        missing+=("$p")
    fi
done
if [ ${#missing[@]} -eq 0 ]; then
    log "all ${#PKGS[@]} packages already installed"
    exit 0
fi
log "installing: ${missing[*]}"

export DEBIAN_FRONTEND=noninteractive
# tshark asks whether non-root users may capture; preseed the answer.
echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections 2>/dev/null || true

install() {
    apt-get install -y --no-install-recommends -o Dpkg::Options::=--force-confold "${missing[@]}" </dev/null >&2
}
if ! install; then
    log "install failed; running apt-get update and retrying"
    apt-get update </dev/null >&2
    install
fi
log "done"
