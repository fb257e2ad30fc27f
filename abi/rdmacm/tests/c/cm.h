/* What the rdma_cm C tests share: CHECK (print the failing line and errno, exit 1), the test's
 * event channel `ch`, expect() (the next event must be of a type), sa() (an IPv4 address) and
 * qp() (a small QP for an id). */
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

#endif
