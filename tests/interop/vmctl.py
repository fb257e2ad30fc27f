#!/usr/bin/python3
"""Host side of the interop rig's guest control channel (see guest/rigagent.c).

usage:
  vmctl.py RUNDIR K x TIMEOUT CMD          run CMD in guest K, stream output, exit with its rc
  vmctl.py RUNDIR K bg NAME TIMEOUT CMD    start background job NAME (its own timeout)
  vmctl.py RUNDIR K wait NAME TIMEOUT      wait for job NAME; print its output; exit with its rc
  vmctl.py RUNDIR K kill|out|status NAME

Each guest has several virtio-serial ports (RUNDIR/vmK.ctlI unix sockets). A
request takes the first port whose lock file (RUNDIR/vmK.ctlI.lock) it can
flock, so concurrent callers run concurrently; when all are busy it waits.
TIMEOUT is in seconds, 0 = none. The guest enforces it (rc 124, process group
killed); this side gives up GRACE seconds later (rc 124 too).
"""
import base64
import fcntl
import glob
import os
import re
import signal
import socket
import sys
import time
import uuid

GRACE = 15.0


def die(msg, rc=2):
    sys.stderr.write("vmctl: %s\n" % msg)
    sys.exit(rc)


def take_port(rundir, k, wait_s):
    socks = sorted(glob.glob(os.path.join(rundir, "vm%s.ctl[0-9]" % k)))
    if not socks:
        die("guest %s is not running (no control sockets in %s)" % (k, rundir))
    deadline = time.time() + wait_s
    while True:
        for s in socks:
            fd = os.open(s + ".lock", os.O_CREAT | os.O_RDWR, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return s, fd
            except OSError:
                os.close(fd)
        if time.time() > deadline:
            die("all control ports of guest %s busy for %.0f s" % (k, wait_s), 124)
        time.sleep(0.05)


def request(rundir, k, line_fields, timeout, stream=True):
    tag = uuid.uuid4().hex[:16]
    fields = [line_fields[0], tag] + line_fields[1:]
    sock_path, lock_fd = take_port(rundir, k, (timeout or 3600) + GRACE)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(sock_path)
    except OSError as e:
        die("connect %s: %s (is guest %s up?)" % (sock_path, e, k))
    s.sendall((" ".join(fields) + "\n").encode())
    begin = ("\x02RIGBEGIN %s\n" % tag).encode()
    end_re = re.compile(b"\n\x02RIGEND " + tag.encode() + b" (-?\\d+)\n")
    hold = 64  # never print what could be the start of the END marker
    buf = b""
    started = False
    out = sys.stdout.buffer
    deadline = None if not timeout else time.time() + timeout + GRACE
    s.settimeout(0.5)
    while True:
        if deadline and time.time() > deadline:
            if started:
                out.write(buf)
            out.flush()
            sys.stderr.write("vmctl: guest %s: no answer within %.0f s; giving up\n" % (k, timeout + GRACE))
            return 124
        try:
            d = s.recv(65536)
        except socket.timeout:
            continue
        if not d:
            if started:
                out.write(buf)
            out.flush()
            sys.stderr.write("vmctl: guest %s closed the control channel\n" % k)
            return 125
        buf += d
        if not started:
            i = buf.find(begin)
            if i < 0:
                buf = buf[-len(begin):]  # stale output of an abandoned request
                continue
            buf = buf[i + len(begin):]
            started = True
        m = end_re.search(buf)
        if m:
            out.write(buf[: m.start()])
            out.flush()
            s.close()
            os.close(lock_fd)
            return int(m.group(1))
        if stream and len(buf) > hold:
            out.write(buf[:-hold])
            out.flush()
            buf = buf[-hold:]


def b64(cmd):
    return base64.b64encode(cmd.encode()).decode()


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    a = sys.argv[1:]
    if len(a) < 3:
        die(__doc__.strip())
    rundir, k, op = a[0], a[1], a[2]
    a = a[3:]
    try:
        if op == "x" and len(a) >= 2:
            t = float(a[0])
            return request(rundir, k, ["X", "%g" % t, b64(" ".join(a[1:]))], t)
        if op == "bg" and len(a) >= 3:
            t = float(a[1])
            return request(rundir, k, ["B", a[0], "%g" % t, b64(" ".join(a[2:]))], 30)
        if op == "wait" and len(a) == 2:
            t = float(a[1])
            return request(rundir, k, ["W", a[0], "%g" % t], t)
        if op in ("kill", "out", "status") and len(a) == 1:
            return request(rundir, k, [{"kill": "K", "out": "O", "status": "S"}[op], a[0]], 30)
    except ValueError:
        pass
    die(__doc__.strip())


if __name__ == "__main__":
    sys.exit(main())
