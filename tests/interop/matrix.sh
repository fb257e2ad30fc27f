#!/bin/bash
# matrix.sh - softroce against kernel rxe: every peer tool (ibv_{rc,uc,ud,srq}_pingpong, perftest,
# labpeer), both directions, both PMTUs,
# with and without loss; every packet softroce sent checked by tshark and accepted by rxe.
#
#   tests/interop/matrix.sh [FILTER]       (as root; FILTER = substring of the run names)
#   BACKEND=raw tests/interop/matrix.sh    only the raw-backend subset; BACKEND=udp: only the
#                                          UDP runs; default: both (the UDP matrix, then the
#                                          raw subset, rows marked udp / raw)
#
# (rows: ibv_*_pingpong, perftest, labpeer, librdmacm's rping, udaddy and ucmatose, kvpeer,
# Debian's binaries through softroce's drop-in libibverbs.so.1 and librdmacm.so.1 on the host side,
# and the differential conformance probe, tests/conformance)
# Needs the softroce binary, examples and drop-in libraries built (MATRIX_BIN_DIR, default
# target/release):
#   cargo build --release --bin softroce --example lab --example kvstore && cargo build --release -p softroce-ibverbs -p softroce-rdmacm
# Writes $RIG_WORK/matrix/summary.md (the table docs/interop.md shows; UPDATE_DOCS=1 writes it
# into docs/interop.md too) and one log and one pcap per run; exit 0 only if every run passed.
#
# Per run: capture on br0, run the rxe side in guest 1 and softroce in the rig's namespace
# (10.77.0.1), then check
#   - both programs exited 0 and printed their success line;
#   - tshark decodes every packet softroce sent as InfiniBand, with no malformed packet or
#     expert warning;
#   - softroce dump --check: every ICRC in the capture (both directions) is right;
#   - rxe's rcvd_pkts grew by exactly the number of packets softroce sent (rxe drops a packet
#     with a bad ICRC or header silently: this is the proof it took every one).
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
RIG=$HERE/rig.sh
BIN=${MATRIX_BIN_DIR:-$REPO/target/release}
SR=$BIN/softroce
LAB=$BIN/examples/lab
KV=$BIN/examples/kvstore
FILTER=${1:-}
W=$("$RIG" env | sed -n 's/^RIG_WORK=//p')
OUT=$W/matrix
HOST=10.77.0.1
VM=10.77.0.2
# IPv6 of the raw subset: added to br0 and guest 1's eth0 for those runs (rxe adds the GID).
HOST6=fd77::1
VM6=fd77::2
# (the guest powers itself off after RIG_TTL seconds, 30 minutes by default: long LOSS_RUNS
# loops need longer; a run takes up to a minute under load)
[ "${LOSS_RUNS:-1}" -gt 1 ] && export RIG_TTL=${RIG_TTL:-$(( 1800 + LOSS_RUNS * 2 * 60 ))}
BACKENDS=${BACKEND:-udp raw}
BACKEND=udp
# Which of softroce's packets the capture checks look at.
SRC_FILTER="ip.src==$HOST"
mkdir -p "$OUT"
rm -f "$OUT"/*.log "$OUT"/*.log.first "$OUT"/rows.txt
: > "$OUT/rows.txt"

say() { echo "[matrix $(date +%T)] $*" >&2; }
[ -x "$SR" ] && [ -x "$LAB" ] && [ -x "$KV" ] || { say "build first: cargo build --release --bin softroce --example lab --example kvstore"; exit 2; }

cleanup() { "$RIG" down >/dev/null 2>&1 || true; }
trap cleanup EXIT
trap 'exit 130' INT TERM

PASS=0 FAIL=0
T0=$(date +%s)

# Wireshark's heuristic sub-dissectors (RPC-over-RDMA, SMB Direct, iSER, ...) claim some
# payloads (a 1-byte ping-pong SEND looks like a truncated RPC-over-RDMA header) and then report
# them malformed; the matrix checks the InfiniBand headers, so turn them off.
TSHARK="tshark -n --disable-heuristic rpcrdma_infiniband --disable-heuristic smcr_infiniband \
  --disable-heuristic smb_direct_infiniband --disable-heuristic iser_infiniband --disable-heuristic lnet_ib \
  --disable-heuristic eth_over_ib --disable-heuristic sdp_infiniband --disable-heuristic fc_infiniband \
  --disable-heuristic mellanox_eoib"
RUN=$W/run

# Packets the host dropped on their way into guest 1 (the tap's queue overflows when the TCG
# guest falls behind a burst): they were sent and captured but never reached rxe.
tapdrops() { "$RIG" host "cat /sys/class/net/tap1/statistics/tx_dropped"; }

# Packets netem dropped on guest 1's ingress (ifb0), 0 without an ingress netem.
netemdrops() {
    [ -z "${LOSS_IN:-}" ] && { echo 0; return; }
    "$RIG" vm -t 30 1 "/usr/sbin/tc -s qdisc show dev ifb0" | grep -oE 'dropped [0-9]+' | head -1 | grep -oE '[0-9]+' || echo 0
}

counter() { "$RIG" counters 1 | awk -v k="$1" '$1 == k { print $2 }'; }

# check_capture NAME: tshark + dump + rxe counter checks; prints problems, returns 1 on any.
check_capture() {
    local name=$1 pcap=$W/pcaps/$1.pcap bad=0 ours decoded experts icrc
    ours=$("$RIG" host "$TSHARK -r $pcap -Y '$SRC_FILTER && udp.dstport==4791' -T fields -e frame.number" 2>/dev/null | wc -l)
    decoded=$("$RIG" host "$TSHARK -r $pcap -Y '$SRC_FILTER && udp.dstport==4791 && infiniband.bth' -T fields -e frame.number" 2>/dev/null | wc -l)
    experts=$("$RIG" host "$TSHARK -r $pcap -Y '$SRC_FILTER && udp.dstport==4791 && (_ws.malformed || _ws.expert.severity >= 4194304)' -T fields -e frame.number" 2>/dev/null | wc -l)
    # (a UC receiver answers nothing: runs that expect softroce to be silent say silent=1)
    if { [ "$ours" -eq 0 ] && [ -z "${silent:-}" ]; } || [ "$decoded" -ne "$ours" ] || [ "$experts" -ne 0 ]; then
        echo "tshark: $ours packets from softroce, $decoded decoded as InfiniBand, $experts with errors"; bad=1
    fi
    if ! icrc=$("$SR" dump --check "$pcap" | tail -1); then
        echo "ICRC: $icrc"; bad=1
    fi
    echo "$ours"
    return $bad
}

# How many packets softroce sent after the last packet from rxe in run NAME's capture that are
# ACKs (BTH opcode 17) or retransmissions (a destination QP and PSN softroce had sent before),
# with no new request after them (0 when rxe sent nothing).
# late_any=1 (a row's option): every packet softroce sent after rxe's last packet outside QP1
# may be missing, new requests too. rsockets end with a control message from each side (an
# RDMA WRITE with immediate) crossing the disconnect: rdma-core's rclose sends its own and
# destroys its QP, and the peer's may then arrive at a QP that is gone (the same between two
# rdma-core hosts).
late_acks() {
    "$RIG" host "$TSHARK -r $W/pcaps/$1.pcap -Y 'udp.dstport==4791 && infiniband.bth' -T fields -E separator=, -e ip.src -e ipv6.src -e infiniband.bth.opcode -e infiniband.bth.destqp -e infiniband.bth.psn" 2>/dev/null |
        awk -F, -v me="${SRC_FILTER#*==}" -v any="${late_any:-0}" '
            $1 $2 != me { if (!(any && $4 ~ /^0x0*1$/)) n = 0; next }
            any { n++; next }
            { k = $4 "/" $5 } $3 == 17 || (k in seen) { n++; next } { seen[k] = 1; n = 0 } END { print n + 0 }'
}

# run NAME PMTU NETEM PEER-TOOL OPERATION DIRECTION RXE-ROLE RXE-CMD SR-CMD OK-REGEX
#   RXE-ROLE: server (rxe cmd started first in the background) or client (softroce first).
#   post=FUNC: one more check, `FUNC before` at the start and `FUNC after` at the end (its
#   output goes to the log; a failure fails the run).
run() {
    local name=$1 pmtu=$2 netem=$3 peer=$4 op=$5 dir=$6 role=$7 rxe=$8 srcmd=$9 ok=${10}
    [ -n "$FILTER" ] && [[ $name != *"$FILTER"* ]] && return
    local log=$OUT/$name.log t=$(date +%s.%N) rc_r=0 rc_s=0 res=pass rate="" sent=0 before after delta drops0 drops1
    {
        echo "### $name: $peer $op $dir PMTU $pmtu netem '${netem:-none}'"
        before=$(counter rcvd_pkts); drops0=$(( $(tapdrops) + $(netemdrops) ))
        [ -n "${post:-}" ] && "$post" before
        # (tcpdump has been seen to exit silently at its very first start after the rig came
        # up: try again before giving up)
        local try
        for try in 1 2 3; do
            "$RIG" capture-start "$name" "udp port 4791" >/dev/null 2>&1 && break
            echo "capture-start failed (attempt $try): $(cat "$RUN/capture.$name.log" 2>/dev/null)"
            sleep 1
        done
        if [ "$role" = server ]; then
            "$RIG" vm-bg -t 240 1 rxe "$rxe"
            if [ "${rxe_port:-}" = rdma_cm ]; then
                # (an rdma_cm listener has no TCP port to wait for)
                sleep 2
            else
                "$RIG" wait-port 1 "${rxe_port:-18515}" 30 || echo "rxe server did not listen"
            fi
            echo "--- softroce: $srcmd"
            timeout 240 "$RIG" host "$srcmd" || rc_s=$?
            echo "--- rxe: $rxe"
            "$RIG" vm-wait 1 rxe 120 || rc_r=$?
        else
            echo "--- softroce: $srcmd"
            "$RIG" host "timeout 240 $srcmd" > "$log.sr" 2>&1 &
            local srpid=$!
            sleep 1
            echo "--- rxe: $rxe"
            "$RIG" vm -t 240 1 "$rxe" || rc_r=$?
            wait $srpid || rc_s=$?
            cat "$log.sr"; rm -f "$log.sr"
        fi
        # (settle=S: packets may still be on their way for S seconds, e.g. delayed MADs)
        sleep "${settle:-0.5}"
        "$RIG" capture-stop "$name" >/dev/null 2>&1
        after=$(counter rcvd_pkts); drops1=$(( $(tapdrops) + $(netemdrops) ))
        echo "--- exit: rxe $rc_r softroce $rc_s"
    } > "$log" 2>&1
    if [ "$rc_r" != 0 ] || [ "$rc_s" != 0 ] || [ "$(grep -cE "$ok" "$log")" -lt "${need:-2}" ]; then
        res=fail; echo "programs failed or did not report success" >> "$log"
    fi
    local chk
    if chk=$(check_capture "$name"); then sent=$(echo "$chk" | tail -1); else res=fail; echo "$chk" >> "$log"; sent=$(echo "$chk" | tail -1); fi
    delta=$((after - before))
    # Every packet softroce sent (the capture) reached rxe (rcvd_pkts) unless the host dropped
    # it at the guest's tap or netem dropped it on the guest's ingress; both count their drops. tcpdump may itself drop packets under load (it
    # says so when it stops): then the capture holds fewer than were sent.
    local dropped tapd=$((drops1 - drops0)) late
    dropped=$(grep -oE '[0-9]+ packets dropped by kernel' "$RUN/capture.$name.log" 2>/dev/null | grep -oE '^[0-9]+')
    # (packets the filter took but tcpdump never wrote — it was stopped with a backlog — are
    # missing from the capture just the same)
    local took wrote
    took=$(grep -oE '[0-9]+ packets received by filter' "$RUN/capture.$name.log" 2>/dev/null | grep -oE '^[0-9]+')
    wrote=$(grep -oE '[0-9]+ packets captured' "$RUN/capture.$name.log" 2>/dev/null | grep -oE '^[0-9]+')
    [ -n "$took" ] && [ -n "$wrote" ] && [ "$took" -gt "$wrote" ] && dropped=$((${dropped:-0} + took - wrote))
    # Under loss, softroce may ACK a retransmitted request after rxe's program has already seen
    # an earlier ACK, finished and destroyed its QP: rxe drops a packet for a QP it no longer
    # has before counting it. So may a retransmission: rxe completes a request before it sends
    # the ACK, and its program can exit in between (seen with 4 QPs on an SRQ), so softroce
    # retransmits to a QP that is gone. Those packets (ACKs and retransmissions softroce sent
    # after the last packet rxe sent) may be missing from rcvd_pkts, nothing else.
    late=$(late_acks "$name")
    if [ "${dropped:-0}" = 0 ]; then
        if [ "$delta" -gt "$sent" ] || [ $((delta + tapd + late)) -lt "$sent" ]; then
            res=fail; echo "rxe rcvd_pkts grew by $delta, softroce sent $sent, the tap and netem dropped $tapd, $late ACKs or retransmissions followed rxe's last packet" >> "$log"
        fi
    elif [ $((delta + tapd)) -lt "$sent" ]; then
        res=fail; echo "rxe rcvd_pkts grew by $delta, the tap and netem dropped $tapd, softroce sent at least $sent" >> "$log"
    else
        echo "tcpdump dropped or did not write $dropped packets: checked rcvd_pkts + tap drops >= captured" >> "$log"
    fi
    echo "--- checks: softroce sent $sent packets, rxe rcvd_pkts +$delta, tap and netem drops +$tapd" >> "$log"
    if [ -n "${post:-}" ] && ! "$post" after >> "$log" 2>&1; then
        res=fail; echo "post-check $post failed" >> "$log"
    fi
    # A failed run is run once more, and the table says so ("pass on 2nd run"): the guests are
    # TCG-emulated and share two cores with everything else, so a peer tool now and then fails
    # for reasons of its own (perftest calibrates its cycle counter against the clock and gives
    # up on a poor fit, "Can't produce a report"). The first run's log is kept beside the
    # second's and printed at the end of the matrix either way; a run that fails twice fails.
    if [ "$res" = fail ]; then
        {
            echo "--- guest console (tail)"; tail -c 2000 "$RUN/vm1.console.log" | tr -d '\r'
            echo "--- guest processes"; "$RIG" vm -t 10 1 'ps | grep -v " \["; cat /proc/loadavg' 2>&1
            # (where a packet may vanish inside the guest without a counter the checks read:
            # the backlog, the NIC's receive drops, UDP's own errors)
            echo "--- guest drops (softnet_stat, eth0/ifb0 rx_dropped, Udp)"
            "$RIG" vm -t 10 1 'cut -d" " -f1-3 /proc/net/softnet_stat; cat /sys/class/net/eth0/statistics/rx_dropped /sys/class/net/ifb0/statistics/rx_dropped /sys/class/net/ifb0/statistics/tx_dropped 2>/dev/null; grep ^Udp: /proc/net/snmp; grep -E "^(Ip|IpExt):" /proc/net/snmp /proc/net/netstat 2>/dev/null | head -4' 2>&1
        } >> "$log"
    fi
    if [ "$res" = fail ] && [ -z "${RETRY:-}" ] && [ -z "${NORETRY:-}" ]; then
        mv "$log" "$log.first"
        cp "$W/pcaps/$name.pcap" "$W/pcaps/$name.first.pcap" 2>/dev/null
        say "$name: failed; running it again (first run: $log.first)"
        "$RIG" vm-kill 1 rxe >/dev/null 2>&1
        RETRY=1 run "$@"
        return
    fi
    [ $res = pass ] && [ -n "${RETRY:-}" ] && res="pass on 2nd run"
    rate=$(rate_of "$log")
    local secs; secs=$(printf '%.1f' "$(echo "$(date +%s.%N) - $t" | bc)")
    printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$peer" "$op" "$dir" "$pmtu" "${netem:-none}" "$BACKEND" "$res" "$rate" "$sent / +$delta$([ "$tapd" -gt 0 ] && echo " + $tapd dropped on the way")" >> "$OUT/rows.txt"
    if [ "$res" != fail ]; then
        PASS=$((PASS + 1))
    else
        FAIL=$((FAIL + 1))
        tail -n 40 "$log" >&2
    fi
    say "$name: $res ($secs s) $rate"
}

# The throughput a run reported (pingpong: Mbit/s; perftest: BW average; lab: steps).
rate_of() {
    local v
    v=$(grep -m1 -oE '= [0-9.]+ Mbit/sec' "$1" | grep -oE '[0-9.]+') && [ -n "$v" ] && { echo "$v Mb/s"; return; }
    if grep -q 't_typical' "$1"; then
        v=$(grep -m1 -E "$PERF_OK" "$1" | awk '{print $5}') && [ -n "$v" ] && { echo "$v µs typical"; return; }
    fi
    v=$(grep -E "$PERF_OK" "$1" | tail -1 | awk '{print $4}') && [ -n "$v" ] && { echo "$v MB/s"; return; }
    v=$(grep -m1 -oE 'result: PASS [0-9]+/14' "$1" | grep -oE '[0-9]+/14') && [ -n "$v" ] && { echo "$v steps"; return; }
    echo "-"
}

# ppx TYPE PMTU PREFIX SUFFIX [SR-EXTRA]: ibv_TYPE_pingpong (uc, ud or srq) against softroce
#   TYPE-pingpong in both directions, runs PREFIX-TYPE-sr2rxeSUFFIX and ...-rxe2srSUFFIX;
#   SR-EXTRA goes to softroce only (e.g. --backend raw).
ppx() {
    local t=$1 pmtu=$2 prefix=$3 suffix=$4 extra=${5:-} size args what
    case $t in
        uc) size=$([ "$pmtu" = 1024 ] && echo 4096 || echo 65536); args="-g 1 -m $pmtu -s $size -n 200 -c"; what="UC SEND $size B" ;;
        ud) size=$pmtu; args="-g 1 -s $size -n 200 -c"; what="UD SEND $size B" ;;
        srq) size=4096; args="-g 1 -m $pmtu -s $size -q 4 -n 200 -c"; what="SEND $size B, 4 QPs on one SRQ" ;;
    esac
    rxe_port=18515 run "$prefix-$t-sr2rxe$suffix" "$pmtu" "" "ibv_${t}_pingpong" "$what" "softroce → rxe" server \
        "ibv_${t}_pingpong $args" "$SR $t-pingpong $extra -d $HOST $args $VM" "$PP_OK"
    rxe_port=18515 run "$prefix-$t-rxe2sr$suffix" "$pmtu" "" "ibv_${t}_pingpong" "$what" "rxe → softroce" client \
        "ibv_${t}_pingpong $args $HOST" "$SR $t-pingpong $extra -d $HOST $args" "$PP_OK"
}

# gid0 PREFIX [SR-EXTRA]: GID index 0, what programs told nothing use. On rxe it is the guest's
#   link-local address; softroce opened on the interface (-d br0, SOFTROCE_DEVICES=br0) serves
#   br0's link-local address as its GID 0 (docs/design/gid-table.md). ibv_rc_pingpong -g 0
#   against softroce rc-pingpong -d br0 -g 0, both directions; over the UDP backend also
#   Debian's ibv_rc_pingpong (both directions) and ibv_ud_pingpong through the drop-in library.
#   PMTU 1024. The capture checks look at softroce's IPv6 packets.
gid0() {
    local prefix=$1 extra=${2:-} ll args="-g 0 -s 4096 -n 200 -c" what="SEND 4096 B, GID 0 (link-local)"
    ll=$("$RIG" host "ip -6 -o addr show dev br0 scope link" | awk '{ sub("/.*", "", $4); print $4; exit }')
    if [ -z "$ll" ]; then
        say "$prefix: br0 has no link-local address; GID 0 rows skipped"; FAIL=$((FAIL + 1)); return
    fi
    SRC_FILTER="ipv6.src==$ll"
    rxe_port=18515 run "$prefix-sr2rxe" 1024 "" ibv_rc_pingpong "$what" "softroce → rxe" server \
        "ibv_rc_pingpong $args" "$SR rc-pingpong $extra -d br0 $args $VM" "$PP_OK"
    rxe_port=18515 run "$prefix-rxe2sr" 1024 "" ibv_rc_pingpong "$what" "rxe → softroce" client \
        "ibv_rc_pingpong $args $HOST" "$SR rc-pingpong $extra -d br0 $args" "$PP_OK"
    if [ -z "$extra" ] && LIBDIR=$("$SR" lib-path 2>/dev/null); then
        local dl="env SOFTROCE_DEVICES=br0 LD_LIBRARY_PATH=$LIBDIR"
        rxe_port=18515 run "$prefix-abi-rc-sr2rxe" 1024 "" "ibv_rc_pingpong (drop-in lib)" "$what" "softroce → rxe" server \
            "ibv_rc_pingpong $args" "$dl ibv_rc_pingpong -d softroce0 $args $VM" "$PP_OK"
        rxe_port=18515 run "$prefix-abi-rc-rxe2sr" 1024 "" "ibv_rc_pingpong (drop-in lib)" "$what" "rxe → softroce" client \
            "ibv_rc_pingpong $args $HOST" "$dl ibv_rc_pingpong -d softroce0 $args" "$PP_OK"
        rxe_port=18515 run "$prefix-abi-ud-sr2rxe" 1024 "" "ibv_ud_pingpong (drop-in lib)" "UD SEND 1024 B, GID 0 (link-local)" \
            "softroce → rxe" server "ibv_ud_pingpong -g 0 -s 1024 -n 200 -c" \
            "$dl ibv_ud_pingpong -d softroce0 -g 0 -s 1024 -n 200 -c $VM" "$PP_OK"
    fi
    SRC_FILTER="ip.src==$HOST"
}

# perf NAME PMTU NETEM TOOL OPERATION DIR RXE-ARGS SR-ARGS
#   TOOL: write_bw, read_lat, ...; DIR: sr2rxe (softroce is the client) or rxe2sr.
perf() {
    local name=$1 pmtu=$2 netem=$3 tool=$4 op=$5 dir=$6 rargs=$7 sargs=$8 sub=${4/_/-} n=2
    # The passive side of a READ or atomic latency test prints no result.
    [[ $tool == read_lat || $tool == atomic_lat ]] && n=1
    if [ "$dir" = sr2rxe ]; then
        need=$n rxe_port=18515 run "$name" "$pmtu" "$netem" "ib_$tool" "$op" "softroce → rxe" server \
            "ib_$tool -x 1 $rargs" "$SR perf $sub -d $HOST $sargs $VM" "$PERF_OK"
    else
        need=$n rxe_port=18515 run "$name" "$pmtu" "$netem" "ib_$tool" "$op" "rxe → softroce" client \
            "ib_$tool -x 1 $rargs $HOST" "$SR perf $sub -d $HOST $sargs" "$PERF_OK"
    fi
}

# rxe_as_softroce0 CMD: CMD for the guest, run with its rxe device named softroce0 (ucx_perftest's
#   server opens the device the client names) and renamed rxe0 after it, CMD's status kept.
rxe_as_softroce0() {
    echo "rdma dev set rxe0 name softroce0 2>/dev/null; $1; r=\$?; rdma dev set softroce0 name rxe0; exit \$r"
}

# ------------------------------------------------------------------------------------------
say "rig: build and boot one kernel-rxe guest"
"$RIG" build >/dev/null || { say "rig build failed"; exit 1; }
"$RIG" down >/dev/null 2>&1 || true
"$RIG" up 1 >/dev/null || { say "rig up failed"; exit 1; }

LOSSKEYS="completer_retry_err|rcvd_seq_err|duplicate_request|out_of_seq_request|retry_exceeded_err|rdma_sends|rdma_recvs"
NETEM="loss 2% reorder 5%"
retries="(no UDP loss runs)"
PP_OK='iters in .* usec/iter'
LAB_OK='result: PASS 14/14'
# a perftest result row: size, iterations, then three or more numbers (spaces and tabs)
PERF_OK='^ +[0-9]+ +[0-9]+([[:space:]]+[0-9.]+){3}'

if [[ " $BACKENDS " == *" udp "* ]]; then
for mtu in 1500 9000; do
    "$RIG" mtu $mtu >/dev/null
    pmtu=$([ $mtu = 1500 ] && echo 1024 || echo 4096)
    # ---- ibv_rc_pingpong <-> softroce rc-pingpong, sizes 1 B .. 64 KiB
    for size in 1 1024 4096 65536; do
        [ $pmtu = 4096 ] && [ $size = 1024 ] && continue
        n=$([ $size -ge 65536 ] && echo 50 || echo 200)
        rxe_port=18515 run "pp-sr2rxe-$pmtu-$size" $pmtu "" ibv_rc_pingpong "SEND $size B" "softroce → rxe" server \
            "ibv_rc_pingpong -g 1 -m $pmtu -s $size -n $n -c" \
            "$SR rc-pingpong -d $HOST -g 1 -m $pmtu -s $size -n $n -c $VM" "$PP_OK"
        rxe_port=18515 run "pp-rxe2sr-$pmtu-$size" $pmtu "" ibv_rc_pingpong "SEND $size B" "rxe → softroce" client \
            "ibv_rc_pingpong -g 1 -m $pmtu -s $size -n $n -c $HOST" \
            "$SR rc-pingpong -d $HOST -g 1 -m $pmtu -s $size -n $n -c" "$PP_OK"
    done
    # ---- ibv_{uc,ud,srq}_pingpong <-> softroce {uc,ud,srq}-pingpong
    for t in uc ud srq; do
        [ $t = srq ] && [ $pmtu = 4096 ] && continue
        ppx $t $pmtu ppx "-$pmtu"
    done
    # ---- the lab sequence (SEND, SEND+imm, WRITE, WRITE+imm, READ, atomics, multi-SGE)
    rxe_port=18700 run "lab-sr2rxe-$pmtu" $pmtu "" labpeer "lab sequence" "softroce → rxe" server \
        "labpeer -s" "$LAB -d $HOST -m $pmtu $VM" "$LAB_OK"
    rxe_port=18700 run "lab-rxe2sr-$pmtu" $pmtu "" labpeer "lab sequence" "rxe → softroce" client \
        "labpeer -m $pmtu $HOST" "$LAB -s -d $HOST" "$LAB_OK"
    rxe_port=18700 run "lab-big-sr2rxe-$pmtu" $pmtu "" labpeer "lab sequence, 1 MiB" "softroce → rxe" server \
        "labpeer -s" "$LAB -d $HOST -m $pmtu -z 1048576 $VM" "$LAB_OK"
    # ---- the RDMA course lab's key-value store (examples/kvstore.rs) <-> kvpeer (tests/interop/
    # kvpeer.c, librdmacm's synchronous API on rxe): SET, gets by RPC and by RDMA READ (an
    # invalid key: -1 both ways), then 100 of each in benchmark mode (every value checked);
    # the server reports the client's DISCONNECT. ~19 s each (measured: 22 s and 21 s with 200).
    if [ $pmtu = 1024 ]; then
        KV_OK='^get 7: rpc 42 read 42$|^get 40000: rpc -1 read -1$|^bench read-get +100 ops|; it disconnected$'
        need=4 rxe_port=rdma_cm run "kvstore-sr2rxe" $pmtu "" kvpeer "kvstore: SET, RPC + READ gets, 100 each" "softroce → rxe" server \
            "kvpeer -s -n 1" "$KV client -a $HOST --bench 100 $VM set 7 42 get 7 get 40000" "$KV_OK"
        need=4 rxe_port=rdma_cm run "kvstore-rxe2sr" $pmtu "" kvpeer "kvstore: SET, RPC + READ gets, 100 each" "rxe → softroce" client \
            "kvpeer -B 100 $HOST set 7 42 get 7 get 40000" "$KV server -a $HOST -n 1" "$KV_OK"
    fi
    # ---- GID index 0 (the link-local address), softroce opened on br0 (~50 s)
    [ $pmtu = 1024 ] && gid0 gid0
    # ---- rping (librdmacm, connected through the IB CM over QP1) <-> softroce rping,
    # validated (-V); both print each ping's data (-v)
    if [ $pmtu = 1024 ]; then
        for size in 100 65535; do
            n=$([ $size = 100 ] && echo 10 || echo 3)
            rxe_port=rdma_cm run "rping-sr2rxe-$size" $pmtu "" rping "-S $size -C $n -V" "softroce → rxe" server \
                "rping -s -a $VM -v -V -S $size" "$SR rping -c -a $VM -v -V -C $n -S $size" "ping data: rdma-ping-$((n - 1)):"
            rxe_port=rdma_cm run "rping-rxe2sr-$size" $pmtu "" rping "-S $size -C $n -V" "rxe → softroce" client \
                "rping -c -a $HOST -v -V -C $n -S $size" "$SR rping -s -a $HOST -v" "ping data: rdma-ping-$((n - 1)):"
        done
    fi
    # ---- librdmacm's udaddy (UD through SIDR, SENDs with immediate both ways) and ucmatose
    # (RC, the *server* disconnects: rping's rows cover the client's disconnect) <-> softroce
    # udaddy / ucmatose; then the CM's refusals, each ending at once with the exit status the
    # tools give it (an `echo` turns the expected failure into the row's check):
    #   - a port nobody listens on: REJ 8 (rping: REJECTED, error 8) and SIDR status 1
    #     (udaddy: UNREACHABLE, error 1), the client on either side;
    #   - the application's reject: ucmatose -c 1 refuses a second connection (REJ 28; the
    #     server gives up with -12), udaddy -S 2000 refuses a request its MTU cannot carry
    #     (SIDR status 2: UNREACHABLE, error 2).
    if [ $pmtu = 1024 ]; then
        for t in udaddy ucmatose; do
            # (-c 8: eight connections at once from one process, as issue 11 asks)
            rxe_port=rdma_cm run "$t-sr2rxe" $pmtu "" $t "-c 8 -C 10" "softroce → rxe" server \
                "$t -b $VM -c 8 -C 10" "$SR $t -s $VM -b $HOST -c 8 -C 10" '^return status 0$'
            rxe_port=rdma_cm run "$t-rxe2sr" $pmtu "" $t "-c 8 -C 10" "rxe → softroce" client \
                "$t -s $HOST -b $VM -c 8 -C 10" "$SR $t -b $HOST -c 8 -C 10" '^return status 0$'
        done
        rxe_port=rdma_cm run "refused-rping-sr2rxe" $pmtu "" rping "no listener: REJ 8" "softroce → rxe" server \
            "echo nobody listens on 7999" "timeout 20 $SR rping -c -a $VM -p 7999 -C 1; echo softroce exit \$?" \
            'RDMA_CM_EVENT_REJECTED, error 8|^softroce exit 1$'
        rxe_port=rdma_cm run "refused-rping-rxe2sr" $pmtu "" rping "no listener: REJ 8" "rxe → softroce" client \
            "timeout 20 rping -c -a $HOST -p 7999 -C 1; echo rping exit \$?" "timeout 3 $SR rping -s -a $HOST; true" \
            'RDMA_CM_EVENT_REJECTED, error 8|^rping exit 255$'
        rxe_port=rdma_cm run "refused-udaddy-sr2rxe" $pmtu "" udaddy "no listener: SIDR status 1" "softroce → rxe" server \
            "echo nobody listens on 7174" "timeout 20 $SR udaddy -s $VM -b $HOST; echo softroce exit \$?" \
            'RDMA_CM_EVENT_UNREACHABLE, error: 1$|^softroce exit 1$'
        rxe_port=rdma_cm run "refused-udaddy-rxe2sr" $pmtu "" udaddy "no listener: SIDR status 1" "rxe → softroce" client \
            "timeout 20 udaddy -s $HOST -b $VM; echo udaddy exit \$?" "timeout 3 $SR rping -s -a $HOST; true" \
            'RDMA_CM_EVENT_UNREACHABLE, error: 1$|^udaddy exit 1$'
        # (the server that rejects exits at once, as ucmatose does, which destroys the first
        # connection too: when that REJ overtakes the client's handling of its CONNECT_RESPONSE,
        # the client sees CONNECT_ERROR first and stops there — librdmacm's status -1, exit 255;
        # softroce's -22 (EINVAL), exit 234 — a race of ucmatose's own exit, either way round)
        rxe_port=rdma_cm run "reject-ucmatose-sr2rxe" $pmtu "" ucmatose "reject: REJ 28" "softroce → rxe" server \
            "ucmatose -b $VM -c 1 -C 1; echo ucmatose exit \$?" "$SR ucmatose -s $VM -b $HOST -c 2 -C 1; echo softroce exit \$?" \
            '^(ucmatose exit 244|softroce exit (28|234))$'
        rxe_port=rdma_cm run "reject-ucmatose-rxe2sr" $pmtu "" ucmatose "reject: REJ 28" "rxe → softroce" client \
            "ucmatose -s $HOST -b $VM -c 2 -C 1; echo ucmatose exit \$?" "$SR ucmatose -b $HOST -c 1 -C 1; echo softroce exit \$?" \
            '^(softroce exit 244|ucmatose exit (28|255))$'
        rxe_port=rdma_cm run "reject-udaddy-sr2rxe" $pmtu "" udaddy "reject: SIDR status 2" "softroce → rxe" server \
            "udaddy -b $VM -S 2000; echo udaddy exit \$?" "$SR udaddy -s $VM -b $HOST; echo softroce exit \$?" \
            '^(udaddy exit 0|softroce exit 2)$'
        rxe_port=rdma_cm run "reject-udaddy-rxe2sr" $pmtu "" udaddy "reject: SIDR status 2" "rxe → softroce" client \
            "udaddy -s $HOST -b $VM; echo udaddy exit \$?" "$SR udaddy -b $HOST -S 2000; echo softroce exit \$?" \
            '^(softroce exit 0|udaddy exit 2)$'
    fi
    # ---- perftest <-> softroce perf
    if [ $pmtu = 1024 ]; then
        # every test with its defaults (BW: 64 KiB messages = 64-packet First/Middle/Last
        # trains; latency: 2 B (8 B atomics) Only packets)
        for tool in send_bw write_bw read_bw atomic_bw send_lat write_lat read_lat atomic_lat; do
            for dir in sr2rxe rxe2sr; do
                perf "perf-$tool-$dir-$pmtu" $pmtu "" $tool "defaults, 200 iters" $dir "-n 200" "-n 200"
            done
        done
        for dir in sr2rxe rxe2sr; do
            perf "perf-atomic_bw-cas-$dir" $pmtu "" atomic_bw "CMP_AND_SWAP, 2 QPs" $dir \
                "-A CMP_AND_SWAP -q 2 -n 200" "-A CMP_AND_SWAP -q 2 -n 200"
            perf "perf-atomic_lat-cas-$dir" $pmtu "" atomic_lat "CMP_AND_SWAP" $dir \
                "-A CMP_AND_SWAP -n 200" "-A CMP_AND_SWAP -n 200"
            perf "perf-write_bw-q4-$dir" $pmtu "" write_bw "64 KiB, 4 QPs" $dir "-q 4 -n 100" "-q 4 -n 100"
            perf "perf-read_bw-q4-$dir" $pmtu "" read_bw "64 KiB, 4 QPs" $dir "-q 4 -n 100" "-q 4 -n 100"
            perf "perf-send_bw-q3-$dir" $pmtu "" send_bw "8 KiB, 3 QPs" $dir "-q 3 -s 8192 -n 200" "-q 3 -s 8192 -n 200"
            perf "perf-send_bw-only-$dir" $pmtu "" send_bw "1000 B Only" $dir "-s 1000 -n 500" "-s 1000 -n 500"
        done
        # UC (perftest -c UC): nothing paces a UC sender, and a lost packet loses its message
        # (a send test then waits forever), so these send 100 messages of 4 KiB: 400 packets,
        # which the TCG guest's tap queue absorbs. The receiving softroce sends nothing.
        for dir in sr2rxe rxe2sr; do
            sil=$([ $dir = rxe2sr ] && echo 1)
            silent=$sil perf "perf-write_bw-uc-$dir" $pmtu "" write_bw "UC, 4 KiB" $dir "-c UC -s 4096 -n 100" "-c UC -s 4096 -n 100"
            silent=$sil perf "perf-send_bw-uc-$dir" $pmtu "" send_bw "UC, 4 KiB" $dir "-c UC -s 4096 -n 100" "-c UC -s 4096 -n 100"
        done
        perf "perf-send_lat-uc-sr2rxe" $pmtu "" send_lat "UC" sr2rxe "-c UC -n 200" "-c UC -n 200"
        perf "perf-write_lat-uc-rxe2sr" $pmtu "" write_lat "UC" rxe2sr "-c UC -n 200" "-c UC -n 200"
        perf "perf-write_bw-all-rxe2sr" $pmtu "" write_bw "-a: 2 B .. 8 MiB" rxe2sr "-a -n 5" "-a -n 5"
        perf "perf-read_bw-all-sr2rxe" $pmtu "" read_bw "-a: 2 B .. 8 MiB" sr2rxe "-a -n 5" "-a -n 5"
        # ---- Debian's own binaries on the host through softroce's drop-in libibverbs.so.1
        # (abi/ibverbs) <-> the same binaries on rxe: the four pingpongs (data checked) and
        # four perftest tools.
        if LIBDIR=$("$SR" lib-path 2>/dev/null); then
            DL="env SOFTROCE_DEVICES=$HOST LD_LIBRARY_PATH=$LIBDIR"
            for t in rc uc ud srq; do
                case $t in
                    rc | uc) args="-g 1 -m $pmtu -s 4096 -n 200 -c" ;;
                    ud) args="-g 1 -s $pmtu -n 200 -c" ;;
                    srq) args="-g 1 -m $pmtu -s 4096 -q 4 -n 200 -c" ;;
                esac
                rxe_port=18515 run "abi-$t-sr2rxe" $pmtu "" "ibv_${t}_pingpong (drop-in lib)" "${t^^} SEND" "softroce → rxe" server \
                    "ibv_${t}_pingpong $args" "$DL ibv_${t}_pingpong -d softroce0 $args $VM" "$PP_OK"
                rxe_port=18515 run "abi-$t-rxe2sr" $pmtu "" "ibv_${t}_pingpong (drop-in lib)" "${t^^} SEND" "rxe → softroce" client \
                    "ibv_${t}_pingpong $args $HOST" "$DL ibv_${t}_pingpong -d softroce0 $args" "$PP_OK"
            done
            for tool in write_bw send_lat read_bw atomic_bw; do
                need=2 rxe_port=18515 run "abi-$tool-sr2rxe" $pmtu "" "ib_$tool (drop-in lib)" "defaults, 200 iters" "softroce → rxe" server \
                    "ib_$tool -x 1 -n 200" "$DL ib_$tool -d softroce0 -x 1 -n 200 $VM" "$PERF_OK"
                need=2 rxe_port=18515 run "abi-$tool-rxe2sr" $pmtu "" "ib_$tool (drop-in lib)" "defaults, 200 iters" "rxe → softroce" client \
                    "ib_$tool -x 1 -n 200 $HOST" "$DL ib_$tool -d softroce0 -x 1 -n 200" "$PERF_OK"
            done
            # ---- Debian's rdma_cm programs on the host through softroce's drop-in
            # librdmacm.so.1 + libibverbs.so.1 (abi/rdmacm) <-> the same programs on rxe, both
            # directions: rping -V (64 and 4000 bytes), ucmatose (RC, 2 connections), udaddy (UD
            # through SIDR, 2 ids) and perftest -R (connected by rdma_cm: write/read/send
            # bandwidth, send latency). Small counts: 65-100 s for the 13 rows.
            if [ -e "$LIBDIR/librdmacm.so.1" ]; then
                # (one size per direction: a row costs ~7 s, mostly the capture and the wait
                # for the rxe listener, whatever the count)
                rxe_port=rdma_cm run "abi-cm-rping-sr2rxe-64" $pmtu "" "rping (drop-in librdmacm)" "-V -S 64 -C 10" "softroce → rxe" server \
                    "rping -s -a $VM -v -V -S 64" "$DL rping -c -a $VM -v -V -C 10 -S 64" "ping data: rdma-ping-9:"
                rxe_port=rdma_cm run "abi-cm-rping-rxe2sr-4000" $pmtu "" "rping (drop-in librdmacm)" "-V -S 4000 -C 10" "rxe → softroce" client \
                    "rping -c -a $HOST -v -V -C 10 -S 4000" "$DL rping -s -a $HOST -v -V -S 4000" "ping data: rdma-ping-9:"
                for t in ucmatose udaddy; do
                    rxe_port=rdma_cm run "abi-cm-$t-sr2rxe" $pmtu "" "$t (drop-in librdmacm)" "-c 2 -C 10" "softroce → rxe" server \
                        "$t -b $VM -c 2 -C 10" "$DL $t -s $VM -b $HOST -c 2 -C 10" '^return status 0$'
                    rxe_port=rdma_cm run "abi-cm-$t-rxe2sr" $pmtu "" "$t (drop-in librdmacm)" "-c 2 -C 10" "rxe → softroce" client \
                        "$t -s $HOST -b $VM -c 2 -C 10" "$DL $t -b $HOST -c 2 -C 10" '^return status 0$'
                done
                # rdma_server/rdma_client: synchronous ids from rdma_getaddrinfo + rdma_create_ep,
                # rdma_get_request, the rdma_verbs.h inlines (one message each way)
                rxe_port=rdma_cm run "abi-cm-rdma_server-sr2rxe" $pmtu "" "rdma_server/rdma_client (drop-in librdmacm)" "rdma_create_ep, one message" "softroce → rxe" server \
                    "rdma_server -s $VM -p 7471" "$DL rdma_client -s $VM -p 7471" ': end 0$'
                rxe_port=rdma_cm run "abi-cm-rdma_server-rxe2sr" $pmtu "" "rdma_server/rdma_client (drop-in librdmacm)" "rdma_create_ep, one message" "rxe → softroce" client \
                    "rdma_client -s $HOST -p 7471" "$DL rdma_server -s $HOST -p 7471" ': end 0$'
                # ---- rsockets (issue 29): Debian's rstream and riostream through softroce's
                # drop-in librdmacm <-> the same programs over rdma-core's rsockets on rxe, both
                # directions, 64 KiB transfers verified (-T v): the connection data, credits,
                # iomaps and RDMA WRITE with immediate as rdma-core 44 speaks them.
                for prog in rstream riostream; do
                    late_any=1 rxe_port=rdma_cm run "abi-rs-$prog-sr2rxe" $pmtu "" "$prog (drop-in librdmacm)" "-S 65536 -C 20 -T v" "softroce → rxe" server \
                        "$prog -b $VM -S 65536 -C 20 -T v" "$DL $prog -s $VM -S 65536 -C 20 -T v" '^custom'
                    late_any=1 rxe_port=rdma_cm run "abi-rs-$prog-rxe2sr" $pmtu "" "$prog (drop-in librdmacm)" "-S 65536 -C 20 -T v" "rxe → softroce" client \
                        "$prog -s $HOST -S 65536 -C 20 -T v" "$DL $prog -b $HOST -S 65536 -C 20 -T v" '^custom'
                done
                # ---- middleware (issue 26, docs/middleware.md): Debian's UCX 1.13 and libfabric
                # 1.17 through softroce's drop-in libraries <-> the same on kernel rxe, both
                # directions. The host side gets the device node UCX insists on from
                # `softroce setup` in a private mount namespace (a tmpfs over /dev/infiniband).
                #   - UCT ucx_perftest am_lat over rc_verbs and ud_verbs, 1000 iterations. Its
                #     server takes the client's whole parameter block, device name included, so
                #     both ends must have one device name: the rxe side renames its device
                #     softroce0 for the run (`rdma dev set`; rig.sh counters finds it either way)
                #     and back. The server prints the test's header, the client the Final: line.
                #   - ud_verbs: UCX_UD_VERBS_ETH_DGID_CHECK=n on the rxe side only. UCX 1.13
                #     reads a UD receive's GRH layout from wc.sl as mlx5 reports it; softroce
                #     reports it so, kernel rxe reports 0, and UCX on rxe then drops every
                #     datagram (rxe against rxe too; fixed in later UCX).
                #   - fi_pingpong -c (every byte checked), 64 B to 1 MiB, 10 iterations each,
                #     -e msg (verbs, rdma_cm) and -e rdm (verbs;ofi_rxm). rdm: FI_UNIVERSE_SIZE=64
                #     on the rxe side only. ofi_rxm sizes its verbs CQ (tx 128 + rx 128) x
                #     universe size (256) = 65536 entries, above rxe's max_cqe 32767, and
                #     fi_enable fails with EINVAL (rxe against rxe too; softroce's max_cqe is
                #     1048575).
                UCXDL="$DL unshare -m --propagation private sh -c 'mkdir -p /dev/infiniband && mount -t tmpfs -o mode=0755 tmpfs /dev/infiniband && \"\$0\" setup -n 1 >/dev/null && exec \"\$@\"' $SR"
                UCX_OK='^Final: +1000 |Test: +active message latency'
                FI_OK='^1m +10 +=10 '
                for tl in rc_verbs ud_verbs; do
                    renv=$([ $tl = ud_verbs ] && echo "UCX_UD_VERBS_ETH_DGID_CHECK=n ")
                    ucx="-d softroce0:1 -x $tl -t am_lat -n 1000 -w 100"
                    rxe_port=13337 run "abi-mw-ucx-$tl-sr2rxe" $pmtu "" "ucx_perftest (drop-in lib)" "UCT $tl am_lat${renv:+, rxe: ${renv% }}" "softroce → rxe" server \
                        "$(rxe_as_softroce0 "${renv}ucx_perftest -p 13337")" "$UCXDL ucx_perftest -p 13337 $ucx $VM" "$UCX_OK"
                    run "abi-mw-ucx-$tl-rxe2sr" $pmtu "" "ucx_perftest (drop-in lib)" "UCT $tl am_lat${renv:+, rxe: ${renv% }}" "rxe → softroce" client \
                        "$(rxe_as_softroce0 "${renv}ucx_perftest -p 13337 $ucx $HOST")" "$UCXDL ucx_perftest -p 13337" "$UCX_OK"
                done
                "$RIG" vm 1 "rdma dev set softroce0 name rxe0 2>/dev/null; true" >/dev/null
                for ep in msg rdm; do
                    prov=$([ $ep = msg ] && echo verbs || echo "'verbs;ofi_rxm'")
                    renv=$([ $ep = rdm ] && echo "FI_UNIVERSE_SIZE=64 ")
                    fi="-p $prov -e $ep -I 10 -c"
                    rxe_port=47592 run "abi-mw-fi-$ep-sr2rxe" $pmtu "" "fi_pingpong (drop-in libs)" "-e $ep -c, 64 B .. 1 MiB${renv:+, rxe: ${renv% }}" "softroce → rxe" server \
                        "${renv}fi_pingpong $fi -B 47592" "$DL fi_pingpong $fi -P 47592 $VM" "$FI_OK"
                    run "abi-mw-fi-$ep-rxe2sr" $pmtu "" "fi_pingpong (drop-in libs)" "-e $ep -c, 64 B .. 1 MiB${renv:+, rxe: ${renv% }}" "rxe → softroce" client \
                        "${renv}fi_pingpong $fi -P 47592 $HOST" "$DL fi_pingpong $fi -B 47592" "$FI_OK"
                done
                for tool in write_bw read_bw send_bw send_lat; do
                    need=2 rxe_port=rdma_cm run "abi-cm-R-$tool-rxe2sr" $pmtu "" "ib_$tool -R (drop-in librdmacm)" "rdma_cm, 100 iters" "rxe → softroce" client \
                        "ib_$tool -R -F -n 100 $HOST" "$DL ib_$tool -R -F -d softroce0 -n 100" "$PERF_OK"
                done
                # Debian's perftest -R with softroce as the client, the CM's MADs to the guest
                # delayed by 1.5 s (rig.sh cm-delay; the data path is not delayed): perftest
                # 4.5 connects its test QP right after the parameter exchange, and its server
                # must have called rdma_listen again by the time the REQ arrives; if not, REJ 8
                # (nobody listens), which this perftest cannot retry (its retry loop reuses
                # destroyed ids and crashes). The server in the TCG guest takes from about
                # 100 ms to more than 360 ms to listen again (stop 23: refused every time
                # without delay, and at 50 and 150 ms of delay on the whole link now and then);
                # on real hardware it does so in microseconds. A kernel client is refused the
                # same way (rxe answers REJ 8, librdmacm reports REJECTED status 8). The native
                # `softroce perf -R` rows perfcm-R-*-sr2rxe run without delay: they retry.
                "$RIG" cm-delay 1 1500ms >/dev/null
                for tool in write_bw read_bw send_bw send_lat; do
                    settle=2 need=2 rxe_port=rdma_cm run "abi-cm-R-$tool-sr2rxe" $pmtu "CM MADs in +1.5 s" "ib_$tool -R (drop-in librdmacm)" "rdma_cm, 100 iters" "softroce → rxe" server \
                        "ib_$tool -R -F -n 100" "$DL ib_$tool -R -F -d softroce0 -n 100 $VM" "$PERF_OK"
                done
                "$RIG" cm-delay 1 off >/dev/null
            else
                say "no drop-in librdmacm in $LIBDIR (cargo build --release -p softroce-rdmacm): its rows fail"
                FAIL=$((FAIL + 1))
            fi
        else
            say "no drop-in library beside $SR (cargo build --release -p softroce-ibverbs): its rows fail"
            FAIL=$((FAIL + 1))
        fi
    else
        # long trains at PMTU 4096: 1 MiB = 256 packets per message; Only at 4096 B
        for tool in send_bw write_bw read_bw; do
            for dir in sr2rxe rxe2sr; do
                perf "perf-$tool-1m-$dir-$pmtu" $pmtu "" $tool "1 MiB" $dir "-s 1048576 -n 20" "-s 1048576 -n 20"
            done
        done
        perf "perf-write_bw-only-sr2rxe-$pmtu" $pmtu "" write_bw "4096 B Only" sr2rxe "-s 4096 -n 500" "-s 4096 -n 500"
        perf "perf-send_lat-only-rxe2sr-$pmtu" $pmtu "" send_lat "4096 B Only" rxe2sr "-s 4096 -n 200" "-s 4096 -n 200"
    fi
done

# ---- perftest -R (rdma_cm: the parameter exchange over an RC QP the CM connects, then the
# test QP through the CM) and perftest -c UD (UD QPs, the TCP exchange) <-> native softroce
# perf, both directions, PMTU 1024. Sixteen short rows, about 80 s in all.
"$RIG" mtu 1500 >/dev/null
# perf_cm NAME TOOL OPERATION DIR ARGS RXE-PORT: ARGS go to both sides.
perf_cm() {
    local name=$1 tool=$2 op=$3 dir=$4 args=$5 port=$6 sub=${2/_/-} n=2
    # The passive side of a READ latency test prints no result.
    [[ $tool == read_lat ]] && n=1
    if [ "$dir" = sr2rxe ]; then
        need=$n rxe_port=$port run "$name" 1024 "" "ib_$tool" "$op" "softroce → rxe" server \
            "ib_$tool $args" "$SR perf $sub -d $HOST $args $VM" "$PERF_OK"
    else
        need=$n rxe_port=$port run "$name" 1024 "" "ib_$tool" "$op" "rxe → softroce" client \
            "ib_$tool $args $HOST" "$SR perf $sub -d $HOST $args" "$PERF_OK"
    fi
}
for tool in write_bw read_bw send_bw send_lat write_lat read_lat; do
    a="-R -n 100"; [[ $tool == *_bw ]] && a="-R -s 4096 -n 100"
    for dir in sr2rxe rxe2sr; do
        perf_cm "perfcm-R-$tool-$dir" $tool "-R (rdma_cm), ${a#-R }" $dir "$a" rdma_cm
    done
done
for tool in send_bw send_lat; do
    for dir in sr2rxe rxe2sr; do
        # (a UD receiver answers nothing: softroce is silent as the send_bw server)
        sil=$([ "$tool$dir" = send_bwrxe2sr ] && echo 1)
        silent=$sil perf_cm "perfcm-UD-$tool-$dir" $tool "-c UD, 1024 B" $dir "-c UD -x 1 -s 1024 -n 100" 18515
    done
done

# ---- the differential conformance probe (tests/conformance/probe.c): some 1500 libibverbs and
# librdmacm calls with valid and invalid arguments, each side of its connections in one process,
# against kernel rxe in guest 1 and against softroce's drop-in libraries on a veth device made
# like the guest's (tests/conformance/run.sh); the outputs must be identical but for the reviewed
# tests/conformance/allowlist.txt. No capture: its packets stay inside each side. About 90 s.
"$RIG" mtu 1500 >/dev/null
if [ -z "$FILTER" ] || [[ conformance == *"$FILTER"* ]]; then
    t=$(date +%s)
    cres=pass
    CONF_BIN_DIR=$BIN CONF_WORK=$OUT/conformance "$REPO/tests/conformance/run.sh" rig "$OUT/conformance" > "$OUT/conformance.log" 2>&1 || cres=fail
    csum=$(tail -1 "$OUT/conformance/compare.txt" 2>/dev/null | sed 's/^conformance: //')
    printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "probe.c (libibverbs + librdmacm)" "${csum:-no comparison}" "both ends in one process" 1024 none "$BACKEND" "$cres" "-" "-" >> "$OUT/rows.txt"
    if [ "$cres" = pass ]; then
        PASS=$((PASS + 1))
    else
        FAIL=$((FAIL + 1))
        grep -A2 '^DIFF' "$OUT/conformance/compare.txt" >&2
        tail -n 20 "$OUT/conformance.log" >&2
    fi
    say "conformance: $cres ($(( $(date +%s) - t )) s) $csum"
fi

# ---- loss: netem on the guest's egress and ingress (what either side sends is lost and
# reordered; netem counts what it drops, so the rcvd_pkts check still holds)
"$RIG" mtu 1500 >/dev/null
"$RIG" counters 1 | awk -v k="^($LOSSKEYS)\$" '$1 ~ k' > "$OUT/counters.before"
"$RIG" netem -d both 1 $NETEM >/dev/null
LOSS_IN=1
rxe_port=18700 run "loss-lab-sr2rxe" 1024 "$NETEM" labpeer "lab sequence, 100 KiB" "softroce → rxe" server \
    "labpeer -s" "$LAB -d $HOST -z 102400 $VM" "$LAB_OK"
rxe_port=18700 run "loss-lab-rxe2sr" 1024 "$NETEM" labpeer "lab sequence, 100 KiB" "rxe → softroce" client \
    "labpeer -z 102400 $HOST" "$LAB -s -d $HOST" "$LAB_OK"
# (issue 15 item 6, by hand: LOSS_RUNS=N runs the two ibv_rc_pingpong loss rows N times each,
# loss-pp-*-1 ... -N, with no second chance: a run that hangs — rxe once retransmitted a message
# forever although it had counted softroce's ACK — or in which rxe's rcvd_pkts goes backwards
# fails. `BACKEND=udp tests/interop/matrix.sh loss-pp-` runs only them.)
for i in $(seq 1 "${LOSS_RUNS:-1}"); do
    suffix=$([ "${LOSS_RUNS:-1}" = 1 ] || echo "-$i")
    noretry=$([ "${LOSS_RUNS:-1}" = 1 ] || echo 1)
    NORETRY=$noretry rxe_port=18515 run "loss-pp-sr2rxe$suffix" 1024 "$NETEM" ibv_rc_pingpong "SEND 64 KiB" "softroce → rxe" server \
        "ibv_rc_pingpong -g 1 -s 65536 -n 50" "$SR rc-pingpong -d $HOST -g 1 -s 65536 -n 50 $VM" "$PP_OK"
    NORETRY=$noretry rxe_port=18515 run "loss-pp-rxe2sr$suffix" 1024 "$NETEM" ibv_rc_pingpong "SEND 64 KiB" "rxe → softroce" client \
        "ibv_rc_pingpong -g 1 -s 65536 -n 50 -c $HOST" "$SR rc-pingpong -d $HOST -g 1 -s 65536 -n 50 -c" "$PP_OK"
done
rxe_port=rdma_cm run "loss-rping-sr2rxe" 1024 "$NETEM" rping "-S 100 -C 5 -V" "softroce → rxe" server \
    "rping -s -a $VM -v -V -S 100" "$SR rping -c -a $VM -v -V -C 5 -S 100" "ping data: rdma-ping-4:"
rxe_port=rdma_cm run "loss-rping-rxe2sr" 1024 "$NETEM" rping "-S 100 -C 5 -V" "rxe → softroce" client \
    "rping -c -a $HOST -v -V -C 5 -S 100" "$SR rping -s -a $HOST -v" "ping data: rdma-ping-4:"
perf "loss-perf-write_bw-rxe2sr" 1024 "$NETEM" write_bw "64 KiB" rxe2sr "-n 200" "-n 200"
perf "loss-perf-read_bw-sr2rxe" 1024 "$NETEM" read_bw "64 KiB" sr2rxe "-n 200" "-n 200"
perf "loss-perf-send_bw-sr2rxe" 1024 "$NETEM" send_bw "64 KiB" sr2rxe "-n 200" "-n 200"
perf "loss-perf-atomic_bw-rxe2sr" 1024 "$NETEM" atomic_bw "FETCH_AND_ADD" rxe2sr "-n 500" "-n 500"
perf "loss-perf-send_lat-rxe2sr" 1024 "$NETEM" send_lat "2 B" rxe2sr "-n 500" "-n 500"
"$RIG" counters 1 | awk -v k="^($LOSSKEYS)\$" '$1 ~ k' > "$OUT/counters.after"
retries=$(awk 'NR == FNR { b[$1] = $2; next } { printf "%s +%d, ", $1, $2 - b[$1] }' \
    "$OUT/counters.before" "$OUT/counters.after" | sed 's/, $//')
"$RIG" netem 1 off >/dev/null
# ---- issue 15 item 7: 5 % loss of what rxe sends (the guest's egress only; softroce's packets
# all arrive), ibv_rc_pingpong on rxe as the client of softroce rc-pingpong, 64 KiB x 100 —
# once seen failing 1 in 13 from outside. LOSS5_RUNS=N repeats the row (RETRY=1: no second
# chance) to measure its failure rate.
"$RIG" netem 1 loss 5% >/dev/null
for i in $(seq 1 "${LOSS5_RUNS:-1}"); do
    suffix=$([ "${LOSS5_RUNS:-1}" = 1 ] || echo "-$i")
    rxe_port=18515 run "loss5-pp-rxe2sr$suffix" 1024 "loss 5% (rxe's egress)" ibv_rc_pingpong "SEND 64 KiB x 100" "rxe → softroce" client \
        "ibv_rc_pingpong -g 1 -s 65536 -n 100 -c $HOST" "$SR rc-pingpong -d $HOST -g 1 -s 65536 -n 100 -c" "$PP_OK"
done
# LOSS5_MIRROR=1 (by hand): the mirror image — 5 % loss of what softroce sends (the guest's
# ingress), softroce the client of rxe's ibv_rc_pingpong server: kernel rxe as the side waiting
# for the last ACK.
if [ -n "${LOSS5_MIRROR:-}" ]; then
    "$RIG" netem 1 off >/dev/null
    "$RIG" netem -d in 1 loss 5% >/dev/null
    for i in $(seq 1 "${LOSS5_RUNS:-1}"); do
        rxe_port=18515 run "loss5-pp-sr2rxe-$i" 1024 "loss 5% (rxe's ingress)" ibv_rc_pingpong "SEND 64 KiB x 100" "softroce → rxe" server \
            "ibv_rc_pingpong -g 1 -s 65536 -n 100" "$SR rc-pingpong -d $HOST -g 1 -s 65536 -n 100 $VM" "$PP_OK"
    done
fi
"$RIG" netem 1 off >/dev/null
LOSS_IN=""
# ---- fault injection on softroce's side (issue 27), no netem: --faults / SOFTROCE_FAULTS
# loses, duplicates and reorders what softroce sends and receives. The faults are on the wire:
# rxe's own hw_counters show the gaps and duplicates it received (out_of_seq_request,
# duplicate_request) and its retransmissions of what softroce lost on receipt
# (completer_retry_err), in every run. softroce rc-pingpong in both roles, and Debian's
# ibv_rc_pingpong through the drop-in library (4 KiB x 100, each about 10-15 s in the TCG guest).
FAULTS="seed=1,loss=3%,dup=2%,reorder=2%"
FAULTKEYS="duplicate_request|out_of_seq_request|completer_retry_err"
# faults_seen before|after: after, each of FAULTKEYS (or the row's faultkeys) grew since before.
faults_seen() {
    "$RIG" counters 1 | awk -v k="^(${faultkeys:-$FAULTKEYS})\$" '$1 ~ k' > "$OUT/faults.$1"
    [ "$1" = before ] && return 0
    echo "--- rxe hw_counters during the run:"
    awk 'NR == FNR { b[$1] = $2; next } { d = $2 - b[$1]; printf "%s +%d\n", $1, d; if (d <= 0) bad = 1 }
        END { exit bad }' "$OUT/faults.before" "$OUT/faults.after"
}
"$RIG" counters 1 | awk -v k="^($FAULTKEYS)\$" '$1 ~ k' > "$OUT/faults.all.before"
post=faults_seen rxe_port=18515 run "faults-pp-sr2rxe" 1024 "softroce --faults $FAULTS" ibv_rc_pingpong "SEND 4096 B" "softroce → rxe" server \
    "ibv_rc_pingpong -g 1 -s 4096 -n 100 -c" "$SR rc-pingpong --faults $FAULTS -d $HOST -g 1 -s 4096 -n 100 -c $VM" "$PP_OK"
post=faults_seen rxe_port=18515 run "faults-pp-rxe2sr" 1024 "softroce --faults $FAULTS" ibv_rc_pingpong "SEND 4096 B" "rxe → softroce" client \
    "ibv_rc_pingpong -g 1 -s 4096 -n 100 -c $HOST" "$SR rc-pingpong --faults $FAULTS -d $HOST -g 1 -s 4096 -n 100 -c" "$PP_OK"
# Debian's ibv_rc_pingpong exits the moment its last completion arrives, and with it its
# device: had the fault layer lost its last ACK, rxe (whose retry_cnt 7 retries forever) would
# retransmit to nobody and never finish — what any program that exits that way risks on a lossy
# link (softroce's own tools linger: docs/faults.md). So this row loses only what softroce
# receives: rxe retransmits what was lost (completer_retry_err) and sees softroce's
# retransmissions of what was lost of its ACKs (duplicate_request).
RXFAULTS="seed=1,dir=rx,loss=3%,dup=2%,reorder=2%"
if LIBDIR=$("$SR" lib-path 2>/dev/null); then
    faultkeys="duplicate_request|completer_retry_err" post=faults_seen rxe_port=18515 run "faults-abi-pp-sr2rxe" 1024 "SOFTROCE_FAULTS=$RXFAULTS" "ibv_rc_pingpong (drop-in lib)" "SEND 4096 B" "softroce → rxe" server \
        "ibv_rc_pingpong -g 1 -s 4096 -n 100 -c" \
        "env SOFTROCE_DEVICES=$HOST SOFTROCE_FAULTS=$RXFAULTS LD_LIBRARY_PATH=$LIBDIR ibv_rc_pingpong -d softroce0 -g 1 -s 4096 -n 100 -c $VM" "$PP_OK"
fi
"$RIG" counters 1 | awk -v k="^($FAULTKEYS)\$" '$1 ~ k' > "$OUT/faults.all.after"
faultctr=$(awk 'NR == FNR { b[$1] = $2; next } { printf "%s +%d, ", $1, $2 - b[$1] }' \
    "$OUT/faults.all.before" "$OUT/faults.all.after" | sed 's/, $//')
fi

# ---- one host address, two host processes (docs/design/shared-device.md): Debian's programs
# through the drop-in libraries, both on 10.77.0.1 at the same time, each with a different
# program on kernel rxe in the guest as its peer, one host process the client and the other the
# server. Without the sharing the second process could not open the device (address in use).
# shared2 NAME TOOL OPERATION RXE-SERVER HOST-CLIENT HOST-SERVER RXE-CLIENT OK-REGEX
shared2() {
    local name=$1 tool=$2 op=$3 g1=$4 hc=$5 hs=$6 g2=$7 ok=$8 res=pass log=$OUT/$1.log rc=0 sent t=$(date +%s.%N)
    [ -n "$FILTER" ] && [[ $name != *"$FILTER"* ]] && return
    {
        echo "### $name: $tool $op, two host processes on $HOST"
        "$RIG" capture-start "$name" "udp port 4791" >/dev/null 2>&1
        "$RIG" vm-bg -t 120 1 g1 "$g1"
        sleep 2
        echo "--- host server: $hs"
        "$RIG" host "timeout 120 $hs" > "$log.hs" 2>&1 &
        local hspid=$!
        sleep 2
        echo "--- host client: $hc"
        "$RIG" host "timeout 120 $hc" > "$log.hc" 2>&1 &
        local hcpid=$!
        sleep 1
        echo "--- rxe client: $g2"
        "$RIG" vm -t 120 1 "$g2" || { echo "rxe client exit $?"; rc=1; }
        wait $hcpid || { echo "host client exit $?"; rc=1; }
        wait $hspid || { echo "host server exit $?"; rc=1; }
        "$RIG" vm-wait 1 g1 60 || { echo "rxe server exit $?"; rc=1; }
        echo "--- host client"; cat "$log.hc"; echo "--- host server"; cat "$log.hs"; rm -f "$log.hc" "$log.hs"
        sleep 0.5
        "$RIG" capture-stop "$name" >/dev/null 2>&1
    } > "$log" 2>&1
    if [ "$rc" != 0 ] || [ "$(grep -cE "$ok" "$log")" -lt 4 ]; then
        res=fail; echo "programs failed or did not report success" >> "$log"
    fi
    local chk
    if chk=$(check_capture "$name"); then sent=$(echo "$chk" | tail -1); else res=fail; echo "$chk" >> "$log"; sent=$(echo "$chk" | tail -1); fi
    local secs; secs=$(printf '%.1f' "$(echo "$(date +%s.%N) - $t" | bc)")
    printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$tool" "$op" "both at once: host 1 → rxe 1, rxe 2 → host 2" 1024 none "$BACKEND" "$res" "-" "$sent / -" >> "$OUT/rows.txt"
    if [ "$res" = pass ]; then PASS=$((PASS + 1)); else FAIL=$((FAIL + 1)); tail -n 40 "$log" >&2; fi
    say "$name: $res ($secs s)"
}
if [[ " $BACKENDS " == *" udp "* ]] && LIBDIR=$("$SR" lib-path 2>/dev/null) && [ -e "$LIBDIR/librdmacm.so.1" ]; then
    BACKEND=udp
    "$RIG" mtu 1500 >/dev/null
    DL="env SOFTROCE_DEVICES=$HOST LD_LIBRARY_PATH=$LIBDIR"
    shared2 shared-host-pp ibv_rc_pingpong "SEND 4096 B x 200, data checked, two host processes on one address" \
        "ibv_rc_pingpong -g 1 -s 4096 -n 200 -c" \
        "$DL ibv_rc_pingpong -d softroce0 -g 1 -s 4096 -n 200 -c $VM" \
        "$DL ibv_rc_pingpong -d softroce0 -g 1 -s 4096 -n 200 -c -p 18516" \
        "ibv_rc_pingpong -g 1 -s 4096 -n 200 -c -p 18516 $HOST" "$PP_OK"
    shared2 shared-host-rping rping "-V -C 20, two host processes on one address" \
        "rping -s -a $VM -V -C 20 -v" \
        "$DL rping -c -a $VM -V -C 20 -v" \
        "$DL rping -s -a $HOST -V -C 20 -v" \
        "rping -c -a $HOST -V -C 20 -v" 'ping data: rdma-ping-19'
fi

# ---- the raw (AF_PACKET) backend: a representative subset, both directions, PMTU 1024,
# one loss row (the lab sequence: every operation; a 64 KiB write_bw under loss takes 75 s),
# and IPv6 GIDs (softroce binds br0 in the rig's namespace; every packet it
# sends is a frame it built, every ICRC it receives checked over the real IP header)
if [[ " $BACKENDS " == *" raw "* ]]; then
    BACKEND=raw
    R="--backend raw"
    "$RIG" mtu 1500 >/dev/null
    for size in 4096 65536; do
        n=$([ $size -ge 65536 ] && echo 50 || echo 200)
        rxe_port=18515 run "raw-pp-sr2rxe-$size" 1024 "" ibv_rc_pingpong "SEND $size B" "softroce → rxe" server \
            "ibv_rc_pingpong -g 1 -s $size -n $n -c" "$SR rc-pingpong $R -d $HOST -g 1 -s $size -n $n -c $VM" "$PP_OK"
        rxe_port=18515 run "raw-pp-rxe2sr-$size" 1024 "" ibv_rc_pingpong "SEND $size B" "rxe → softroce" client \
            "ibv_rc_pingpong -g 1 -s $size -n $n -c $HOST" "$SR rc-pingpong $R -d $HOST -g 1 -s $size -n $n -c" "$PP_OK"
    done
    rxe_port=18700 run "raw-lab-sr2rxe" 1024 "" labpeer "lab sequence" "softroce → rxe" server \
        "labpeer -s" "$LAB $R -d $HOST $VM" "$LAB_OK"
    rxe_port=18700 run "raw-lab-rxe2sr" 1024 "" labpeer "lab sequence" "rxe → softroce" client \
        "labpeer $HOST" "$LAB $R -s -d $HOST" "$LAB_OK"
    for tool in write_bw read_bw send_lat; do
        for dir in sr2rxe rxe2sr; do
            perf "raw-perf-$tool-$dir" 1024 "" $tool "defaults, 200 iters" $dir "-n 200" "$R -n 200"
        done
    done
    perf "raw-perf-atomic_bw-sr2rxe" 1024 "" atomic_bw "defaults, 200 iters" sr2rxe "-n 200" "$R -n 200"
    perf "raw-perf-atomic_bw-rxe2sr" 1024 "" atomic_bw "defaults, 200 iters" rxe2sr "-n 200" "$R -n 200"
    # IPv6: addresses on br0 and the guest's eth0; rxe adds a RoCEv2 GID for it. The side
    # channel stays on IPv4 (ibv_rc_pingpong's server listens on IPv4 only).
    "$RIG" host "ip addr add $HOST6/64 dev br0 nodad" >/dev/null 2>&1 || true
    "$RIG" vm 1 "/usr/sbin/ip -6 addr add $VM6/64 dev eth0 nodad" >/dev/null 2>&1 || true
    sleep 1
    g6=$("$RIG" gid 1 | awk -v a="$VM6" '{ g = $2 } g ~ /fd77/ { print $1; exit }')
    # GID index 0: br0's link-local address, served by the raw backend opened on br0
    gid0 raw-gid0 "$R"
    # UD and SRQ pingpongs (UC is the RC path without ACKs)
    for t in ud srq; do
        ppx $t 1024 raw-ppx "" "$R"
    done
    if [ -n "$g6" ]; then
        SRC_FILTER="ipv6.src==$HOST6"
        rxe_port=18515 run "raw-pp6-sr2rxe-4096" 1024 "" ibv_rc_pingpong "SEND 4096 B, IPv6" "softroce → rxe" server \
            "ibv_rc_pingpong -g $g6 -s 4096 -n 200 -c" "$SR rc-pingpong $R -d $HOST6 -g 1 -s 4096 -n 200 -c $VM" "$PP_OK"
        rxe_port=18515 run "raw-pp6-rxe2sr-4096" 1024 "" ibv_rc_pingpong "SEND 4096 B, IPv6" "rxe → softroce" client \
            "ibv_rc_pingpong -g $g6 -s 4096 -n 200 -c $HOST" "$SR rc-pingpong $R -d $HOST6 -g 1 -s 4096 -n 200 -c" "$PP_OK"
        rxe_port=18515 run "raw-ppud6-sr2rxe" 1024 "" ibv_ud_pingpong "UD SEND 1024 B, IPv6" "softroce → rxe" server \
            "ibv_ud_pingpong -g $g6 -s 1024 -n 200 -c" "$SR ud-pingpong $R -d $HOST6 -g 1 -s 1024 -n 200 -c $VM" "$PP_OK"
        SRC_FILTER="ip.src==$HOST"
    else
        say "raw: guest 1 has no IPv6 GID for $VM6 (rig gid 1: $("$RIG" gid 1 | tr '\n' ';')); IPv6 rows skipped"
        FAIL=$((FAIL + 1))
    fi
    "$RIG" netem -d both 1 $NETEM >/dev/null
    LOSS_IN=1
    rxe_port=18700 run "raw-loss-lab-sr2rxe" 1024 "$NETEM" labpeer "lab sequence, 100 KiB" "softroce → rxe" server \
        "labpeer -s" "$LAB $R -d $HOST -z 102400 $VM" "$LAB_OK"
    "$RIG" netem 1 off >/dev/null
    LOSS_IN=""
fi

# ------------------------------------------------------------------------------------------
{
    echo "| peer tool | operation | client → server | PMTU | loss (guest netem, both ways) | backend | result | throughput | packets softroce sent / rxe rcvd_pkts |"
    echo "|---|---|---|---|---|---|---|---|---|"
    cat "$OUT/rows.txt"
    echo
    echo "Kernel rxe hw_counters during the loss runs: $retries"
    echo "Kernel rxe hw_counters during the fault-injection runs (softroce --faults / SOFTROCE_FAULTS, no netem): ${faultctr:-(none run)}"
    echo "Runs: $PASS passed ($(ls "$OUT"/*.log.first 2>/dev/null | wc -l) of them on a 2nd run), $FAIL failed, $(( $(date +%s) - T0 )) s ($(date -u +%Y-%m-%d), $(uname -r) host, guest kernel $(cat "$W/kver" 2>/dev/null))."
} > "$OUT/summary.md"
cat "$OUT/summary.md"
# UPDATE_DOCS=1: the table in docs/interop.md becomes this run's (between its markers), to commit.
if [ "${UPDATE_DOCS:-0}" = 1 ]; then
    python3 - "$REPO/docs/interop.md" "$OUT/summary.md" <<'PY'
import sys
doc, new = sys.argv[1], open(sys.argv[2]).read().rstrip("\n")
text = open(doc).read()
b = text.index("<!-- matrix:begin")
b = text.index("\n", b) + 1
e = text.index("<!-- matrix:end -->")
open(doc, "w").write(text[:b] + new + "\n" + text[e:])
PY
    say "docs/interop.md: table replaced by this run's"
fi
# Every failure, first runs included, with the checks' verdicts and the log's end: last, so
# that it is what a CI log shows.
for f in "$OUT"/*.log.first "$OUT"/*.log; do
    [ -e "$f" ] || continue
    [[ $f == *.log ]] && ! grep -q '^--- guest console' "$f" && continue
    echo
    echo "==== failed: $(basename "$f")"
    grep -E '^(programs failed|tshark:|ICRC:|rxe rcvd_pkts|rxe server did not|capture-start failed|--- exit)' "$f"
    echo "---- last lines of the log"
    tail -n 60 "$f"
done
say "matrix: $PASS passed, $FAIL failed"
[ "$FAIL" = 0 ]
