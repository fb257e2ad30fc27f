#!/bin/bash
# shellcheck disable=SC2015,SC2016  # "a && b || die" is intended; guest commands are single-quoted on purpose
# rig.sh - kernel Soft-RoCE (rdma_rxe) peers for softroce's interop tests.
#
# The host kernel has no InfiniBand/rxe, so kernel rxe runs in QEMU (TCG)
# guests that boot Debian's stock kernel with a small busybox initramfs
# (rdma-core, ibverbs-utils, perftest, rdmacm-utils, iproute2, tcpdump,
# labpeer, UCX's ucx_perftest and libfabric's fi_pingpong). The guests' NICs are taps on bridge br0 inside network namespace
# softroce-rig (host side 10.77.0.1/24, guest K = 10.77.0.(K+1)/24, no uplink,
# no route out): traffic never leaves the namespace and the guests.
#
# Usage: rig.sh COMMAND [ARGS]     (stdout = the command's output, logs on stderr)
#
#   build [-f]                 download .debs (cached), build initramfs + guest tools
#                              (skipped when inputs are unchanged; -f forces)
#   up [N]                     netns + N guests (default 2), wait until rxe0 is ACTIVE
#   down                       kill the rig's qemu/tcpdump (pid files), delete the netns
#   status                     one line per guest; exit 1 if the rig is not up
#   env                        print shell-sourceable RIG_* variables
#   ip K                       print guest K's IPv4 address
#   vm [-t SECS] K CMD...      run CMD (sh -c) in guest K, exit with its status
#   vm-bg [-t SECS] K NAME CMD...   start CMD as background job NAME in guest K
#   vm-wait K NAME [SECS]      wait for job NAME, print its output, exit with its status
#                              (124 and the job is killed if it is still running)
#   vm-kill K NAME             kill job NAME, print its output so far
#   vm-out K NAME              print job NAME's output so far
#   vm-status K NAME           print "running" or "exited RC"
#   vm-put K HOSTFILE GUESTPATH   copy a file into guest K (mode 0755); to fetch one:
#                              rig.sh vm K 'cat GUESTPATH' > HOSTFILE (byte-exact)
#   wait-port K PORT [SECS]    wait until guest K listens on TCP PORT
#   host CMD...                run CMD on the host inside the netns
#   mtu [VALUE]                set MTU of br0, taps and every guest's eth0 (1500 ->
#                              rxe active_mtu 1024, 9000 -> 4096); no VALUE: show
#   netem [-d out|in|both] K SPEC...|off|show
#                              netem on guest K's eth0 egress (default), ingress
#                              (via ifb0) or both; "reorder" without "delay" gets
#                              "delay ${RIG_REORDER_DELAY:-2ms}" added
#   cm-delay K DELAY|off       delay the CM's MADs (RoCEv2 packets to QP 1) arriving at
#                              guest K by DELAY (netem on ifb0 for them alone); other
#                              traffic passes undelayed. "netem K off" also clears it
#   counters K                 guest K's rxe0 hw_counters as "name value" lines (the guest's one
#                              RDMA device, whatever its name: matrix.sh's UCX rows rename it)
#   gid K                      guest K's non-empty GID table: "index gid type ndev"
#   devinfo K                  ibv_devinfo -v in guest K
#   console K                  guest K's console log
#   capture-start NAME [FILTER]   tcpdump on br0 (netns) -> $RIG_WORK/pcaps/NAME.pcap
#                              (default filter: "udp port 4791 or tcp")
#   capture-stop NAME          stop it; prints the pcap path
#   decode NAME [TSHARK-ARGS]  tshark one-line-per-packet view of a capture
#
# Env: RIG_WORK (default $REPO/target/interop-rig), RIG_NS (softroce-rig),
#      RIG_MEM (MiB per guest, 1024), RIG_TTL (guest self-poweroff, s, 1800),
#      RIG_MTU (MTU at "up", 1500), RIG_VM_TIMEOUT (default vm/vm-bg timeout, s, 120),
#      RIG_BOOT_TIMEOUT (s, 180), RIG_PORTS (control ports per guest, 4),
#      RIG_ACCEL (tcg), RIG_KPKG (kernel package; default: linux-image-amd64's dependency),
#      RIG_KERNEL (vmlinux = uncompressed ELF, PVH boot; vmlinuz = the bzImage), RIG_APPEND
#      (extra kernel command line), RIG_SOFTROCE (the softroce binary put into the guests as
#      /usr/bin/softroce, stripped; default $REPO/target/release/softroce; none if absent)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(git -C "$HERE/.." rev-parse --show-toplevel 2>/dev/null || (cd "$HERE/../.." && pwd))
W=$(realpath -m "${RIG_WORK:-$REPO/target/interop-rig}")   # absolute: pid checks match on it
NS=${RIG_NS:-softroce-rig}
MEM=${RIG_MEM:-1024}
TTL=${RIG_TTL:-1800}
ACCEL=${RIG_ACCEL:-tcg}
VM_TIMEOUT=${RIG_VM_TIMEOUT:-120}
BOOT_TIMEOUT=${RIG_BOOT_TIMEOUT:-180}
NPORTS=${RIG_PORTS:-4}
HOST_IP=10.77.0.1
RUN=$W/run
PCAPS=$W/pcaps
PY=python3

# Debian packages unpacked into the initramfs (binaries + the libraries they need)
PKGS="busybox-static rdma-core libibverbs1 ibverbs-providers ibverbs-utils perftest
 rdmacm-utils librdmacm1 libibumad3 libpci3 iproute2 tcpdump libpcap0.8
 libnl-3-200 libnl-route-3-200 libc6 libgcc-s1 libssl3 libbpf1 libbsd0 libcap2
 libdb5.3 libelf1 libmnl0 libselinux1 libtirpc3 libxtables12 libmd0 libpcre2-8-0
 libgssapi-krb5-2 libkrb5-3 libk5crypto3 libkrb5support0 libkeyutils1 libcom-err2
 zlib1g libzstd1 liblzma5 libudev1 libdbus-1-3 libsystemd0 libgcrypt20 libgpg-error0 liblz4-1
 ucx-utils libucx0 libnuma1 libgomp1 libfabric-bin libfabric1 libatomic1 libpsm2-2 libpsm-infinipath1 libuuid1"
# (UCX 1.13 and libfabric 1.17 for the middleware rows, docs/middleware.md. Debian's libfabric
# has its psm2 and psm providers built in: libfabric.so.1 names libpsm2.so.2 and
# libpsm_infinipath.so.1 as DT_NEEDED, so the loader needs them even for the verbs provider.)
# package path -> guest path
BINS="usr/bin/ibv_devinfo usr/bin/ibv_devices usr/bin/ibv_rc_pingpong usr/bin/ibv_ud_pingpong
 usr/bin/ibv_uc_pingpong usr/bin/ibv_srq_pingpong usr/bin/ib_write_bw usr/bin/ib_write_lat
 usr/bin/ib_read_bw usr/bin/ib_read_lat usr/bin/ib_send_bw usr/bin/ib_send_lat
 usr/bin/ib_atomic_bw usr/bin/ib_atomic_lat usr/bin/rping usr/bin/ucmatose usr/bin/udaddy
 usr/bin/rdma_server usr/bin/rdma_client usr/bin/rstream usr/bin/riostream usr/bin/udpong usr/bin/rdma usr/bin/tcpdump
 usr/bin/ucx_info usr/bin/ucx_perftest usr/bin/fi_info usr/bin/fi_pingpong
 bin/ip=usr/sbin/ip sbin/tc=usr/sbin/tc bin/ss=usr/sbin/ss"
# softroce's own binary in the guests (tests/interop/compare.sh: kernel rxe against softroce on
# the same emulated CPU). Its content is one of the build's inputs: a new binary rebuilds the
# image (~2.5 s); without one the guests have none.
SOFTROCE_BIN=${RIG_SOFTROCE:-$REPO/target/release/softroce}
# kernel modules (dependencies resolved with modprobe --show-depends)
MODS="virtio_pci virtio_net virtio_console crc32_generic rdma_rxe ib_umad rdma_ucm
 sch_netem ifb sch_ingress cls_matchall act_mirred sch_prio cls_u32"

log() { echo "[rig $(date +%T)] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }
now() { date +%s.%N; }
lap() { # lap LABEL T0: print and record elapsed time
    local s; s=$(printf '%.1f' "$(echo "$(now) - $2" | bc)")
    printf '%-34s %6s s\n' "$1" "$s" >> "$W/timings.txt"
    log "$1: ${s} s"
}
need_root() { [ "$(id -u)" = 0 ] || die "must run as root"; }
guest_ip() { echo "10.77.0.$(( $1 + 1 ))"; }
nguests() { cat "$RUN/guests" 2>/dev/null || echo 0; }
check_k() {
    [[ $1 =~ ^[0-9]+$ ]] && [ "$1" -ge 1 ] && [ "$1" -le "$(nguests)" ] || die "no guest '$1' (rig has $(nguests) guests; run 'rig.sh up')"
}
is_ours() { # is_ours PID: a live process whose command line mentions our work dir
    [ -n "$1" ] && [ -r "/proc/$1/cmdline" ] && tr '\0' ' ' < "/proc/$1/cmdline" | grep -qF -- "$W/"
}

# ---------------------------------------------------------------- build ----
inputs_hash() {
    { cat "$HERE/rig.sh" "$HERE/labpeer.c" "$HERE/kvpeer.c" "$HERE"/guest/*; echo "$PKGS $MODS ${RIG_KPKG:-}"
      if [ -f "$SOFTROCE_BIN" ]; then sha256sum < "$SOFTROCE_BIN"; else echo "no softroce"; fi; } | sha256sum | cut -c1-16
}

download() { # -> sets KPKG; debs cached in $W/debs
    local manifest=$W/debs/manifest missing=() p
    mkdir -p "$W/debs"
    KPKG=${RIG_KPKG:-}
    if [ -z "$KPKG" ] && [ -f "$manifest" ]; then KPKG=$(head -1 "$manifest"); fi
    if [ -z "$KPKG" ]; then
        KPKG=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
        if [ -z "$KPKG" ]; then
            log "apt-cache knows no linux-image-amd64: apt-get update"
            apt-get update >&2
            KPKG=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
        fi
        [ -n "$KPKG" ] || die "cannot determine the kernel package"
    fi
    for p in $KPKG $PKGS; do
        compgen -G "$W/debs/${p}_*.deb" >/dev/null || missing+=("$p")
    done
    if [ ${#missing[@]} -eq 0 ]; then
        log "all $(( $(wc -w <<< "$PKGS") + 1 )) .debs cached in $W/debs"
    else
        log "apt-get download ${#missing[@]} packages"
        if ! (cd "$W/debs" && apt-get download "${missing[@]}" </dev/null 2>&1 | grep -v -e unsandboxed -e '^Get:' >&2; exit "${PIPESTATUS[0]}"); then
            log "apt-get download failed: apt-get update and retry"
            apt-get update >&2
            (cd "$W/debs" && apt-get download "${missing[@]}" </dev/null 2>&1 | grep -v -e unsandboxed -e '^Get:' >&2; exit "${PIPESTATUS[0]}") \
                || die "apt-get download failed"
        fi
    fi
    echo "$KPKG" > "$manifest"
}

cmd_build() {
    local force=0 t0 t h
    [ "${1:-}" = -f ] && force=1
    need_root
    mkdir -p "$W"
    h=$(inputs_hash)
    if [ $force = 0 ] && [ -f "$W/initramfs.cpio" ] && [ -f "$W/vmlinux" ] && [ "$(cat "$W/build.stamp" 2>/dev/null)" = "$h" ]; then
        log "build is up to date ($W; 'build -f' to force)"
        return 0
    fi
    command -v qemu-system-x86_64 >/dev/null && command -v depmod >/dev/null && command -v cpio >/dev/null \
        && [ -e /usr/include/infiniband/verbs.h ] || die "host packages missing: run $HERE/setup-host.sh"
    t0=$(now); : > "$W/timings.txt"

    t=$(now)
    download
    local KV=${KPKG#linux-image-}
    lap "build: download (.deb, cached)" "$t"

    # extract (kept while the set of .debs is unchanged)
    t=$(now)
    local S=$W/stage K=$W/kernel dh d
    dh=$(find "$W/debs" -name "*.deb" -printf "%f\n" | sort | sha256sum | cut -c1-16)
    if [ "$(cat "$W/extract.stamp" 2>/dev/null)" != "$dh" ]; then
        rm -rf "$K" "$S"; mkdir -p "$K" "$S"
        dpkg-deb -x "$W/debs/${KPKG}"_*.deb "$K"
        for d in "$W"/debs/*.deb; do
            case $d in */linux-image-*) ;; *) dpkg-deb -x "$d" "$S" ;; esac
        done
        depmod -b "$K" "$KV"
        echo "$dh" > "$W/extract.stamp"
    fi
    lap "build: extract + depmod" "$t"

    # rootfs
    t=$(now)
    local R=$W/rootfs b src dst l m
    rm -rf "$R"
    mkdir -p "$R"/{bin,sbin,usr/bin,usr/sbin,lib64,lib/x86_64-linux-gnu,etc/libibverbs.d,proc,sys,dev,tmp,run,root}
    mkdir -p "$R/usr/lib/x86_64-linux-gnu/libibverbs"
    cp "$S/bin/busybox" "$R/bin/busybox"
    for b in $BINS; do
        src=${b%%=*}; dst=${b#*=}
        cp "$S/$src" "$R/$dst"
    done
    gcc -O2 -Wall -Wextra -static -o "$R/usr/bin/rigagent" "$HERE/guest/rigagent.c"
    gcc -O2 -Wall -Wextra -o "$R/usr/bin/labpeer" "$HERE/labpeer.c" -libverbs
    cp "$R/usr/bin/labpeer" "$W/labpeer"        # host copy (compile check / inspection)
    # the key-value store peer (examples/kvstore.rs's protocol) over librdmacm's synchronous API
    gcc -O2 -Wall -Wextra -o "$R/usr/bin/kvpeer" "$HERE/kvpeer.c" -lrdmacm -libverbs
    if [ -f "$SOFTROCE_BIN" ]; then
        # (symbols stripped: ~1 MB less for every guest to unpack under TCG)
        strip -o "$R/usr/bin/softroce" "$SOFTROCE_BIN" 2>/dev/null || cp "$SOFTROCE_BIN" "$R/usr/bin/softroce"
        log "softroce: $SOFTROCE_BIN -> /usr/bin/softroce ($(du -h "$R/usr/bin/softroce" | cut -f1))"
    else
        log "note: no softroce binary at $SOFTROCE_BIN (cargo build --release --bin softroce): the guests have none"
    fi
    cp "$S"/usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav*.so "$R/usr/lib/x86_64-linux-gnu/libibverbs/"
    cp "$S/etc/libibverbs.d/rxe.driver" "$R/etc/libibverbs.d/"
    # UCX's transports are modules it dlopen()s from the directory "ucx" beside its libucs.so.0,
    # which lands in /lib/x86_64-linux-gnu below: libuct_ib alone (rc_verbs, ud_verbs, dc_mlx5...;
    # not cma, not rdmacm)
    mkdir -p "$R/lib/x86_64-linux-gnu/ucx"
    cp -L "$S/usr/lib/x86_64-linux-gnu/ucx/libuct_ib.so.0" "$R/lib/x86_64-linux-gnu/ucx/"
    # libpsm_infinipath.so.1 is a symlink update-alternatives makes at install time (it is not
    # in the .deb): make it in the stage as the package's postinst would
    if [ ! -e "$S/usr/lib/x86_64-linux-gnu/libpsm_infinipath.so.1" ]; then
        local psm; psm=$(cd "$S/usr/lib" && compgen -G "libpsm1/libpsm_infinipath.so.1.*" | head -1)
        [ -n "$psm" ] || die "libpsm-infinipath1 has no libpsm1/libpsm_infinipath.so.1.*"
        ln -s "../$psm" "$S/usr/lib/x86_64-linux-gnu/libpsm_infinipath.so.1"
    fi
    # shared-library closure, resolved against the unpacked .debs first
    local LLP=$S/lib/x86_64-linux-gnu:$S/usr/lib/x86_64-linux-gnu libs
    libs=$(for f in "$R"/usr/bin/* "$R"/usr/sbin/* "$R"/usr/lib/x86_64-linux-gnu/libibverbs/*.so "$R"/lib/x86_64-linux-gnu/ucx/*.so.0; do
               LD_LIBRARY_PATH=$LLP ldd "$f" 2>/dev/null | awk '/=> \//{print $3}'
           done | sort -u)
    for l in $libs; do
        case $l in "$S"/*) ;; *) log "note: $l resolved from the host, not from a .deb" ;; esac
        cp -L "$l" "$R/lib/x86_64-linux-gnu/"
    done
    cp -L "$S/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" "$R/lib64/"
    cp -L "$S/lib/x86_64-linux-gnu/libgcc_s.so.1" "$R/lib/x86_64-linux-gnu/"   # dlopen()ed at thread exit
    ln -s lib "$R/usr/lib64"
    if LD_LIBRARY_PATH=$R/lib/x86_64-linux-gnu ldd "$R"/usr/bin/* "$R"/usr/sbin/* "$R"/lib/x86_64-linux-gnu/ucx/*.so.0 2>/dev/null | grep -q 'not found'; then
        die "missing libraries: $(LD_LIBRARY_PATH=$R/lib/x86_64-linux-gnu ldd "$R"/usr/bin/* "$R"/usr/sbin/* "$R"/lib/x86_64-linux-gnu/ucx/*.so.0 2>/dev/null | grep 'not found' | sort -u | tr '\n' ' ')"
    fi
    # kernel modules in dependency order
    local KM=$K/lib/modules/$KV
    : > "$R/etc/rig-modules.order"
    for m in $MODS; do
        modprobe -d "$K" -S "$KV" --show-depends "$m" | awk '$1=="insmod"{print $2}' || die "module $m not found"
    done | awk '!seen[$0]++' | while read -r m; do
        mkdir -p "$R/lib/modules/$KV/$(dirname "${m#"$KM"/}")"
        cp "$m" "$R/lib/modules/$KV/${m#"$KM"/}"
        echo "${m#"$KM"/}" >> "$R/etc/rig-modules.order"
    done
    echo "$KV" > "$R/etc/rig-kver"
    printf 'root:x:0:0:root:/root:/bin/sh\ntcpdump:x:0:0::/:/bin/false\n' > "$R/etc/passwd"
    printf 'root:x:0:\n' > "$R/etc/group"
    { echo "127.0.0.1 localhost"; echo "$HOST_IP host"; for m in 1 2 3 4 5 6 7 8; do echo "$(guest_ip $m) vm$m"; done; } > "$R/etc/hosts"
    printf 'passwd: files\ngroup: files\nhosts: files\n' > "$R/etc/nsswitch.conf"
    install -m 0755 "$HERE/guest/init" "$R/init"
    lap "build: rootfs + compile" "$t"

    # Uncompressed initramfs and an uncompressed ELF vmlinux booted through its
    # PVH entry point: under TCG, xz-decompressing the bzImage and gunzipping
    # the initramfs inside the guest cost ~3.5 s of a ~7.5 s boot.
    t=$(now)
    (cd "$R" && find . | LC_ALL=C sort | cpio -o -H newc --quiet) > "$W/initramfs.cpio.tmp"
    mv "$W/initramfs.cpio.tmp" "$W/initramfs.cpio"
    cp "$K/boot/vmlinuz-$KV" "$W/vmlinuz"
    $PY - "$W/vmlinuz" "$W/vmlinux.tmp" <<'PYEOF'
import lzma, sys
d = open(sys.argv[1], "rb").read()
i = d.find(b"\xfd7zXZ\x00")           # Debian 12 bzImages carry an xz payload
if i < 0:
    sys.exit("no xz payload in the bzImage")
out = lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(d[i:])
if out[:4] != b"\x7fELF":
    sys.exit("xz payload is not an ELF vmlinux")
open(sys.argv[2], "wb").write(out)
PYEOF
    mv "$W/vmlinux.tmp" "$W/vmlinux"
    echo "$KV" > "$W/kver"
    echo "$h" > "$W/build.stamp"
    lap "build: cpio + vmlinux" "$t"
    log "kernel $KV; initramfs $(du -h "$W/initramfs.cpio" | cut -f1) ($(find "$R" -type f | wc -l) files)"
    lap "build: TOTAL" "$t0"
}

# ------------------------------------------------------------- up/down ----
net_up() { # net_up N MTU
    local n=$1 mtu=$2 k
    ip netns add "$NS"
    ip -n "$NS" link set lo up
    ip -n "$NS" link add br0 type bridge
    for k in $(seq 1 "$n"); do
        ip -n "$NS" tuntap add dev "tap$k" mode tap
        ip -n "$NS" link set "tap$k" mtu "$mtu" master br0 up
    done
    ip -n "$NS" link set br0 mtu "$mtu" up
    ip -n "$NS" addr add "$HOST_IP/24" dev br0
    log "netns $NS: br0 $HOST_IP/24 mtu $mtu, tap1..tap$n (no uplink, no default route)"
}

vm_boot() { # vm_boot K MTU
    local k=$1 mtu=$2 i ports=() accel cpu
    rm -f "$RUN/vm$k".*
    for i in $(seq 0 $(( NPORTS - 1 ))); do
        ports+=(-chardev "socket,id=c$i,path=$RUN/vm$k.ctl$i,server=on,wait=off"
                -device "virtserialport,chardev=c$i,name=rig.ctl$i")
    done
    case $ACCEL in kvm) accel=kvm; cpu=host ;; *) accel=tcg; cpu=max ;; esac
    # setsid: not in the caller's process group (a ^C of the caller does not kill
    # the guests: "down" does). timeout: host-side backstop behind the guest TTL.
    setsid ip netns exec "$NS" timeout -k 10 $(( TTL + 120 )) qemu-system-x86_64 \
        -name "rig-vm$k" -accel "$accel" -cpu "$cpu" -m "$MEM" -smp 1 -nodefaults -display none -no-reboot \
        -kernel "$W/${RIG_KERNEL:-vmlinux}" -initrd "$W/initramfs.cpio" \
        -append "console=ttyS0 quiet panic=-1 rig.ip=$(guest_ip "$k")/24 rig.name=vm$k rig.ttl=$TTL rig.mtu=$mtu ${RIG_APPEND:-}" \
        -serial "file:$RUN/vm$k.console.log" \
        -device virtio-serial-pci "${ports[@]}" \
        -netdev "tap,id=n0,ifname=tap$k,script=no,downscript=no" \
        -device "virtio-net-pci,netdev=n0,mac=52:54:00:77:00:$(printf %02x $(( k + 1 )))" \
        -pidfile "$RUN/vm$k.pid" </dev/null >"$RUN/vm$k.qemu.log" 2>&1 &
    echo $! > "$RUN/vm$k.wrapper.pid"
}

vm_wait_ready() { # vm_wait_ready K T0
    local k=$1 t0=$2
    while ! grep -qa RIG-READY "$RUN/vm$k.console.log" 2>/dev/null; do
        if ! is_ours "$(cat "$RUN/vm$k.wrapper.pid" 2>/dev/null)"; then
            log "vm$k: qemu exited during boot"; cat "$RUN/vm$k.qemu.log" >&2
            tail -c 3000 "$RUN/vm$k.console.log" >&2 2>/dev/null || true
            return 1
        fi
        if (( $(echo "$(now) - $t0 > $BOOT_TIMEOUT" | bc) )); then
            log "vm$k not ready after ${BOOT_TIMEOUT}s; console tail:"
            tail -c 3000 "$RUN/vm$k.console.log" >&2 || true
            return 1
        fi
        sleep 0.2
    done
    grep -a 'RIG:' "$RUN/vm$k.console.log" | tr -d '\r' >&2
    grep -aq 'state=4: ACTIVE' "$RUN/vm$k.console.log" || { log "vm$k: rxe0 port not ACTIVE"; return 1; }
    grep -aq 'FAILED' "$RUN/vm$k.console.log" && { log "vm$k: guest setup step FAILED (see above)"; return 1; }
    vmctl "$k" x 30 true || { log "vm$k: control channel does not answer"; return 1; }
    lap "up: vm$k ready (rxe0 ACTIVE)" "$t0"
}

cmd_up() {
    local n=${1:-2} mtu=${RIG_MTU:-1500} t0 k
    need_root
    [[ $n =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 8 ] || die "up: N must be 1..8"
    [ -f "$W/initramfs.cpio" ] && [ -f "$W/vmlinux" ] || die "not built: run 'rig.sh build' first"
    if ip netns list | grep -qx "$NS\( .*\)\?" || compgen -G "$RUN/vm*.pid" >/dev/null; then
        log "rig (or leftovers) present: taking it down first"
        cmd_down
    fi
    mkdir -p "$RUN" "$PCAPS"
    [ -f "$W/timings.txt" ] || : > "$W/timings.txt"
    t0=$(now)
    net_up "$n" "$mtu"
    echo "$n" > "$RUN/guests"
    echo "$mtu" > "$RUN/mtu"
    for k in $(seq 1 "$n"); do vm_boot "$k" "$mtu"; done
    for k in $(seq 1 "$n"); do
        vm_wait_ready "$k" "$t0" || { log "up failed: taking the rig down"; cmd_down; exit 1; }
    done
    lap "up: $n guests" "$t0"
}

kill_pidfile() { # kill_pidfile FILE SIGNAL: kill that process if it is ours; wait for it
    local f=$1 sig=$2 p i
    [ -f "$f" ] || return 0
    p=$(cat "$f" 2>/dev/null || true)
    if is_ours "$p"; then
        kill "-$sig" "$p" 2>/dev/null || true
        for i in $(seq 50); do is_ours "$p" || break; sleep 0.1; done
        if is_ours "$p"; then kill -KILL "$p" 2>/dev/null || true; sleep 0.2; fi
        log "stopped pid $p (${f##*/})"
    fi
    rm -f "$f"
}

cmd_down() {
    need_root
    local f
    for f in "$RUN"/capture.*.pid; do [ -e "$f" ] && kill_pidfile "$f" INT; done
    for f in "$RUN"/vm*.pid; do
        case $f in *.wrapper.pid) ;; *) [ -e "$f" ] && kill_pidfile "$f" TERM ;; esac
    done
    for f in "$RUN"/vm*.wrapper.pid; do [ -e "$f" ] && kill_pidfile "$f" TERM; done
    if ip netns list | grep -q "^$NS\b"; then
        ip netns del "$NS"
        log "netns $NS deleted"
    fi
    rm -f "$RUN"/vm*.ctl* "$RUN/guests" "$RUN/mtu"
    log "rig down"
}

cmd_status() {
    local n k p rc=0
    n=$(nguests)
    if [ "$n" = 0 ] || ! ip netns list | grep -q "^$NS\b"; then echo "rig: down"; return 1; fi
    echo "rig: netns $NS, host $HOST_IP, mtu $(cat "$RUN/mtu" 2>/dev/null), $n guests"
    for k in $(seq 1 "$n"); do
        p=$(cat "$RUN/vm$k.pid" 2>/dev/null || true)
        if is_ours "$p"; then echo "vm$k $(guest_ip "$k") qemu pid $p running"; else echo "vm$k $(guest_ip "$k") NOT running"; rc=1; fi
    done
    return $rc
}

cmd_env() {
    local k
    echo "RIG_WORK=$W"; echo "RIG_NS=$NS"; echo "RIG_HOST_IP=$HOST_IP"; echo "RIG_GUESTS=$(nguests)"
    echo "RIG_MTU=$(cat "$RUN/mtu" 2>/dev/null || echo "${RIG_MTU:-1500}")"
    for k in $(seq 1 "$(nguests)"); do echo "RIG_VM${k}_IP=$(guest_ip "$k")"; done
}

# ------------------------------------------------------------ guest ops ----
vmctl() { local k=$1; shift; $PY "$HERE/vmctl.py" "$RUN" "$k" "$@"; }

parse_t() { # parse_t ARGS... -> T (timeout) and NARGS (count consumed)
    T=$VM_TIMEOUT; NARGS=0
    if [ "${1:-}" = -t ]; then T=${2:?-t needs seconds}; NARGS=2; fi
    [[ $T =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "bad timeout '$T'"
}

cmd_vm() {
    parse_t "$@"; shift "$NARGS"
    [ $# -ge 2 ] || die "usage: vm [-t SECS] K CMD..."
    local k=$1; shift; check_k "$k"
    vmctl "$k" x "$T" "$*"
}
cmd_vm_bg() {
    parse_t "$@"; shift "$NARGS"
    [ $# -ge 3 ] || die "usage: vm-bg [-t SECS] K NAME CMD..."
    local k=$1 name=$2; shift 2; check_k "$k"
    vmctl "$k" bg "$name" "$T" "$*"
}
cmd_vm_wait() {
    [ $# -ge 2 ] || die "usage: vm-wait K NAME [SECS]"
    check_k "$1"
    vmctl "$1" wait "$2" "${3:-$VM_TIMEOUT}"
}
cmd_vm_job() { # kill|out|status K NAME
    [ $# -eq 3 ] || die "usage: vm-$1 K NAME"
    check_k "$2"
    vmctl "$2" "$1" "$3"
}

cmd_vm_put() {
    [ $# -eq 3 ] || die "usage: vm-put K HOSTFILE GUESTPATH"
    local k=$1 src=$2 dst=$3 tmp chunk
    check_k "$k"; [ -f "$src" ] || die "no file $src"
    [[ $dst =~ ^/[A-Za-z0-9_./-]+$ ]] || die "bad guest path '$dst'"
    tmp=$(mktemp -d)
    # one request per 64 KiB: a request's command must stay below the kernel's
    # 128 KiB limit for one argv string (it runs as sh -c CMD)
    split -b 65536 -d -a 4 "$src" "$tmp/c."
    vmctl "$k" x 30 ": > '$dst.part'" || { rm -rf "$tmp"; die "vm-put: cannot write $dst"; }
    for chunk in "$tmp"/c.*; do
        [ -e "$chunk" ] || continue
        vmctl "$k" x 30 "echo '$(base64 -w0 "$chunk")' | base64 -d >> '$dst.part'" || { rm -rf "$tmp"; die "vm-put: transfer failed"; }
    done
    rm -rf "$tmp"
    vmctl "$k" x 30 "chmod 0755 '$dst.part' && mv '$dst.part' '$dst' && [ \$(wc -c < '$dst') = $(stat -c %s "$src") ]" \
        || die "vm-put: size mismatch"
}

cmd_wait_port() {
    [ $# -ge 2 ] || die "usage: wait-port K PORT [SECS]"
    local k=$1 port=$2 t=${3:-30}; check_k "$k"
    [[ $port =~ ^[0-9]+$ ]] || die "bad port"
    vmctl "$k" x "$(( ${t%.*} + 5 ))" "i=0; while ! netstat -ltn 2>/dev/null | grep -q ':$port '; do
        i=\$((i+1)); [ \$i -gt $(( ${t%.*} * 10 )) ] && { echo 'port $port not listening after ${t}s' >&2; exit 1; }; sleep 0.1; done"
}

cmd_host() {
    [ $# -ge 1 ] || die "usage: host CMD..."
    ip netns list | grep -q "^$NS\b" || die "netns $NS does not exist (rig not up)"
    if [ $# -eq 1 ]; then exec ip netns exec "$NS" sh -c "$1"; else exec ip netns exec "$NS" "$@"; fi
}

cmd_mtu() {
    need_root
    local n k v=${1:-} rc=0
    n=$(nguests); [ "$n" -ge 1 ] || die "rig not up"
    if [ -n "$v" ]; then
        [[ $v =~ ^[0-9]+$ ]] && [ "$v" -ge 1280 ] && [ "$v" -le 9000 ] || die "mtu: 1280..9000"
        for k in $(seq 1 "$n"); do ip -n "$NS" link set "tap$k" mtu "$v"; done
        ip -n "$NS" link set br0 mtu "$v"
        for k in $(seq 1 "$n"); do vmctl "$k" x 30 "/usr/sbin/ip link set eth0 mtu $v; [ -d /sys/class/net/ifb0 ] && /usr/sbin/ip link set ifb0 mtu $v; true" || rc=1; done
        echo "$v" > "$RUN/mtu"
        sleep 0.3
    fi
    echo "host br0 mtu $(ip -n "$NS" -o link show br0 | sed -E 's/.* mtu ([0-9]+).*/\1/')"
    for k in $(seq 1 "$n"); do
        vmctl "$k" x 30 "echo \"vm$k eth0 mtu \$(cat /sys/class/net/eth0/mtu) rxe0 \$(ibv_devinfo -d rxe0 | grep -E 'active_mtu' | xargs)\"" || rc=1
    done
    return $rc
}

# The guest commands that send everything eth0 receives through ifb0, whose egress qdisc then
# acts on the guest's ingress (netem -d in, cm-delay).
ifb_redirect() {
    local TC=/usr/sbin/tc IPR=/usr/sbin/ip
    echo "$IPR link set ifb0 mtu \$(cat /sys/class/net/eth0/mtu) up
        $TC qdisc replace dev eth0 handle ffff: ingress
        $TC filter del dev eth0 parent ffff: 2>/dev/null || true
        $TC filter add dev eth0 parent ffff: matchall action mirred egress redirect dev ifb0"
}

cmd_netem() {
    local dir=out k spec
    if [ "${1:-}" = -d ]; then dir=${2:?-d out|in|both}; shift 2; fi
    case $dir in out|in|both) ;; *) die "netem -d out|in|both" ;; esac
    [ $# -ge 2 ] || die "usage: netem [-d out|in|both] K SPEC...|off|show"
    k=$1; shift; check_k "$k"; spec="$*"
    local TC=/usr/sbin/tc
    case $spec in
        off)
            vmctl "$k" x 30 "$TC qdisc del dev eth0 root 2>/dev/null; $TC qdisc del dev eth0 ingress 2>/dev/null;
                [ -d /sys/class/net/ifb0 ] && $TC qdisc del dev ifb0 root 2>/dev/null; true" ;;
        show)
            vmctl "$k" x 30 "$TC -s qdisc show dev eth0; [ -d /sys/class/net/ifb0 ] && $TC -s qdisc show dev ifb0; true" ;;
        *)
            if [[ $spec == *reorder* && $spec != *delay* ]]; then spec="delay ${RIG_REORDER_DELAY:-2ms} $spec"; fi
            local c="set -e"
            if [ "$dir" != in ]; then c="$c; $TC qdisc replace dev eth0 root netem $spec"; fi
            if [ "$dir" != out ]; then
                c="$c; $(ifb_redirect)
                    $TC qdisc replace dev ifb0 root netem $spec"
            fi
            vmctl "$k" x 30 "$c" && log "vm$k netem ($dir): $spec"
            ;;
    esac
}

cmd_cm_delay() {
    [ $# -eq 2 ] || die "usage: cm-delay K DELAY|off"
    local k=$1 d=$2 TC=/usr/sbin/tc; check_k "$k"
    if [ "$d" = off ]; then cmd_netem "$k" off; return; fi
    # IPv4 + UDP to 4791 whose BTH names destination QP 1: the BTH's DestQP is the low 24 bits
    # of the 32-bit word 4 bytes into the UDP payload (IP header 20, UDP 8: offset 32). The
    # other band gets a deep FIFO: prio's default child takes ifb0's txqueuelen (32), and a
    # 64 KiB WRITE burst overflowed it.
    vmctl "$k" x 30 "set -e
        $(ifb_redirect)
        $TC qdisc replace dev ifb0 root handle 1: prio bands 3 priomap 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1
        $TC qdisc replace dev ifb0 parent 1:1 handle 10: netem delay $d
        $TC qdisc replace dev ifb0 parent 1:2 handle 20: pfifo limit 10000
        $TC filter add dev ifb0 parent 1: protocol ip prio 1 u32 match ip protocol 17 0xff match ip dport 4791 0xffff match u32 0x00000001 0x00ffffff at 32 flowid 1:1" \
        && log "vm$k: CM MADs in delayed by $d"
}

cmd_counters() {
    [ $# -eq 1 ] || die "usage: counters K"
    check_k "$1"
    vmctl "$1" x 30 'cd /sys/class/infiniband/*/ports/1/hw_counters && grep -H . * | sed "s/:/ /"'
}

cmd_gid() {
    [ $# -eq 1 ] || die "usage: gid K"
    check_k "$1"
    # one grep over the (large) GID table; per-entry cats only for the used ones
    vmctl "$1" x 30 'P=/sys/class/infiniband/rxe0/ports/1; cd $P/gids && grep -H . * | grep -v ":0000:0000:0000:0000:0000:0000:0000:0000$" |
        while IFS=: read -r i v; do echo "$i $v $(tr " " _ < $P/gid_attrs/types/$i 2>/dev/null) $(cat $P/gid_attrs/ndevs/$i 2>/dev/null)"; done | sort -n'
}

# ------------------------------------------------------------- capture ----
cap_name() { [[ ${1:-} =~ ^[A-Za-z0-9_.-]+$ ]] || die "bad capture name '${1:-}'"; }

cmd_capture_start() {
    need_root
    local name=${1:-} filter=${2:-udp port 4791 or tcp} i
    cap_name "$name"
    ip netns list | grep -q "^$NS\b" || die "rig not up"
    [ -e "$RUN/capture.$name.pid" ] && die "capture $name already running"
    mkdir -p "$PCAPS"
    rm -f "$PCAPS/$name.pcap"
    # tcpdump must be a process we can signal directly: ip netns exec and
    # setsid both exec, so $! is tcpdump itself. -Z root: write as root.
    setsid ip netns exec "$NS" tcpdump -i br0 -n -U --immediate-mode -B 32768 -s 0 -Z root -w "$PCAPS/$name.pcap" "$filter" \
        </dev/null >/dev/null 2>"$RUN/capture.$name.log" &
    echo $! > "$RUN/capture.$name.pid"
    for i in $(seq 300); do
        grep -q 'listening on' "$RUN/capture.$name.log" 2>/dev/null && { log "capture $name started"; return 0; }
        is_ours "$(cat "$RUN/capture.$name.pid")" || break
        sleep 0.05
    done
    cat "$RUN/capture.$name.log" >&2
    kill_pidfile "$RUN/capture.$name.pid" KILL
    die "tcpdump did not start"
}

cmd_capture_stop() {
    need_root
    local name=${1:-}
    cap_name "$name"
    [ -e "$RUN/capture.$name.pid" ] || die "no capture $name running"
    sleep 0.3   # let trailing packets land
    # tcpdump (-U) writes each packet as it takes it from its buffer, and on SIGINT it stops
    # without taking what is still buffered. Without --immediate-mode (capture-start) libpcap
    # reads the kernel's ring a block at a time, a block handed over when full or after 1 s:
    # the CI run of stop 22 lost the last 15 packets of a 6 573-packet run, twice, that way.
    # With it, tcpdump can still lag a burst on a busy host: wait until the file stops growing
    # (at most 10 s) before stopping it.
    local size=-1 now i
    for i in $(seq 50); do
        now=$(stat -c %s "$PCAPS/$name.pcap" 2>/dev/null || echo 0)
        [ "$now" = "$size" ] && break
        size=$now; sleep 0.2
    done
    kill_pidfile "$RUN/capture.$name.pid" INT 2>/dev/null
    grep -E 'packets (captured|received|dropped)' "$RUN/capture.$name.log" | tr '\n' ' ' >&2 || true; echo >&2
    echo "$PCAPS/$name.pcap"
}

cmd_decode() {
    local name=${1:-}; cap_name "$name"; shift
    [ -f "$PCAPS/$name.pcap" ] || die "no $PCAPS/$name.pcap"
    tshark -r "$PCAPS/$name.pcap" "$@" 2>/dev/null
}

# ----------------------------------------------------------------- main ----
usage() { sed -n '3,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

cmd=${1:-}; [ $# -gt 0 ] && shift
case $cmd in
    build) cmd_build "$@" ;;
    up) cmd_up "$@" ;;
    down) cmd_down ;;
    status) cmd_status ;;
    env) cmd_env ;;
    ip) [ $# -eq 1 ] || die "usage: ip K"; guest_ip "$1" ;;
    vm) cmd_vm "$@" ;;
    vm-bg) cmd_vm_bg "$@" ;;
    vm-wait) cmd_vm_wait "$@" ;;
    vm-kill) cmd_vm_job kill "$@" ;;
    vm-out) cmd_vm_job out "$@" ;;
    vm-status) cmd_vm_job status "$@" ;;
    vm-put) cmd_vm_put "$@" ;;
    wait-port) cmd_wait_port "$@" ;;
    host) cmd_host "$@" ;;
    mtu) cmd_mtu "$@" ;;
    netem) cmd_netem "$@" ;;
    cm-delay) cmd_cm_delay "$@" ;;
    counters) cmd_counters "$@" ;;
    gid) cmd_gid "$@" ;;
    devinfo) [ $# -eq 1 ] || die "usage: devinfo K"; check_k "$1"; vmctl "$1" x 60 "ibv_devinfo -v" ;;
    console) [ $# -eq 1 ] || die "usage: console K"; cat "$RUN/vm$1.console.log" ;;
    capture-start) cmd_capture_start "$@" ;;
    capture-stop) cmd_capture_stop "$@" ;;
    decode) cmd_decode "$@" ;;
    help|-h|--help) usage ;;
    *) usage >&2; exit 2 ;;
esac
