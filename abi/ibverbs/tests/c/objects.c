/* The object verbs as applications use them, built against the installed headers (so the
 * header inlines ibv_post_send/ibv_poll_cq/ibv_req_notify_cq are the ones programs compile):
 * two RC QPs on one device connected to each other, a sender thread posting while the main
 * thread polls, an event thread blocked in ibv_get_cq_event, the errno of bad input, and a
 * thread cancelled while blocked in ibv_get_cq_event, a solicited-only arm. Prints "key value" lines.
 *
 * Usage: objects <device name>
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <endian.h>
#include <infiniband/verbs.h>
#include "rts.h"

#define N 2000
#define SZ 64

static struct ibv_qp *qa, *qb;
static struct ibv_mr *mra, *mrb;
static char *bufa, *bufb;

static void *sender(void *arg)
{
	(void)arg;
	for (int i = 0; i < N; i++) {
		struct ibv_sge sge = { .addr = (uintptr_t)bufa + (i % 16) * SZ, .length = SZ, .lkey = mra->lkey };
		/* The immediate numbers the messages: the receiver checks the order. */
		struct ibv_send_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND_WITH_IMM,
					  .send_flags = (i % 16 == 15) ? IBV_SEND_SIGNALED : 0,
					  .imm_data = htobe32(i) }, *bad;
		int r;
		while ((r = ibv_post_send(qa, &wr, &bad)) == ENOMEM)
			sched_yield();
		if (r) {
			printf("post_send_failed %d\n", r);
			exit(1);
		}
	}
	return NULL;
}

struct evarg {
	struct ibv_comp_channel *ch;
	struct ibv_cq *cq;
	int got;
};

static void *event_waiter(void *arg)
{
	struct evarg *e = arg;
	struct ibv_cq *cq;
	void *cqctx;
	if (ibv_get_cq_event(e->ch, &cq, &cqctx) == 0 && cq == e->cq && cqctx == (void *)e)
		e->got = 1;
	return NULL;
}

static int cleanup_ran;
static void on_cancel(void *arg) { (void)arg; cleanup_ran = 1; }
static void *blocked(void *arg)
{
	struct ibv_comp_channel *ch = arg;
	struct ibv_cq *cq;
	void *c;
	pthread_cleanup_push(on_cancel, NULL);
	ibv_get_cq_event(ch, &cq, &c);
	pthread_cleanup_pop(0);
	return NULL;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_device *dev = NULL;
	for (int i = 0; list && list[i]; i++)
		if (argc > 1 && !strcmp(ibv_get_device_name(list[i]), argv[1]))
			dev = list[i];
	if (!dev)
		return 2;
	struct ibv_context *ctx = ibv_open_device(dev);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	printf("pd %d\n", pd != NULL);

	/* Bad input: the errno of the real library. */
	bufa = aligned_alloc(4096, 16 * SZ);
	bufb = aligned_alloc(4096, 16 * SZ);
	errno = 0;
	struct ibv_mr *bad_mr = ibv_reg_mr(pd, bufa, 16 * SZ, IBV_ACCESS_REMOTE_WRITE);
	{ int ok_ = bad_mr != NULL; printf("reg_mr_remote_write_without_local %d errno %d\n", ok_, errno); }
	errno = 0;
	{ int ok_ = ibv_reg_mr(NULL, bufa, 16, 0) != NULL; printf("reg_mr_null_pd %d errno %d\n", ok_, errno); }
	errno = 0;
	{ int ok_ = ibv_create_cq(ctx, 0, NULL, NULL, 0) != NULL; printf("create_cq_zero %d errno %d\n", ok_, errno); }
	errno = 0;
	{ int ok_ = ibv_create_cq(ctx, 1 << 30, NULL, NULL, 0) != NULL; printf("create_cq_huge %d errno %d\n", ok_, errno); }
	errno = 0;
	{ int ok_ = ibv_create_cq(ctx, 16, NULL, NULL, 5) != NULL; printf("create_cq_vector %d errno %d\n", ok_, errno); }
	printf("dealloc_pd_null %d\n", ibv_dealloc_pd(NULL));
	printf("dereg_mr_null %d\n", ibv_dereg_mr(NULL));
	printf("destroy_cq_null %d\n", ibv_destroy_cq(NULL));
	printf("destroy_qp_null %d\n", ibv_destroy_qp(NULL));

	mra = ibv_reg_mr(pd, bufa, 16 * SZ, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	mrb = ibv_reg_mr(pd, bufb, 16 * SZ, IBV_ACCESS_LOCAL_WRITE);
	printf("mr %d %d addr_ok %d\n", mra != NULL, mrb != NULL, mra && mra->addr == bufa && mra->length == 16 * SZ);

	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	struct evarg ea = { .ch = ch };
	struct ibv_cq *scq = ibv_create_cq(ctx, 256, NULL, NULL, 0);
	struct ibv_cq *rcq = ibv_create_cq(ctx, 4096, &ea, ch, 0);
	ea.cq = rcq;
	printf("cq %d %d cqe_ok %d\n", scq != NULL, rcq != NULL, rcq && rcq->cqe >= 4096);
	errno = 0;
	printf("destroy_busy_channel %d\n", ibv_destroy_comp_channel(ch));

	struct ibv_qp_init_attr ia = { .send_cq = scq, .recv_cq = rcq, .qp_type = IBV_QPT_RC,
				       .cap = { .max_send_wr = 64, .max_recv_wr = 512, .max_send_sge = 1, .max_recv_sge = 1 } };
	errno = 0;
	struct ibv_qp_init_attr big = ia;
	big.cap.max_send_wr = 1 << 30;
	{ int ok_ = ibv_create_qp(pd, &big) != NULL; printf("create_qp_too_deep %d errno %d\n", ok_, errno); }
	struct ibv_qp_init_attr xrc = ia;
	xrc.qp_type = IBV_QPT_XRC_SEND;
	errno = 0;
	{ int ok_ = ibv_create_qp(pd, &xrc) != NULL; printf("create_qp_xrc %d errno %d\n", ok_, errno); }
	qa = ibv_create_qp(pd, &ia);
	qb = ibv_create_qp(pd, &ia);
	printf("qp %d %d\n", qa != NULL, qb != NULL);

	/* Posting to a RESET QP, and a RESET -> RTS jump, are refused. */
	struct ibv_sge s0 = { .addr = (uintptr_t)bufa, .length = SZ, .lkey = mra->lkey };
	struct ibv_send_wr w0 = { .sg_list = &s0, .num_sge = 1, .opcode = IBV_WR_SEND }, *badw = NULL;
	int r = ibv_post_send(qa, &w0, &badw);
	printf("post_send_reset %d bad_ok %d\n", r, badw == &w0);
	struct ibv_qp_attr rts = { .qp_state = IBV_QPS_RTS };
	printf("modify_reset_to_rts %d\n", ibv_modify_qp(qa, &rts, IBV_QP_STATE));

	union ibv_gid gid;
	ibv_query_gid(ctx, 1, 1, &gid);
	printf("connect %d %d\n", to_rts(qa, qb->qp_num, &gid), to_rts(qb, qa->qp_num, &gid));
	struct ibv_qp_attr qattr;
	struct ibv_qp_init_attr qinit;
	r = ibv_query_qp(qb, &qattr, IBV_QP_STATE | IBV_QP_CAP | IBV_QP_DEST_QPN, &qinit);
	printf("query_qp %d state %d dest_ok %d mtu %d recv_cq_ok %d\n", r, qattr.qp_state,
	       qattr.dest_qp_num == qa->qp_num, qattr.path_mtu, qinit.recv_cq == rcq);

	/* A receive with a bad lkey is refused at post time by softroce (rxe completes it with
	 * an error later); either way it must not be accepted silently into the buffer. */
	for (int i = 0; i < 512; i++) {
		struct ibv_sge sge = { .addr = (uintptr_t)bufb + (i % 16) * SZ, .length = SZ, .lkey = mrb->lkey };
		struct ibv_recv_wr rw = { .wr_id = i, .sg_list = &sge, .num_sge = 1 }, *badr;
		if (ibv_post_recv(qb, &rw, &badr)) {
			printf("post_recv_failed %d\n", i);
			return 1;
		}
	}

	/* Event thread: arm, then block in ibv_get_cq_event until the first receive. */
	ibv_req_notify_cq(rcq, 0);
	pthread_t et, st;
	pthread_create(&et, NULL, event_waiter, &ea);
	usleep(20000);
	pthread_create(&st, NULL, sender, NULL);

	/* Main thread polls both CQs; receives are reposted as they complete. */
	int recvd = 0, sent = 0, bad_data = 0, errors = 0;
	struct ibv_wc wc[16];
	while (recvd < N || sent < N / 16) {
		int n = ibv_poll_cq(rcq, 16, wc);
		for (int i = 0; i < n; i++) {
			if (wc[i].status != IBV_WC_SUCCESS || wc[i].opcode != IBV_WC_RECV || wc[i].byte_len != SZ ||
			    !(wc[i].wc_flags & IBV_WC_WITH_IMM))
				errors++;
			/* Exactly once, in order: receive k carries immediate k. */
			if (be32toh(wc[i].imm_data) != (uint32_t)recvd)
				bad_data++;
			recvd++;
			struct ibv_sge sge = { .addr = (uintptr_t)bufb + (wc[i].wr_id % 16) * SZ, .length = SZ,
					       .lkey = mrb->lkey };
			struct ibv_recv_wr rw = { .wr_id = wc[i].wr_id, .sg_list = &sge, .num_sge = 1 }, *badr;
			ibv_post_recv(qb, &rw, &badr);
		}
		n = ibv_poll_cq(scq, 16, wc);
		for (int i = 0; i < n; i++) {
			if (wc[i].status != IBV_WC_SUCCESS || wc[i].opcode != IBV_WC_SEND || wc[i].wr_id % 16 != 15)
				errors++;
			sent++;
		}
		if (n < 0)
			break;
	}
	pthread_join(st, NULL);
	pthread_join(et, NULL);
	printf("transfer recvd %d sent %d errors %d bad_data %d event %d\n", recvd, sent, errors, bad_data, ea.got);
	ibv_ack_cq_events(rcq, ea.got);

	/* A non-blocking channel with nothing pending: EAGAIN; poll() says not ready. */
	fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
	struct ibv_cq *ecq;
	void *ectx;
	errno = 0;
	r = ibv_get_cq_event(ch, &ecq, &ectx);
	printf("cq_event_nonblock %d errno %d\n", r, errno);
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	printf("channel_poll_idle %d\n", poll(&p, 1, 0));
	/* Armed, then one completion: the fd becomes readable, exactly one event. */
	ibv_req_notify_cq(rcq, 0);
	struct ibv_sge sge = { .addr = (uintptr_t)bufa, .length = SZ, .lkey = mra->lkey };
	struct ibv_send_wr wr = { .wr_id = 9, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	ibv_post_send(qa, &wr, &bad);
	printf("channel_poll_ready %d\n", poll(&p, 1, 5000));
	r = ibv_get_cq_event(ch, &ecq, &ectx);
	int r2 = ibv_get_cq_event(ch, &ecq, &ectx);
	printf("cq_event_once %d %d cq_ok %d\n", r, r2, ecq == rcq);
	ibv_ack_cq_events(rcq, 1);

	/* Solicited-only arm: a plain SEND's receive does not fire it, a solicited one does. */
	while (ibv_poll_cq(scq, 16, wc) > 0 || ibv_poll_cq(rcq, 16, wc) > 0)
		;
	ibv_req_notify_cq(rcq, 1);
	ibv_post_send(qa, &wr, &bad);
	int plain = 0;
	for (int t = 0; t < 5000000 && !plain; t++)
		plain = ibv_poll_cq(rcq, 1, wc);
	int idle = poll(&p, 1, 100);
	wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_SOLICITED;
	ibv_post_send(qa, &wr, &bad);
	int ready = poll(&p, 1, 5000);
	r = ibv_get_cq_event(ch, &ecq, &ectx);
	ibv_ack_cq_events(rcq, 1);
	wr.send_flags = IBV_SEND_SIGNALED;
	printf("solicited_only plain_recv %d idle %d ready %d event %d\n", plain, idle, ready, r);

	/* RDMA WRITE into a's region with its rkey, then READ it back. */
	while (ibv_poll_cq(scq, 16, wc) > 0 || ibv_poll_cq(rcq, 16, wc) > 0)
		;
	memset(bufb, 0x5a, SZ);
	struct ibv_sge ws = { .addr = (uintptr_t)bufb, .length = SZ, .lkey = mrb->lkey };
	struct ibv_send_wr ww = { .wr_id = 10, .sg_list = &ws, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				  .send_flags = IBV_SEND_SIGNALED,
				  .wr.rdma = { .remote_addr = (uintptr_t)bufa + 8 * SZ, .rkey = mra->rkey } };
	ibv_post_send(qb, &ww, &bad);
	/* The drain above is a snapshot: the SENDs' completions (their ACKs) may still come in
	 * after it, as on an HCA. Wait for the WRITE's own. */
	int got = 0;
	for (int t = 0; t < 5000000 && !got; t++)
		got = ibv_poll_cq(scq, 1, wc) == 1 && wc[0].wr_id == 10;
	printf("rdma_write %d status %d opcode %d data_ok %d\n", got, wc[0].status, wc[0].opcode,
	       ((unsigned char *)bufa)[8 * SZ + SZ - 1] == 0x5a);

	/* A region with a memory window bound cannot be deregistered (EINVAL, as rxe); once the
	 * window is deallocated it can. */
	static char wbuf[4096];
	struct ibv_mr *wm = ibv_reg_mr(pd, wbuf, sizeof wbuf, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
	struct ibv_mw *mw = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
	struct ibv_mw_bind mb = { .wr_id = 20, .send_flags = IBV_SEND_SIGNALED,
				  .bind_info = { .mr = wm, .addr = (uintptr_t)wbuf, .length = 64,
						 .mw_access_flags = IBV_ACCESS_REMOTE_WRITE } };
	int bound = wm && mw ? ibv_bind_mw(qa, mw, &mb) : -1;
	got = 0;
	for (int t = 0; t < 5000000 && !got && bound == 0; t++)
		got = ibv_poll_cq(scq, 1, wc) == 1 && wc[0].wr_id == 20;
	int busy = ibv_dereg_mr(wm);
	int freed = ibv_dealloc_mw(mw);
	printf("dereg_bound bind %d done %d status %d dereg %d dealloc %d dereg_after %d\n", bound, got,
	       wc[0].status, busy, freed, ibv_dereg_mr(wm));

	/* The extended CQ and the new post API. */
	struct ibv_cq_init_attr_ex cxa = { .cqe = 64, .wc_flags = IBV_WC_EX_WITH_COMPLETION_TIMESTAMP };
	errno = 0;
	{ int ok_ = ibv_create_cq_ex(ctx, &cxa) != NULL; printf("cq_ex_timestamp %d errno %d\n", ok_, errno); }
	cxa.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM;
	struct ibv_cq_ex *cqx = ibv_create_cq_ex(ctx, &cxa);
	struct ibv_qp_init_attr_ex xa = { .send_cq = ibv_cq_ex_to_cq(cqx), .recv_cq = ibv_cq_ex_to_cq(cqx),
					  .qp_type = IBV_QPT_RC, .pd = pd,
					  .cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1 },
					  .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
					  .send_ops_flags = IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_WRITE };
	struct ibv_qp *x1 = ibv_create_qp_ex(ctx, &xa);
	struct ibv_qp *x2 = ibv_create_qp_ex(ctx, &xa);
	printf("qp_ex %d %d %d to_qp_ex_plain_null %d\n", cqx != NULL, x1 != NULL, x2 != NULL, ibv_qp_to_qp_ex(qa) == NULL);
	printf("connect_ex %d %d\n", to_rts(x1, x2->qp_num, &gid), to_rts(x2, x1->qp_num, &gid));
	struct ibv_sge rs = { .addr = (uintptr_t)bufb, .length = SZ, .lkey = mrb->lkey };
	struct ibv_recv_wr rw2 = { .wr_id = 88, .sg_list = &rs, .num_sge = 1 }, *badr2;
	ibv_post_recv(x2, &rw2, &badr2);
	struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(x1);
	ibv_wr_start(qx);
	qx->wr_id = 77;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send_imm(qx, htobe32(0x1234));
	ibv_wr_set_sge(qx, mra->lkey, (uintptr_t)bufa, 48);
	printf("wr_complete %d\n", ibv_wr_complete(qx));
	int seen = 0, send_ok = 0, recv_ok = 0;
	struct ibv_poll_cq_attr pa = { 0 };
	for (int t = 0; t < 5000000 && seen < 2; t++) {
		if (ibv_start_poll(cqx, &pa))
			continue;
		do {
			seen++;
			if (cqx->wr_id == 77 && cqx->status == IBV_WC_SUCCESS && ibv_wc_read_opcode(cqx) == IBV_WC_SEND)
				send_ok = 1;
			if (cqx->wr_id == 88 && cqx->status == IBV_WC_SUCCESS && ibv_wc_read_opcode(cqx) == IBV_WC_RECV &&
			    ibv_wc_read_byte_len(cqx) == 48 && be32toh(ibv_wc_read_imm_data(cqx)) == 0x1234 &&
			    (ibv_wc_read_wc_flags(cqx) & IBV_WC_WITH_IMM) && ibv_wc_read_qp_num(cqx) == x2->qp_num)
				recv_ok = 1;
		} while (ibv_next_poll(cqx) == 0);
		ibv_end_poll(cqx);
	}
	printf("poll_ex seen %d send_ok %d recv_ok %d\n", seen, send_ok, recv_ok);
	printf("destroy_ex %d %d", ibv_destroy_qp(x1), 0);
	printf(" %d", ibv_destroy_qp(x2));
	printf(" %d\n", ibv_destroy_cq(ibv_cq_ex_to_cq(cqx)));

	/* Cancel a thread blocked in ibv_get_cq_event (made blocking again). */
	fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) & ~O_NONBLOCK);
	pthread_t bt;
	pthread_create(&bt, NULL, blocked, ch);
	usleep(50000);
	pthread_cancel(bt);
	void *res;
	pthread_join(bt, &res);
	printf("cancelled %d cleanup_ran %d\n", res == PTHREAD_CANCELED, cleanup_ran);

	int d[9];
	d[0] = ibv_destroy_qp(qa);
	d[1] = ibv_destroy_qp(qb);
	d[2] = ibv_dereg_mr(mra);
	d[3] = ibv_dereg_mr(mrb);
	d[4] = ibv_destroy_cq(scq);
	d[5] = ibv_destroy_cq(rcq);
	d[6] = ibv_destroy_comp_channel(ch);
	d[7] = ibv_dealloc_pd(pd);
	d[8] = ibv_close_device(ctx);
	printf("destroy %d %d %d %d %d %d %d %d %d\n", d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7], d[8]);
	ibv_free_device_list(list);
	return 0;
}
