#!/usr/bin/env bash
# Open MPI ping-pong over softroce against Open MPI over TCP, in the same invocation.
#
# Two network namespaces joined by a veth pair are two "hosts" (mpirun's rsh agent runs each
# rank under `ip netns exec`, as abi/ibverbs/tests/middleware.rs does). benches/mpi/pingpong.c
# (mpicc) measures the half round trip of 8 B, 64 KiB and 1 MiB messages between two ranks, one
# per host, and checks every echo. Each round runs, back to back:
#   softroce   --mca pml ucx -x UCX_TLS=rc,self    (every byte over softroce's rc_verbs)
#   btl tcp    --mca pml ob1 --mca btl tcp,self    (Open MPI's own TCP transport)
# and prints each line and, per size, the ratio softroce / btl tcp. (UCX's own tcp transport
# is not a row: between these namespaces its ranks listed the wrong namespace's interfaces and
# refused to start. Open MPI's btl tcp runs, but at ~4.7 ms per 8 B half round trip, one
# 250 Hz tick: a configuration artefact of this setup rather than TCP's latency; see
# docs/performance.md.)
#
# Needs root (namespaces, mounts), Debian's openmpi-bin, libopenmpi-dev and ucx-utils, and a
# release build: cargo build --release --bin softroce -p softroce-ibverbs -p softroce-rdmacm
#   sudo benches/mpi_pingpong.sh
# Environment: ROUNDS (default 2), ITERS (8 B iterations, default 10000; the larger sizes run
# ITERS/20+1), SOFTROCE (the binary). Takes /tmp/softroce-netns.lock. It prints, it does not
# judge.
set -euo pipefail

if [ -z "${SOFTROCE_MPI_LOCKED:-}" ]; then
    exec env SOFTROCE_MPI_LOCKED=1 flock /tmp/softroce-netns.lock "$0" "$@"
fi

ROUNDS=${ROUNDS:-2}
ITERS=${ITERS:-10000}
here=$(cd "$(dirname "$0")/.." && pwd)
BIN=$(realpath "${SOFTROCE:-$here/target/release/softroce}")
[ -x "$BIN" ] || { echo "no $BIN: cargo build --release --bin softroce first" >&2; exit 2; }
LIB=$("$BIN" lib-path)
[ -e "$LIB/libibverbs.so.1" ] || { echo "no drop-in libraries in $LIB: cargo build --release -p softroce-ibverbs -p softroce-rdmacm" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "needs root (namespaces, mounts)" >&2; exit 2; }
command -v mpirun >/dev/null && command -v mpicc >/dev/null || { echo "needs openmpi-bin and libopenmpi-dev" >&2; exit 2; }

tag=$$
A=srmp-a-$tag
B=srmp-b-$tag
VA=srmpa$tag
VB=srmpb$tag
work=$(mktemp -d /tmp/softroce-mpi.XXXXXX)
cleanup() {
    ip netns del "$A" 2>/dev/null || true
    ip netns del "$B" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

ip netns add "$A"
ip netns add "$B"
ip link add "$VA" netns "$A" type veth peer name "$VB" netns "$B"
for x in "$A:$VA:10.203.0.1" "$B:$VB:10.203.0.2"; do
    IFS=: read -r ns dev ip <<<"$x"
    ip -n "$ns" addr add "$ip/24" dev "$dev"
    ip -n "$ns" link set "$dev" up
    ip -n "$ns" link set lo up
done

mpicc -O2 -Wall -o "$work/pingpong" "$here/benches/mpi/pingpong.c"

# The rsh agent: the host's veth is its softroce device; a private /dev/infiniband with the
# node UCX insists on (softroce setup); a session directory of the host's own.
cat > "$work/nsrsh" <<AGENT
#!/bin/sh
host=\$1; shift
case \$host in $A) dev=$VA ;; $B) dev=$VB ;; *) echo "nsrsh: no host \$host" >&2; exit 1 ;; esac
exec ip netns exec "\$host" unshare -m --propagation private sh -c '
  mkdir -p /dev/infiniband && mount -t tmpfs -o mode=0755 tmpfs /dev/infiniband && $BIN setup -n 1 >/dev/null || exit 1
  export SOFTROCE_DEVICES='"\$dev"' LD_LIBRARY_PATH=$LIB OMPI_MCA_orte_tmpdir_base=$work/'"\$host"'
  mkdir -p "\$OMPI_MCA_orte_tmpdir_base" || exit 1
  exec sh -c "\$0"' "\$*"
AGENT
chmod 755 "$work/nsrsh"

run() { # NAME MPIRUN-ARGS...
    local name=$1; shift
    local out
    case ",${ONLY:-$name}," in *",$name,"*) ;; *) return 0 ;; esac
    if ! out=$(ip netns exec "$A" timeout 300 mpirun --allow-run-as-root -np 2 --host "$A:1,$B:1" \
        --mca plm_rsh_agent "$work/nsrsh" --mca oob_tcp_if_include "$VA,$VB" "$@" \
        "$work/pingpong" "$ITERS" 2>&1); then
        echo "$name: failed"; echo "$out" | tail -${FAIL_LINES:-20}; return 0
    fi
    echo "$out" | grep '^pingpong' | sed "s/^/$name: /"
    echo "$out" | awk -v n="$name" '/^pingpong [0-9]+ B:/{print n, $2, $4}' >> "$work/results"
}

echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$ROUNDS"); do
    : > "$work/results"
    echo "== round $r"
    run softroce --mca pml ucx -x UCX_TLS=rc,self
    run "btl tcp" --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include 10.203.0.0/24 ${BTL_TCP_ARGS:-}
    for size in 8 65536 1048576; do
        s=$(awk -v s=$size '$1=="softroce" && $2==s {print $3}' "$work/results")
        t=$(awk -v s=$size '$1=="btl" && $3==s {print $4}' "$work/results")
        [ -n "$s" ] && [ -n "$t" ] && echo "round $r, $size B: softroce / btl tcp latency $(awk -v a="$s" -v b="$t" 'BEGIN{printf "%.2f", a/b}')"
    done
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
