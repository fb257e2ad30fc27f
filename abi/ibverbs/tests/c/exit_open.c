/* Exits from a second thread while the device is open and its engine runs (no ibv_close_device,
 * as many programs end): softroce's fault summary line must still be printed, by its atexit
 * handler, without blocking. Prints "pd ok" once the engine runs; exits 0 from the thread. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <infiniband/verbs.h>

static void *ender(void *arg)
{
	(void)arg;
	exit(0);
}

int main(void)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n < 1)
		return 2;
	struct ibv_context *ctx = ibv_open_device(list[0]);
	if (!ctx)
		return 3;
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	if (!pd)
		return 4;
	printf("pd ok\n");
	fflush(stdout);
	pthread_t t;
	pthread_create(&t, NULL, ender, NULL);
	pthread_join(t, NULL);
	return 5;
}
