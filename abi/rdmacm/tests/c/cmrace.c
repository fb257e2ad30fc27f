/* rdma_destroy_id racing rdma_get_cm_event on another thread (abi/rdmacm/tests/events.rs): the
 * main thread creates an id, resolves an address (an event on its way) and destroys the id
 * at once, many times; an event thread takes and acknowledges events all along. An event is
 * either delivered before its id's destroy (which then waits for its acknowledgement) or
 * dropped with the id: rdma_get_cm_event must never fail ("ok no-failures <n> events").
 *   cmrace <ip> <port> */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>

#include "rscheck.h"

static struct rdma_event_channel *ch;
static volatile int failures, events;

static void *taker(void *arg)
{
	struct rdma_cm_event *ev;

	(void)arg;
	for (;;) {
		if (rdma_get_cm_event(ch, &ev)) {
			fprintf(stderr, "rdma_get_cm_event: %s\n", strerror(errno));
			__atomic_add_fetch(&failures, 1, __ATOMIC_SEQ_CST);
			continue;
		}
		__atomic_add_fetch(&events, 1, __ATOMIC_SEQ_CST);
		rdma_ack_cm_event(ev);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	struct sockaddr_in dst;
	pthread_t t;
	int i, rounds;

	CHECK(argc >= 3, "usage: cmrace <ip> <port> [rounds]");
	rounds = argc > 3 ? atoi(argv[3]) : 2000;
	memset(&dst, 0, sizeof(dst));
	dst.sin_family = AF_INET;
	dst.sin_port = htons(atoi(argv[2]));
	CHECK(inet_pton(AF_INET, argv[1], &dst.sin_addr) == 1, "address");
	CHECK((ch = rdma_create_event_channel()) != NULL, "create_event_channel");
	CHECK(pthread_create(&t, NULL, taker, NULL) == 0, "pthread_create");
	for (i = 0; i < rounds; i++) {
		struct rdma_cm_id *id;

		CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "create_id");
		CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 1000) == 0, "resolve_addr");
		/* Destroyed a moment later each time: sometimes before the event, sometimes while
		 * the event thread takes it, sometimes after. */
		for (volatile int k = (i * 7919) % 400000; k > 0; k--)
			;
		CHECK(rdma_destroy_id(id) == 0, "destroy_id");
	}
	CHECK(failures == 0, "%d of rdma_get_cm_event's calls failed (%d events)", failures, events);
	printf("ok no-failures %d events\n", events);
	fflush(stdout);
	/* The event thread stays blocked in rdma_get_cm_event; the process ends with main. */
	return 0;
}
