/*
 * A stream peer that stops granting credits (it never reads), in one process: the
 * non-blocking writer gets EAGAIN once the peer's receive buffer and its own send buffer are
 * full (after a bounded amount of data), and rpoll(POLLOUT) times out; a blocking writer
 * sleeps — as rdma-core's, which waits for credits like a TCP writer facing a zero window —
 * without spinning (its CPU time while blocked is measured against the wall time); once the
 * peer closes without having read, the blocked rsend returns (what it wrote, or ECONNRESET).
 * Prints "ok <name>" per check; exits non-zero on the first failure.
 *
 *   rscredit IP PORT
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <rdma/rsocket.h>

#include "rscheck.h"

static double now(clockid_t c)
{
	struct timespec t;
	clock_gettime(c, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static int w;
static char buf[65536];
static volatile ssize_t blocked_ret = -2;
static volatile int blocked_errno;

static void *writer(void *arg)
{
	(void)arg;
	ssize_t r = rsend(w, buf, sizeof buf, 0);
	blocked_errno = errno;
	blocked_ret = r;
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: rscredit IP PORT\n");
		return 2;
	}
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(atoi(argv[2])) };
	inet_pton(AF_INET, argv[1], &sa.sin_addr);
	int l = rsocket(AF_INET, SOCK_STREAM, 0);
	CHECK(l >= 0 && rbind(l, (struct sockaddr *)&sa, sizeof sa) == 0 && rlisten(l, 4) == 0, "listen");
	w = rsocket(AF_INET, SOCK_STREAM, 0);
	CHECK(w >= 0 && rconnect(w, (struct sockaddr *)&sa, sizeof sa) == 0, "connect");
	int r = raccept(l, NULL, NULL);
	CHECK(r >= 0, "accept");

	/* Non-blocking: EAGAIN after a bounded amount (the reader never reads). */
	CHECK(rfcntl(w, F_SETFL, O_NONBLOCK) == 0, "nonblock");
	long long total = 0;
	double t0 = now(CLOCK_MONOTONIC);
	for (;;) {
		ssize_t n = rsend(w, buf, sizeof buf, 0);
		if (n < 0) {
			CHECK(errno == EAGAIN, "send");
			break;
		}
		total += n;
		CHECK(total < (64ll << 20), "no end to the credits: %lld bytes", total);
		CHECK(now(CLOCK_MONOTONIC) - t0 < 20, "no EAGAIN in 20 s");
	}
	/* A little later (credit updates in flight have arrived), still nothing. */
	usleep(100000);
	while (rsend(w, buf, sizeof buf, 0) > 0)
		total += 1;
	CHECK(errno == EAGAIN, "send after a pause");
	printf("eagain after %lld bytes\n", total);
	struct pollfd p = { .fd = w, .events = POLLOUT };
	CHECK(rpoll(&p, 1, 200) == 0, "POLLOUT with no credits (revents %#x)", p.revents);
	printf("ok nonblocking-eagain\n");

	/* Blocking: the writer sleeps without spinning. */
	CHECK(rfcntl(w, F_SETFL, 0) == 0, "blocking");
	pthread_t th;
	CHECK(pthread_create(&th, NULL, writer, NULL) == 0, "thread");
	clockid_t cpu;
	CHECK(pthread_getcpuclockid(th, &cpu) == 0, "cpu clock");
	usleep(200000);
	double c0 = now(cpu), w0 = now(CLOCK_MONOTONIC);
	usleep(1000000);
	double c1 = now(cpu), w1 = now(CLOCK_MONOTONIC);
	CHECK(blocked_ret == -2, "the writer returned %zd with no credits", blocked_ret);
	double ratio = (c1 - c0) / (w1 - w0);
	printf("blocked writer: %.1f ms CPU in %.0f ms\n", (c1 - c0) * 1e3, (w1 - w0) * 1e3);
	CHECK(ratio < 0.1, "the blocked writer spins (%.0f%% of a core)", ratio * 100);
	printf("ok blocking-sleeps\n");

	/* The peer goes away without reading: the blocked rsend returns. */
	t0 = now(CLOCK_MONOTONIC);
	CHECK(rclose(r) == 0, "close the reader");
	while (blocked_ret == -2 && now(CLOCK_MONOTONIC) - t0 < 10)
		usleep(1000);
	CHECK(blocked_ret != -2, "the writer still blocked 10 s after the peer closed");
	CHECK(blocked_ret >= 0 || blocked_errno == ECONNRESET, "rsend: %zd", blocked_ret);
	printf("writer returned %zd (errno %d) %.0f ms after the peer closed\n", blocked_ret,
	       blocked_ret < 0 ? blocked_errno : 0, (now(CLOCK_MONOTONIC) - t0) * 1e3);
	pthread_join(th, NULL);
	CHECK(rsend(w, buf, 100, 0) == -1, "send after the peer left");
	printf("ok peer-gone\n");
	rclose(w);
	rclose(l);
	return 0;
}
