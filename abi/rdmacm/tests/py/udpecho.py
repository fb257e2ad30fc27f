"""A plain UDP program (Python's socket module, nothing RDMA in it) for the datagram rsockets
test through librspreload.so: the client sends 100 datagrams of 1 to 1400 random bytes on a
connected socket, the server answers each with its SHA-1, the client checks every answer. Both
print their socket's RDMA_SQSIZE (SOL_RDMA): only an rsocket answers it.

    udpecho.py server|client IP PORT
"""
import hashlib
import os
import socket
import sys

role, ip, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(10)
print("sqsize", s.getsockopt(0x10000, 0), flush=True)
if role == "server":
    s.bind((ip, port))
    for _ in range(100):
        d, a = s.recvfrom(4096)
        s.sendto(hashlib.sha1(d).digest(), a)
    print("server done", flush=True)
else:
    s.connect((ip, port))
    for i in range(100):
        d = os.urandom(1 + (i * 37) % 1400)
        s.send(d)
        assert s.recv(100) == hashlib.sha1(d).digest(), i
    print("client ok", flush=True)
