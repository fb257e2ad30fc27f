/*
 * Peers that are no rsockets, through plain rdma_cm in the same process (tests/rsockets.rs):
 * connection requests to an rsocket listener whose private data is garbage (a wrong version,
 * zeros but the version, too short) are refused (REJECTED) and the listener goes on serving real
 * rsockets; an rconnect answered with garbage private data fails (POLLERR, SO_ERROR ENOTSUP, as
 * rdma-core's rs_do_connect) instead of hanging. Prints "ok <name>" per check.
 *
 *   rsbad IP PORT        (uses PORT and PORT+1)
 */
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>

#include <rdma/rsocket.h>

#include "cm.h"

/* An rdma_cm connection request with `len` bytes of `data` to a: the answer's event type. */
static enum rdma_cm_event_type request_with(struct sockaddr_in *a, const void *data, uint8_t len)
{
	struct rdma_cm_id *id;
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "create_id");
	resolve(id, a);
	qp(id, IBV_QPT_RC);
	struct rdma_conn_param p;
	memset(&p, 0, sizeof p);
	p.private_data = data;
	p.private_data_len = len;
	p.retry_count = 7;
	p.rnr_retry_count = 7;
	CHECK(rdma_connect(id, &p) == 0, "connect");
	struct rdma_cm_event *ev;
	CHECK(rdma_get_cm_event(ch, &ev) == 0, "get_cm_event");
	enum rdma_cm_event_type t = ev->event;
	rdma_ack_cm_event(ev);
	if (t == RDMA_CM_EVENT_ESTABLISHED) {
		rdma_disconnect(id);
		rdma_ack_cm_event(expect(RDMA_CM_EVENT_DISCONNECTED));
	}
	rdma_destroy_qp(id);
	CHECK(rdma_destroy_id(id) == 0, "destroy_id");
	return t;
}

int main(int argc, char **argv)
{
	if (argc < 3)
		return 2;
	const char *ip = argv[1];
	int port = atoi(argv[2]);
	CHECK((ch = rdma_create_event_channel()) != NULL, "channel");

	/* Garbage to an rsocket listener. */
	int l = rsocket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = sa(ip, port);
	CHECK(l >= 0 && !rbind(l, (struct sockaddr *)&a, sizeof a) && !rlisten(l, 4), "listener");
	uint8_t junk[56];
	memset(junk, 0xA5, sizeof junk);
	CHECK(request_with(&a, junk, sizeof junk) == RDMA_CM_EVENT_REJECTED, "wrong version refused");
	memset(junk, 0, sizeof junk);
	junk[0] = 1;
	CHECK(request_with(&a, junk, sizeof junk) == RDMA_CM_EVENT_REJECTED, "no target SGL refused");
	CHECK(request_with(&a, junk, 4) == RDMA_CM_EVENT_REJECTED, "short data refused");
	CHECK(request_with(&a, NULL, 0) == RDMA_CM_EVENT_REJECTED, "no data refused");
	printf("ok garbage-request-refused\n");

	/* The listener still serves an rsocket, and nothing of the refused requests is queued. */
	CHECK(!rfcntl(l, F_SETFL, O_NONBLOCK), "F_SETFL");
	CHECK(raccept(l, NULL, NULL) == -1 && errno == EAGAIN, "nothing to accept");
	int c = rsocket(AF_INET, SOCK_STREAM, 0);
	CHECK(!rconnect(c, (struct sockaddr *)&a, sizeof a), "rconnect");
	struct pollfd pl = { .fd = l, .events = POLLIN };
	CHECK(rpoll(&pl, 1, 10000) == 1, "the listener is readable");
	int s = raccept(l, NULL, NULL);
	CHECK(s >= 0, "raccept");
	CHECK(rsend(c, "ok", 2, 0) == 2, "rsend");
	char buf[4];
	CHECK(rrecv(s, buf, 2, MSG_WAITALL) == 2 && !memcmp(buf, "ok", 2), "rrecv");
	CHECK(!rclose(c) && !rclose(s) && !rclose(l), "rclose");
	printf("ok listener-serves-after-garbage\n");

	/* An rconnect answered with garbage. */
	struct rdma_cm_id *lid;
	struct sockaddr_in b = sa(ip, port + 1);
	CHECK(rdma_create_id(ch, &lid, NULL, RDMA_PS_TCP) == 0, "create_id");
	listen_at(lid, &b);
	c = rsocket(AF_INET, SOCK_STREAM, 0);
	CHECK(!rfcntl(c, F_SETFL, O_NONBLOCK), "F_SETFL");
	CHECK(rconnect(c, (struct sockaddr *)&b, sizeof b) == -1 && errno == EINPROGRESS, "EINPROGRESS");
	struct rdma_cm_id *conn = next_request();
	qp(conn, IBV_QPT_RC);
	struct rdma_conn_param p;
	memset(&p, 0, sizeof p);
	memset(junk, 0xA5, sizeof junk);
	p.private_data = junk;
	p.private_data_len = sizeof junk;
	CHECK(rdma_accept(conn, &p) == 0, "accept");
	struct pollfd pc = { .fd = c, .events = POLLOUT };
	CHECK(rpoll(&pc, 1, 10000) == 1 && (pc.revents & POLLERR), "POLLERR (revents %#x)", pc.revents);
	int err = 0;
	socklen_t len = sizeof err;
	CHECK(!rgetsockopt(c, SOL_SOCKET, SO_ERROR, &err, &len) && err == ENOTSUP, "SO_ERROR %d", err);
	CHECK(rsend(c, "x", 1, 0) == -1 && errno == ENOTCONN, "rsend");
	CHECK(!rclose(c), "rclose");
	printf("ok garbage-answer-fails\n");
	return 0;
}
