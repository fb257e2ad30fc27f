/*
 * The rsocket API's semantics in one process (the listener's connections are accepted by the
 * library's service thread, so a blocking rconnect to our own listener completes before
 * raccept): errors (EBADF, ENOTSUP, ECONNREFUSED, EAGAIN, EINPROGRESS, EINVAL), options,
 * rfcntl, rpoll and rselect mixing an rsocket with a pipe, MSG_PEEK, MSG_WAITALL,
 * rshutdown(SHUT_WR), rclose with data still queued, the end of a connection as each side
 * sees it, riomap/riowrite. Prints "ok <name>" per check; exits non-zero on the first failure.
 *
 *   rsapi IP PORT        (uses PORT .. PORT+9)
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/select.h>
#include <sys/time.h>
#include <unistd.h>

#include <rdma/rsocket.h>

#include "rscheck.h"

static const char *ip;
static int port;

static struct sockaddr_in addr(int p)
{
	struct sockaddr_in a;
	memset(&a, 0, sizeof a);
	a.sin_family = AF_INET;
	a.sin_port = htons(p);
	inet_pton(AF_INET, ip, &a.sin_addr);
	return a;
}

static long ms_now(void)
{
	struct timeval tv;
	gettimeofday(&tv, NULL);
	return tv.tv_sec * 1000L + tv.tv_usec / 1000;
}

static int listener(int p, int iomap)
{
	int l = rsocket(AF_INET, SOCK_STREAM, 0);
	CHECK(l >= 0, "rsocket");
	int one = 1;
	CHECK(!rsetsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one), "SO_REUSEADDR");
	if (iomap)
		CHECK(!rsetsockopt(l, SOL_RDMA, RDMA_IOMAPSIZE, &iomap, sizeof iomap), "RDMA_IOMAPSIZE");
	struct sockaddr_in a = addr(p);
	CHECK(!rbind(l, (struct sockaddr *)&a, sizeof a), "rbind");
	CHECK(!rlisten(l, 4), "rlisten");
	CHECK(!rlisten(l, 4), "rlisten twice");
	return l;
}

static int client(int p, int iomap)
{
	int c = rsocket(AF_INET, SOCK_STREAM, 0);
	CHECK(c >= 0, "rsocket");
	if (iomap)
		CHECK(!rsetsockopt(c, SOL_RDMA, RDMA_IOMAPSIZE, &iomap, sizeof iomap), "RDMA_IOMAPSIZE");
	struct sockaddr_in a = addr(p);
	CHECK(!rconnect(c, (struct sockaddr *)&a, sizeof a), "rconnect");
	return c;
}

static int getint(int s, int level, int name)
{
	int v = -12345;
	socklen_t len = sizeof v;
	CHECK(!rgetsockopt(s, level, name, &v, &len), "rgetsockopt %d/%d", level, name);
	CHECK(len == sizeof v, "optlen %u", len);
	return v;
}

static void setint(int s, int level, int name, int v)
{
	CHECK(!rsetsockopt(s, level, name, &v, sizeof v), "rsetsockopt %d/%d", level, name);
}

static void recv_exact(int s, void *buf, size_t n)
{
	CHECK(rrecv(s, buf, n, MSG_WAITALL) == (ssize_t)n, "rrecv %zu", n);
}

struct reader {
	int s;
	uint64_t n, fnv;
};

static void *read_all(void *arg)
{
	struct reader *r = arg;
	static uint8_t b[1 << 16];
	r->fnv = 0xcbf29ce484222325ull;
	for (;;) {
		ssize_t k = rrecv(r->s, b, sizeof b, 0);
		if (k <= 0)
			break;
		for (ssize_t i = 0; i < k; i++) {
			r->fnv ^= b[i];
			r->fnv *= 0x100000001b3ull;
		}
		r->n += k;
	}
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 3)
		return 2;
	ip = argv[1];
	port = atoi(argv[2]);
	char buf[256];

	/* Numbers that are no rsocket; families and types rsockets do not have. */
	CHECK(rrecv(9999, buf, 1, 0) == -1 && errno == EBADF, "rrecv(9999)");
	CHECK(rclose(9999) == EBADF, "rclose(9999) returns EBADF itself");
	CHECK(rsocket(AF_UNIX, SOCK_STREAM, 0) == -1 && errno == ENOTSUP, "AF_UNIX");
	CHECK(rsocket(AF_INET, SOCK_RAW, 0) == -1 && errno == ENOTSUP, "SOCK_RAW");
	printf("ok ebadf-enotsup\n");

	/* Nobody listens: ECONNREFUSED, then ENOTCONN (rdma-core's state after a failure). */
	int r = rsocket(AF_INET, SOCK_STREAM, 0);
	CHECK(rsend(r, "x", 1, 0) == -1 && errno == ENOTCONN, "rsend before rconnect");
	struct sockaddr_in nobody = addr(port + 9);
	CHECK(rconnect(r, (struct sockaddr *)&nobody, sizeof nobody) == -1 && errno == ECONNREFUSED, "refused");
	CHECK(rconnect(r, (struct sockaddr *)&nobody, sizeof nobody) == -1 && errno == ENOTCONN, "again");
	CHECK(!rclose(r), "rclose");
	printf("ok refused\n");

	/* Options before connecting, connection, names. */
	int l = listener(port, 0);
	int c = rsocket(AF_INET, SOCK_STREAM, 0);
	setint(c, SOL_SOCKET, SO_SNDBUF, 32768);
	setint(c, SOL_SOCKET, SO_RCVBUF, 32768);
	CHECK(getint(c, SOL_SOCKET, SO_SNDBUF) == 65536, "SO_SNDBUF doubled");
	CHECK(getint(c, SOL_SOCKET, SO_RCVBUF) == 65536, "SO_RCVBUF doubled");
	setint(c, SOL_RDMA, RDMA_SQSIZE, 64);
	setint(c, SOL_RDMA, RDMA_RQSIZE, 32);
	setint(c, SOL_RDMA, RDMA_INLINE, 32);
	CHECK(getint(c, SOL_RDMA, RDMA_SQSIZE) == 64 && getint(c, SOL_RDMA, RDMA_RQSIZE) == 32, "queue sizes");
	CHECK(getint(c, SOL_RDMA, RDMA_INLINE) == 32, "inline");
	setint(c, IPPROTO_TCP, TCP_NODELAY, 1);
	CHECK(getint(c, IPPROTO_TCP, TCP_NODELAY) == 1, "TCP_NODELAY");
	setint(c, SOL_SOCKET, SO_KEEPALIVE, 1);
	setint(c, IPPROTO_TCP, TCP_KEEPIDLE, 30);
	CHECK(getint(c, SOL_SOCKET, SO_KEEPALIVE) == 1 && getint(c, IPPROTO_TCP, TCP_KEEPIDLE) == 30, "keep-alive");
	CHECK(rsetsockopt(c, IPPROTO_TCP, TCP_KEEPIDLE, &(int){0}, sizeof(int)) == -1 && errno == EINVAL, "KEEPIDLE 0");
	CHECK(rsetsockopt(c, SOL_SOCKET, SO_BROADCAST, &(int){1}, sizeof(int)) == -1 && errno == ENOTSUP, "unknown");
	struct sockaddr_in a = addr(port);
	CHECK(!rconnect(c, (struct sockaddr *)&a, sizeof a), "rconnect");
	CHECK(!rconnect(c, (struct sockaddr *)&a, sizeof a), "rconnect on a connected socket (rdma-core: 0)");
	struct sockaddr_in pa;
	socklen_t plen = sizeof pa;
	int s = raccept(l, (struct sockaddr *)&pa, &plen);
	CHECK(s >= 0, "raccept");
	CHECK(plen == sizeof pa && pa.sin_family == AF_INET, "raccept's address");
	struct sockaddr_in me, peer;
	socklen_t ml = sizeof me, pl = sizeof peer;
	CHECK(!rgetsockname(c, (struct sockaddr *)&me, &ml) && !rgetpeername(c, (struct sockaddr *)&peer, &pl), "names");
	CHECK(peer.sin_port == htons(port) && peer.sin_addr.s_addr == a.sin_addr.s_addr, "peer name");
	CHECK(me.sin_port == pa.sin_port, "the accepted side sees the client's port");
	CHECK(rsetsockopt(c, SOL_RDMA, RDMA_SQSIZE, &(int){16}, sizeof(int)) == -1 && errno == EINVAL, "late");
	CHECK(getint(c, SOL_SOCKET, SO_ERROR) == 0, "SO_ERROR");
	printf("ok connect-options-names\n");

	/* rfcntl, EAGAIN. */
	CHECK(!rfcntl(l, F_SETFL, O_NONBLOCK), "F_SETFL");
	CHECK(rfcntl(l, F_GETFL) & O_NONBLOCK, "F_GETFL");
	CHECK(raccept(l, NULL, NULL) == -1 && errno == EAGAIN, "non-blocking raccept");
	CHECK(rfcntl(l, F_GETFD) == -1 && errno == ENOTSUP, "F_GETFD");
	CHECK(!rfcntl(l, F_SETFL, 0), "F_SETFL 0");
	CHECK(rrecv(s, buf, 10, MSG_DONTWAIT) == -1 && errno == EAGAIN, "MSG_DONTWAIT");
	printf("ok nonblocking\n");

	/* rpoll with a pipe: each reports its own. */
	int p[2];
	CHECK(!pipe(p), "pipe");
	CHECK(write(p[1], "x", 1) == 1, "write");
	struct pollfd f[2] = { { .fd = s, .events = POLLIN }, { .fd = p[0], .events = POLLIN } };
	CHECK(rpoll(f, 2, 1000) == 1 && f[0].revents == 0 && (f[1].revents & POLLIN), "pipe ready");
	CHECK(read(p[0], buf, 1) == 1, "read");
	long t0 = ms_now();
	CHECK(rpoll(f, 2, 150) == 0, "nothing ready");
	CHECK(ms_now() - t0 >= 140, "the timeout was kept: %ld ms", ms_now() - t0);
	CHECK(rsend(c, "abc", 3, 0) == 3, "rsend");
	CHECK(rpoll(f, 2, 5000) == 1 && (f[0].revents & POLLIN) && f[1].revents == 0, "rsocket ready");
	struct pollfd o = { .fd = c, .events = POLLOUT };
	CHECK(rpoll(&o, 1, 0) == 1 && o.revents == POLLOUT, "writable");
	printf("ok rpoll\n");

	/* rselect: the rsocket (data waiting) and the pipe. */
	CHECK(write(p[1], "y", 1) == 1, "write");
	fd_set rs;
	FD_ZERO(&rs);
	FD_SET(s, &rs);
	FD_SET(p[0], &rs);
	struct timeval tv = { 5, 0 };
	int nfds = (s > p[0] ? s : p[0]) + 1;
	CHECK(rselect(nfds, &rs, NULL, NULL, &tv) == 2 && FD_ISSET(s, &rs) && FD_ISSET(p[0], &rs), "rselect");
	CHECK(read(p[0], buf, 1) == 1, "read");
	printf("ok rselect\n");

	/* MSG_PEEK, MSG_WAITALL across two sends. */
	CHECK(rrecv(s, buf, 2, MSG_PEEK) == 2 && !memcmp(buf, "ab", 2), "peek");
	CHECK(rrecv(s, buf, sizeof buf, 0) == 3 && !memcmp(buf, "abc", 3), "after peek");
	CHECK(rsend(c, "hello ", 6, 0) == 6 && rsend(c, "world", 5, 0) == 5, "rsend");
	recv_exact(s, buf, 11);
	CHECK(!memcmp(buf, "hello world", 11), "waitall");
	printf("ok peek-waitall\n");

	/* SHUT_WR: the peer reads the end, and may still answer. */
	CHECK(!rshutdown(c, SHUT_WR), "rshutdown");
	CHECK(rrecv(s, buf, sizeof buf, 0) == 0, "end of stream");
	CHECK(rsend(s, "back", 4, 0) == 4, "answer after the peer's SHUT_WR");
	recv_exact(c, buf, 4);
	CHECK(!memcmp(buf, "back", 4), "answer");
	CHECK(rsend(c, "x", 1, 0) == -1 && errno == ECONNRESET, "send after SHUT_WR (rdma-core: ECONNRESET)");
	CHECK(!rclose(c) && !rclose(s), "rclose");
	printf("ok shutdown-wr\n");

	/* rclose right after a large send: every byte still arrives, then the end. */
	c = client(port, 0);
	s = raccept(l, NULL, NULL);
	CHECK(s >= 0, "raccept");
	struct reader rd = { .s = s };
	pthread_t th;
	CHECK(!pthread_create(&th, NULL, read_all, &rd), "thread");
	size_t big = 8 << 20;
	uint8_t *data = malloc(big);
	uint64_t fnv = 0xcbf29ce484222325ull;
	for (size_t i = 0; i < big; i++) {
		data[i] = (uint8_t)(i * 2654435761u >> 13);
		fnv ^= data[i];
		fnv *= 0x100000001b3ull;
	}
	CHECK(rsend(c, data, big, 0) == (ssize_t)big, "rsend 8 MiB");
	CHECK(!rclose(c), "rclose with data queued");
	pthread_join(th, NULL);
	CHECK(rd.n == big && rd.fnv == fnv, "received %llu bytes", (unsigned long long)rd.n);
	printf("ok close-with-queued-data\n");

	/* The peer is gone: reads end, sends fail. */
	CHECK(rrecv(s, buf, sizeof buf, 0) == 0, "read after the peer closed");
	ssize_t w;
	for (int i = 0; i < 100 && (w = rsend(s, "x", 1, 0)) == 1; i++)
		usleep(10000);
	CHECK(w == -1 && errno == ECONNRESET, "send after the peer closed");
	struct pollfd h = { .fd = s, .events = POLLIN };
	CHECK(rpoll(&h, 1, 1000) == 1 && (h.revents & POLLHUP), "POLLHUP");
	CHECK(!rclose(s), "rclose");
	printf("ok peer-closed\n");

	/* riomap / riowrite: the peer writes straight into our buffer. */
	int li = listener(port + 1, 1);
	c = client(port + 1, 1);
	s = raccept(li, NULL, NULL);
	CHECK(s >= 0, "raccept");
	CHECK(getint(s, SOL_RDMA, RDMA_IOMAPSIZE) == 1, "inherited iomap size");
	uint8_t *target = aligned_alloc(4096, 8192);
	memset(target, 0, 8192);
	CHECK(riomap(s, target, 8192, PROT_WRITE, 0, 0) == 0, "riomap");
	CHECK(riomap(s, target, 8192, PROT_WRITE, 0, 0) == -1 && errno == ENOMEM, "a second mapping: the table is full");
	CHECK(riomap(s, target, 8192, PROT_EXEC, 0, 0) == -1 && errno == EINVAL, "PROT_EXEC");
	CHECK(rsend(s, "m", 1, 0) == 1, "rsend (carries the iomap entry first)");
	recv_exact(c, buf, 1);
	CHECK(riowrite(c, data, 8192, 0, 0) == 8192, "riowrite");
	CHECK(riowrite(c, data, 10, 100000, 0) == 0, "no mapping there");
	CHECK(rsend(c, "d", 1, 0) == 1, "rsend");
	recv_exact(s, buf, 1);
	CHECK(!memcmp(target, data, 8192), "the data landed");
	CHECK(!riounmap(s, target, 8192), "riounmap");
	CHECK(riounmap(s, target, 8192) == -1 && errno == EINVAL, "riounmap twice");
	CHECK(!rclose(c) && !rclose(s) && !rclose(li), "rclose");
	printf("ok iomap\n");

	/* Non-blocking rconnect: EINPROGRESS, then POLLOUT and SO_ERROR. */
	c = rsocket(AF_INET, SOCK_STREAM, 0);
	CHECK(!rfcntl(c, F_SETFL, O_NONBLOCK), "F_SETFL");
	CHECK(rconnect(c, (struct sockaddr *)&a, sizeof a) == -1 && errno == EINPROGRESS, "EINPROGRESS");
	o.fd = c;
	CHECK(rpoll(&o, 1, 10000) == 1 && (o.revents & POLLOUT) && !(o.revents & POLLERR), "connected");
	CHECK(getint(c, SOL_SOCKET, SO_ERROR) == 0, "SO_ERROR");
	s = raccept(l, NULL, NULL);
	CHECK(s >= 0, "raccept");
	CHECK(!rclose(c) && !rclose(s), "rclose");
	c = rsocket(AF_INET, SOCK_STREAM, 0);
	CHECK(!rfcntl(c, F_SETFL, O_NONBLOCK), "F_SETFL");
	/* The refusal may already be there when rconnect looks (rdma-core's rs_do_connect
	 * checks for the answer right after sending the request; TCP on loopback refuses at
	 * once too): then ECONNREFUSED directly, otherwise EINPROGRESS, POLLERR and SO_ERROR. */
	int rc = rconnect(c, (struct sockaddr *)&nobody, sizeof nobody);
	CHECK(rc == -1, "rconnect to nobody");
	if (errno == EINPROGRESS) {
		o.fd = c;
		CHECK(rpoll(&o, 1, 10000) == 1 && (o.revents & POLLERR), "refused: POLLERR");
		CHECK(getint(c, SOL_SOCKET, SO_ERROR) == ECONNREFUSED, "SO_ERROR");
		CHECK(getint(c, SOL_SOCKET, SO_ERROR) == 0, "SO_ERROR is cleared by reading it");
	} else {
		CHECK(errno == ECONNREFUSED, "refused at once");
	}
	CHECK(!rclose(c) && !rclose(l), "rclose");
	printf("ok nonblocking-connect\n");
	free(data);
	free(target);
	return 0;
}
