/*
 * A plain BSD-sockets program that knows nothing of rsockets: one TCP connection carries
 * BYTES of a seeded pseudo-random stream, in sends of varying sizes, and both sides print
 * the stream's 64-bit FNV-1a checksum. Run under LD_PRELOAD=librspreload.so it goes over
 * rsockets (tests/rsockets.rs). The server waits with poll() (or select(), "select" mode),
 * the client ends with shutdown(SHUT_WR) and waits for the server's 8-byte count.
 *
 * Each side prints "transport: rsocket" when its connected socket answers getsockopt at
 * rsockets' own level (SOL_RDMA, RDMA_SQSIZE: what librspreload passes on to rgetsockopt),
 * "transport: kernel" when it is an ordinary socket (ENOPROTOOPT): whether the preload took over.
 *
 * With STOP, that side closes its socket and exits (status 0) once STOP bytes have passed,
 * mid-stream: the other side must see the end (recv 0) or an error, never wait forever; it
 * prints "server: end of stream after N bytes" or "client: send failed after N bytes: ...".
 *
 * With KEEPIDLE the server turns keep-alive on (SO_KEEPALIVE, TCP_KEEPIDLE seconds) on the
 * accepted socket; with "pause" the client stops sending at STOP and sleeps instead of closing
 * (to be killed: a peer that vanishes while the reader has nothing to send).
 *
 *   sockxfer server IP PORT BYTES [poll|select [STOP [KEEPIDLE]]]
 *   sockxfer client IP PORT BYTES [BIND-IP [STOP [pause]]]
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <unistd.h>

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint8_t next_byte(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint8_t)rng;
}

static uint64_t fnv = 0xcbf29ce484222325ull;
static void sum(const uint8_t *b, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		fnv ^= b[i];
		fnv *= 0x100000001b3ull;
	}
}

static void die(const char *what)
{
	fprintf(stderr, "sockxfer: %s: %s\n", what, strerror(errno));
	exit(1);
}

static struct sockaddr_in addr_of(const char *ip, int port)
{
	struct sockaddr_in a;
	memset(&a, 0, sizeof a);
	a.sin_family = AF_INET;
	a.sin_port = htons(port);
	if (inet_pton(AF_INET, ip, &a.sin_addr) != 1) {
		fprintf(stderr, "sockxfer: bad address %s\n", ip);
		exit(2);
	}
	return a;
}

/* rsockets' option level and its send queue size (rdma/rsocket.h), written out: this program
 * includes no RDMA header. */
#define SOL_RDMA_LEVEL 0x10000
#define RDMA_SQSIZE_OPT 0

static void print_transport(const char *side, int fd)
{
	int v = 0;
	socklen_t len = sizeof v;
	int r = getsockopt(fd, SOL_RDMA_LEVEL, RDMA_SQSIZE_OPT, &v, &len);
	printf("%s transport: %s\n", side, r == 0 ? "rsocket" : "kernel");
}

static void wait_readable(int fd, int use_select)
{
	if (use_select) {
		fd_set r;
		struct timeval tv = { 30, 0 };
		FD_ZERO(&r);
		FD_SET(fd, &r);
		int n = select(fd + 1, &r, NULL, NULL, &tv);
		if (n < 0)
			die("select");
		if (n == 0 || !FD_ISSET(fd, &r)) {
			fprintf(stderr, "sockxfer: select timed out\n");
			exit(1);
		}
	} else {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int n = poll(&p, 1, 30000);
		if (n < 0)
			die("poll");
		if (n == 0) {
			fprintf(stderr, "sockxfer: poll timed out\n");
			exit(1);
		}
	}
}

int main(int argc, char **argv)
{
	if (argc < 5)
		return 2;
	int server = !strcmp(argv[1], "server");
	struct sockaddr_in a = addr_of(argv[2], atoi(argv[3]));
	uint64_t total = strtoull(argv[4], NULL, 0), n = 0;
	static uint8_t buf[1 << 17];
	int s = socket(AF_INET, SOCK_STREAM, 0);
	if (s < 0)
		die("socket");
	if (server) {
		int use_select = argc > 5 && !strcmp(argv[5], "select");
		uint64_t stop = argc > 6 ? strtoull(argv[6], NULL, 0) : UINT64_MAX;
		int one = 1;
		if (setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one))
			die("setsockopt");
		if (bind(s, (struct sockaddr *)&a, sizeof a))
			die("bind");
		if (listen(s, 1))
			die("listen");
		wait_readable(s, use_select);
		int c = accept(s, NULL, NULL);
		if (c < 0)
			die("accept");
		print_transport("server", c);
		if (argc > 7) {
			int one = 1, idle = atoi(argv[7]);
			if (setsockopt(c, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one) ||
			    setsockopt(c, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle))
				die("keep-alive");
		}
		for (;;) {
			wait_readable(c, use_select);
			ssize_t r = recv(c, buf, sizeof buf, 0);
			if (r < 0) {
				fprintf(stderr, "server: recv failed after %" PRIu64 " bytes: %s\n", n, strerror(errno));
				return 3;
			}
			if (r == 0)
				break;
			sum(buf, r);
			n += r;
			if (n >= stop) {
				printf("server: closing after %" PRIu64 " bytes\n", n);
				close(c);
				return 0;
			}
		}
		if (n != total)
			printf("server: end of stream after %" PRIu64 " bytes\n", n);
		if (send(c, &n, sizeof n, 0) != sizeof n)
			die("send count");
		printf("server received %" PRIu64 " bytes checksum %016" PRIx64 "\n", n, fnv);
		close(c);
		close(s);
		return n == total ? 0 : 1;
	}
	if (argc > 5) {
		struct sockaddr_in b = addr_of(argv[5], 0);
		if (bind(s, (struct sockaddr *)&b, sizeof b))
			die("bind");
	}
	uint64_t stop = argc > 6 ? strtoull(argv[6], NULL, 0) : UINT64_MAX;
	if (connect(s, (struct sockaddr *)&a, sizeof a))
		die("connect");
	print_transport("client", s);
	size_t chunk = 1;
	while (n < total) {
		size_t k = chunk;
		if (k > total - n)
			k = total - n;
		for (size_t i = 0; i < k; i++)
			buf[i] = next_byte();
		sum(buf, k);
		for (size_t off = 0; off < k;) {
			ssize_t w = send(s, buf + off, k - off, 0);
			if (w < 0) {
				fprintf(stderr, "client: send failed after %" PRIu64 " bytes: %s\n", n + off, strerror(errno));
				return 3;
			}
			off += w;
		}
		n += k;
		if (n >= stop && argc > 7 && !strcmp(argv[7], "pause")) {
			printf("client: pausing after %" PRIu64 " bytes\n", n);
			for (;;)
				pause();
		}
		if (n >= stop) {
			printf("client: closing after %" PRIu64 " bytes\n", n);
			close(s);
			return 0;
		}
		/* 1 byte, 7, 49, ... up to 128 KiB, then again. */
		chunk = chunk * 7 > sizeof buf ? 1 : chunk * 7;
	}
	if (shutdown(s, SHUT_WR))
		die("shutdown");
	uint64_t got = 0;
	for (size_t off = 0; off < sizeof got;) {
		ssize_t r = recv(s, (char *)&got + off, sizeof got - off, 0);
		if (r <= 0)
			die("recv count");
		off += r;
	}
	printf("client sent %" PRIu64 " bytes checksum %016" PRIx64 " (server counted %" PRIu64 ")\n", n, fnv, got);
	close(s);
	return got == total ? 0 : 1;
}
