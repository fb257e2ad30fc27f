#!/bin/bash
# compare.sh - kernel rxe against softroce on the same (emulated) CPU, in the same run.
#
#   tests/interop/compare.sh [--short] [--keep]        (as root; flock /tmp/softroce-rig.lock)
#
# Boots the rig's two guests (vm1 10.77.0.2 = server, vm2 10.77.0.3 = client), then
#   1. rxe <-> rxe: ib_write_bw 64 KiB, ib_send_lat 2 B, ib_read_bw 64 KiB (perftest, -x 1);
#   2. removes kernel rxe from both guests (it holds UDP 4791): rdma link delete rxe0,
#      rmmod rdma_rxe, and checks that no socket is bound to UDP 4791 any more;
#   3. softroce <-> softroce: softroce perf write-bw / send-lat / read-bw with the same sizes and
#      iterations (UDP backend, each guest's device on its eth0 address, -d);
#   4. puts kernel rxe back (insmod rdma_rxe, rdma link add rxe0, port ACTIVE with its IPv4 GID);
# repeats 1-4 for each round (2 by default: the host's load drifts, and the rounds interleave
# the two stacks), checks the restored rxe with ibv_rc_pingpong between the guests, prints a
# table with each softroce figure as a ratio to rxe's in the same round and one JSON line per
# test and round, and takes the rig down (--keep: leave it up, rxe restored).
#
# Both stacks run in the same TCG guests on the same host cores: emulation makes both slow, so
# the absolute numbers mean little; the ratio is the point. Figures: perftest's "BW average"
# (MB/s) and "t_typical" (µs, half a round trip), from the client's report on both sides.
#
# COMPARE_SR_ENV: environment for the softroce runs (e.g. SOFTROCE_INLINE_PROGRESS=0).
# Iterations: 2000 for bandwidth (perftest's default 5000 takes a minute a run under TCG), 1000
# for latency (perftest's default), 2 rounds; --short (CI): 100 each, 1 round.
# COMPARE_ITERS_BW / COMPARE_ITERS_LAT / COMPARE_ROUNDS override. The exit status is non-zero only when a run
# fails outright (a program fails or prints no result, twice), or rxe cannot be removed or put
# back: never because of a ratio.
#
# Needs the release binary (cargo build --release --bin softroce): rig.sh build puts it into the
# guest image (RIG_SOFTROCE to use another one).
#
# COMPARE_TESTS picks the tests (default "write_bw send_lat read_bw"). write_bw_flood is
# write_bw while the host floods both guests' UDP 4791 with junk from the namespace
# (examples/spray.rs, as tests/flood.rs: random bytes, truncated headers, BTH-shaped packets
# for QPs 0x11..0x14 with wrong ICRCs, 4 GiB READ requests with wrong ICRCs, as fast as one host
# process sends; cargo build --release --example spray); with write_bw beside it, the table
# gives each stack's flooded goodput as a share of its clean one (issue 30):
#   COMPARE_TESTS="write_bw write_bw_flood" flock /tmp/softroce-rig.lock tests/interop/compare.sh
# COMPARE_RUN_TIMEOUT: seconds a run may take (300). COMPARE_FLOOD_ARGS adds sprayer
# arguments, e.g. "--rate 4000" (datagrams/s in all): a TCG guest's emulated CPU drowns in
# the kernel's receive path long before the sprayer's full rate.
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
RIG=$HERE/rig.sh
SHORT=0 KEEP=0
for a in "$@"; do
    case $a in
        --short) SHORT=1 ;;
        --keep) KEEP=1 ;;
        -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "usage: $0 [--short] [--keep]" >&2; exit 2 ;;
    esac
done
if [ $SHORT = 1 ]; then IBW=100 ILAT=100 ROUNDS=1; else IBW=2000 ILAT=1000 ROUNDS=2; fi
IBW=${COMPARE_ITERS_BW:-$IBW}
ILAT=${COMPARE_ITERS_LAT:-$ILAT}
ROUNDS=${COMPARE_ROUNDS:-$ROUNDS}
SR_BIN=${RIG_SOFTROCE:-$REPO/target/release/softroce}
SR_ENV=${COMPARE_SR_ENV:+env $COMPARE_SR_ENV }
SPRAY=${COMPARE_SPRAY:-$REPO/target/release/examples/spray}
RUN_TIMEOUT=${COMPARE_RUN_TIMEOUT:-300}
VM1=10.77.0.2
VM2=10.77.0.3
# a perftest result row: size, iterations, then three or more numbers
ROW='^ +[0-9]+ +[0-9]+([[:space:]]+[0-9.]+){3}'

say() { echo "[compare $(date +%T)] $*" >&2; }
[ -f "$SR_BIN" ] || { say "no softroce binary at $SR_BIN: cargo build --release --bin softroce"; exit 2; }
W=$("$RIG" env | sed -n 's/^RIG_WORK=//p')
# one directory per invocation (the last ten kept), $W/compare/latest -> the newest
OUT=$W/compare/$(date -u +%Y%m%dT%H%M%S)
mkdir -p "$OUT"
ln -sfn "$OUT" "$W/compare/latest"
find "$W/compare" -mindepth 1 -maxdepth 1 -type d -name '2*' | sort | head -n -10 | xargs -r rm -rf
load() { cut -d' ' -f1 /proc/loadavg; }
LOAD0=$(load)

cleanup() { [ $KEEP = 1 ] || "$RIG" down >/dev/null 2>&1 || true; }
trap cleanup EXIT
trap 'exit 130' INT TERM

T0=$(date +%s)
say "rig: build (softroce $SR_BIN in the image) and boot two guests"
"$RIG" build >/dev/null || { say "rig build failed"; exit 1; }
"$RIG" down >/dev/null 2>&1 || true
"$RIG" up 2 >/dev/null || { say "rig up failed"; exit 1; }
"$RIG" vm 1 'softroce --version' >/dev/null 2>&1 || { say "the guest image has no working /usr/bin/softroce"; exit 1; }
PMTU=$("$RIG" mtu | grep -oE 'active_mtu: [0-9]+' | head -1 | grep -oE '[0-9]+$')

# pair STACK TEST ARGS ROUND: run TEST between the guests (vm1 server, vm2 client); prints the
# client's result row; the log goes to $OUT/ROUND-STACK-TEST.log. One more try if the first fails
# (perftest under TCG now and then gives up on its clock calibration: "Can't produce a report").
pair() {
    local stack=$1 test=$2 args=$3 round=$4 try log srv cli row
    for try in 1 2; do
        log=$OUT/$round-$stack-$test.log
        [ $try = 2 ] && { mv "$log" "$log.first"; say "$stack $test failed; once more (first run: $log.first)"; }
        local tool=${test%_flood} spray= sp=
        if [ "$stack" = rxe ]; then
            srv="ib_$tool -x 1 $args"
            cli="ib_$tool -x 1 $args $VM1"
        else
            srv="${SR_ENV}softroce perf ${tool/_/-} -d $VM1 $args"
            # (the client retries its connection for up to 60 s: no wait-port, see below)
            cli="${SR_ENV}softroce perf ${tool/_/-} -d $VM2 --connect-timeout 60 $args $VM1"
        fi
        [ "$tool" != "$test" ] && spray="$SPRAY --from 10.77.0.1 --to $VM1,$VM2 --qpn 0x11 --qpns 4 --kinds random,truncated,bth_bad_icrc,read_bad_icrc --seconds 600 --report-every 1 ${COMPARE_FLOOD_ARGS:-}"
        {
            echo "### $stack $test: server vm1: $srv; client vm2: $cli"
            echo "--- $(date +%T.%N | cut -c1-12) server start (host load $(load))"
            "$RIG" vm-bg -t "$RUN_TIMEOUT" 1 srv "$srv"
            # perftest's client does not retry its connection: wait until the server listens.
            # softroce's does, so its runs skip this: under host load the rig's control
            # channel now and then leaves a request unanswered (4 of ~20 wait-ports after a
            # softroce server started, once a `rig.sh mtu`; each time vm1 was idle and its
            # server listening when asked again), and a wait-port without an answer costs 50 s.
            if [ "$stack" = rxe ] && ! "$RIG" wait-port 1 18515 30; then
                echo "server did not listen; vm1's processes and load:"
                "$RIG" vm -t 30 1 'ps -o pid,stat,args | grep -v " \[" ; cat /proc/loadavg; netstat -ltnu'
            fi
            if [ -n "$spray" ]; then
                echo "--- flood: $spray"
                "$RIG" host "exec $spray" > "$log.spray" 2>&1 &
                sp=$!
                sleep 1
            fi
            echo "--- $(date +%T.%N | cut -c1-12) client start"
            echo "--- client (vm2)"
            "$RIG" vm -t "$RUN_TIMEOUT" 2 "$cli"; echo "--- client exit $?"
            if [ -n "$sp" ]; then
                # (SIGTERM: a background job of a script ignores SIGINT)
                kill "$sp" 2>/dev/null; wait "$sp" 2>/dev/null
                echo "--- flood ended: $(tail -n 1 "$log.spray")"
            fi
            echo "--- server (vm1)"
            "$RIG" vm-wait 1 srv 60; echo "--- server exit $?"
            echo "--- $(date +%T.%N | cut -c1-12) end"
        } > "$log" 2>&1
        row=$(sed -n '/^--- client (vm2)/,/^--- client exit/p' "$log" | grep -E "$ROW" | tail -1)
        if grep -q '^--- client exit 0$' "$log" && grep -q '^--- server exit 0$' "$log" && [ -n "$row" ]; then
            echo "$row"
            return 0
        fi
        "$RIG" vm-kill 1 srv >/dev/null 2>&1
    done
    say "$stack $test failed twice: $log"
    tail -n 30 "$log" >&2
    return 1
}

# figure TEST ROW: BW average (MB/s) for a bandwidth test, t_typical (µs) for a latency test
figure() { case $1 in *_bw | *_bw_flood) awk '{ print $4 }' <<< "$2" ;; *) awk '{ print $5 }' <<< "$2" ;; esac; }

TESTS=${COMPARE_TESTS:-"write_bw send_lat read_bw"}
declare -A ARGS=([write_bw]="-s 65536 -n $IBW" [write_bw_flood]="-s 65536 -n $IBW" [send_lat]="-s 2 -n $ILAT" [read_bw]="-s 65536 -n $IBW")
if [[ " $TESTS " == *_flood* ]] && [ ! -x "$SPRAY" ]; then say "no sprayer at $SPRAY: cargo build --release --example spray"; exit 2; fi
declare -A RES TMIN
FAILED=0

# rxe_out: kernel rxe out of both guests (its tunnel socket holds UDP 4791 on every address)
rxe_out() {
    local k
    say "removing kernel rxe from both guests (it holds UDP 4791)"
    for k in 1 2; do
        # (rmmod retried for a moment: the device's last reference may go a little after the
        # link is deleted)
        if ! "$RIG" vm -t 60 $k '/usr/bin/rdma link delete rxe0 || exit 1
                i=0; until rmmod rdma_rxe; do i=$((i + 1)); [ $i -gt 20 ] && exit 1; sleep 0.2; done
                ! grep -qi ":12B7 " /proc/net/udp /proc/net/udp6 && [ -z "$(ls /sys/class/infiniband 2>/dev/null)" ]' >&2; then
            say "vm$k: could not remove rxe or UDP 4791 is still bound:"
            "$RIG" vm $k 'lsmod; cat /proc/net/udp /proc/net/udp6' >&2
            exit 1
        fi
    done
}

# rxe_in: kernel rxe back into both guests (no modules.dep in the initramfs: insmod, not
# modprobe), port ACTIVE with its IPv4-mapped GID
rxe_in() {
    local k
    say "putting kernel rxe back in both guests"
    for k in 1 2; do
        "$RIG" vm -t 120 $k 'insmod /lib/modules/$(cat /etc/rig-kver)/$(grep /rdma_rxe.ko /etc/rig-modules.order) &&
            /usr/bin/rdma link add rxe0 type rxe netdev eth0 || exit 1
            P=/sys/class/infiniband/rxe0/ports/1; i=0
            while [ $i -lt 300 ]; do
                case "$(cat $P/state)" in *ACTIVE*) case "$(cat $P/gids/1)" in 0000:0000:0000:0000:0000:ffff:*) exit 0 ;; esac ;; esac
                sleep 0.1; i=$((i + 1))
            done; exit 1' >&2 || { say "vm$k: rxe could not be put back"; exit 1; }
    done
}

for round in $(seq 1 "$ROUNDS"); do
    [ "$round" -gt 1 ] && rxe_in
    for stack in rxe softroce; do
        [ $stack = softroce ] && rxe_out
        for t in $TESTS; do
            say "round $round: $stack $t ${ARGS[$t]}"
            if row=$(pair $stack $t "${ARGS[$t]}" "$round"); then
                RES[$stack.$t.$round]=$(figure $t "$row")
                [[ $t == *_lat ]] && TMIN[$stack.$t.$round]=$(awk '{ print $3 }' <<< "$row")
                say "round $round: $stack $t: ${RES[$stack.$t.$round]} $([[ $t == *_bw* ]] && echo MB/s || echo µs)"
            else
                RES[$stack.$t.$round]=""
                FAILED=$((FAILED + 1))
            fi
        done
    done
done
rxe_in
# the rig stays usable: rxe <-> rxe again
"$RIG" vm-bg -t 60 1 pp 'ibv_rc_pingpong -g 1 -n 20' && "$RIG" wait-port 1 18515 30 &&
    "$RIG" vm -t 60 2 "ibv_rc_pingpong -g 1 -n 20 $VM1" > "$OUT/rxe-restored.log" 2>&1 && "$RIG" vm-wait 1 pp 30 >> "$OUT/rxe-restored.log" 2>&1 &&
    say "rxe is back: ibv_rc_pingpong vm2 -> vm1 ok" || { say "rxe after the comparison: ibv_rc_pingpong failed ($OUT/rxe-restored.log)"; FAILED=$((FAILED + 1)); }

# ---- the table and one JSON line per row and round
LOAD1=$(load)
ratio() { [ -n "$1" ] && [ -n "$2" ] && awk -v a="$2" -v b="$1" -v f="$3" 'BEGIN { if (b > 0) printf f, a / b }'; }
join() { local IFS=/; echo "$*" | sed 's|/| / |g'; }
{
    echo "| test | size | iterations | kernel rxe ↔ rxe | softroce ↔ softroce | softroce / rxe |"
    echo "|---|---|---|---|---|---|"
    for t in $TESTS; do
        case $t in
            write_bw) name="RC WRITE bandwidth (BW average)"; size="64 KiB"; n=$IBW; u="MB/s"; better=higher ;;
            write_bw_flood) name="RC WRITE bandwidth under a junk flood"; size="64 KiB"; n=$IBW; u="MB/s"; better=higher ;;
            send_lat) name="RC SEND latency (t_typical)"; size="2 B"; n=$ILAT; u="µs"; better=lower ;;
            read_bw) name="RC READ bandwidth (BW average)"; size="64 KiB"; n=$IBW; u="MB/s"; better=higher ;;
        esac
        rs=() ss=() qs=()
        for round in $(seq 1 "$ROUNDS"); do
            r=${RES[rxe.$t.$round]} s=${RES[softroce.$t.$round]}
            rs+=("${r:-failed}") ss+=("${s:-failed}")
            q=$(ratio "$r" "$s" '%.2f'); qs+=("${q:+${q}×}")
        done
        printf '| %s | %s | %s | %s %s | %s %s | %s (%s is better) |\n' "$name" "$size" "$n" "$(join "${rs[@]}")" "$u" \
            "$(join "${ss[@]}")" "$u" "$(join "${qs[@]}")" "$better"
    done
    # under a flood: each stack's share of its clean goodput, round by round
    if [[ " $TESTS " == *" write_bw "* && " $TESTS " == *" write_bw_flood "* ]]; then
        for stack in rxe softroce; do
            ks=()
            for round in $(seq 1 "$ROUNDS"); do
                k=$(ratio "${RES[$stack.write_bw.$round]}" "${RES[$stack.write_bw_flood.$round]}" '%.2f')
                ks+=("${k:-failed}")
            done
            keeps+="${keeps:+; }$stack $(join "${ks[@]}")"
        done
        echo
        echo "Flooded / clean write bandwidth: $keeps."
    fi
    # the latency floor beside the median: under host load the two differ most
    if [[ " $TESTS " == *" send_lat "* ]]; then
        for stack in rxe softroce; do
            ms=()
            for round in $(seq 1 "$ROUNDS"); do ms+=("${TMIN[$stack.send_lat.$round]:-failed}"); done
            mins+="${mins:+, }$stack $(join "${ms[@]}") µs"
        done
        echo
        echo "send_lat t_min: $mins."
    fi
} > "$OUT/table.md"
# json TEST SIZE ITERS METRIC ROUND: one machine-readable line (null for a failed side)
json() {
    local t=$1 size=$2 n=$3 metric=$4 round=$5 r s q
    r=${RES[rxe.$t.$round]} s=${RES[softroce.$t.$round]}
    q=$(ratio "$r" "$s" '%.3f')
    printf '{"bench":"rxe-compare","test":"%s","round":%s,"size":%s,"iters":%s,"pmtu":%s,"metric":"%s","rxe":%s,"softroce":%s,"ratio":%s,"rxe_t_min":%s,"softroce_t_min":%s,"short":%s,"host_load":[%s,%s]}\n' \
        "$t" "$round" "$size" "$n" "${PMTU:-null}" "$metric" "${r:-null}" "${s:-null}" "${q:-null}" \
        "${TMIN[rxe.$t.$round]:-null}" "${TMIN[softroce.$t.$round]:-null}" "$([ $SHORT = 1 ] && echo true || echo false)" "$LOAD0" "$LOAD1"
}
for round in $(seq 1 "$ROUNDS"); do
    for t in $TESTS; do
        case $t in
            send_lat) json "$t" 2 "$ILAT" t_typical_us "$round" ;;
            *) json "$t" 65536 "$IBW" bw_avg_MBps "$round" ;;
        esac
    done
done > "$OUT/results.jsonl"
cat "$OUT/table.md"
echo
echo "$ROUNDS round(s) (rxe, then softroce, in each; figures per round), two QEMU TCG guests (1 vCPU each), PMTU ${PMTU:-?}, vm2 client -> vm1 server${SR_ENV:+, softroce run with $COMPARE_SR_ENV}; $(( $(date +%s) - T0 )) s, host load average $LOAD0 at the start and $LOAD1 at the end (2 cores), $(date -u +%Y-%m-%d), guest kernel $(cat "$W/kver" 2>/dev/null), softroce $("$SR_BIN" --version 2>/dev/null | awk '{ print $NF }')."
cat "$OUT/results.jsonl"
say "compare: $FAILED failed; logs in $OUT"
[ "$FAILED" = 0 ]
