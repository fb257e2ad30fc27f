/* Exercises the device-level verbs the way applications do — through the header's inline
 * functions where the header has them — and prints "key value" lines for
 * tests/device_verbs.rs to check.
 *
 * usage: devquery <device name>            everything below, one device
 *        devquery --hold <device name>     open it, print its GID[1], wait for stdin to close
 *        devquery --cancel <device name>   pthread_cancel a thread blocked in
 *                                          ibv_get_async_event (a forced unwind through it)
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <infiniband/verbs.h>

/* Private to rdma-core (driver.h), exported as ibv_query_gid_type@IBVERBS_PRIVATE_34. */
int ibv_query_gid_type(struct ibv_context *context, uint8_t port_num, unsigned int index, int *type);
/* "Historical private" exports of IBVERBS_1.0 (driver.h), used by ibv_devinfo and librdmacm. */
int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size);
const char *ibv_get_sysfs_path(void);

static struct ibv_device *find(const char *name, struct ibv_device ***list)
{
	int n = -1;
	*list = ibv_get_device_list(&n);
	if (!*list) {
		printf("list_errno %d\n", errno);
		exit(2);
	}
	printf("num_devices %d\n", n);
	for (int i = 0; i < n; i++) {
		struct ibv_device *d = (*list)[i];
		printf("device %s index %d guid %016" PRIx64 " node_type %d transport %d\n",
		       ibv_get_device_name(d), ibv_get_device_index(d),
		       (uint64_t)be64toh(ibv_get_device_guid(d)), d->node_type, d->transport_type);
		if (!strcmp(ibv_get_device_name(d), name))
			return d;
	}
	printf("not_found %s\n", name);
	exit(3);
}

static void gidstr(const union ibv_gid *g, char *buf)
{
	inet_ntop(AF_INET6, g->raw, buf, INET6_ADDRSTRLEN);
}

static int hold(const char *name)
{
	struct ibv_device **list;
	struct ibv_device *dev = find(name, &list);
	struct ibv_context *ctx = ibv_open_device(dev);
	union ibv_gid gid;
	char buf[INET6_ADDRSTRLEN];
	char c;

	if (!ctx) {
		printf("open_errno %d\n", errno);
		return 1;
	}
	if (ibv_query_gid(ctx, 1, 1, &gid))
		return 1;
	gidstr(&gid, buf);
	printf("gid1 %s\n", buf);
	fflush(stdout);
	while (read(0, &c, 1) > 0)
		;
	return ibv_close_device(ctx);
}

static int cleanup_ran;

static void cleanup(void *arg)
{
	(void)arg;
	cleanup_ran = 1;
}

static void *waiter(void *arg)
{
	struct ibv_async_event ev;
	pthread_cleanup_push(cleanup, NULL);
	ibv_get_async_event(arg, &ev); /* blocks: nothing is ever queued */
	pthread_cleanup_pop(0);
	return NULL;
}

static int cancel(const char *name)
{
	struct ibv_device **list;
	struct ibv_context *ctx = ibv_open_device(find(name, &list));
	pthread_t t;
	void *res;

	if (!ctx)
		return 1;
	pthread_create(&t, NULL, waiter, ctx);
	usleep(100000);
	pthread_cancel(t);
	pthread_join(t, &res);
	printf("cancelled %d cleanup_ran %d\n", res == PTHREAD_CANCELED, cleanup_ran);
	printf("close %d\n", ibv_close_device(ctx));
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "--hold"))
		return hold(argv[2]);
	if (argc == 3 && !strcmp(argv[1], "--cancel"))
		return cancel(argv[2]);
	if (argc != 2)
		return 64;

	struct ibv_device **list;
	struct ibv_device *dev = find(argv[1], &list);
	printf("ibdev_path %s\n", dev->ibdev_path);

	struct ibv_context *ctx = ibv_open_device(dev);
	if (!ctx) {
		printf("open_errno %d\n", errno);
		return 1;
	}
	ibv_free_device_list(list); /* the device stays valid while the context is open */

	struct verbs_context *vctx = verbs_get_ctx(ctx);
	printf("verbs_context %d sz %zu\n", vctx != NULL, vctx ? vctx->sz : 0);
	printf("num_comp_vectors %d\n", ctx->num_comp_vectors);
	printf("cmd_fd_valid %d\n", fcntl(ctx->cmd_fd, F_GETFD) >= 0);
	printf("async_fd_valid %d\n", fcntl(ctx->async_fd, F_GETFD) >= 0);
	printf("ctx_device_matches %d\n", ctx->device == dev);

	struct ibv_device_attr attr;
	printf("query_device %d\n", ibv_query_device(ctx, &attr));
	printf("vendor_id 0x%x part %u max_qp %d max_cqe %d max_sge %d max_mr %d max_pd %d "
	       "max_qp_rd_atom %d max_srq %d max_ah %d ports %u atomic %d cap_flags 0x%x guid %016" PRIx64 "\n",
	       attr.vendor_id, attr.vendor_part_id, attr.max_qp, attr.max_cqe, attr.max_sge,
	       attr.max_mr, attr.max_pd, attr.max_qp_rd_atom, attr.max_srq, attr.max_ah,
	       attr.phys_port_cnt, attr.atomic_cap, attr.device_cap_flags,
	       (uint64_t)be64toh(attr.node_guid));

	struct ibv_device_attr_ex ax;
	memset(&ax, 0xaa, sizeof(ax));
	printf("query_device_ex %d\n", ibv_query_device_ex(ctx, NULL, &ax));
	printf("ex_same_orig %d ex_port_cnt %u ex_ts_mask %" PRIu64 " ex_odp %" PRIu64 "\n",
	       !memcmp(&ax.orig_attr, &attr, sizeof(attr)), ax.phys_port_cnt_ex,
	       ax.completion_timestamp_mask, ax.odp_caps.general_caps);
	struct ibv_query_device_ex_input in = { .comp_mask = 1 };
	printf("query_device_ex_bad_mask %d\n", ibv_query_device_ex(ctx, &in, &ax));

	struct ibv_port_attr pa;
	memset(&pa, 0xaa, sizeof(pa));
	printf("query_port %d\n", ibv_query_port(ctx, 1, &pa));
	printf("port state %d max_mtu %d active_mtu %d gid_tbl_len %d lid %u link_layer %u "
	       "pkey_tbl_len %u max_msg_sz 0x%x cap_flags 0x%x flags2 0x%x width %u speed %u phys %u\n",
	       pa.state, pa.max_mtu, pa.active_mtu, pa.gid_tbl_len, pa.lid, pa.link_layer,
	       pa.pkey_tbl_len, pa.max_msg_sz, pa.port_cap_flags, pa.port_cap_flags2,
	       pa.active_width, pa.active_speed, pa.phys_state);
	printf("query_port_2 %d\n", ibv_query_port(ctx, 2, &pa));

	/* A caller built against older headers passes a shorter struct: only that much is
	 * written. */
	unsigned char small[64];
	memset(small, 0xaa, sizeof(small));
	int r = vctx->query_port(ctx, 1, (struct ibv_port_attr *)small, 20);
	int untouched = 1;
	for (size_t i = 20; i < sizeof(small); i++)
		untouched &= small[i] == 0xaa;
	printf("query_port_len20 %d state %u untouched_after %d\n", r, *(uint32_t *)small, untouched);
	/* ... and a longer one (a newer header) gets the rest zeroed. */
	memset(small, 0xaa, sizeof(small));
	r = vctx->query_port(ctx, 1, (struct ibv_port_attr *)small, 64);
	int zeroed = 1;
	for (size_t i = sizeof(struct ibv_port_attr); i < 64; i++)
		zeroed &= small[i] == 0;
	printf("query_port_len64 %d zeroed_after %d\n", r, zeroed);
	/* The exported ibv_query_port@IBVERBS_1.1 (what binaries without the inline call). */
	int (*exported_query_port)(struct ibv_context *, uint8_t, struct ibv_port_attr *) =
		(void *)ctx->ops._compat_query_port;
	memset(small, 0xaa, sizeof(small));
	r = exported_query_port(ctx, 1, (struct ibv_port_attr *)small);
	printf("compat_query_port %d byte48 0x%x\n", r, small[48]);

	for (int i = 0; i < pa.gid_tbl_len; i++) {
		union ibv_gid gid;
		char buf[INET6_ADDRSTRLEN];
		int type = -1;
		struct ibv_gid_entry e;
		int rq = ibv_query_gid(ctx, 1, i, &gid);
		int rt = ibv_query_gid_type(ctx, 1, i, &type);
		int rx = ibv_query_gid_ex(ctx, 1, i, &e, 0);
		gidstr(&gid, buf);
		printf("gid %d %s rc %d type %d rc %d ex %d ex_index %u ex_port %u ex_type %u ex_same %d ex_ifindex %u\n",
		       i, buf, rq, type, rt, rx, e.gid_index, e.port_num, e.gid_type,
		       !memcmp(&e.gid, &gid, sizeof(gid)), e.ndev_ifindex);
	}
	union ibv_gid gid;
	errno = 0;
	r = ibv_query_gid(ctx, 1, pa.gid_tbl_len, &gid);
	printf("gid_past_end %d errno %d\n", r, errno);
	struct ibv_gid_entry e;
	printf("gid_ex_past_end %d\n", ibv_query_gid_ex(ctx, 1, pa.gid_tbl_len, &e, 0));
	printf("gid_ex_flags %d\n", ibv_query_gid_ex(ctx, 1, 0, &e, 1));

	struct ibv_gid_entry table[64];
	ssize_t n = ibv_query_gid_table(ctx, table, 64, 0);
	printf("gid_table %zd", n);
	for (ssize_t i = 0; i < n; i++)
		printf(" %u/%u", table[i].gid_index, table[i].gid_type);
	printf("\n");
	printf("gid_table_too_small %zd\n", ibv_query_gid_table(ctx, table, 1, 0));

	__be16 pkey = 0;
	r = ibv_query_pkey(ctx, 1, 0, &pkey);
	printf("pkey0 %d 0x%x\n", r, ntohs(pkey));
	errno = 0;
	r = ibv_query_pkey(ctx, 1, 1, &pkey);
	printf("pkey1 %d errno %d\n", r, errno);
	printf("pkey_index_ffff %d pkey_index_7fff %d\n", ibv_get_pkey_index(ctx, 1, htons(0xffff)),
	       ibv_get_pkey_index(ctx, 1, htons(0x7fff)));

	char buf[64];
	printf("sysfs_board_id %d\n", ibv_read_sysfs_file(dev->ibdev_path, "board_id", buf, sizeof buf));
	r = ibv_read_sysfs_file(dev->ibdev_path, "node_type", buf, sizeof buf);
	printf("sysfs_node_type %d %s\n", r, r > 0 ? buf : "-");
	r = ibv_read_sysfs_file(dev->ibdev_path, "ports/1/gid_attrs/types/0", buf, sizeof buf);
	printf("sysfs_gid_type0 %d %s\n", r, r > 0 ? buf : "-");
	r = ibv_read_sysfs_file(dev->ibdev_path, "node_type", buf, 3);
	printf("sysfs_too_small %d\n", r);
	printf("sysfs_path %s\n", ibv_get_sysfs_path());

	/* The async event fd is a real, pollable descriptor with nothing queued. */
	struct pollfd p = { .fd = ctx->async_fd, .events = POLLIN };
	printf("async_poll %d\n", poll(&p, 1, 0));
	fcntl(ctx->async_fd, F_SETFL, fcntl(ctx->async_fd, F_GETFL) | O_NONBLOCK);
	struct ibv_async_event ev;
	errno = 0;
	r = ibv_get_async_event(ctx, &ev);
	printf("async_nonblock %d errno %d\n", r, errno);

	printf("fork_init %d fork_status %d\n", ibv_fork_init(), ibv_is_fork_initialized());

	/* Objects (PD, CQ, channel) exist; the verbs not implemented yet fail cleanly. */
	errno = 0;
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	printf("alloc_pd %d errno %d\n", pd != NULL, errno);
	errno = 0;
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	printf("create_cq %d errno %d\n", cq != NULL, errno);
	errno = 0;
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	printf("create_comp_channel %d errno %d\n", ch != NULL, errno);
	struct ibv_cq_init_attr_ex cqa = { .cqe = 16 };
	errno = 0;
	struct ibv_cq_ex *cqx = ibv_create_cq_ex(ctx, &cqa);
	printf("create_cq_ex %d errno %d\n", cqx != NULL, errno);
	struct ibv_qp_init_attr_ex qpa = { .comp_mask = IBV_QP_INIT_ATTR_PD, .qp_type = IBV_QPT_RC };
	errno = 0;
	struct ibv_qp *qp = ibv_create_qp_ex(ctx, &qpa);
	printf("create_qp_ex %d errno %d\n", qp != NULL, errno);
	struct ibv_xrcd_init_attr xa = { 0 };
	errno = 0;
	struct ibv_xrcd *x = ibv_open_xrcd(ctx, &xa);
	printf("open_xrcd %d errno %d\n", x != NULL, errno);
	struct ibv_alloc_dm_attr dma = { .length = 64 };
	errno = 0;
	struct ibv_dm *dm = ibv_alloc_dm(ctx, &dma);
	printf("alloc_dm %d errno %d\n", dm != NULL, errno);

	printf("close %d\n", ibv_close_device(ctx));
	return 0;
}
