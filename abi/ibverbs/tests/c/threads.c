/* Several threads opening one device at once (issue 25 item 2): each of THREADS threads opens
 * the first device, allocates a PD, frees it and closes the device, ROUNDS times, with no
 * synchronisation between them (the way `cargo test` runs a Rust project's tests, each opening
 * the device). Every call must succeed: the last context of one thread closing while another
 * opens must never leave the new context unable to start the device (EADDRINUSE).
 * Prints "ok N" (N = opens) or each failure; exit status 0 only if nothing failed.
 *   threads [THREADS [ROUNDS]] */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>

static struct ibv_device *dev;
static int rounds = 50;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int failures;

static void fail(const char *what, int e)
{
	pthread_mutex_lock(&mu);
	failures++;
	printf("FAIL %s: %s\n", what, strerror(e));
	pthread_mutex_unlock(&mu);
}

static void *worker(void *arg)
{
	int i;
	(void)arg;
	for (i = 0; i < rounds; i++) {
		struct ibv_context *c = ibv_open_device(dev);
		struct ibv_pd *p;
		struct ibv_cq *cq;
		if (!c) {
			fail("ibv_open_device", errno);
			continue;
		}
		p = ibv_alloc_pd(c);
		if (!p)
			fail("ibv_alloc_pd", errno);
		cq = ibv_create_cq(c, 4, NULL, NULL, 0);
		if (!cq)
			fail("ibv_create_cq", errno);
		if (cq && ibv_destroy_cq(cq))
			fail("ibv_destroy_cq", errno);
		if (p && ibv_dealloc_pd(p))
			fail("ibv_dealloc_pd", errno);
		if (ibv_close_device(c))
			fail("ibv_close_device", errno);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	int threads = argc > 1 ? atoi(argv[1]) : 8, i, n = 0;
	struct ibv_device **list;
	pthread_t t[64];

	if (argc > 2)
		rounds = atoi(argv[2]);
	if (threads > 64)
		threads = 64;
	list = ibv_get_device_list(&n);
	if (!list || n < 1) {
		printf("FAIL no device\n");
		return 1;
	}
	dev = list[0];
	for (i = 0; i < threads; i++)
		pthread_create(&t[i], NULL, worker, NULL);
	for (i = 0; i < threads; i++)
		pthread_join(t[i], NULL);
	ibv_free_device_list(list);
	if (failures)
		return 1;
	printf("ok %d\n", threads * rounds);
	return 0;
}
