/* rdma_set_option and UD ids through SIDR, built against the installed <rdma/rdma_cma.h> and
 * run on softroce's libraries (abi/rdmacm/tests/events.rs). One process, one device: listeners
 * and clients on the address argv[1], ports from argv[2].
 * Prints one "ok <what>" line per check; exits non-zero at the first failure. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>

#include "cm.h"

static struct rdma_cm_id *listener(const char *ip, int port, enum rdma_port_space ps)
{
	struct rdma_cm_id *l;
	struct sockaddr_in me = sa(ip, port);
	CHECK(rdma_create_id(ch, &l, NULL, ps) == 0, "create listen id");
	CHECK(rdma_bind_addr(l, (struct sockaddr *)&me) == 0, "bind");
	CHECK(rdma_listen(l, 4) == 0, "listen");
	return l;
}

/* An id resolved (address and route) to ip:port; `before_route` runs between the two. */
static struct rdma_cm_id *resolved(const char *ip, int port, enum rdma_port_space ps,
				   void (*before_route)(struct rdma_cm_id *))
{
	struct rdma_cm_id *id;
	struct sockaddr_in dst = sa(ip, port);
	CHECK(rdma_create_id(ch, &id, NULL, ps) == 0, "create_id");
	CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) == 0, "resolve_addr");
	rdma_ack_cm_event(expect(RDMA_CM_EVENT_ADDR_RESOLVED));
	if (before_route)
		before_route(id);
	CHECK(rdma_resolve_route(id, 2000) == 0, "resolve_route");
	rdma_ack_cm_event(expect(RDMA_CM_EVENT_ROUTE_RESOLVED));
	return id;
}

static void set_tos_and_timeout(struct rdma_cm_id *id)
{
	uint8_t tos = 32, timeout = 17;
	int v = 1;
	CHECK(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, sizeof tos) == 0, "TOS");
	CHECK(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &timeout, sizeof timeout) == 0, "ACK_TIMEOUT");
	CHECK(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &v, sizeof v) == -1 && errno == EINVAL, "TOS of an int's size: EINVAL");
	CHECK(rdma_set_option(id, RDMA_OPTION_ID, 42, &tos, sizeof tos) == -1 && errno == ENOSYS, "unknown option: ENOSYS");
}

int main(int argc, char **argv)
{
	const char *ip = argv[1];
	int port = atoi(argv[2]);
	struct rdma_cm_id *l, *cli, *srv, *u;
	struct rdma_cm_event *ev;
	struct rdma_conn_param cp;
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qia;
	uint8_t timeout = 14;
	int v = 1;

	CHECK(argc == 3, "usage: cmoptions <ip> <port>");
	CHECK((ch = rdma_create_event_channel()) != NULL, "create_event_channel");

	/* REUSEADDR and AFONLY: accepted while the id may still bind, EINVAL after (the kernel's
	 * checks); ACK_TIMEOUT is for RC ids only. */
	CHECK(rdma_create_id(ch, &u, NULL, RDMA_PS_TCP) == 0, "create_id");
	CHECK(rdma_set_option(u, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &v, sizeof v) == 0, "REUSEADDR on an idle id");
	CHECK(rdma_set_option(u, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &v, sizeof v) == 0, "AFONLY on an idle id");
	CHECK(rdma_set_option(u, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &timeout, 1) == -1 && errno == EINVAL, "AFONLY of one byte: EINVAL");
	rdma_destroy_id(u);
	l = listener(ip, port, RDMA_PS_TCP);
	v = 0;
	CHECK(rdma_set_option(l, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &v, sizeof v) == -1 && errno == EINVAL, "REUSEADDR off on a listener: EINVAL");
	CHECK(rdma_set_option(l, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &v, sizeof v) == -1 && errno == EINVAL, "AFONLY on a listener: EINVAL");
	CHECK(rdma_create_id(ch, &u, NULL, RDMA_PS_UDP) == 0, "create UD id");
	CHECK(rdma_set_option(u, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &timeout, 1) == -1 && errno == EINVAL, "ACK_TIMEOUT on a UD id: EINVAL");
	rdma_destroy_id(u);
	printf("ok option-checks\n");

	/* TOS and ACK_TIMEOUT set before the route: the connected QP's traffic class and local
	 * ACK timeout. */
	cli = resolved(ip, port, RDMA_PS_TCP, set_tos_and_timeout);
	qp(cli, IBV_QPT_RC);
	memset(&cp, 0, sizeof cp);
	cp.responder_resources = cp.initiator_depth = 1;
	cp.retry_count = 7;
	CHECK(rdma_connect(cli, &cp) == 0, "connect");
	ev = expect(RDMA_CM_EVENT_CONNECT_REQUEST);
	srv = ev->id;
	rdma_ack_cm_event(ev);
	qp(srv, IBV_QPT_RC);
	CHECK(rdma_accept(srv, &cp) == 0, "accept");
	for (int n = 0; n < 2; n++)
		rdma_ack_cm_event(expect(RDMA_CM_EVENT_ESTABLISHED));
	memset(&qa, 0, sizeof qa);
	CHECK(ibv_query_qp(cli->qp, &qa, IBV_QP_AV | IBV_QP_TIMEOUT | IBV_QP_STATE, &qia) == 0, "query_qp");
	CHECK(qa.qp_state == IBV_QPS_RTS, "RTS");
	CHECK(qa.ah_attr.grh.traffic_class == 32, "traffic class %d, want the TOS 32", qa.ah_attr.grh.traffic_class);
	CHECK(qa.timeout == 17, "ACK timeout %d, want 17", qa.timeout);
	rdma_disconnect(cli);
	for (int n = 0; n < 2; n++) {
		ev = expect(RDMA_CM_EVENT_DISCONNECTED);
		if (ev->id == srv) /* the passive side answers the DREQ */
			CHECK(rdma_disconnect(srv) == 0, "passive disconnect");
		rdma_ack_cm_event(ev);
	}
	rdma_destroy_qp(cli);
	rdma_destroy_qp(srv);
	rdma_destroy_id(cli);
	rdma_destroy_id(srv);
	rdma_destroy_id(l);
	printf("ok tos-and-ack-timeout\n");

	/* UD ids through SIDR: CONNECT_REQUEST on the UD listener, rdma_accept's SIDR_REP, the
	 * active side's ESTABLISHED with rdma_ud_param (the server's QP number, Q_Key
	 * 0x01234567, an address to create an AH from); the passive side gets no ESTABLISHED. */
	l = listener(ip, port + 1, RDMA_PS_UDP);
	cli = resolved(ip, port + 1, RDMA_PS_UDP, NULL);
	CHECK(cli->qp_type == IBV_QPT_UD, "a UDP id's qp_type is UD");
	qp(cli, IBV_QPT_UD);
	CHECK(cli->qp->state == IBV_QPS_RTS, "a UD QP of rdma_create_qp is in RTS");
	memset(&cp, 0, sizeof cp);
	cp.private_data = "ud-hello";
	cp.private_data_len = 9;
	CHECK(rdma_connect(cli, &cp) == 0, "connect UD");
	ev = expect(RDMA_CM_EVENT_CONNECT_REQUEST);
	CHECK(ev->listen_id == l && strcmp(ev->param.ud.private_data, "ud-hello") == 0, "UD request with private data");
	srv = ev->id;
	rdma_ack_cm_event(ev);
	qp(srv, IBV_QPT_UD);
	memset(&cp, 0, sizeof cp);
	cp.qp_num = srv->qp->qp_num;
	CHECK(rdma_accept(srv, &cp) == 0, "accept UD");
	ev = expect(RDMA_CM_EVENT_ESTABLISHED);
	CHECK(ev->id == cli, "ESTABLISHED on the active id");
	CHECK(ev->param.ud.qp_num == srv->qp->qp_num, "ud.qp_num %u, want %u", ev->param.ud.qp_num, srv->qp->qp_num);
	CHECK(ev->param.ud.qkey == 0x01234567, "ud.qkey %#x", ev->param.ud.qkey);
	CHECK(ev->param.ud.ah_attr.is_global == 1, "a RoCE AH is global");
	{
		struct ibv_ah *ah = ibv_create_ah(cli->pd, &ev->param.ud.ah_attr);
		CHECK(ah != NULL, "ibv_create_ah from ud.ah_attr");
		ibv_destroy_ah(ah);
	}
	rdma_ack_cm_event(ev);
	memset(&qa, 0, sizeof qa);
	CHECK(ibv_query_qp(srv->qp, &qa, IBV_QP_QKEY, &qia) == 0 && qa.qkey == 0x01234567, "the passive QP's Q_Key");
	rdma_destroy_qp(srv);
	rdma_destroy_id(srv);
	rdma_destroy_qp(cli);
	rdma_destroy_id(cli);
	printf("ok ud-accept\n");

	/* The application rejects a UD request: UNREACHABLE, status 2 (the SIDR_REP's "rejected"),
	 * as the kernel's cma_sidr_rep_handler reports it. */
	cli = resolved(ip, port + 1, RDMA_PS_UDP, NULL);
	qp(cli, IBV_QPT_UD);
	CHECK(rdma_connect(cli, NULL) == 0, "connect UD");
	ev = expect(RDMA_CM_EVENT_CONNECT_REQUEST);
	srv = ev->id;
	CHECK(rdma_reject(srv, NULL, 0) == 0, "reject UD");
	rdma_ack_cm_event(ev);
	ev = expect(RDMA_CM_EVENT_UNREACHABLE);
	CHECK(ev->id == cli && ev->status == 2, "UNREACHABLE status %d, want 2", ev->status);
	rdma_ack_cm_event(ev);
	rdma_destroy_id(srv);
	rdma_destroy_qp(cli);
	rdma_destroy_id(cli);
	/* Nobody listens on the port: SIDR status 1, UNREACHABLE with status 1. */
	cli = resolved(ip, port + 2, RDMA_PS_UDP, NULL);
	qp(cli, IBV_QPT_UD);
	CHECK(rdma_connect(cli, NULL) == 0, "connect UD");
	ev = expect(RDMA_CM_EVENT_UNREACHABLE);
	CHECK(ev->status == 1, "UNREACHABLE status %d, want 1", ev->status);
	rdma_ack_cm_event(ev);
	rdma_destroy_qp(cli);
	rdma_destroy_id(cli);
	rdma_destroy_id(l);
	printf("ok ud-unreachable\n");

	rdma_destroy_event_channel(ch);
	printf("done\n");
	return 0;
}
