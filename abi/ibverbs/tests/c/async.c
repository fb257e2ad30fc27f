/* Asynchronous events reach a thread blocked in ibv_get_async_event while nothing else calls
 * the library: two RC QPs on one device, the sender's send CQ holds one completion, eight
 * signaled RDMA WRITEs overflow it. The engine raises IBV_EVENT_CQ_ERR (as rxe, no QP event:
 * the QP goes to the error state silently); the waiter thread must get it while the main
 * thread only sleeps. Then ibv_destroy_cq returns once the waiter acknowledged the event.
 * Prints "key value" lines.
 *
 * Usage: async <device name>
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <infiniband/verbs.h>
#include "rts.h"

static struct ibv_context *ctx;
static struct ibv_cq *small_cq;
static struct ibv_qp *sender_qp;
static volatile int cq_err, qp_fatal, other;

static void *waiter(void *arg)
{
	(void)arg;
	while (!cq_err) {
		struct ibv_async_event ev;
		if (ibv_get_async_event(ctx, &ev))
			return NULL;
		if (ev.event_type == IBV_EVENT_CQ_ERR && ev.element.cq == small_cq)
			cq_err = 1;
		else if (ev.event_type == IBV_EVENT_QP_FATAL && ev.element.qp == sender_qp)
			qp_fatal = 1;
		else
			other++;
		ibv_ack_async_event(&ev);
	}
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
	ctx = ibv_open_device(dev);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	char *buf = aligned_alloc(4096, 4096);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	small_cq = ibv_create_cq(ctx, 1, NULL, NULL, 0);
	struct ibv_cq *big_cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_qp_init_attr ia = { .send_cq = small_cq, .recv_cq = big_cq, .qp_type = IBV_QPT_RC,
				       .cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1 } };
	sender_qp = ibv_create_qp(pd, &ia);
	ia.send_cq = big_cq;
	struct ibv_qp *target = ibv_create_qp(pd, &ia);
	printf("objects %d\n", pd && mr && small_cq && big_cq && sender_qp && target);
	union ibv_gid gid;
	ibv_query_gid(ctx, 1, 1, &gid);
	printf("connect %d %d\n", to_rts(sender_qp, target->qp_num, &gid), to_rts(target, sender_qp->qp_num, &gid));
	printf("cqe %d\n", small_cq->cqe);

	pthread_t t;
	pthread_create(&t, NULL, waiter, NULL);
	usleep(100000); /* the waiter is blocked in ibv_get_async_event */
	int posted = 0;
	for (int i = 0; i < 8; i++) {
		struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = 8, .lkey = mr->lkey };
		struct ibv_send_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
					  .send_flags = IBV_SEND_SIGNALED,
					  .wr.rdma = { .remote_addr = (uintptr_t)buf + 2048, .rkey = mr->rkey } };
		struct ibv_send_wr *bad;
		if (ibv_post_send(sender_qp, &wr, &bad) == 0)
			posted++;
	}
	printf("posted %d\n", posted);
	/* No verb from here until the waiter reports (or 10 s pass). */
	for (int i = 0; i < 1000 && !cq_err; i++)
		usleep(10000);
	printf("woke_without_calls cq_err %d\n", cq_err);
	if (!cq_err) {
		/* Calling the library drains what the engine queued: say whether that helps. */
		struct ibv_wc wc;
		ibv_poll_cq(small_cq, 1, &wc);
		for (int i = 0; i < 100 && !cq_err; i++)
			usleep(10000);
		printf("after_a_call cq_err %d\n", cq_err);
		return 1;
	}
	pthread_join(t, NULL);
	{
		/* in this order: a CQ a QP still uses cannot be destroyed (EBUSY) */
		int d1 = ibv_destroy_qp(sender_qp), d2 = ibv_destroy_qp(target);
		int d3 = ibv_destroy_cq(small_cq), d4 = ibv_destroy_cq(big_cq);
		printf("destroy %d %d %d %d\n", d1, d2, d3, d4);
	}
	printf("other_events %d qp_fatal %d\n", other, qp_fatal);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return 0;
}
