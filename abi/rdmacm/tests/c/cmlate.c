/* rping's end (abi/rdmacm/tests/events.rs): the event thread acknowledges the DISCONNECTED
 * that lets the main thread go on, and calls rdma_get_cm_event again only after the main
 * thread destroyed the channel on its way out. That call must block until the process exits
 * (as one already waiting does), not fail and make the thread exit the process with an error
 * first. Prints "ok blocked" and exits 0 when the late call has not returned after 300 ms.
 *   cmlate <ip> <port> */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>

static struct rdma_event_channel *ch;
static volatile int started;

static void *late(void *arg)
{
	struct rdma_cm_event *ev;

	(void)arg;
	while (!__atomic_load_n(&started, __ATOMIC_SEQ_CST))
		usleep(1000);
	int r = rdma_get_cm_event(ch, &ev);
	printf("late rdma_get_cm_event returned %d: %s\n", r, strerror(errno));
	fflush(stdout);
	exit(3);
}

int main(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	ch = rdma_create_event_channel();
	if (!ch)
		return 2;
	pthread_t t;
	pthread_create(&t, NULL, late, NULL);
	rdma_destroy_event_channel(ch);
	__atomic_store_n(&started, 1, __ATOMIC_SEQ_CST);
	usleep(300000);
	printf("ok blocked\n");
	fflush(stdout);
	exit(0);
}
