/* Verbs arguments as kernel rxe answers them (issue 25: the differences the conformance probe,
 * tests/conformance/probe.c, found against kernel rxe), each check passing on rxe in the rig's
 * guest as on softroce: objects still in use are EBUSY; memory registration refuses what the
 * kernel refuses (unknown access bits, on-demand paging, no length: EINVAL; unmapped or read-only
 * memory for a writable region: EFAULT) and takes regions at any alignment; the QP state table
 * (RESET -> ERR refused), any P_Key index, the AV's port, retry counts above 7; P_Key queries
 * past the table ENOENT; the port's GRH-required flag.
 * Prints "ok <what>" per check; exits non-zero at the first failure. Runs on the first device. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <infiniband/verbs.h>

#define CHECK(c, ...) do { if (!(c)) { printf("FAIL line %d: ", __LINE__); printf(__VA_ARGS__); printf(" (errno %d %s)\n", errno, strerror(errno)); exit(1); } } while (0)

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;

static struct ibv_qp *mkqp(enum ibv_qp_type t, struct ibv_srq *srq)
{
	struct ibv_qp_init_attr a;
	memset(&a, 0, sizeof a);
	a.qp_type = t;
	a.send_cq = a.recv_cq = cq;
	a.srq = srq;
	a.cap.max_send_wr = a.cap.max_recv_wr = 4;
	a.cap.max_send_sge = a.cap.max_recv_sge = 1;
	return ibv_create_qp(pd, &a);
}

static int to_init(struct ibv_qp *qp, int pkey_index)
{
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = pkey_index;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

int main(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_port_attr pa;
	struct ibv_mr *mr;
	struct ibv_qp *qp;
	struct ibv_srq *srq;
	struct ibv_srq_init_attr sa;
	struct ibv_qp_attr qa;
	union ibv_gid g;
	uint16_t pkey;
	int gid4 = -1, i;
	char *buf = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char *ro = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	CHECK(list && list[0], "a device");
	CHECK((ctx = ibv_open_device(list[0])) != NULL, "open");
	CHECK((pd = ibv_alloc_pd(ctx)) != NULL, "alloc_pd");
	CHECK((cq = ibv_create_cq(ctx, 16, NULL, NULL, 0)) != NULL, "create_cq");
	CHECK(ibv_query_port(ctx, 1, &pa) == 0, "query_port");
	for (i = 0; i < pa.gid_tbl_len && i < 16; i++)
		if (ibv_query_gid(ctx, 1, i, &g) == 0 && g.raw[10] == 0xff && g.raw[11] == 0xff && !g.raw[0])
			gid4 = i;
	CHECK(gid4 >= 0, "an IPv4 GID");

	/* the port */
	CHECK(pa.flags & IBV_QPF_GRH_REQUIRED, "port flags: GRH required");
	CHECK(ibv_query_pkey(ctx, 1, 1, &pkey) == -1 && errno == ENOENT, "P_Key index 1: ENOENT");
	CHECK(ibv_get_pkey_index(ctx, 1, htobe16(0x1234)) == -1 && errno == ENOENT, "an unknown P_Key: ENOENT");
	printf("ok port\n");

	/* memory registration */
	errno = 0;
	CHECK(!ibv_reg_mr(pd, buf, 0, IBV_ACCESS_LOCAL_WRITE) && errno == EINVAL, "length 0: EINVAL");
	errno = 0;
	CHECK(!ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE | (1 << 30)) && errno == EINVAL, "an unknown access bit: EINVAL");
	errno = 0;
	CHECK(!ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND) && errno == EINVAL, "on-demand paging: EINVAL");
	errno = 0;
	CHECK(!ibv_reg_mr(pd, (void *)0x1000, 4096, IBV_ACCESS_LOCAL_WRITE) && errno == EFAULT, "unmapped: EFAULT");
	errno = 0;
	CHECK(!ibv_reg_mr(pd, ro, 4096, IBV_ACCESS_LOCAL_WRITE) && errno == EFAULT, "read-only, writable region: EFAULT");
	mr = ibv_reg_mr(pd, ro, 4096, 0);
	CHECK(mr, "read-only, read-only region");
	ibv_dereg_mr(mr);
	mr = ibv_reg_mr(pd, buf + 3, 4093, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	CHECK(mr && mr->addr == buf + 3 && mr->length == 4093, "an unaligned region");
	CHECK(ibv_dealloc_pd(pd) == EBUSY, "the PD of a region: EBUSY");
	CHECK(ibv_dereg_mr(mr) == 0, "dereg");
	printf("ok memory-regions\n");

	/* QPs: the state table, values the kernel takes */
	CHECK((qp = mkqp(IBV_QPT_RC, NULL)) != NULL, "create_qp");
	CHECK(ibv_destroy_cq(cq) == EBUSY, "the CQ of a QP: EBUSY");
	memset(&qa, 0, sizeof qa);
	qa.qp_state = IBV_QPS_ERR;
	CHECK(ibv_modify_qp(qp, &qa, IBV_QP_STATE) == EINVAL, "RESET -> ERR: EINVAL");
	CHECK(to_init(qp, 1) == 0, "INIT with P_Key index 1");
	memset(&qa, 0, sizeof qa);
	qa.qp_state = IBV_QPS_RTR;
	qa.path_mtu = IBV_MTU_1024;
	qa.dest_qp_num = qp->qp_num;
	qa.rq_psn = 1;
	qa.max_dest_rd_atomic = 1;
	qa.min_rnr_timer = 12;
	qa.ah_attr.is_global = 1;
	qa.ah_attr.grh.sgid_index = gid4;
	qa.ah_attr.grh.hop_limit = 64;
	ibv_query_gid(ctx, 1, gid4, &qa.ah_attr.grh.dgid);
	qa.ah_attr.port_num = 2;
	int rtr = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	CHECK(ibv_modify_qp(qp, &qa, rtr) == EINVAL, "an AV on port 2: EINVAL");
	qa.ah_attr.port_num = 1;
	qa.ah_attr.grh.sgid_index = 200;
	CHECK(ibv_modify_qp(qp, &qa, rtr) == ENODATA, "a GID index that names no GID: ENODATA");
	qa.ah_attr.grh.sgid_index = gid4;
	CHECK(ibv_modify_qp(qp, &qa, rtr) == 0, "RTR");
	memset(&qa, 0, sizeof qa);
	qa.qp_state = IBV_QPS_RTS;
	qa.timeout = 14;
	qa.retry_cnt = 8;
	qa.rnr_retry = 7;
	qa.max_rd_atomic = 1;
	CHECK(ibv_modify_qp(qp, &qa, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC) == 0,
	      "RTS with retry_cnt 8");
	qa.qp_state = IBV_QPS_ERR;
	CHECK(ibv_modify_qp(qp, &qa, IBV_QP_STATE | IBV_QP_TIMEOUT) == EINVAL, "a move to ERR with an attribute: EINVAL");
	CHECK(ibv_destroy_qp(qp) == 0, "destroy_qp");
	printf("ok qp-states\n");

	/* SRQ in use */
	memset(&sa, 0, sizeof sa);
	sa.attr.max_wr = 16;
	sa.attr.max_sge = 1;
	CHECK((srq = ibv_create_srq(pd, &sa)) != NULL, "create_srq");
	CHECK((qp = mkqp(IBV_QPT_RC, srq)) != NULL, "create_qp on the SRQ");
	CHECK(ibv_destroy_srq(srq) == EBUSY, "the SRQ of a QP: EBUSY");
	CHECK(ibv_dealloc_pd(pd) == EBUSY, "the PD of a QP: EBUSY");
	CHECK(ibv_destroy_qp(qp) == 0 && ibv_destroy_srq(srq) == 0, "destroy in order");
	CHECK(ibv_destroy_cq(cq) == 0 && ibv_dealloc_pd(pd) == 0, "the rest");
	printf("ok objects-in-use\n");
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return 0;
}
