#!/bin/bash
# smoke.sh - end-to-end check of the kernel-rxe interop rig (guest <-> guest).
#
#   tests/interop/smoke.sh          (as root)
#
# setup-host (no-op when installed) -> build (if needed) -> up 2 -> host ping
# -> GID table -> ibv_rc_pingpong -> ib_write_bw -> labpeer at PMTU 1024
# (captured, every RC opcode checked) -> labpeer at PMTU 4096 -> labpeer under
# netem loss + reorder -> down (always, via trap). SMOKE_NETEM overrides the
# netem spec (default "loss 5% reorder 10%").
# Logs: $RIG_WORK/smoke/*.log, captures: $RIG_WORK/pcaps/smoke-*.pcap.
# Last line: "smoke: N passed, M failed"; exit 0 only if nothing failed.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
RIG=$HERE/rig.sh
W=$("$RIG" env | sed -n 's/^RIG_WORK=//p')
OUT=$W/smoke
mkdir -p "$OUT"
LOSS=${SMOKE_NETEM:-loss 5% reorder 10%}

now() { date +%s.%N; }
el() { printf '%.1f' "$(echo "$(now) - $1" | bc)"; }
say() { echo "[smoke $(date +%T)] $*" >&2; }

declare -a NAMES=() RESULTS=() TIMES=()
PASS=0 FAIL=0
record() { # record NAME pass|fail SECONDS
    NAMES+=("$1"); RESULTS+=("$2"); TIMES+=("$3")
    if [ "$2" = pass ]; then PASS=$((PASS + 1)); else FAIL=$((FAIL + 1)); fi
    say "$1: $2 ($3 s)"
}

# run NAME CMD...: a check that passes when CMD exits 0; output -> $OUT/NAME.log
run() {
    local name=$1 t; shift
    t=$(now)
    if "$@" > "$OUT/$name.log" 2>&1; then record "$name" pass "$(el "$t")"
    else record "$name" fail "$(el "$t")"; tail -n 20 "$OUT/$name.log" >&2; fi
}

# pair SERVER_CMD CLIENT_CMD PORT: server in guest 1 (background job), client in guest 2
pair() {
    local srv=$1 cli=$2 port=$3 crc=0 src=0
    "$RIG" vm-bg -t 300 1 smoke-srv "$srv"
    "$RIG" wait-port 1 "$port" 30
    echo "### vm2: $cli"
    "$RIG" vm -t 300 2 "$cli" || crc=$?
    echo "### vm1: $srv"
    "$RIG" vm-wait 1 smoke-srv 60 || src=$?
    echo "### client rc=$crc server rc=$src"
    [ "$crc" = 0 ] && [ "$src" = 0 ]
}

cleanup() { "$RIG" down >/dev/null 2>&1 || true; }
trap cleanup EXIT
trap 'exit 130' INT TERM

T0=$(now)

# ---- host packages (no-op when present)
t=$(now)
if "$HERE/setup-host.sh"; then record setup-host pass "$(el "$t")"
else record setup-host fail "$(el "$t")"; echo "smoke: $PASS passed, $FAIL failed"; exit 1; fi

# ---- build
t=$(now)
if "$RIG" build; then record build pass "$(el "$t")"
else record build fail "$(el "$t")"; echo "smoke: $PASS passed, $FAIL failed"; exit 1; fi

# ---- up
t=$(now)
if "$RIG" up 2; then record up pass "$(el "$t")"
else record up fail "$(el "$t")"; echo "smoke: $PASS passed, $FAIL failed"; exit 1; fi

# ---- host (netns) -> guests
run ping_host_vm1 "$RIG" host "ping -c 3 -i 0.2 -W 2 $("$RIG" ip 1)"
run ping_host_vm2 "$RIG" host "ping -c 3 -i 0.2 -W 2 $("$RIG" ip 2)"
run gid_table sh -c "'$RIG' gid 1 && '$RIG' gid 1 | grep -q '^1 0000:0000:0000:0000:0000:ffff:0a4d:0002 RoCE_v2'"

# ---- perftest / rdma-core examples
run ibv_rc_pingpong pair "ibv_rc_pingpong -d rxe0 -g 1 -n 20" "ibv_rc_pingpong -d rxe0 -g 1 -n 20 $("$RIG" ip 1)" 18515
run ib_write_bw pair "ib_write_bw -d rxe0 -x 1 -s 65536 -n 200 -F --report_gbits" \
    "ib_write_bw -d rxe0 -x 1 -s 65536 -n 200 -F --report_gbits $("$RIG" ip 1)" 18515

# ---- labpeer at PMTU 1024 (netdev MTU 1500), captured; every opcode must show up
lab1024() {
    "$RIG" capture-start smoke-lab1024 || return 1
    local rc=0
    pair "labpeer -s" "labpeer -m 1024 $("$RIG" ip 1)" 18700 || rc=$?
    "$RIG" capture-stop smoke-lab1024 || rc=1
    [ $rc = 0 ] || return $rc
    local seen op missing=0
    seen=$("$RIG" decode smoke-lab1024 -Y infiniband -T fields -e _ws.col.Info | sed -E 's/ QP=.*//' | sort | uniq -c)
    echo "### opcodes in the capture"; echo "$seen"
    for op in "Send First" "Send Middle" "Send Last" "Send Last Immediate" "Send Only" "Send Only Immediate" \
              "RDMA Write First" "RDMA Write Middle" "RDMA Write Last" "RDMA Write Last Immediate" \
              "RDMA Write Only" "RDMA Write Only Immediate" "RDMA Read Request" "RDMA Read Response First" \
              "RDMA Read Response Middle" "RDMA Read Response Last" "RDMA Read Response Only" \
              "Compare Swap" "Fetch Add" "Atomic Acknowledge" "Acknowledge"; do
        grep -q "RC $op\$" <<< "$seen" || { echo "MISSING opcode: RC $op"; missing=1; }
    done
    return $missing
}
run labpeer_mtu1024 lab1024

# ---- labpeer at PMTU 4096 (netdev MTU 9000)
lab4096() {
    local m
    m=$("$RIG" mtu 9000) || return 1
    echo "$m"
    grep -q 'vm1 eth0 mtu 9000 rxe0 active_mtu: 4096' <<< "$m" && grep -q 'vm2 eth0 mtu 9000 rxe0 active_mtu: 4096' <<< "$m" || return 1
    local rc=0
    pair "labpeer -s" "labpeer -m 4096 $("$RIG" ip 1)" 18700 || rc=$?
    "$RIG" mtu 1500 || rc=1
    return $rc
}
run labpeer_mtu4096 lab4096

# ---- labpeer under netem loss + reorder on both guests' egress
labloss() {
    local rc=0
    "$RIG" netem 1 "$LOSS" && "$RIG" netem 2 "$LOSS" || return 1
    "$RIG" counters 1 > "$OUT/counters.vm1.before"
    pair "labpeer -s" "labpeer -z 30000 $("$RIG" ip 1)" 18700 || rc=$?
    "$RIG" counters 1 > "$OUT/counters.vm1.after"
    echo "### netem"; "$RIG" netem 1 show; "$RIG" netem 2 show
    echo "### vm1 hw_counters that changed"; diff "$OUT/counters.vm1.before" "$OUT/counters.vm1.after" | grep '^>' || true
    "$RIG" netem 1 off; "$RIG" netem 2 off
    return $rc
}
run labpeer_netem labloss

# ---- down
t=$(now)
trap - EXIT
if "$RIG" down && ! ip netns list | grep -q "^$("$RIG" env | sed -n 's/^RIG_NS=//p')\b"; then
    record down pass "$(el "$t")"
else
    record down fail "$(el "$t")"
fi

echo
printf '%-18s %-5s %8s\n' CHECK RESULT SECONDS
for i in "${!NAMES[@]}"; do printf '%-18s %-5s %8s\n' "${NAMES[$i]}" "${RESULTS[$i]}" "${TIMES[$i]}"; done
printf '%-18s %-5s %8s\n' total "" "$(el "$T0")"
echo "smoke: $PASS passed, $FAIL failed"
[ "$FAIL" = 0 ]
