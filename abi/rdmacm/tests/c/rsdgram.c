/*
 * Datagram rsockets' semantics in one process: two SOCK_DGRAM rsockets, a server bound to
 * IP:PORT and a client; every datagram's bytes and source checked, the first through the
 * server's UDP socket (the peer's QP is not known yet), the rest over the UD QPs; replies by
 * rsendto to the source rrecvfrom gave; MSG_PEEK; EAGAIN; rpoll; EMSGSIZE past a slot;
 * EINVAL before bind; EDESTADDRREQ on an unconnected rsend; garbage on the server's UDP port
 * (plain UDP, no rsocket header) ignored. Prints "ok <name>" per check; exits non-zero on the
 * first failure.
 *
 *   rsdgram IP PORT
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <rdma/rsocket.h>

#include "rscheck.h"

static void fill(uint8_t *b, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		b[i] = (uint8_t)(seed * 131 + i * 7);
}

/* A blocking receive with a time limit (rpoll first). */
static ssize_t recv_within(int s, void *b, size_t n, int flags, struct sockaddr_in *from, int ms)
{
	struct pollfd p = { .fd = s, .events = POLLIN };
	int r = rpoll(&p, 1, ms);
	if (r <= 0) {
		errno = r == 0 ? ETIMEDOUT : errno;
		return -1;
	}
	socklen_t fl = sizeof *from;
	return rrecvfrom(s, b, n, flags, (struct sockaddr *)from, &fl);
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: rsdgram IP PORT\n");
		return 2;
	}
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(atoi(argv[2])) };
	inet_pton(AF_INET, argv[1], &sa.sin_addr);
	uint8_t out[2048], in[2048];

	int s = rsocket(AF_INET, SOCK_DGRAM, 0);
	CHECK(s >= 0, "rsocket server");
	CHECK(rrecv(s, in, sizeof in, MSG_DONTWAIT) == -1 && errno == EINVAL, "recv before bind");
	CHECK(rbind(s, (struct sockaddr *)&sa, sizeof sa) == 0, "rbind");
	CHECK(rrecv(s, in, sizeof in, MSG_DONTWAIT) == -1 && errno == EAGAIN, "nothing yet");
	int type = 0;
	socklen_t tl = sizeof type;
	CHECK(rgetsockopt(s, SOL_SOCKET, SO_TYPE, &type, &tl) == 0 && type == SOCK_DGRAM, "SO_TYPE");
	printf("ok bind\n");

	int c = rsocket(AF_INET, SOCK_DGRAM, 0);
	CHECK(c >= 0, "rsocket client");
	CHECK(rsend(c, out, 10, 0) == -1 && errno == EDESTADDRREQ, "unconnected rsend");
	CHECK(rconnect(c, (struct sockaddr *)&sa, sizeof sa) == 0, "rconnect");
	struct sockaddr_in cname;
	socklen_t cl = sizeof cname;
	CHECK(rgetsockname(c, (struct sockaddr *)&cname, &cl) == 0 && cname.sin_port != 0, "client name");
	CHECK(rsend(c, out, 2041, 0) == -1 && errno == EMSGSIZE, "2041 bytes after an 8-byte header");
	printf("ok connect\n");

	/* Garbage on the server's UDP port from a plain socket: ignored. */
	int u = socket(AF_INET, SOCK_DGRAM, 0);
	CHECK(u >= 0, "udp");
	memset(out, 0x55, 64);
	CHECK(sendto(u, out, 64, 0, (struct sockaddr *)&sa, sizeof sa) == 64, "garbage");
	CHECK(sendto(u, out, 3, 0, (struct sockaddr *)&sa, sizeof sa) == 3, "short garbage");
	close(u);

	/* Client -> server, sizes 1 .. 2040, every byte and the source checked. */
	size_t sizes[] = { 1, 16, 100, 1000, 1500, 2040 };
	struct sockaddr_in from;
	for (unsigned round = 0; round < 3; round++) {
		for (unsigned i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
			size_t n = sizes[i];
			fill(out, n, round * 10 + i);
			CHECK(rsend(c, out, n, 0) == (ssize_t)n, "rsend %zu", n);
			ssize_t r = recv_within(s, in, sizeof in, 0, &from, 5000);
			CHECK(r == (ssize_t)n, "recv %zd of %zu (round %u)", r, n, round);
			CHECK(!memcmp(in, out, n), "bytes of %zu", n);
			CHECK(from.sin_port == cname.sin_port && from.sin_addr.s_addr == cname.sin_addr.s_addr,
			      "source %s:%d", inet_ntoa(from.sin_addr), ntohs(from.sin_port));
			/* ... and back to that source. */
			fill(out, n, 1000 + i);
			CHECK(rsendto(s, out, n, 0, (struct sockaddr *)&from, sizeof from) == (ssize_t)n, "reply");
			struct sockaddr_in back;
			r = recv_within(c, in, sizeof in, 0, &back, 5000);
			CHECK(r == (ssize_t)n && !memcmp(in, out, n), "reply bytes %zd", r);
			CHECK(back.sin_port == sa.sin_port && back.sin_addr.s_addr == sa.sin_addr.s_addr,
			      "reply source");
		}
	}
	printf("ok exchange\n");

	/* MSG_PEEK leaves it; a short buffer truncates. */
	fill(out, 300, 77);
	CHECK(rsend(c, out, 300, 0) == 300, "send");
	CHECK(recv_within(s, in, sizeof in, MSG_PEEK, &from, 5000) == 300, "peek");
	CHECK(rrecv(s, in, 10, 0) == 10 && !memcmp(in, out, 10), "short");
	CHECK(rrecv(s, in, sizeof in, MSG_DONTWAIT) == -1 && errno == EAGAIN, "truncated datagram gone");
	printf("ok peek\n");

	/* A burst: non-blocking sends until EAGAIN or 200, all arrive (loopback, room for them). */
	CHECK(rfcntl(c, F_SETFL, O_NONBLOCK) == 0, "nonblock");
	int sent = 0;
	for (; sent < 200; sent++) {
		fill(out, 64, sent);
		ssize_t r = rsend(c, out, 64, 0);
		if (r < 0) {
			CHECK(errno == EAGAIN, "burst send");
			break;
		}
	}
	int got = 0;
	while (got < sent && recv_within(s, in, sizeof in, 0, &from, 2000) == 64)
		got++;
	printf("burst: %d sent, %d received\n", sent, got);
	CHECK(got > 0, "burst");
	printf("ok burst\n");

	CHECK(rshutdown(s, SHUT_RDWR) == 0, "shutdown");
	CHECK(rrecv(s, in, sizeof in, MSG_DONTWAIT) == -1 && errno == EINVAL, "recv after shutdown");
	CHECK(rclose(c) == 0 && rclose(s) == 0, "close");
	printf("ok close\n");
	return 0;
}
