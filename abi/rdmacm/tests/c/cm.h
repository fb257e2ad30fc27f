/* What the rdma_cm C tests share: CHECK (print the failing line and errno, exit 1), the test's
 * event channel `ch`, expect() (the next event must be of a type), sa() (an IPv4 address),
 * qp() (a small QP for an id), listen_at() and next_request() (the passive side's start) and
 * resolve() (the active side's). */
#ifndef SOFTROCE_TEST_CM_H
#define SOFTROCE_TEST_CM_H
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>

#define CHECK(c, ...) do { if (!(c)) { printf("FAIL line %d: ", __LINE__); printf(__VA_ARGS__); printf(" (errno %d %s)\n", errno, strerror(errno)); exit(1); } } while (0)

static struct rdma_event_channel *ch;

static inline struct rdma_cm_event *expect(enum rdma_cm_event_type t)
{
	struct rdma_cm_event *ev;
	CHECK(rdma_get_cm_event(ch, &ev) == 0, "get_cm_event");
	CHECK(ev->event == t, "expected %s, got %s status %d", rdma_event_str(t), rdma_event_str(ev->event), ev->status);
	return ev;
}

static inline struct sockaddr_in sa(const char *ip, int port)
{
	struct sockaddr_in a;
	memset(&a, 0, sizeof a);
	a.sin_family = AF_INET;
	a.sin_port = htons(port);
	inet_pton(AF_INET, ip, &a.sin_addr);
	return a;
}

/* A QP of type t for the id (4 work requests and 1 SGE each way, the library's own CQs). */
static inline void qp(struct rdma_cm_id *id, enum ibv_qp_type t)
{
	struct ibv_qp_init_attr qa;
	memset(&qa, 0, sizeof qa);
	qa.qp_type = t;
	qa.cap.max_send_wr = qa.cap.max_recv_wr = 4;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	CHECK(rdma_create_qp(id, NULL, &qa) == 0, "create_qp");
}

/* Binds the id to a and listens (backlog 1). */
static inline void listen_at(struct rdma_cm_id *id, struct sockaddr_in *a)
{
	CHECK(rdma_bind_addr(id, (struct sockaddr *)a) == 0, "bind");
	CHECK(rdma_listen(id, 1) == 0, "listen");
}

/* The next event must be a CONNECT_REQUEST: acknowledges it and returns its new id. */
static inline struct rdma_cm_id *next_request(void)
{
	struct rdma_cm_event *ev = expect(RDMA_CM_EVENT_CONNECT_REQUEST);
	struct rdma_cm_id *conn = ev->id;
	rdma_ack_cm_event(ev);
	return conn;
}

/* Resolves the id's address (to a) and route, acknowledging both events. */
static inline void resolve(struct rdma_cm_id *id, struct sockaddr_in *a)
{
	CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)a, 2000) == 0, "resolve_addr");
	rdma_ack_cm_event(expect(RDMA_CM_EVENT_ADDR_RESOLVED));
	CHECK(rdma_resolve_route(id, 2000) == 0, "resolve_route");
	rdma_ack_cm_event(expect(RDMA_CM_EVENT_ROUTE_RESOLVED));
}

#endif
