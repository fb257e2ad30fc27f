#!/bin/bash
# run.sh - the differential conformance probe (probe.c): kernel rxe against softroce.
#
#   tests/conformance/run.sh build               compile the probe (host gcc, Debian's headers)
#   tests/conformance/run.sh host OUT            softroce: the probe through the drop-in libraries
#                                                on an interface device in a network namespace of
#                                                its own (root; takes /tmp/softroce-netns.lock)
#   tests/conformance/run.sh rxe OUT             kernel rxe: the probe in the VM rig's guest 1
#                                                (the rig must be up; hold /tmp/softroce-rig.lock)
#   tests/conformance/run.sh compare RXE HOST    exit 0 if the outputs differ only where
#                                                allowlist.txt says, else print the differences
#   tests/conformance/run.sh rig OUTDIR          the matrix's row: build, the guest's run, the
#                                                host's, compare (the rig must be up)
#
# The host device is made as alike the guest's rxe0 as can be: a veth end with the guest's MAC
# (52:54:00:77:00:02, so the same link-local GID 0 and node GUID), its IPv4 address 10.77.0.2/24
# (GID 1), MTU 1500 (active MTU 1024), and no route beyond its subnet; SOFTROCE_DEVICES names it,
# so the drop-in library lists one device, as the guest has one. PROBE_ARGS adds probe options
# (e.g. "-s cm,cmconn").
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
BIN=${CONF_BIN_DIR:-$REPO/target/release}
OUTDIR=${CONF_WORK:-$REPO/target/conformance}
PROBE=$OUTDIR/probe
IP=10.77.0.2
MAC=52:54:00:77:00:02
NS=softroce-conf-$$

say() { echo "[conformance $(date +%T)] $*" >&2; }

build() {
    mkdir -p "$OUTDIR"
    if [ ! -x "$PROBE" ] || [ "$HERE/probe.c" -nt "$PROBE" ]; then
        gcc -O1 -Wall -Wextra -Werror -o "$PROBE" "$HERE/probe.c" -lrdmacm -libverbs -lpthread || return 1
    fi
}

host() {
    local out=$1 libdir rc=0
    build || return 1
    libdir=$("$BIN/softroce" lib-path) || { say "no drop-in libraries beside $BIN/softroce"; return 1; }
    [ -e "$libdir/librdmacm.so.1" ] || { say "no drop-in librdmacm in $libdir"; return 1; }
    (
        flock 9
        cleanup() { ip netns del "$NS" 2>/dev/null; }
        trap cleanup EXIT
        ip netns add "$NS" || exit 1
        ip -n "$NS" link add cf0 address $MAC type veth peer name cf1 || exit 1
        ip netns exec "$NS" sysctl -qw net.ipv6.conf.cf0.accept_dad=0 net.ipv6.conf.cf1.accept_dad=0 2>/dev/null
        ip -n "$NS" link set lo up
        ip -n "$NS" link set cf1 up
        ip -n "$NS" addr add $IP/24 dev cf0
        ip -n "$NS" link set cf0 up
        # (the link-local address appears when the link is up)
        for _ in $(seq 50); do
            ip -n "$NS" -6 addr show dev cf0 | grep -q 'fe80.*scope link' && break
            sleep 0.1
        done
        ip netns exec "$NS" env SOFTROCE_DEVICES=cf0 LD_LIBRARY_PATH="$libdir" \
            timeout 600 "$PROBE" -d softroce0 -a $IP ${PROBE_ARGS:-} > "$out"
    ) 9>/tmp/softroce-netns.lock || rc=$?
    return $rc
}

rxe() {
    local out=$1 rig=$REPO/tests/interop/rig.sh
    build || return 1
    "$rig" vm-put 1 "$PROBE" /tmp/probe >/dev/null || return 1
    "$rig" vm -t 600 1 "/tmp/probe -d rxe0 -a $IP ${PROBE_ARGS:-}" > "$out"
}

# compare RXE HOST: every line equal, but for the cases allowlist.txt names. A case's name is the
# text before the first ": "; an entry is "PATTERN  reason", PATTERN a shell-style pattern of case
# names ("*" any text). Lines present on one side only count as differences. Entries that no
# longer cover any difference are listed (review and remove them), without failing.
compare() {
    python3 - "$1" "$2" "$HERE/allowlist.txt" <<'PY'
import fnmatch, sys
rxe, host, allow = sys.argv[1:4]
def cases(path):
    d = {}
    for ln in open(path, errors="replace"):
        ln = ln.rstrip("\n")
        if not ln:
            continue
        name, _, rest = ln.partition(": ")
        d.setdefault(name, []).append(rest)
    return d
a, b = cases(rxe), cases(host)
rules = []
for ln in open(allow):
    s = ln.strip()
    if not s or s.startswith("#"):
        continue
    pat, _, why = s.partition(" ")
    rules.append([pat, why.strip(), 0])
def allowed(name):
    for r in rules:
        if fnmatch.fnmatchcase(name, r[0]):
            r[2] += 1
            return True
    return False
order = list(a) + [n for n in b if n not in a]
bad, ok_diff = [], 0
for n in order:
    if a.get(n) == b.get(n):
        continue
    if allowed(n):
        ok_diff += 1
    else:
        bad.append(n)
for n in bad:
    print(f"DIFF {n}\n  rxe:      {a.get(n, ['(absent)'])}\n  softroce: {b.get(n, ['(absent)'])}")
for pat, why, used in rules:
    if not used:
        print(f"note: allowlist entry {pat!r} covers no difference any more")
total = len(set(a) | set(b))
print(f"conformance: {total} cases, {total - len(bad) - ok_diff} identical, {ok_diff} allowed differences, {len(bad)} unexpected differences")
sys.exit(1 if bad or "done" not in a or "done" not in b else 0)
PY
}

# rig OUTDIR: both runs and the comparison (the interop matrix's row; the rig must be up, with
# guest 1 at MTU 1500).
rig() {
    local d=$1 rc=0
    mkdir -p "$d"
    rxe "$d/rxe.out" || { say "the probe failed in the guest (exit $?)"; rc=1; }
    host "$d/host.out" || { say "the probe failed on the host (exit $?)"; rc=1; }
    compare "$d/rxe.out" "$d/host.out" > "$d/compare.txt" || rc=1
    cat "$d/compare.txt"
    return $rc
}

cmd=${1:-}
shift || true
case $cmd in
    build) build ;;
    host) host "$@" ;;
    rxe) rxe "$@" ;;
    compare) compare "$@" ;;
    rig) rig "$@" ;;
    *) sed -n '2,18p' "$0"; exit 2 ;;
esac
