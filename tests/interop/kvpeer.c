/*
 * kvpeer - the key-value store protocol of the RDMA course lab (examples/kvstore.rs documents
 * it), client and server, over librdmacm's synchronous API: rdma_getaddrinfo, rdma_create_ep,
 * rdma_listen / rdma_get_request / rdma_accept, rdma_connect, rdma_reg_msgs, rdma_post_send /
 * rdma_post_recv / rdma_post_read, rdma_get_send_comp / rdma_get_recv_comp, rdma_disconnect.
 * Written for softroce's tests: it runs on kernel rxe in the interop rig and, on the host,
 * through softroce's drop-in librdmacm.so.1 + libibverbs.so.1.
 *
 *   kvpeer -s [-a ADDR] [-p PORT] [-n CLIENTS] [-i] [-v]     server (-n 0: serve forever; 1)
 *   kvpeer [-b ADDR] [-p PORT] [-B N] [-i] SERVER [set K V | get K | hostile]...    client
 *
 * The client prints the same lines as `kvstore client`: "set K V: ok", "get K: rpc V read V",
 * "bench set|rpc-get|read-get N ops in S s: R ops/s, mean latency L us", "disconnected".
 * Exit 0 on success, 1 on any failure, 3 if an RPC get and a READ get disagreed.
 */
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#define NUM_KEYS (32 * 1024)
#define SLOTS 16

enum { T_DISCONNECT, T_SET, T_SET_RESP, T_QUERY, T_QUERY_RESP, T_DB_INFO };

/* 24 bytes, host (little-endian) byte order, the union at offset 8. */
struct kvmsg {
	uint32_t type;
	uint32_t pad;
	union {
		struct {
			int32_t key;
			int32_t value;
		} kv;
		struct {
			uint32_t rkey;
			uint32_t num_keys;
			uint64_t address;
		} db;
	} u;
};
_Static_assert(sizeof(struct kvmsg) == 24, "message size");

static const char *port = "7471";
static int send_flags;
static int verbose;

static int32_t table[NUM_KEYS];

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* ---------------------------------------------------------------------------------------- */
/* server */

static struct kvmsg srecv[SLOTS], ssend[SLOTS];

/* Serves one connected id; returns a description of how it ended. */
static const char *serve(struct rdma_cm_id *id, struct ibv_mr *rmr, struct ibv_mr *smr,
			 struct ibv_mr *tmr, long *sets, long *queries, long *invalid)
{
	struct ibv_wc wc;
	int ret;

	for (;;) {
		ret = rdma_get_recv_comp(id, &wc);
		if (ret <= 0)
			return "rdma_get_recv_comp failed";
		if (wc.status != IBV_WC_SUCCESS)
			return wc.status == IBV_WC_WR_FLUSH_ERR ? "connection lost (flushed)" : "receive error";
		if (wc.wr_id >= SLOTS)
			return "bad wr_id";
		if (wc.byte_len != sizeof(struct kvmsg))
			return "hostile: wrong message length";
		struct kvmsg *m = &srecv[wc.wr_id], *r = &ssend[wc.wr_id];
		*r = *m;
		int32_t key = m->u.kv.key;
		switch (m->type) {
		case T_DISCONNECT:
			return "it disconnected";
		case T_SET:
			++*sets;
			r->type = T_SET_RESP;
			if (key < 0 || key >= NUM_KEYS) {
				++*invalid;
				printf("Invalid key: %d\n", key);
			} else {
				table[key] = m->u.kv.value;
			}
			break;
		case T_QUERY:
			++*queries;
			r->type = T_QUERY_RESP;
			if (key < 0 || key >= NUM_KEYS) {
				++*invalid;
				printf("Invalid key: %d\n", key);
				r->u.kv.value = -1;
			} else {
				r->u.kv.value = table[key];
			}
			break;
		case T_DB_INFO:
			r->u.db.rkey = tmr->rkey;
			r->u.db.num_keys = NUM_KEYS;
			r->u.db.address = (uintptr_t)table;
			break;
		default:
			return "hostile: bad message type";
		}
		if (verbose)
			printf("request type %u key %d -> type %u value %d\n", m->type, key, r->type, r->u.kv.value);
		if (rdma_post_recv(id, (void *)(uintptr_t)wc.wr_id, m, sizeof(*m), rmr))
			return "rdma_post_recv failed";
		if (rdma_post_send(id, NULL, r, sizeof(*r), smr, send_flags))
			return "rdma_post_send failed";
		ret = rdma_get_send_comp(id, &wc);
		if (ret <= 0 || wc.status != IBV_WC_SUCCESS)
			return "send failed";
	}
}

static int server(const char *addr, long clients)
{
	struct rdma_addrinfo hints, *res;
	struct ibv_qp_init_attr attr;
	struct rdma_cm_id *listen_id, *id;
	long served = 0;
	int ret, i;

	memset(&hints, 0, sizeof hints);
	hints.ai_flags = RAI_PASSIVE;
	hints.ai_port_space = RDMA_PS_TCP;
	ret = rdma_getaddrinfo(addr, port, &hints, &res);
	if (ret) {
		perror("rdma_getaddrinfo");
		return 1;
	}
	memset(&attr, 0, sizeof attr);
	attr.cap.max_send_wr = attr.cap.max_recv_wr = SLOTS;
	attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
	attr.cap.max_inline_data = sizeof(struct kvmsg);
	attr.sq_sig_all = 1;
	if (rdma_create_ep(&listen_id, res, NULL, &attr)) {
		perror("rdma_create_ep");
		return 1;
	}
	if (rdma_listen(listen_id, 0)) {
		perror("rdma_listen");
		return 1;
	}
	printf("kvpeer server: listening on %s:%s\n", addr ? addr : "*", port);
	fflush(stdout);
	while (clients == 0 || served < clients) {
		long sets = 0, queries = 0, invalid = 0;
		struct ibv_mr *rmr = NULL, *smr = NULL, *tmr = NULL;
		const char *how;

		if (rdma_get_request(listen_id, &id)) {
			perror("rdma_get_request");
			return 1;
		}
		served++;
		rmr = rdma_reg_msgs(id, srecv, sizeof srecv);
		smr = rdma_reg_msgs(id, ssend, sizeof ssend);
		tmr = ibv_reg_mr(id->pd, table, sizeof table,
				 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE);
		if (!rmr || !smr || !tmr) {
			perror("register");
			return 1;
		}
		for (i = 0; i < SLOTS; i++)
			if (rdma_post_recv(id, (void *)(uintptr_t)i, &srecv[i], sizeof srecv[i], rmr)) {
				perror("rdma_post_recv");
				return 1;
			}
		if (rdma_accept(id, NULL)) {
			perror("rdma_accept");
			how = "accept failed";
		} else {
			how = serve(id, rmr, smr, tmr, &sets, &queries, &invalid);
			rdma_disconnect(id);
		}
		printf("client %ld: %ld SETs, %ld QUERYs, %ld invalid keys; %s\n", served, sets, queries,
		       invalid, how);
		fflush(stdout);
		rdma_dereg_mr(tmr);
		rdma_dereg_mr(smr);
		rdma_dereg_mr(rmr);
		rdma_destroy_ep(id);
	}
	rdma_destroy_ep(listen_id);
	rdma_freeaddrinfo(res);
	printf("kvpeer server: %ld clients served\n", served);
	return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* client */

static struct rdma_cm_id *cid;
static struct ibv_mr *crmr, *csmr, *cvmr;
static struct kvmsg crecv, csend;
static int32_t readval;
static uint32_t db_rkey, db_keys;
static uint64_t db_addr;

static int send_msg(void)
{
	struct ibv_wc wc;

	if (rdma_post_send(cid, NULL, &csend, sizeof csend, csmr, send_flags)) {
		perror("rdma_post_send");
		return -1;
	}
	if (rdma_get_send_comp(cid, &wc) <= 0 || wc.status != IBV_WC_SUCCESS) {
		fprintf(stderr, "send failed\n");
		return -1;
	}
	return 0;
}

/* Sends csend, leaves the answer in crecv (and posts the receive again). */
static int rpc(void)
{
	struct ibv_wc wc;

	if (send_msg())
		return -1;
	if (rdma_get_recv_comp(cid, &wc) <= 0 || wc.status != IBV_WC_SUCCESS) {
		fprintf(stderr, "receive failed (status %d)\n", wc.status);
		return -1;
	}
	if (wc.byte_len != sizeof crecv) {
		fprintf(stderr, "an answer of %u bytes\n", wc.byte_len);
		return -1;
	}
	struct kvmsg got = crecv;
	if (rdma_post_recv(cid, NULL, &crecv, sizeof crecv, crmr)) {
		perror("rdma_post_recv");
		return -1;
	}
	crecv = got;
	return 0;
}

static int kv_set(int32_t key, int32_t value)
{
	csend = (struct kvmsg){ .type = T_SET, .u.kv = { key, value } };
	if (rpc())
		return -1;
	if (crecv.type != T_SET_RESP || crecv.u.kv.key != key || crecv.u.kv.value != value) {
		fprintf(stderr, "SET %d %d answered with type %u key %d value %d\n", key, value, crecv.type,
			crecv.u.kv.key, crecv.u.kv.value);
		return -1;
	}
	return 0;
}

static int kv_query(int32_t key, int32_t *value)
{
	csend = (struct kvmsg){ .type = T_QUERY, .u.kv = { key, 0 } };
	if (rpc())
		return -1;
	if (crecv.type != T_QUERY_RESP || crecv.u.kv.key != key) {
		fprintf(stderr, "QUERY %d answered with type %u key %d\n", key, crecv.type, crecv.u.kv.key);
		return -1;
	}
	*value = crecv.u.kv.value;
	return 0;
}

/* A 4-byte RDMA READ at address + 4*key; -1 for a key outside the table (not read). */
static int kv_read(int32_t key, int32_t *value)
{
	struct ibv_wc wc;

	if (key < 0 || (uint32_t)key >= db_keys) {
		*value = -1;
		return 0;
	}
	if (rdma_post_read(cid, NULL, &readval, sizeof readval, cvmr, IBV_SEND_SIGNALED,
			   db_addr + 4 * (uint64_t)key, db_rkey)) {
		perror("rdma_post_read");
		return -1;
	}
	if (rdma_get_send_comp(cid, &wc) <= 0 || wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_RDMA_READ) {
		fprintf(stderr, "RDMA READ failed (status %d)\n", wc.status);
		return -1;
	}
	*value = readval;
	return 0;
}

static void report(const char *what, long n, double s)
{
	printf("bench %-9s %ld ops in %.3f s: %.0f ops/s, mean latency %.2f us\n", what, n, s, n / s,
	       s * 1e6 / n);
}

static int bench(long n)
{
	long keys = db_keys ? db_keys : 1, i;
	double t;
	int32_t v;

	t = now();
	for (i = 0; i < n; i++)
		if (kv_set(i % keys, (int32_t)i))
			return -1;
	report("set", n, now() - t);
	t = now();
	for (i = 0; i < n; i++) {
		long k = i % keys, want = (n - 1 - k) / keys * keys + k;
		if (kv_query(k, &v))
			return -1;
		if (v != want) {
			fprintf(stderr, "RPC get of key %ld: %d, expected %ld\n", k, v, want);
			return -1;
		}
	}
	report("rpc-get", n, now() - t);
	t = now();
	for (i = 0; i < n; i++) {
		long k = i % keys, want = (n - 1 - k) / keys * keys + k;
		if (kv_read(k, &v))
			return -1;
		if (v != want) {
			fprintf(stderr, "READ get of key %ld: %d, expected %ld\n", k, v, want);
			return -1;
		}
	}
	report("read-get", n, now() - t);
	return 0;
}

static int client(const char *srv, const char *bind, long nbench, int argc, char **argv)
{
	struct rdma_addrinfo hints, *res;
	struct ibv_qp_init_attr attr;
	int i, mismatch = 0;

	memset(&hints, 0, sizeof hints);
	hints.ai_port_space = RDMA_PS_TCP;
	if (bind) {
		struct rdma_addrinfo bh, *br;
		memset(&bh, 0, sizeof bh);
		bh.ai_flags = RAI_PASSIVE;
		bh.ai_port_space = RDMA_PS_TCP;
		if (rdma_getaddrinfo(bind, NULL, &bh, &br)) {
			perror("rdma_getaddrinfo (bind)");
			return 1;
		}
		hints.ai_src_addr = br->ai_src_addr;
		hints.ai_src_len = br->ai_src_len;
	}
	if (rdma_getaddrinfo(srv, port, &hints, &res)) {
		perror("rdma_getaddrinfo");
		return 1;
	}
	memset(&attr, 0, sizeof attr);
	attr.cap.max_send_wr = 2;
	attr.cap.max_recv_wr = 1;
	attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
	attr.cap.max_inline_data = sizeof(struct kvmsg);
	attr.sq_sig_all = 1;
	if (rdma_create_ep(&cid, res, NULL, &attr)) {
		perror("rdma_create_ep");
		return 1;
	}
	crmr = rdma_reg_msgs(cid, &crecv, sizeof crecv);
	csmr = rdma_reg_msgs(cid, &csend, sizeof csend);
	cvmr = rdma_reg_msgs(cid, &readval, sizeof readval);
	if (!crmr || !csmr || !cvmr) {
		perror("rdma_reg_msgs");
		return 1;
	}
	if (rdma_post_recv(cid, NULL, &crecv, sizeof crecv, crmr)) {
		perror("rdma_post_recv");
		return 1;
	}
	if (rdma_connect(cid, NULL)) {
		perror("rdma_connect");
		return 1;
	}
	csend = (struct kvmsg){ .type = T_DB_INFO };
	if (rpc())
		return 1;
	if (crecv.type != T_DB_INFO) {
		fprintf(stderr, "the database exchange was answered with type %u\n", crecv.type);
		return 1;
	}
	db_rkey = crecv.u.db.rkey;
	db_keys = crecv.u.db.num_keys;
	db_addr = crecv.u.db.address;
	printf("connected to %s:%s: table of %u keys at 0x%" PRIx64 ", rkey 0x%x\n", srv, port, db_keys,
	       db_addr, db_rkey);
	for (i = 0; i < argc; i++) {
		if (!strcmp(argv[i], "set") && i + 2 < argc) {
			int32_t k = atoi(argv[i + 1]), v = atoi(argv[i + 2]);
			if (kv_set(k, v))
				return 1;
			printf("set %d %d: ok\n", k, v);
			i += 2;
		} else if (!strcmp(argv[i], "get") && i + 1 < argc) {
			int32_t k = atoi(argv[i + 1]), rv, dv;
			if (kv_query(k, &rv) || kv_read(k, &dv))
				return 1;
			printf("get %d: rpc %d read %d\n", k, rv, dv);
			mismatch |= rv != dv;
			i += 1;
		} else if (!strcmp(argv[i], "hostile")) {
			/* A message of an unknown type: the server must drop the connection, not
			 * answer it and not crash (the server's output says what it did). No
			 * answer may arrive within 2 s; the receive is not necessarily flushed (a
			 * DREQ does not move our QP to the error state), so poll, do not block. */
			struct ibv_wc wc;
			double t;
			int n = 0;
			csend = (struct kvmsg){ .type = 77 };
			if (send_msg())
				return 1;
			for (t = now(); n == 0 && now() - t < 2.0; usleep(1000))
				n = ibv_poll_cq(cid->recv_cq, 1, &wc);
			if (n > 0 && wc.status == IBV_WC_SUCCESS) {
				fprintf(stderr, "hostile: the server answered a message of type 77\n");
				return 1;
			}
			printf("hostile: the server dropped the connection (%s)\n",
			       n > 0 ? ibv_wc_status_str(wc.status) : "no answer");
			rdma_disconnect(cid);
			rdma_destroy_ep(cid);
			return 0;
		} else {
			fprintf(stderr, "bad operation %s (set KEY VALUE, get KEY, hostile)\n", argv[i]);
			return 1;
		}
	}
	if (nbench > 0 && bench(nbench))
		return 1;
	csend = (struct kvmsg){ .type = T_DISCONNECT };
	if (send_msg())
		return 1;
	rdma_disconnect(cid);
	rdma_dereg_mr(cvmr);
	rdma_dereg_mr(csmr);
	rdma_dereg_mr(crmr);
	rdma_destroy_ep(cid);
	rdma_freeaddrinfo(res);
	printf("disconnected\n");
	return mismatch ? 3 : 0;
}

int main(int argc, char **argv)
{
	const char *addr = NULL, *bind = NULL;
	long clients = 1, nbench = 0;
	int op, is_server = 0;

	while ((op = getopt(argc, argv, "+sa:b:p:n:B:iv")) != -1) {
		switch (op) {
		case 's': is_server = 1; break;
		case 'a': addr = optarg; break;
		case 'b': bind = optarg; break;
		case 'p': port = optarg; break;
		case 'n': clients = atol(optarg); break;
		case 'B': nbench = atol(optarg); break;
		case 'i': send_flags = IBV_SEND_INLINE; break;
		case 'v': verbose = 1; break;
		default:
			fprintf(stderr, "usage: %s -s [-a ADDR] [-p PORT] [-n CLIENTS] [-i] [-v]\n"
					"       %s [-b ADDR] [-p PORT] [-B N] [-i] SERVER [set K V | get K]...\n",
				argv[0], argv[0]);
			return 1;
		}
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (is_server)
		return server(addr, clients);
	if (optind >= argc) {
		fprintf(stderr, "client: name the server\n");
		return 1;
	}
	return client(argv[optind], bind, nbench, argc - optind - 1, argv + optind + 1);
}
