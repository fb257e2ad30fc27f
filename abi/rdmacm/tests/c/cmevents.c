/* librdmacm event semantics, built against the installed <rdma/rdma_cma.h> and run on
 * softroce's libraries (abi/rdmacm/tests/events.rs). One process, one device: a listener and
 * clients on the address given as argv[1], port argv[2].
 * Prints one "ok <what>" line per check; exits non-zero at the first failure. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>

#include "cm.h"

/* A client id with a QP, resolved and connecting to ip:port. */
static struct rdma_cm_id *client(const char *ip, int port, const char *pdata)
{
	struct rdma_cm_id *id;
	struct rdma_cm_event *ev;
	struct sockaddr_in dst = sa(ip, port);
	struct rdma_conn_param cp;

	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "create_id");
	CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) == 0, "resolve_addr");
	ev = expect(RDMA_CM_EVENT_ADDR_RESOLVED);
	CHECK(ev->id == id && id->verbs != NULL, "ADDR_RESOLVED names the id, which has a device");
	rdma_ack_cm_event(ev);
	CHECK(rdma_resolve_route(id, 2000) == 0, "resolve_route");
	rdma_ack_cm_event(expect(RDMA_CM_EVENT_ROUTE_RESOLVED));
	qp(id, IBV_QPT_RC);
	CHECK(id->qp && id->pd && id->send_cq && id->recv_cq && id->send_cq_channel && id->recv_cq_channel,
	      "rdma_create_qp fills qp, pd, CQs and their channels");
	CHECK(id->send_cq->cq_context == id, "the CQs' context is the id (rdma_get_send_comp asserts it)");
	memset(&cp, 0, sizeof cp);
	cp.private_data = pdata;
	cp.private_data_len = pdata ? strlen(pdata) + 1 : 0;
	cp.responder_resources = cp.initiator_depth = 1;
	cp.retry_count = 7;
	cp.rnr_retry_count = 7;
	CHECK(rdma_connect(id, &cp) == 0, "connect");
	return id;
}

struct destroyer { struct rdma_cm_id *id; volatile int done; };

static void *destroy_thread(void *arg)
{
	struct destroyer *d = arg;
	rdma_destroy_id(d->id);
	d->done = 1;
	return NULL;
}

/* Blocks in rdma_get_cm_event on a channel another thread destroys: must never return. */
static void *blocked_getter(void *arg)
{
	struct rdma_cm_event *e;
	int r = rdma_get_cm_event((struct rdma_event_channel *)arg, &e);
	printf("FAIL a waiter on a destroyed channel returned %d (errno %d %s)\n", r, errno, strerror(errno));
	fflush(stdout);
	_exit(1);
	return NULL;
}

/* Zeroes as large as any object of the library's: "a channel not ours". */
static uint64_t junk[512];

struct migrator { struct rdma_cm_id *id; struct rdma_event_channel *to; volatile int done; };

static void *migrate_thread(void *arg)
{
	struct migrator *m = arg;
	CHECK(rdma_migrate_id(m->id, m->to) == 0, "migrate (thread)");
	m->done = 1;
	return NULL;
}

/* Waits until `c` holds an event (without taking it). */
static void wait_readable(struct rdma_event_channel *c)
{
	struct pollfd p = { .fd = c->fd, .events = POLLIN };
	CHECK(poll(&p, 1, 10000) == 1, "an event on the channel");
}

/* rdma_migrate_id between two channels `a` and `b`: a listener's pending request moves with
 * it; migrating waits for the id's taken, unacknowledged events; a new id moved to `a` gets
 * its ESTABLISHED there; a client's queued answer moves with it; NULL makes an id synchronous. */
static void migrate_checks(const char *ip, int port)
{
	struct rdma_event_channel *a = rdma_create_event_channel(), *b = rdma_create_event_channel(), *orig = ch;
	struct rdma_cm_id *l, *cli, *srv;
	struct rdma_cm_event *ev;
	struct sockaddr_in me = sa(ip, port);
	struct migrator m;
	struct pollfd p;
	pthread_t t;

	CHECK(a && b, "two channels");
	ch = a;
	CHECK(rdma_create_id(a, &l, NULL, RDMA_PS_TCP) == 0, "create listen id");
	CHECK(rdma_bind_addr(l, (struct sockaddr *)&me) == 0, "bind");
	CHECK(rdma_listen(l, 4) == 0, "listen");
	CHECK(rdma_migrate_id(l, (struct rdma_event_channel *)junk) == -1 && errno == EINVAL, "a channel not ours: EINVAL");
	cli = client(ip, port, NULL);
	wait_readable(a);
	CHECK(rdma_migrate_id(l, b) == 0 && l->channel == b, "migrate the listener to b");
	p.fd = a->fd; p.events = POLLIN; p.revents = 0;
	CHECK(poll(&p, 1, 0) == 0, "the request left a");
	ch = b;
	ev = expect(RDMA_CM_EVENT_CONNECT_REQUEST);
	srv = ev->id;
	CHECK(ev->listen_id == l && srv->channel == b, "the request, on b");
	/* Moving the listener back waits for the request event's acknowledgement. */
	m.id = l; m.to = a; m.done = 0;
	CHECK(pthread_create(&t, NULL, migrate_thread, &m) == 0, "thread");
	usleep(300000);
	CHECK(!m.done, "rdma_migrate_id returned with an event unacknowledged");
	rdma_ack_cm_event(ev);
	pthread_join(t, NULL);
	CHECK(m.done && l->channel == a, "migrate returned after the ack");
	CHECK(rdma_migrate_id(srv, a) == 0 && srv->channel == a, "migrate the new id to a");
	qp(srv, IBV_QPT_RC);
	CHECK(rdma_accept(srv, NULL) == 0, "accept");
	/* The client's answer waits on a (it was created there): move the client to b. Its
	 * ESTABLISHED (which sends the RTU) comes from b, then the server's from a. */
	wait_readable(a);
	CHECK(rdma_migrate_id(cli, b) == 0 && cli->channel == b, "migrate the client to b");
	ev = expect(RDMA_CM_EVENT_ESTABLISHED);
	CHECK(ev->id == cli, "the client's ESTABLISHED on b");
	rdma_ack_cm_event(ev);
	ch = a;
	ev = expect(RDMA_CM_EVENT_ESTABLISHED);
	CHECK(ev->id == srv, "the server's ESTABLISHED on a");
	rdma_ack_cm_event(ev);
	/* synchronous, with a channel of its own (librdmacm makes one) */
	CHECK(rdma_migrate_id(srv, NULL) == 0 && srv->channel != NULL && srv->channel != a && srv->channel != b,
	      "migrate to no channel: synchronous");
	CHECK(rdma_disconnect(cli) == 0, "disconnect");
	CHECK(rdma_disconnect(srv) == 0, "passive disconnect");
	ch = b;
	ev = expect(RDMA_CM_EVENT_DISCONNECTED);
	CHECK(ev->id == cli, "the client's DISCONNECTED on b");
	rdma_ack_cm_event(ev);
	p.fd = a->fd; p.revents = 0;
	CHECK(poll(&p, 1, 200) == 0, "nothing more on a");
	rdma_destroy_qp(srv);
	rdma_destroy_id(srv);
	rdma_destroy_qp(cli);
	rdma_destroy_id(cli);
	rdma_destroy_id(l);
	rdma_destroy_event_channel(a);
	rdma_destroy_event_channel(b);
	ch = orig;
}

int main(int argc, char **argv)
{
	const char *ip = argv[1];
	int port = atoi(argv[2]);
	struct rdma_cm_id *listen, *cli, *srv;
	struct rdma_cm_event *ev, *held;
	struct sockaddr_in me = sa(ip, port);
	struct ibv_qp_init_attr qa;
	struct destroyer d;
	pthread_t t;
	int fl;

	CHECK(argc == 3, "usage: cmevents <ip> <port>");
	CHECK((ch = rdma_create_event_channel()) != NULL, "create_event_channel");

	/* Non-blocking channel: EAGAIN when empty. */
	fl = fcntl(ch->fd, F_GETFL);
	CHECK(fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK) == 0, "O_NONBLOCK");
	CHECK(rdma_get_cm_event(ch, &ev) == -1 && errno == EAGAIN, "empty non-blocking channel gives EAGAIN");
	CHECK(fcntl(ch->fd, F_SETFL, fl) == 0, "blocking again");
	printf("ok nonblocking\n");

	CHECK(rdma_create_id(ch, &listen, NULL, RDMA_PS_TCP) == 0, "create listen id");
	CHECK(rdma_bind_addr(listen, (struct sockaddr *)&me) == 0, "bind");
	CHECK(ntohs(rdma_get_src_port(listen)) == port, "src port");
	CHECK(rdma_listen(listen, 4) == 0, "listen");

	/* Nobody listens on port + 1: REJECTED, status 8 (invalid service ID). */
	cli = client(ip, port + 1, NULL);
	ev = expect(RDMA_CM_EVENT_REJECTED);
	CHECK(ev->status == 8 && ev->id == cli, "REJECTED status %d", ev->status);
	rdma_ack_cm_event(ev);
	rdma_destroy_qp(cli);
	CHECK(rdma_destroy_id(cli) == 0, "destroy rejected id");
	printf("ok rejected-no-listener\n");

	/* The application rejects: REJECTED, status 28, with its private data. */
	cli = client(ip, port, "hello");
	ev = expect(RDMA_CM_EVENT_CONNECT_REQUEST);
	CHECK(ev->listen_id == listen && ev->id != listen && ev->id->verbs != NULL, "CONNECT_REQUEST carries a new id");
	CHECK(ev->param.conn.private_data_len >= 6 && strcmp(ev->param.conn.private_data, "hello") == 0, "request private data");
	srv = ev->id;
	CHECK(rdma_reject(srv, "nope", 5) == 0, "reject");
	rdma_ack_cm_event(ev);
	ev = expect(RDMA_CM_EVENT_REJECTED);
	CHECK(ev->status == 28 && strcmp(ev->param.conn.private_data, "nope") == 0, "REJECTED status %d", ev->status);
	rdma_ack_cm_event(ev);
	rdma_destroy_id(srv);
	rdma_destroy_qp(cli);
	rdma_destroy_id(cli);
	printf("ok rejected-by-application\n");

	/* A connection, then DISCONNECTED on both sides after one disconnects. */
	cli = client(ip, port, NULL);
	ev = expect(RDMA_CM_EVENT_CONNECT_REQUEST);
	srv = ev->id;
	rdma_ack_cm_event(ev);
	qp(srv, IBV_QPT_RC);
	CHECK(rdma_accept(srv, NULL) == 0, "accept");
	for (int n = 0; n < 2; n++) {
		ev = expect(RDMA_CM_EVENT_ESTABLISHED);
		CHECK(ev->id == cli || ev->id == srv, "ESTABLISHED id");
		rdma_ack_cm_event(ev);
	}
	CHECK(cli->qp->state == IBV_QPS_RTS, "the client QP is in RTS (%d)", cli->qp->state);
	CHECK(ntohs(rdma_get_dst_port(cli)) == port, "dst port");
	printf("ok established\n");
	CHECK(rdma_disconnect(cli) == 0, "disconnect");
	held = NULL;
	for (int n = 0; n < 2; n++) {
		ev = expect(RDMA_CM_EVENT_DISCONNECTED);
		if (ev->id == srv) {
			/* The passive side answers the DREQ (its DREP gives the active side
			 * DISCONNECTED), as rping's server does. */
			held = ev;
			CHECK(rdma_disconnect(srv) == 0, "passive disconnect");
		} else
			rdma_ack_cm_event(ev);
	}
	CHECK(held, "the passive side got DISCONNECTED");
	printf("ok disconnected-both-sides\n");

	/* rdma_destroy_id waits for the id's unacknowledged event. */
	rdma_destroy_qp(srv);
	d.id = srv;
	d.done = 0;
	pthread_create(&t, NULL, destroy_thread, &d);
	usleep(300000);
	CHECK(!d.done, "rdma_destroy_id returned with an event unacknowledged");
	rdma_ack_cm_event(held);
	pthread_join(t, NULL);
	CHECK(d.done, "destroy returned after the ack");
	printf("ok destroy-waits-for-ack\n");

	rdma_destroy_qp(cli);
	rdma_destroy_id(cli);
	rdma_destroy_id(listen);

	migrate_checks(ip, port + 3);
	printf("ok migrate\n");

	/* Synchronous id: connect to a port nobody listens on fails with ECONNREFUSED. */
	{
		struct rdma_addrinfo hints, *res;
		struct rdma_cm_id *sid;
		char p[16];
		memset(&hints, 0, sizeof hints);
		hints.ai_port_space = RDMA_PS_TCP;
		snprintf(p, sizeof p, "%d", port + 2);
		CHECK(rdma_getaddrinfo(ip, p, &hints, &res) == 0, "getaddrinfo");
		memset(&qa, 0, sizeof qa);
		qa.cap.max_send_wr = qa.cap.max_recv_wr = 1;
		qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
		CHECK(rdma_create_ep(&sid, res, NULL, &qa) == 0, "create_ep");
		CHECK(rdma_connect(sid, NULL) == -1 && errno == ECONNREFUSED, "sync connect refused");
		rdma_destroy_ep(sid);
		rdma_freeaddrinfo(res);
	}
	printf("ok sync-refused\n");

	/* Host names, passive lookups, the device list and event names. */
	{
		struct rdma_addrinfo hints, *res;
		struct ibv_context **devs;
		int n = -1;
		memset(&hints, 0, sizeof hints);
		hints.ai_flags = RAI_PASSIVE;
		hints.ai_family = AF_INET;
		CHECK(rdma_getaddrinfo("localhost", "7471", &hints, &res) == 0, "getaddrinfo localhost");
		CHECK(res->ai_src_addr && !res->ai_dst_addr && res->ai_port_space == RDMA_PS_TCP &&
		      res->ai_qp_type == IBV_QPT_RC, "passive: a source address, TCP, RC");
		CHECK(((struct sockaddr_in *)res->ai_src_addr)->sin_addr.s_addr == htonl(INADDR_LOOPBACK) &&
		      ntohs(((struct sockaddr_in *)res->ai_src_addr)->sin_port) == 7471, "localhost:7471");
		rdma_freeaddrinfo(res);
		CHECK(rdma_getaddrinfo(NULL, NULL, NULL, &res) == -1 && errno == EINVAL, "no node, no service");
		devs = rdma_get_devices(&n);
		CHECK(devs && n == 1 && devs[0] && !devs[1], "one device (%d)", n);
		CHECK(strcmp(ibv_get_device_name(devs[0]->device), "softroce0") == 0, "softroce0");
		rdma_free_devices(devs);
		CHECK(strcmp(rdma_event_str(RDMA_CM_EVENT_TIMEWAIT_EXIT), "RDMA_CM_EVENT_TIMEWAIT_EXIT") == 0, "event_str");
	}
	printf("ok addrinfo-devices\n");
	/* A thread blocked in rdma_get_cm_event while another thread destroys the channel (rping's
	 * server at exit) stays blocked, as in the kernel; the process then exits normally. */
	{
		struct rdma_event_channel *c2 = rdma_create_event_channel();
		pthread_t t;
		CHECK(c2, "create a second channel");
		CHECK(pthread_create(&t, NULL, blocked_getter, c2) == 0, "thread");
		usleep(100000);
		rdma_destroy_event_channel(c2);
		usleep(300000);
	}
	printf("ok destroyed-under-a-waiter\n");
	rdma_destroy_event_channel(ch);
	return 0;
}
