/* What UCX and libfabric do (issue 25 item 5): each side creates its own RC QP on id->verbs
 * (its own PD and CQ, not rdma_create_qp), moves it with rdma_init_qp_attr + ibv_modify_qp and
 * passes its number in rdma_conn_param.qp_num. The passive side moves its QP to INIT, RTR and
 * RTS after CONNECT_REQUEST and before rdma_accept; the active side to INIT before
 * rdma_connect, and to RTR and RTS on CONNECT_RESPONSE, then calls rdma_establish. One SEND
 * each way checks that the QPs really are connected; then the client disconnects.
 * Built against the installed headers and run on softroce's libraries (tests/events.rs).
 *   cmownqp server <ip> <port> | cmownqp client <ip> <port>
 * Prints "ok <step>" lines; exits non-zero at the first failure. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>

#include "cm.h"

static struct ibv_pd *pd;
static struct ibv_cq *cq;
static struct ibv_qp *myqp;
static struct ibv_mr *mr;
static char buf[256];

/* The application's own verbs objects on the id's device. */
static void own_qp(struct rdma_cm_id *id)
{
	struct ibv_qp_init_attr a;
	CHECK(id->verbs != NULL, "id->verbs");
	CHECK((pd = ibv_alloc_pd(id->verbs)) != NULL, "alloc_pd");
	CHECK((cq = ibv_create_cq(id->verbs, 8, NULL, NULL, 0)) != NULL, "create_cq");
	memset(&a, 0, sizeof a);
	a.qp_type = IBV_QPT_RC;
	a.send_cq = a.recv_cq = cq;
	a.cap.max_send_wr = a.cap.max_recv_wr = 4;
	a.cap.max_send_sge = a.cap.max_recv_sge = 1;
	CHECK((myqp = ibv_create_qp(pd, &a)) != NULL, "create_qp");
	CHECK((mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE)) != NULL, "reg_mr");
}

/* rdma_init_qp_attr for `state`, then ibv_modify_qp with what it gave. */
static void move(struct rdma_cm_id *id, enum ibv_qp_state state, const char *what)
{
	struct ibv_qp_attr qa;
	int mask = 0;
	memset(&qa, 0, sizeof qa);
	qa.qp_state = state;
	CHECK(rdma_init_qp_attr(id, &qa, &mask) == 0, "rdma_init_qp_attr %s", what);
	CHECK(qa.qp_state == state && (mask & IBV_QP_STATE), "%s: state in the answer", what);
	CHECK(ibv_modify_qp(myqp, &qa, mask) == 0, "ibv_modify_qp %s (mask 0x%x)", what, mask);
	CHECK(myqp->state == state, "%s reached", what);
	printf("ok %s\n", what);
}

static void post_recv(void)
{
	struct ibv_sge s = { (uintptr_t)buf, 128, mr->lkey };
	struct ibv_recv_wr w, *bad;
	memset(&w, 0, sizeof w);
	w.sg_list = &s;
	w.num_sge = 1;
	CHECK(ibv_post_recv(myqp, &w, &bad) == 0, "post_recv");
}

static void send_msg(const char *m)
{
	struct ibv_sge s = { (uintptr_t)buf + 128, (uint32_t)strlen(m) + 1, mr->lkey };
	struct ibv_send_wr w, *bad;
	strcpy(buf + 128, m);
	memset(&w, 0, sizeof w);
	w.sg_list = &s;
	w.num_sge = 1;
	w.opcode = IBV_WR_SEND;
	w.send_flags = IBV_SEND_SIGNALED;
	CHECK(ibv_post_send(myqp, &w, &bad) == 0, "post_send");
}

/* Polls until `n` completions, each successful. */
static void complete(int n, const char *what)
{
	struct ibv_wc wc;
	int got = 0, spins = 0;
	while (got < n) {
		int r = ibv_poll_cq(cq, 1, &wc);
		CHECK(r >= 0, "poll_cq");
		if (r == 0) {
			CHECK(++spins < 20000000, "%s: completion within a while", what);
			continue;
		}
		CHECK(wc.status == IBV_WC_SUCCESS, "%s: %s", what, ibv_wc_status_str(wc.status));
		got++;
	}
}

static struct rdma_conn_param param(void)
{
	struct rdma_conn_param p;
	memset(&p, 0, sizeof p);
	p.responder_resources = 1;
	p.initiator_depth = 1;
	p.retry_count = 7;
	p.rnr_retry_count = 7;
	p.qp_num = myqp->qp_num;
	return p;
}

int main(int argc, char **argv)
{
	struct rdma_cm_id *id, *conn;
	struct rdma_cm_event *ev;
	struct rdma_conn_param p;
	struct sockaddr_in a;

	CHECK(argc == 4, "usage: cmownqp server|client <ip> <port>");
	a = sa(argv[2], atoi(argv[3]));
	CHECK((ch = rdma_create_event_channel()) != NULL, "create_event_channel");
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "create_id");
	if (strcmp(argv[1], "server") == 0) {
		listen_at(id, &a);
		printf("listening\n");
		fflush(stdout);
		conn = next_request();
		own_qp(conn);
		move(conn, IBV_QPS_INIT, "passive INIT");
		post_recv();
		move(conn, IBV_QPS_RTR, "passive RTR");
		move(conn, IBV_QPS_RTS, "passive RTS");
		p = param();
		CHECK(rdma_accept(conn, &p) == 0, "accept");
		rdma_ack_cm_event(expect(RDMA_CM_EVENT_ESTABLISHED));
		complete(1, "the client's message");
		CHECK(strcmp(buf, "hello from the client") == 0, "the message: %s", buf);
		printf("ok received\n");
		send_msg("hello from the server");
		complete(1, "the server's send");
		rdma_ack_cm_event(expect(RDMA_CM_EVENT_DISCONNECTED));
		printf("ok disconnected\n");
		rdma_destroy_id(conn);
		rdma_destroy_id(id);
		return 0;
	}
	resolve(id, &a);
	own_qp(id);
	move(id, IBV_QPS_INIT, "active INIT");
	post_recv();
	p = param();
	CHECK(rdma_connect(id, &p) == 0, "connect");
	ev = expect(RDMA_CM_EVENT_CONNECT_RESPONSE);
	CHECK(ev->param.conn.qp_num != 0, "the peer's QP number");
	rdma_ack_cm_event(ev);
	move(id, IBV_QPS_RTR, "active RTR");
	move(id, IBV_QPS_RTS, "active RTS");
	CHECK(rdma_establish(id) == 0, "establish");
	send_msg("hello from the client");
	complete(2, "the client's send and the server's message");
	CHECK(strcmp(buf, "hello from the server") == 0, "the answer: %s", buf);
	printf("ok answered\n");
	CHECK(rdma_disconnect(id) == 0, "disconnect");
	rdma_ack_cm_event(expect(RDMA_CM_EVENT_DISCONNECTED));
	printf("ok done\n");
	rdma_destroy_id(id);
	return 0;
}
