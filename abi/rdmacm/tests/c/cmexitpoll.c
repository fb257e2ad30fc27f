/* Exit must never block (issue 25 item 6): a process with a connection (both ends in this
 * process) whose main thread busy-polls a CQ, and whose SIGTERM handler calls exit(). The
 * library's exit-time work (the disconnect of connections still open) runs in the handler, on
 * the thread that was inside ibv_poll_cq and may hold whatever ibv_poll_cq holds; it must
 * neither wait for it nor for anything waiting for it.
 * Built against the installed headers, run on softroce's libraries (abi/rdmacm/tests/events.rs).
 *   cmexitpoll <ip> <port>: prints "ready" once connected, then polls until SIGTERM */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>

#include "cm.h"

static void on_term(int sig)
{
	(void)sig;
	exit(0);
}

int main(int argc, char **argv)
{
	struct rdma_cm_id *l, *c, *s;
	struct sockaddr_in a;
	struct ibv_wc wc[8];

	CHECK(argc == 3, "usage: cmexitpoll <ip> <port>");
	a = sa(argv[1], atoi(argv[2]));
	CHECK((ch = rdma_create_event_channel()) != NULL, "create_event_channel");
	CHECK(rdma_create_id(ch, &l, NULL, RDMA_PS_TCP) == 0, "create listener");
	listen_at(l, &a);
	CHECK(rdma_create_id(ch, &c, NULL, RDMA_PS_TCP) == 0, "create client");
	resolve(c, &a);
	qp(c, IBV_QPT_RC);
	CHECK(rdma_connect(c, NULL) == 0, "connect");
	s = next_request();
	qp(s, IBV_QPT_RC);
	CHECK(rdma_accept(s, NULL) == 0, "accept");
	/* ESTABLISHED on both ids, in either order */
	rdma_ack_cm_event(expect(RDMA_CM_EVENT_ESTABLISHED));
	rdma_ack_cm_event(expect(RDMA_CM_EVENT_ESTABLISHED));
	signal(SIGTERM, on_term);
	printf("ready\n");
	fflush(stdout);
	for (;;)
		ibv_poll_cq(c->recv_cq, 8, wc);
}
