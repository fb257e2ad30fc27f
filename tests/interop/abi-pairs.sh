#!/bin/bash
# Debian's unmodified ibverbs tools on softroce through the drop-in libibverbs (host side, in the
# rig's namespace, SOFTROCE_DEVICES=<br0 address>) paired with the same tools on kernel rxe in
# guest 1, both directions: ibv_{rc,uc,ud,srq}_pingpong (-c: data checked) and perftest
# ib_write_bw, ib_send_lat, ib_read_bw, ib_atomic_bw. Prints one "### <tool> (<who serves>):"
# line per run with both exit codes and the result row; exits 1 if any run failed.
#
# Needs an up rig and a built library:
#   cargo build --release && flock /tmp/softroce-rig.lock bash -c \
#     'tests/interop/rig.sh up 2 && tests/interop/abi-pairs.sh; tests/interop/rig.sh down'
# (the rig's qemu processes inherit the lock's descriptor: keep `down` inside the flock).
# About 1.5 minutes.
set -u
cd "$(dirname "$0")/../.."
R=tests/interop/rig.sh
L=$(target/release/softroce lib-path) || exit 1
HOST_IP=$($R env | sed -n 's/^RIG_HOST_IP=//p')
VM_IP=$($R ip 1)
H="SOFTROCE_DEVICES=$HOST_IP LD_LIBRARY_PATH=$L"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail=0
run() { # name, guest-server cmd, host-client cmd, port
  local name="$1" gcmd="$2" hcmd="$3" port="$4"
  $R vm-bg -t 90 1 srv "$gcmd" >/dev/null 2>&1
  $R wait-port 1 "$port" 20 >/dev/null 2>&1
  out=$($R host "timeout 80 env $H $hcmd $VM_IP" 2>&1); rc=$?
  sout=$($R vm-wait 1 srv 60 2>&1); src=$?
  echo "### $name (rxe serves): host rc=$rc guest rc=$src"; echo "$out" | grep -E 'iters|#bytes' -A1 | tail -2
  [ $rc = 0 ] && [ $src = 0 ] || { fail=1; echo "--- host:"; echo "$out" | tail -5; echo "--- guest:"; echo "$sout" | tail -5; }
}
rrun() { # name, host-server cmd, guest-client cmd
  local name="$1" hcmd="$2" gcmd="$3"
  ( $R host "timeout 80 env $H $hcmd" > "$TMP/h.txt" 2>&1; echo "rc=$?" >> "$TMP/h.txt" ) &
  sleep 2
  sout=$($R vm -t 80 1 "$gcmd $HOST_IP" 2>&1); src=$?
  wait
  echo "### $name (softroce serves): guest rc=$src host $(tail -1 "$TMP/h.txt")"; echo "$sout" | grep -E 'iters|#bytes' -A1 | tail -2
  [ $src = 0 ] && [ "$(tail -1 "$TMP/h.txt")" = rc=0 ] || { fail=1; echo "--- guest:"; echo "$sout" | tail -5; echo "--- host:"; tail -5 "$TMP/h.txt"; }
}
for t in rc uc ud srq; do
  run  "ibv_${t}_pingpong" "ibv_${t}_pingpong -g 1 -n 200 -c" "ibv_${t}_pingpong -d softroce0 -g 1 -n 200 -c" 18515
  rrun "ibv_${t}_pingpong" "ibv_${t}_pingpong -d softroce0 -g 1 -n 200 -c" "ibv_${t}_pingpong -g 1 -n 200 -c"
done
for t in ib_write_bw ib_send_lat ib_read_bw ib_atomic_bw; do
  run  "$t" "$t -x 1 -n 200 -F" "$t -d softroce0 -x 1 -n 200 -F" 18515
  rrun "$t" "$t -d softroce0 -x 1 -n 200 -F" "$t -x 1 -n 200 -F"
done
exit $fail
