#!/usr/bin/env bash
# Goodput under random loss, as a ratio to the lossless run in the same invocation.
#
# Two network namespaces joined by a veth pair (MTU 1500); an nftables rule in each drops
# LOSS % of the UDP 4791 packets it receives (`numgen random`, as tests/common/netns.rs). The
# veths carry single packets (`gso_max_segs 1`: a GSO run is cut into packets before it
# crosses, so the rule drops packets, not 64 KiB bursts). For each test (`softroce perf
# write-bw` and `read-bw`, 64 KiB messages, PMTU 1024, SECS seconds) it runs once without loss
# and once with it, and prints the client's average goodput, the ratio, the nftables drops and
# the client's retransmission counters.
#
# Needs root (namespaces, veth, nftables) and a release build:
#   cargo build --release --bins && sudo benches/loss.sh
# Environment: SECS (default 4), LOSS (percent, default 1), MTU (default 1024), SIZE
# (default 65536), TESTS (default "write-bw read-bw"), ROUNDS (default 1: the pair of runs per
# test is repeated), SOFTROCE (the binary; default target/release/softroce),
# GSO=1 keeps GSO runs whole across the veth (a drop then loses a burst of packets).
# The namespaces are global: the script takes /tmp/softroce-netns.lock. No timed assertions:
# it prints, it does not judge.
set -euo pipefail

if [ -z "${SOFTROCE_LOSS_LOCKED:-}" ]; then
    exec env SOFTROCE_LOSS_LOCKED=1 flock /tmp/softroce-netns.lock "$0" "$@"
fi

SECS=${SECS:-4}
LOSS=${LOSS:-1}
MTU=${MTU:-1024}
SIZE=${SIZE:-65536}
TESTS=${TESTS:-"write-bw read-bw"}
ROUNDS=${ROUNDS:-1}
here=$(cd "$(dirname "$0")/.." && pwd)
BIN=$(realpath "${SOFTROCE:-$here/target/release/softroce}")
[ -x "$BIN" ] || { echo "no $BIN: cargo build --release --bins first" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "needs root (namespaces, veth, nftables)" >&2; exit 2; }

tag=$$
A=srbl-a-$tag
B=srbl-b-$tag
VA=srbla$tag
VB=srblb$tag
IPA=10.202.0.1
IPB=10.202.0.2
work=$(mktemp -d /tmp/softroce-loss.XXXXXX)

cleanup() {
    ip netns del "$A" 2>/dev/null || true
    ip netns del "$B" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

ip netns add "$A"
ip netns add "$B"
ip link add "$VA" netns "$A" type veth peer name "$VB" netns "$B"
for x in "$A:$VA:$IPA" "$B:$VB:$IPB"; do
    IFS=: read -r ns dev ip <<<"$x"
    ip -n "$ns" addr add "$ip/24" dev "$dev"
    if [ "${GSO:-0}" != 1 ]; then
        ip -n "$ns" link set "$dev" gso_max_segs 1
    fi
    ip -n "$ns" link set "$dev" mtu 1500 up
    ip -n "$ns" link set lo up
    ip netns exec "$ns" nft add table inet srloss
    ip netns exec "$ns" nft add chain inet srloss input '{ type filter hook input priority 0; }'
done

set_loss() {
    for ns in "$A" "$B"; do
        ip netns exec "$ns" nft flush chain inet srloss input
        if [ "$1" != 0 ]; then
            ip netns exec "$ns" nft add rule inet srloss input udp dport 4791 numgen random mod 100 '<' "$1" counter drop
        fi
    done
}

dropped() {
    ip netns exec "$1" nft list chain inet srloss input | awk '/packets/ { for (i = 1; i < NF; i++) if ($i == "packets") print $(i + 1) }' | head -1
}

# One run; prints "MBps retries timeouts probes drops tail_probes".
run() {
    local test=$1 loss=$2 port=$3
    local rd="$work/run-$test-$loss-$port"
    mkdir -p "$rd"
    set_loss "$loss"
    local args=(perf "$test" -m "$MTU" -s "$SIZE" -D "$SECS" -p "$port" --json)
    SOFTROCE_RUN_DIR=$rd ip netns exec "$A" "$BIN" "${args[@]}" -d "$IPA" >"$rd/server.json" 2>"$rd/server.err" &
    local server=$!
    if ! SOFTROCE_RUN_DIR=$rd ip netns exec "$B" "$BIN" "${args[@]}" -d "$IPB" "$IPA" >"$rd/client.json" 2>"$rd/client.err"; then
        echo "client failed:" >&2
        cat "$rd/client.err" "$rd/server.err" >&2
        kill "$server" 2>/dev/null || true
        wait "$server" || true
        return 1
    fi
    wait "$server" || { echo "server failed:" >&2; cat "$rd/server.err" >&2; return 1; }
    local bw
    bw=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["results"][0]["bw_avg"])' "$rd/client.json")
    local drops=0
    if [ "$loss" != 0 ]; then
        drops=$(($(dropped "$A") + $(dropped "$B")))
    fi
    # The client's device counters (the requester side of write-bw and read-bw).
    SOFTROCE_RUN_DIR=$rd "$BIN" counters --all --json -d "$IPB" >"$rd/counters.json" 2>/dev/null || true
    python3 - "$rd/counters.json" "$bw" "$drops" <<'EOF'
import json, sys
c = {}
try:
    data = json.load(open(sys.argv[1]))
    devs = data if isinstance(data, list) else data.get("devices", [data])
    for d in devs:
        for k, v in (d.get("counters") or {}).items():
            c[k] = c.get(k, 0) + v
except Exception:
    pass
print(sys.argv[2], c.get("completer_retry_err", "?"), c.get("local_ack_timeout_err", "?"),
      c.get("probe_retransmit", "-"), sys.argv[3], c.get("tail_probe", "-"))
EOF
}

printf '%s\n' "goodput under ${LOSS} % random loss each way: veth, PMTU $MTU, $SIZE B messages, $SECS s per run ($(date -u +%FT%TZ), $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo '?'))"
printf '%-9s %13s %12s %6s %8s %8s %7s %7s %13s %7s\n' test "lossless MB/s" "lossy MB/s" ratio retries timeouts probes drops "probes(0 %)" tails
port=18515
for round in $(seq "$ROUNDS"); do
    for t in $TESTS; do
        port=$((port + 1))
        read -r base _ _ bprobes _ _ <<<"$(run "$t" 0 "$port")"
        port=$((port + 1))
        read -r lossy retries timeouts probes drops tails <<<"$(run "$t" "$LOSS" "$port")"
        ratio=$(python3 -c "print(f'{$lossy / $base:.2f}' if $base > 0 else '-')")
        printf '%-9s %13.1f %12.1f %6s %8s %8s %7s %7s %13s %7s\n' "$t" "$base" "$lossy" "$ratio" "$retries" "$timeouts" "$probes" "$drops" "$bprobes" "$tails"
        if [ -n "${JSON:-}" ]; then
            printf '{"bench":"loss","test":"%s","loss_pct":%s,"mtu":%s,"size":%s,"secs":%s,"lossless_mbps":%s,"lossy_mbps":%s,"ratio":%s,"retries":"%s","timeouts":"%s","probes":"%s","drops":%s,"lossless_probes":"%s","tail_probes":"%s"}\n' \
                "$t" "$LOSS" "$MTU" "$SIZE" "$SECS" "$base" "$lossy" "$ratio" "$retries" "$timeouts" "$probes" "$drops" "$bprobes" "$tails"
        fi
    done
done
