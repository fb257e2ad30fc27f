/* A process that exits without rdma_disconnect: its peer still gets DISCONNECTED (the library
 * disconnects at exit, as the kernel does when the process's rdma_cm descriptor closes).
 * Built against the installed <rdma/rdma_cma.h> and run on softroce's libraries
 * (abi/rdmacm/tests/events.rs).
 *   cmexit server <ip> <port>: accepts one connection, then waits at most 5 s for DISCONNECTED
 *                              ("ok disconnected-by-exit")
 *   cmexit client <ip> <port>: connects, prints "ok connected", returns from main */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>

#include "cm.h"

int main(int argc, char **argv)
{
	struct rdma_cm_id *id, *conn;
	struct rdma_cm_event *ev;
	struct sockaddr_in a;
	struct pollfd p;

	CHECK(argc == 4, "usage: cmexit server|client <ip> <port>");
	a = sa(argv[2], atoi(argv[3]));
	CHECK((ch = rdma_create_event_channel()) != NULL, "create_event_channel");
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "create_id");
	if (strcmp(argv[1], "server") == 0) {
		listen_at(id, &a);
		printf("listening\n");
		fflush(stdout);
		conn = next_request();
		qp(conn, IBV_QPT_RC);
		CHECK(rdma_accept(conn, NULL) == 0, "accept");
		rdma_ack_cm_event(expect(RDMA_CM_EVENT_ESTABLISHED));
		p.fd = ch->fd;
		p.events = POLLIN;
		CHECK(poll(&p, 1, 5000) == 1, "DISCONNECTED within 5 s of the client's exit");
		ev = expect(RDMA_CM_EVENT_DISCONNECTED);
		CHECK(ev->id == conn, "about the connection");
		rdma_ack_cm_event(ev);
		printf("ok disconnected-by-exit\n");
		rdma_disconnect(conn);
		rdma_destroy_qp(conn);
		rdma_destroy_id(conn);
		rdma_destroy_id(id);
		rdma_destroy_event_channel(ch);
		return 0;
	}
	resolve(id, &a);
	qp(id, IBV_QPT_RC);
	CHECK(rdma_connect(id, NULL) == 0, "connect");
	rdma_ack_cm_event(expect(RDMA_CM_EVENT_ESTABLISHED));
	printf("ok connected\n");
	/* No rdma_disconnect, no destroy: the process just ends. */
	return 0;
}
