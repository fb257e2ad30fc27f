#!/bin/bash
# Debian's unmodified ibverbs tools on softroce through the drop-in libibverbs (host side, in the
# rig's namespace, SOFTROCE_DEVICES=<br0 address>) paired with the same tools on kernel rxe in
# guest 1, both directions: ibv_{rc,uc,ud,srq}_pingpong (-c: data checked) and perftest
# ib_write_bw, ib_send_lat, ib_read_bw, ib_atomic_bw; then rping, ucmatose, udaddy and perftest -R
# through the drop-in librdmacm.so.1. Prints one "### <tool> (<who serves>):"
# line per run with both exit codes and the result row; exits 1 if any run failed.
#
# Needs an up rig and a built library:
#   cargo build --release -p softroce -p softroce-ibverbs -p softroce-rdmacm && flock /tmp/softroce-rig.lock bash -c \
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
# Debian's rdma_cm programs through the drop-in librdmacm.so.1 (+ libibverbs.so.1) on the host,
# the same programs on rxe in guest 1, both directions (an rdma_cm listener has no TCP port to
# wait for: 2 s for the server to start).
cmrun() { # name, guest-server cmd, host-client cmd
  local name="$1" gcmd="$2" hcmd="$3"
  $R vm-bg -t 90 1 srv "$gcmd" >/dev/null 2>&1
  sleep 2
  out=$($R host "timeout 80 env $H $hcmd" 2>&1); rc=$?
  sout=$($R vm-wait 1 srv 60 2>&1); src=$?
  echo "### $name (rxe serves): host rc=$rc guest rc=$src"; echo "$out" | grep -E 'iters|#bytes|return status' -A1 | tail -2
  [ $rc = 0 ] && [ $src = 0 ] || { fail=1; echo "--- host:"; echo "$out" | tail -5; echo "--- guest:"; echo "$sout" | tail -5; }
}
cmrrun() { # name, host-server cmd, guest-client cmd
  local name="$1" hcmd="$2" gcmd="$3"
  ( $R host "timeout 80 env $H $hcmd" > "$TMP/h.txt" 2>&1; echo "rc=$?" >> "$TMP/h.txt" ) &
  sleep 2
  sout=$($R vm -t 80 1 "$gcmd" 2>&1); src=$?
  wait
  echo "### $name (softroce serves): guest rc=$src host $(tail -1 "$TMP/h.txt")"; echo "$sout" | grep -E 'iters|#bytes|return status' -A1 | tail -2
  [ $src = 0 ] && [ "$(tail -1 "$TMP/h.txt")" = rc=0 ] || { fail=1; echo "--- guest:"; echo "$sout" | tail -5; echo "--- host:"; tail -5 "$TMP/h.txt"; }
}
if [ -e "$L/librdmacm.so.1" ]; then
  for size in 64 4000; do
    cmrun  "rping -V -S $size" "rping -s -a $VM_IP -V -S $size" "rping -c -a $VM_IP -V -C 10 -S $size"
    cmrrun "rping -V -S $size" "rping -s -a $HOST_IP -V -S $size" "rping -c -a $HOST_IP -V -C 10 -S $size"
  done
  for t in ucmatose udaddy; do
    cmrun  "$t" "$t -b $VM_IP -c 2 -C 10" "$t -s $VM_IP -b $HOST_IP -c 2 -C 10"
    cmrrun "$t" "$t -b $HOST_IP -c 2 -C 10" "$t -s $HOST_IP -b $VM_IP -c 2 -C 10"
  done
  for t in ib_write_bw ib_read_bw ib_send_bw ib_send_lat; do
    cmrun  "$t -R" "$t -R -F -n 100" "$t -R -F -d softroce0 -n 100 $VM_IP"
    cmrrun "$t -R" "$t -R -F -d softroce0 -n 100" "$t -R -F -n 100 $HOST_IP"
  done
else
  echo "### no librdmacm.so.1 in $L (cargo build --release -p softroce-rdmacm)"; fail=1
fi
exit $fail
