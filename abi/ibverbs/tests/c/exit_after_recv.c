/* The receiver of a SEND ends with exit(), without destroying anything, the moment its busy
 * poll returns the receive completion (as many programs end): the sender's SEND must still
 * complete successfully, however the receiver's library deferred its ACK. Two processes: the
 * parent sends on the first listed device, the forked child receives on the second. Prints
 * "send status S" (the sender's work completion status) and "child exit C". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <infiniband/verbs.h>
#include "rts.h"

struct side {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	char buf[64];
};

struct hello {
	uint32_t qpn;
	union ibv_gid gid;
};

static int open_side(int index, struct side *s, struct hello *me)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n <= index)
		return 1;
	s->ctx = ibv_open_device(list[index]);
	if (!s->ctx)
		return 2;
	s->pd = ibv_alloc_pd(s->ctx);
	s->cq = s->pd ? ibv_create_cq(s->ctx, 16, NULL, NULL, 0) : NULL;
	if (!s->cq)
		return 3;
	struct ibv_qp_init_attr qa = { .send_cq = s->cq, .recv_cq = s->cq, .qp_type = IBV_QPT_RC,
				       .cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1,
						.max_recv_sge = 1 } };
	s->qp = ibv_create_qp(s->pd, &qa);
	s->mr = s->qp ? ibv_reg_mr(s->pd, s->buf, sizeof(s->buf), IBV_ACCESS_LOCAL_WRITE) : NULL;
	if (!s->mr)
		return 4;
	me->qpn = s->qp->qp_num;
	return ibv_query_gid(s->ctx, 1, 1, &me->gid) ? 5 : 0;
}

static int exchange(int out, int in, struct hello *me, struct hello *peer)
{
	if (write(out, me, sizeof(*me)) != sizeof(*me) || read(in, peer, sizeof(*peer)) != sizeof(*peer))
		return 1;
	return 0;
}

int main(void)
{
	int p2c[2], c2p[2];
	if (pipe(p2c) || pipe(c2p))
		return 2;
	struct side s;
	struct hello me, peer;
	struct ibv_wc wc;
	struct ibv_sge sge;
	pid_t pid = fork();
	if (pid == 0) {
		close(c2p[0]);
		close(p2c[1]);
		if (open_side(1, &s, &me) || exchange(c2p[1], p2c[0], &me, &peer))
			_exit(3);
		sge = (struct ibv_sge){ .addr = (uintptr_t)s.buf, .length = sizeof(s.buf), .lkey = s.mr->lkey };
		struct ibv_recv_wr rwr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1 }, *bad;
		if (to_rts(s.qp, peer.qpn, &peer.gid) || ibv_post_recv(s.qp, &rwr, &bad))
			_exit(4);
		/* Busy-poll in vain for a while, then tell the sender to go and poll on. */
		for (int i = 0; i < 1000; i++)
			if (ibv_poll_cq(s.cq, 1, &wc))
				_exit(5);
		if (write(c2p[1], "r", 1) != 1)
			_exit(6);
		while (ibv_poll_cq(s.cq, 1, &wc) == 0)
			;
		exit(wc.status == IBV_WC_SUCCESS ? 0 : 7);
	}
	close(c2p[1]);
	close(p2c[0]);
	if (open_side(0, &s, &me) || exchange(p2c[1], c2p[0], &me, &peer) || to_rts(s.qp, peer.qpn, &peer.gid))
		return 3;
	char go;
	if (read(c2p[0], &go, 1) != 1)
		return 4;
	strcpy(s.buf, "the last message");
	sge = (struct ibv_sge){ .addr = (uintptr_t)s.buf, .length = 17, .lkey = s.mr->lkey };
	struct ibv_send_wr swr = { .wr_id = 2, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				   .send_flags = IBV_SEND_SIGNALED }, *bad;
	if (ibv_post_send(s.qp, &swr, &bad))
		return 5;
	while (ibv_poll_cq(s.cq, 1, &wc) == 0)
		;
	printf("send status %d\n", wc.status);
	int st = 0;
	waitpid(pid, &st, 0);
	printf("child exit %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	return 0;
}
