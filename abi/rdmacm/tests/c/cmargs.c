/* rdma_cm argument handling as the kernel and librdmacm do it (issue 25 item 4), each answer
 * checked against what Linux 6.1 + rdma-core 44 give (tests/conformance/probe.c compares
 * them with kernel rxe):
 *   - rdma_resolve_addr to port 0 resolves (the port matters only at connect);
 *   - rdma_bind_addr on a port another id holds: EADDRNOTAVAIL with a wildcard on either side,
 *     EADDRINUSE for the same address;
 *   - rdma_getaddrinfo(NULL, NULL, hints) copies flags, family, QP type, port space and the
 *     addresses from the hints (libfabric's verbs provider, both sides); a resolver failure is
 *     its EAI_* code;
 *   - rdma_listen on an unbound id binds the wildcard; every port space makes an id;
 *   - rdma_set_option with a NULL value: EFAULT; rdma_notify on an id without a connection:
 *     EINVAL; rdma_init_qp_attr before a connection: P_Key, port and no remote access.
 * Built against the installed headers and run on softroce's libraries (tests/events.rs).
 *   cmargs <ip> <port>     prints "ok <what>" per check; exits non-zero at the first failure */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>

#include "cm.h"

int main(int argc, char **argv)
{
	const char *ip = argv[1];
	int port = atoi(argv[2]);
	struct rdma_cm_id *id, *id2;
	struct rdma_cm_event *ev;
	struct rdma_addrinfo h, *res;
	struct sockaddr_in a, any, s4;
	struct ibv_qp_attr qa;
	int mask, r, ps[] = { RDMA_PS_TCP, RDMA_PS_UDP, RDMA_PS_IB, RDMA_PS_IPOIB };

	CHECK(argc == 3, "usage: cmargs <ip> <port>");
	CHECK((ch = rdma_create_event_channel()) != NULL, "create_event_channel");

	/* resolve to port 0 */
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "create_id");
	a = sa(ip, 0);
	CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&a, 2000) == 0, "resolve_addr to port 0");
	ev = expect(RDMA_CM_EVENT_ADDR_RESOLVED);
	rdma_ack_cm_event(ev);
	CHECK(rdma_get_dst_port(id) == 0 && rdma_get_src_port(id) != 0, "ports after resolving");
	CHECK(rdma_resolve_route(id, 2000) == 0, "resolve_route");
	rdma_ack_cm_event(expect(RDMA_CM_EVENT_ROUTE_RESOLVED));
	memset(&qa, 0, sizeof qa);
	qa.qp_state = IBV_QPS_RTR;
	CHECK(rdma_init_qp_attr(id, &qa, &mask) == 0, "init_qp_attr before a connection");
	CHECK(mask == (IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_PORT) && qa.qp_state == IBV_QPS_RTR &&
		      qa.qp_access_flags == 0 && qa.port_num == 1,
	      "init_qp_attr before a connection: mask 0x%x state %d access 0x%x", mask, qa.qp_state, qa.qp_access_flags);
	CHECK(rdma_notify(id, IBV_EVENT_COMM_EST) == -1 && errno == EINVAL, "notify without a connection");
	rdma_destroy_id(id);
	printf("ok resolve-port-0\n");

	/* bind conflicts */
	any = sa("0.0.0.0", port);
	s4 = sa(ip, port);
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "create_id");
	CHECK(rdma_bind_addr(id, (struct sockaddr *)&any) == 0, "bind the wildcard");
	CHECK(rdma_create_id(ch, &id2, NULL, RDMA_PS_TCP) == 0, "create_id");
	r = rdma_bind_addr(id2, (struct sockaddr *)&s4);
	CHECK(r == -1 && errno == EADDRNOTAVAIL, "an address on a wildcard's port: EADDRNOTAVAIL (got %d)", r);
	rdma_destroy_id(id);
	CHECK(rdma_bind_addr(id2, (struct sockaddr *)&s4) == 0, "bind the address");
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "create_id");
	r = rdma_bind_addr(id, (struct sockaddr *)&s4);
	CHECK(r == -1 && errno == EADDRINUSE, "the same address: EADDRINUSE (got %d)", r);
	r = rdma_bind_addr(id, (struct sockaddr *)&any);
	CHECK(r == -1 && errno == EADDRNOTAVAIL, "the wildcard on an address's port: EADDRNOTAVAIL (got %d)", r);
	a.sin_family = AF_UNSPEC;
	CHECK(rdma_bind_addr(id, (struct sockaddr *)&a) == -1 && errno == EINVAL, "an AF_UNSPEC address: EINVAL");
	rdma_destroy_id(id);
	rdma_destroy_id(id2);
	printf("ok bind-conflicts\n");

	/* rdma_getaddrinfo as libfabric's verbs provider calls it: no node, no service */
	memset(&h, 0, sizeof h);
	h.ai_flags = RAI_FAMILY;
	h.ai_family = AF_INET;
	h.ai_qp_type = IBV_QPT_RC;
	h.ai_port_space = RDMA_PS_TCP;
	h.ai_dst_addr = (struct sockaddr *)&s4;
	h.ai_dst_len = sizeof s4;
	CHECK(rdma_getaddrinfo(NULL, NULL, &h, &res) == 0, "getaddrinfo(NULL, NULL, client hints)");
	CHECK(res->ai_flags == RAI_FAMILY && res->ai_family == AF_INET && res->ai_qp_type == IBV_QPT_RC &&
		      res->ai_port_space == RDMA_PS_TCP && res->ai_dst_len == sizeof s4 && res->ai_dst_addr &&
		      !memcmp(res->ai_dst_addr, &s4, sizeof s4) && !res->ai_src_addr && !res->ai_next,
	      "client hints copied");
	rdma_freeaddrinfo(res);
	h.ai_flags = RAI_FAMILY | RAI_PASSIVE;
	h.ai_dst_addr = NULL;
	h.ai_dst_len = 0;
	h.ai_src_addr = (struct sockaddr *)&s4;
	h.ai_src_len = sizeof s4;
	CHECK(rdma_getaddrinfo(NULL, NULL, &h, &res) == 0, "getaddrinfo(NULL, NULL, server hints)");
	CHECK(res->ai_flags == (RAI_FAMILY | RAI_PASSIVE) && res->ai_src_len == sizeof s4 && !memcmp(res->ai_src_addr, &s4, sizeof s4) &&
		      !res->ai_dst_addr,
	      "server hints copied");
	rdma_freeaddrinfo(res);
	CHECK(rdma_getaddrinfo(NULL, NULL, NULL, &res) == -1 && errno == EINVAL, "getaddrinfo without anything: EINVAL");
	memset(&h, 0, sizeof h);
	h.ai_flags = RAI_NUMERICHOST;
	r = rdma_getaddrinfo("localhost", "7471", &h, &res);
	CHECK(r == EAI_NONAME, "a name with RAI_NUMERICHOST: EAI_NONAME (got %d)", r);
	CHECK(rdma_getaddrinfo(ip, "7471", &h, &res) == 0 && res->ai_flags == 0 && res->ai_dst_addr && !res->ai_src_addr,
	      "a numeric host: the destination, no flags");
	rdma_freeaddrinfo(res);
	printf("ok getaddrinfo-hints\n");

	/* every port space, listen on an unbound id, a NULL option value */
	for (int i = 0; i < 4; i++) {
		CHECK(rdma_create_id(ch, &id, NULL, ps[i]) == 0, "create_id in port space 0x%x", ps[i]);
		rdma_destroy_id(id);
	}
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "create_id");
	CHECK(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, NULL, 1) == -1 && errno == EFAULT, "a NULL option: EFAULT");
	a = sa(ip, port + 1);
	CHECK(rdma_bind_addr(id, (struct sockaddr *)&a) == 0, "bind");
	rdma_destroy_id(id);
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "create_id");
	CHECK(rdma_listen(id, 1) == 0, "listen on an unbound id");
	CHECK(rdma_get_local_addr(id)->sa_family == AF_INET && rdma_get_src_port(id) != 0, "bound to the wildcard");
	rdma_destroy_id(id);
	printf("ok port-spaces-listen-options\n");
	rdma_destroy_event_channel(ch);
	return 0;
}
