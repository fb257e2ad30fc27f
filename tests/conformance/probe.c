/* The differential conformance probe: several hundred libibverbs and librdmacm calls with valid
 * and invalid arguments, in the orders real programs make them, one output line per case. Run
 * against kernel rxe (rdma-core's libraries, in the VM rig's guest) and against softroce's
 * drop-in libraries on a device as alike as can be (tests/conformance/run.sh), the two outputs
 * must be identical but for the reviewed differences in tests/conformance/allowlist.txt.
 *
 *   probe -d DEVICE -a LOCAL_IPV4 [-p PORT_BASE] [-s SECTIONS]
 *
 * DEVICE is the device to use (rxe0, softroce0), LOCAL_IPV4 the address its GID 1 is (the rdma_cm
 * cases connect to it: both sides of every connection are in this process). SECTIONS is a
 * comma-separated subset of: dev query pd mr cq qp srq ah mw data cm cmconn addrinfo (default: all).
 *
 * A line is "<case>: <outcome>[ <fields>]". Outcomes: "ok" (0, or a non-NULL pointer), "-1 ENAME"
 * (-1 and errno), "ENAME" (an errno value returned), "=N" (a count or an index). Nothing that
 * legitimately differs between runs or hosts is printed raw: addresses, keys, QP numbers and PSNs
 * are compared with what they should equal, or printed as "set"/"zero".
 *
 * Only arguments rdma-core handles are passed: NULL pointers and freed objects that rdma-core
 * dereferences (undefined behaviour there) are not probed. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <rdma/rdma_cma.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static const char *devname_arg = NULL;
static const char *local_ip = NULL;
static int port_base = 25000;
static const char *sections = NULL;

static struct ibv_device *dev;
static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_device_attr dattr;
static struct ibv_port_attr pattr;
static int gid_len;          /* gid_tbl_len of port 1 */
static int ipv4_gid = -1;    /* the index of the GID that is LOCAL_IPV4 */
static union ibv_gid own_gid;

/* ------------------------------------------------------------------------------------------ */
/* Output */

static const char *en(int e)
{
	const char *n = strerrorname_np(e);
	static char buf[32];
	if (n)
		return n;
	snprintf(buf, sizeof buf, "E%d", e);
	return buf;
}

static void line(const char *name, const char *fmt, ...)
{
	va_list ap;
	printf("%s: ", name);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
}

/* An int result: 0 "ok", -1 "-1 ERRNO", a small positive value is an errno, else "=N". */
static void pr_int(const char *name, int r, int e, const char *more)
{
	if (r == 0)
		printf("%s: ok%s\n", name, more);
	else if (r == -1)
		printf("%s: -1 %s%s\n", name, en(e), more);
	else if (r > 0 && r < 134)
		printf("%s: %s%s\n", name, en(r), more);
	else
		printf("%s: =%d%s\n", name, r, more);
	fflush(stdout);
}

#define CI(name, call)                             \
	({                                         \
		errno = 0;                         \
		int r_ = (call);                   \
		pr_int(name, r_, errno, "");       \
		r_;                                \
	})

/* A count or index: "=N", or "-1 ERRNO". */
#define CV(name, call)                                              \
	({                                                          \
		errno = 0;                                          \
		int r_ = (call);                                    \
		if (r_ == -1)                                       \
			line(name, "-1 %s", en(errno));             \
		else                                                \
			line(name, "=%d", r_);                      \
		r_;                                                 \
	})

/* A pointer: "ok" or "NULL ERRNO". */
#define CP(name, call)                                              \
	({                                                          \
		errno = 0;                                          \
		void *p_ = (void *)(call);                          \
		if (p_)                                             \
			line(name, "ok");                           \
		else                                                \
			line(name, "NULL %s", en(errno));           \
		p_;                                                 \
	})

static int on(const char *s)
{
	char buf[256], *tok, *save;
	if (!sections)
		return 1;
	snprintf(buf, sizeof buf, "%s", sections);
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
		if (strcmp(tok, s) == 0)
			return 1;
	return 0;
}

static const char *gidstr(const union ibv_gid *g)
{
	static char b[2][INET6_ADDRSTRLEN];
	static int i;
	i ^= 1;
	if (!memcmp(g->raw, "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 16))
		return "zero";
	inet_ntop(AF_INET6, g->raw, b[i], sizeof b[i]);
	return b[i];
}

static char *fmt(const char *f, ...)
{
	static char b[64][256];
	static int i;
	va_list ap;
	i = (i + 1) % 64;
	va_start(ap, f);
	vsnprintf(b[i], sizeof b[i], f, ap);
	va_end(ap);
	return b[i];
}

/* ------------------------------------------------------------------------------------------ */
/* Devices */

static void *opener(void *arg)
{
	long fails = 0;
	int i;
	(void)arg;
	for (i = 0; i < 25; i++) {
		struct ibv_context *c = ibv_open_device(dev);
		struct ibv_pd *p;
		if (!c) {
			fails++;
			continue;
		}
		p = ibv_alloc_pd(c);
		if (!p)
			fails++;
		else if (ibv_dealloc_pd(p))
			fails++;
		if (ibv_close_device(c))
			fails++;
	}
	return (void *)fails;
}

static void sec_dev(void)
{
	struct ibv_device **l1, **l2, mock;
	int n1 = -1, n2 = -1, i, same = 1;
	struct ibv_context *c1, *c2;
	pthread_t t[8];
	long fails = 0;

	l1 = CP("dev.get_device_list", ibv_get_device_list(&n1));
	line("dev.count", "%s", n1 >= 1 ? "at least 1" : "none");
	l2 = CP("dev.get_device_list.again", ibv_get_device_list(&n2));
	for (i = 0; l1 && l2 && i < n1 && i < n2; i++)
		same &= l1[i] == l2[i];
	line("dev.same_pointers", "%d n=%d", same, n1 == n2);
	line("dev.terminated", "%d", l1 && l1[n1] == NULL);
	line("dev.name", "%s", strcmp(ibv_get_device_name(dev), devname_arg) == 0 ? "as listed" : ibv_get_device_name(dev));
	line("dev.node_type", "%d %s", dev->node_type, ibv_node_type_str(dev->node_type));
	line("dev.transport_type", "%d", dev->transport_type);
	line("dev.guid", "%016llx", (unsigned long long)be64toh(ibv_get_device_guid(dev)));
	line("dev.index", "%s", ibv_get_device_index(dev) >= 0 ? ">= 0" : "-1");
	line("dev.dev_name", "%s", strncmp(dev->dev_name, "uverbs", 6) == 0 ? "uverbsN" : dev->dev_name);
	line("dev.ibdev_path", "%s", strncmp(dev->ibdev_path, "/sys/class/infiniband/", 22) == 0 ? "/sys/class/infiniband/<name>" : dev->ibdev_path);
	/* A device the caller made (unit tests mock device lists): rdma-core reads its name. */
	memset(&mock, 0, sizeof mock);
	strcpy(mock.name, "mock0");
	strcpy(mock.dev_name, "uverbs9");
	line("dev.name.mock", "%s", ibv_get_device_name(&mock) ? ibv_get_device_name(&mock) : "NULL");
	line("dev.node_type_str.bad", "%s", ibv_node_type_str(99));
	line("dev.port_state_str", "%s %s", ibv_port_state_str(IBV_PORT_ACTIVE), ibv_port_state_str(99));
	line("dev.event_type_str", "%s %s", ibv_event_type_str(IBV_EVENT_QP_FATAL), ibv_event_type_str(99));
	line("dev.wc_status_str", "%s %s", ibv_wc_status_str(IBV_WC_WR_FLUSH_ERR), ibv_wc_status_str(99));
	line("dev.rate", "%d %d %d %d", ibv_rate_to_mult(IBV_RATE_40_GBPS), mult_to_ibv_rate(4), ibv_rate_to_mbps(IBV_RATE_25_GBPS), mbps_to_ibv_rate(100000));
	line("dev.fork", "%d", ibv_is_fork_initialized());

	c1 = CP("dev.open", ibv_open_device(dev));
	c2 = CP("dev.open.second", ibv_open_device(dev));
	line("dev.open.distinct", "%d", c1 != c2);
	if (c1 && c2) {
		struct ibv_pd *p1 = ibv_alloc_pd(c1), *p2 = ibv_alloc_pd(c2);
		line("dev.open.both_usable", "%d %d", p1 != NULL, p2 != NULL);
		line("dev.open.context_device", "%d", c1->device == dev && c2->device == dev);
		line("dev.open.num_comp_vectors", "%d", c1->num_comp_vectors);
		if (p1)
			ibv_dealloc_pd(p1);
		if (p2)
			ibv_dealloc_pd(p2);
	}
	if (c2)
		CI("dev.close.second", ibv_close_device(c2));
	if (c1)
		CI("dev.close", ibv_close_device(c1));
	/* Open, use and close again after everything was closed. */
	c1 = CP("dev.reopen", ibv_open_device(dev));
	if (c1) {
		struct ibv_pd *p = CP("dev.reopen.alloc_pd", ibv_alloc_pd(c1));
		if (p)
			ibv_dealloc_pd(p);
		CI("dev.reopen.close", ibv_close_device(c1));
	}
	/* Eight threads opening, using and closing the device at once, 25 times each. */
	for (i = 0; i < 8; i++)
		pthread_create(&t[i], NULL, opener, NULL);
	for (i = 0; i < 8; i++) {
		void *r;
		pthread_join(t[i], &r);
		fails += (long)r;
	}
	line("dev.threads.open_alloc_close", "%ld failures", fails);
	ibv_free_device_list(l2);
	ibv_free_device_list(l1);
}

/* ------------------------------------------------------------------------------------------ */
/* Queries */

static void sec_query(void)
{
	struct ibv_device_attr a;
	struct ibv_device_attr_ex ax;
	struct ibv_port_attr p;
	union ibv_gid g;
	struct ibv_gid_entry ge, table[64];
	uint16_t pkey;
	int i, n;

	memset(&a, 0, sizeof a);
	if (CI("query.device", ibv_query_device(ctx, &a)) == 0) {
		line("query.device.fw_ver", "%s", a.fw_ver[0] ? "set" : "empty");
		line("query.device.node_guid", "%016llx", (unsigned long long)be64toh(a.node_guid));
		line("query.device.sys_image_guid", "%016llx", (unsigned long long)be64toh(a.sys_image_guid));
		line("query.device.max_mr_size", "%llu", (unsigned long long)a.max_mr_size);
		line("query.device.page_size_cap", "0x%llx", (unsigned long long)a.page_size_cap);
		line("query.device.vendor", "0x%x 0x%x 0x%x", a.vendor_id, a.vendor_part_id, a.hw_ver);
		line("query.device.max_qp", "%d", a.max_qp);
		line("query.device.max_qp_wr", "%d", a.max_qp_wr);
		line("query.device.device_cap_flags", "0x%x", a.device_cap_flags);
		line("query.device.max_sge", "%d %d", a.max_sge, a.max_sge_rd);
		line("query.device.max_cq", "%d %d", a.max_cq, a.max_cqe);
		line("query.device.max_mr", "%d", a.max_mr);
		line("query.device.max_pd", "%d", a.max_pd);
		line("query.device.rd_atom", "%d %d %d %d %d", a.max_qp_rd_atom, a.max_ee_rd_atom, a.max_res_rd_atom, a.max_qp_init_rd_atom, a.max_ee_init_rd_atom);
		line("query.device.atomic_cap", "%d", a.atomic_cap);
		line("query.device.ee_rdd", "%d %d", a.max_ee, a.max_rdd);
		line("query.device.max_mw", "%d", a.max_mw);
		line("query.device.raw_qp", "%d %d", a.max_raw_ipv6_qp, a.max_raw_ethy_qp);
		line("query.device.mcast", "%d %d %d", a.max_mcast_grp, a.max_mcast_qp_attach, a.max_total_mcast_qp_attach);
		line("query.device.max_ah", "%d", a.max_ah);
		line("query.device.fmr", "%d %d", a.max_fmr, a.max_map_per_fmr);
		line("query.device.srq", "%d %d %d", a.max_srq, a.max_srq_wr, a.max_srq_sge);
		line("query.device.max_pkeys", "%d", a.max_pkeys);
		line("query.device.local_ca_ack_delay", "%d", a.local_ca_ack_delay);
		line("query.device.phys_port_cnt", "%d", a.phys_port_cnt);
	}
	memset(&ax, 0, sizeof ax);
	if (CI("query.device_ex", ibv_query_device_ex(ctx, NULL, &ax)) == 0) {
		line("query.device_ex.same", "%d", memcmp(&ax.orig_attr, &a, sizeof a) == 0);
		line("query.device_ex.cap_flags_ex", "0x%llx", (unsigned long long)ax.device_cap_flags_ex);
		line("query.device_ex.odp", "0x%x", ax.odp_caps.general_caps);
		line("query.device_ex.completion_timestamp_mask", "%llu", (unsigned long long)ax.completion_timestamp_mask);
		line("query.device_ex.hca_core_clock", "%llu", (unsigned long long)ax.hca_core_clock);
		line("query.device_ex.tso", "%u", ax.tso_caps.max_tso);
		line("query.device_ex.rss", "%u", ax.rss_caps.max_rwq_indirection_tables);
		line("query.device_ex.max_wq_type_rq", "%u", ax.max_wq_type_rq);
		line("query.device_ex.raw_packet_caps", "0x%x", ax.raw_packet_caps);
		line("query.device_ex.tm", "%u", ax.tm_caps.max_num_tags);
		line("query.device_ex.cq_mod", "%u %u", ax.cq_mod_caps.max_cq_count, ax.cq_mod_caps.max_cq_period);
		line("query.device_ex.max_dm_size", "%llu", (unsigned long long)ax.max_dm_size);
		line("query.device_ex.pci_atomic", "0x%x 0x%x 0x%x", ax.pci_atomic_caps.fetch_add, ax.pci_atomic_caps.swap, ax.pci_atomic_caps.compare_swap);
		line("query.device_ex.xrc_odp", "0x%x", ax.xrc_odp_caps);
		line("query.device_ex.phys_port_cnt_ex", "%u", ax.phys_port_cnt_ex);
	}
	for (i = 0; i <= 2; i++) {
		memset(&p, 0, sizeof p);
		CI(fmt("query.port.%d", i), ibv_query_port(ctx, i, &p));
	}
	memset(&p, 0, sizeof p);
	if (ibv_query_port(ctx, 1, &p) == 0) {
		line("query.port.state", "%d %s", p.state, ibv_port_state_str(p.state));
		line("query.port.mtu", "max %d active %d", p.max_mtu, p.active_mtu);
		line("query.port.gid_tbl_len", "%d", p.gid_tbl_len);
		line("query.port.port_cap_flags", "0x%x 0x%x", p.port_cap_flags, p.port_cap_flags2);
		line("query.port.max_msg_sz", "%u", p.max_msg_sz);
		line("query.port.counters", "%u %u", p.bad_pkey_cntr, p.qkey_viol_cntr);
		line("query.port.pkey_tbl_len", "%u", p.pkey_tbl_len);
		line("query.port.lid", "%u %u %u %u", p.lid, p.sm_lid, p.lmc, p.max_vl_num);
		line("query.port.sm_sl", "%u %u %u", p.sm_sl, p.subnet_timeout, p.init_type_reply);
		line("query.port.width_speed", "%u %u", p.active_width, p.active_speed);
		line("query.port.phys_state", "%u", p.phys_state);
		line("query.port.link_layer", "%u", p.link_layer);
		line("query.port.flags", "0x%x", p.flags);
	}
	/* The first GID indexes, the last one the port lists, and one past it. */
	for (i = 0; i < 4; i++) {
		memset(&g, 0xee, sizeof g);
		errno = 0;
		n = ibv_query_gid(ctx, 1, i, &g);
		pr_int(fmt("query.gid.%d", i), n, errno, n ? "" : fmt(" %s", gidstr(&g)));
	}
	memset(&g, 0xee, sizeof g);
	errno = 0;
	n = ibv_query_gid(ctx, 1, gid_len - 1, &g);
	pr_int("query.gid.last", n, errno, n ? "" : fmt(" %s", gidstr(&g)));
	errno = 0;
	n = ibv_query_gid(ctx, 1, gid_len, &g);
	pr_int("query.gid.past_end", n, errno, "");
	CI("query.gid.port0", ibv_query_gid(ctx, 0, 0, &g));
	CI("query.gid.port2", ibv_query_gid(ctx, 2, 0, &g));
	CI("query.gid.negative", ibv_query_gid(ctx, 1, -1, &g));
	for (i = 0; i <= 4; i++) {
		memset(&ge, 0, sizeof ge);
		errno = 0;
		n = ibv_query_gid_ex(ctx, 1, i, &ge, 0);
		pr_int(fmt("query.gid_ex.%d", i), n, errno,
		       n ? "" : fmt(" %s index=%u port=%u type=%u ndev=%s", gidstr(&ge.gid), ge.gid_index, ge.port_num, ge.gid_type, ge.ndev_ifindex ? "set" : "0"));
	}
	CI("query.gid_ex.port2", ibv_query_gid_ex(ctx, 2, 0, &ge, 0));
	CI("query.gid_ex.flags", ibv_query_gid_ex(ctx, 1, 0, &ge, 1));
	errno = 0;
	n = ibv_query_gid_table(ctx, table, 64, 0);
	if (n < 0)
		line("query.gid_table", "%d %s", n, en(errno));
	else {
		line("query.gid_table", "=%d", n);
		for (i = 0; i < n; i++)
			line(fmt("query.gid_table.%d", i), "%s index=%u port=%u type=%u", gidstr(&table[i].gid), table[i].gid_index, table[i].port_num, table[i].gid_type);
	}
	errno = 0;
	n = ibv_query_gid_table(ctx, table, 1, 0);
	line("query.gid_table.short", "%d %s", n, n < 0 ? en(errno) : "");
	errno = 0;
	n = ibv_query_gid_table(ctx, table, 64, 1);
	line("query.gid_table.flags", "%d %s", n, n < 0 ? en(errno) : "");
	for (i = 0; i <= 1; i++) {
		pkey = 0x1234;
		errno = 0;
		n = ibv_query_pkey(ctx, 1, i, &pkey);
		pr_int(fmt("query.pkey.%d", i), n, errno, n ? "" : fmt(" 0x%x", be16toh(pkey)));
	}
	CI("query.pkey.port2", ibv_query_pkey(ctx, 2, 0, &pkey));
	CV("query.pkey_index.ffff", ibv_get_pkey_index(ctx, 1, htobe16(0xffff)));
	CV("query.pkey_index.7fff", ibv_get_pkey_index(ctx, 1, htobe16(0x7fff)));
	CV("query.pkey_index.1234", ibv_get_pkey_index(ctx, 1, htobe16(0x1234)));
}

/* ------------------------------------------------------------------------------------------ */
/* PD and MR */

static void sec_pd(void)
{
	struct ibv_pd *p;
	struct ibv_mr *mr;
	char *buf = aligned_alloc(4096, 4096);
	p = CP("pd.alloc", ibv_alloc_pd(ctx));
	if (!p)
		return;
	line("pd.context", "%d", p->context == ctx);
	mr = ibv_reg_mr(p, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	CI("pd.dealloc.with_mr", ibv_dealloc_pd(p));
	if (mr)
		ibv_dereg_mr(mr);
	CI("pd.dealloc", ibv_dealloc_pd(p));
	free(buf);
}

static void mr_case(const char *name, void *addr, size_t len, int access)
{
	struct ibv_mr *mr;
	errno = 0;
	mr = ibv_reg_mr(pd, addr, len, access);
	if (!mr) {
		line(name, "NULL %s", en(errno));
		return;
	}
	line(name, "ok addr=%s len=%zu%s", mr->addr == addr ? "same" : "other", mr->length, mr->pd == pd && mr->context == ctx ? "" : " bad-pd/ctx");
	line(fmt("%s.rkey", name), "%s", mr->rkey == 0 ? "zero" : mr->rkey == mr->lkey ? "lkey" : "other");
	errno = 0;
	CI(fmt("%s.dereg", name), ibv_dereg_mr(mr));
}

static void sec_mr(void)
{
	static const struct {
		const char *n;
		int a;
	} acc[] = {
		{ "none", 0 },
		{ "local_write", IBV_ACCESS_LOCAL_WRITE },
		{ "remote_read", IBV_ACCESS_REMOTE_READ },
		{ "remote_write", IBV_ACCESS_REMOTE_WRITE },
		{ "remote_atomic", IBV_ACCESS_REMOTE_ATOMIC },
		{ "lw_rw", IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE },
		{ "lw_ra", IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC },
		{ "all", IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC },
		{ "mw_bind", IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND },
		{ "zero_based", IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ZERO_BASED },
		{ "on_demand", IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND },
		{ "hugetlb", IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_HUGETLB },
		{ "relaxed", IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_RELAXED_ORDERING },
		{ "flush", IBV_ACCESS_LOCAL_WRITE | (1 << 8) | (1 << 9) },
		{ "bit30", IBV_ACCESS_LOCAL_WRITE | (1 << 30) },
	};
	size_t i;
	char *buf = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char *ro = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct ibv_mr *mr, *mr2;
	struct ibv_pd *pd2;

	for (i = 0; i < sizeof acc / sizeof acc[0]; i++)
		mr_case(fmt("mr.access.%s", acc[i].n), buf, 8192, acc[i].a);
	mr_case("mr.len.0", buf, 0, IBV_ACCESS_LOCAL_WRITE);
	mr_case("mr.len.1", buf, 1, IBV_ACCESS_LOCAL_WRITE);
	mr_case("mr.len.1M", buf, 1 << 20, IBV_ACCESS_LOCAL_WRITE);
	mr_case("mr.unaligned.1", buf + 1, 100, IBV_ACCESS_LOCAL_WRITE);
	mr_case("mr.unaligned.3.remote", buf + 3, 4093, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	mr_case("mr.cross_page", buf + 4000, 200, IBV_ACCESS_LOCAL_WRITE);
	mr_case("mr.readonly.local_read", ro, 4096, 0);
	mr_case("mr.readonly.local_write", ro, 4096, IBV_ACCESS_LOCAL_WRITE);
	mr_case("mr.unmapped", (void *)0x1000, 4096, IBV_ACCESS_LOCAL_WRITE);
	mr_case("mr.null.len0", NULL, 0, 0);
	mr_case("mr.huge", buf, (size_t)1 << 46, IBV_ACCESS_LOCAL_WRITE);
	mr_case("mr.stack", &i, sizeof i, IBV_ACCESS_LOCAL_WRITE);
	/* The same memory twice: two regions, two keys. */
	mr = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	mr2 = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	line("mr.twice", "%d %d keys=%s", mr != NULL, mr2 != NULL, mr && mr2 && mr->lkey != mr2->lkey ? "distinct" : "same");
	if (mr2)
		ibv_dereg_mr(mr2);
	/* iova */
	errno = 0;
	mr2 = ibv_reg_mr_iova(pd, buf, 4096, 0x10000, IBV_ACCESS_LOCAL_WRITE);
	line("mr.iova", "%s%s", mr2 ? "ok" : "NULL ", mr2 ? (mr2->addr == buf ? " addr=buf" : " addr=other") : en(errno));
	if (mr2)
		ibv_dereg_mr(mr2);
	errno = 0;
	mr2 = ibv_reg_mr_iova2(pd, buf, 4096, 0, IBV_ACCESS_LOCAL_WRITE);
	line("mr.iova2.zero", "%s%s", mr2 ? "ok" : "NULL ", mr2 ? "" : en(errno));
	if (mr2)
		ibv_dereg_mr(mr2);
	/* rereg */
	pd2 = ibv_alloc_pd(ctx);
	if (mr) {
		CI("mr.rereg.none", ibv_rereg_mr(mr, 0, NULL, NULL, 0, 0));
		CI("mr.rereg.access", ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ));
		CI("mr.rereg.access.bad", ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_REMOTE_WRITE));
		CI("mr.rereg.pd", ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, pd2, NULL, 0, 0));
		CI("mr.rereg.translation", ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, buf + 4096, 4096, 0));
		CI("mr.rereg.badflag", ibv_rereg_mr(mr, 1 << 5, NULL, NULL, 0, 0));
		CI("mr.dereg", ibv_dereg_mr(mr));
	}
	if (pd2)
		ibv_dealloc_pd(pd2);
	munmap(buf, 1 << 20);
	munmap(ro, 4096);
}

/* ------------------------------------------------------------------------------------------ */
/* CQ */

static void sec_cq(void)
{
	struct ibv_cq *cq;
	struct ibv_comp_channel *ch;
	struct ibv_wc wc[4];
	struct ibv_cq_init_attr_ex cx;
	struct ibv_cq_ex *cqx;
	int sizes[] = { -1, 0, 1, 2, 100, 65536 };
	size_t i;

	for (i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
		errno = 0;
		cq = ibv_create_cq(ctx, sizes[i], NULL, NULL, 0);
		if (!cq)
			line(fmt("cq.create.%d", sizes[i]), "NULL %s", en(errno));
		else {
			line(fmt("cq.create.%d", sizes[i]), "ok cqe=%s", cq->cqe >= sizes[i] ? ">= asked" : "less");
			ibv_destroy_cq(cq);
		}
	}
	errno = 0;
	cq = ibv_create_cq(ctx, dattr.max_cqe, NULL, NULL, 0);
	line("cq.create.max_cqe", "%s", cq ? "ok" : en(errno));
	if (cq)
		ibv_destroy_cq(cq);
	cq = CP("cq.create.max_cqe_plus_1", ibv_create_cq(ctx, dattr.max_cqe + 1, NULL, NULL, 0));
	if (cq)
		ibv_destroy_cq(cq);
	cq = CP("cq.create.vector_1", ibv_create_cq(ctx, 4, NULL, NULL, 1));
	if (cq)
		ibv_destroy_cq(cq);
	cq = CP("cq.create.vector_neg", ibv_create_cq(ctx, 4, NULL, NULL, -1));
	if (cq)
		ibv_destroy_cq(cq);

	ch = CP("cq.channel.create", ibv_create_comp_channel(ctx));
	cq = CP("cq.create.with_channel", ibv_create_cq(ctx, 16, (void *)0x1234, ch, 0));
	if (cq) {
		line("cq.fields", "context=%d channel=%d", cq->cq_context == (void *)0x1234, cq->channel == ch);
		CI("cq.channel.destroy.busy", ch ? ibv_destroy_comp_channel(ch) : -2);
		CV("cq.poll.empty", ibv_poll_cq(cq, 4, wc));
		CV("cq.poll.zero_entries", ibv_poll_cq(cq, 0, wc));
		CI("cq.notify", ibv_req_notify_cq(cq, 0));
		CI("cq.notify.solicited", ibv_req_notify_cq(cq, 1));
		CI("cq.notify.again", ibv_req_notify_cq(cq, 0));
		if (ch) {
			int fl = fcntl(ch->fd, F_GETFL);
			struct ibv_cq *ecq;
			void *ectx;
			fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK);
			CI("cq.get_event.none", ibv_get_cq_event(ch, &ecq, &ectx));
			fcntl(ch->fd, F_SETFL, fl);
		}
		CI("cq.resize.bigger", ibv_resize_cq(cq, 64));
		line("cq.resize.bigger.cqe", "%s", cq->cqe >= 64 ? ">= 64" : fmt("%d", cq->cqe));
		CI("cq.resize.smaller", ibv_resize_cq(cq, 8));
		line("cq.resize.smaller.cqe", "%s", cq->cqe >= 8 ? ">= 8" : fmt("%d", cq->cqe));
		CI("cq.resize.0", ibv_resize_cq(cq, 0));
		CI("cq.resize.neg", ibv_resize_cq(cq, -5));
		CI("cq.resize.max_plus_1", ibv_resize_cq(cq, dattr.max_cqe + 1));
		CI("cq.destroy", ibv_destroy_cq(cq));
	}
	if (ch)
		CI("cq.channel.destroy", ibv_destroy_comp_channel(ch));

	memset(&cx, 0, sizeof cx);
	cx.cqe = 16;
	cx.wc_flags = IBV_WC_STANDARD_FLAGS;
	cqx = CP("cq.create_ex.standard", ibv_create_cq_ex(ctx, &cx));
	if (cqx) {
		struct ibv_poll_cq_attr pa = { 0 };
		CI("cq.ex.start_poll.empty", ibv_start_poll(cqx, &pa));
		ibv_destroy_cq(ibv_cq_ex_to_cq(cqx));
	}
	cx.wc_flags = IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;
	cqx = CP("cq.create_ex.timestamp", ibv_create_cq_ex(ctx, &cx));
	if (cqx)
		ibv_destroy_cq(ibv_cq_ex_to_cq(cqx));
	cx.wc_flags = IBV_WC_STANDARD_FLAGS;
	cx.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS;
	cx.flags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED;
	cqx = CP("cq.create_ex.single_threaded", ibv_create_cq_ex(ctx, &cx));
	if (cqx)
		ibv_destroy_cq(ibv_cq_ex_to_cq(cqx));
	cx.comp_mask = 1 << 7;
	cqx = CP("cq.create_ex.bad_mask", ibv_create_cq_ex(ctx, &cx));
	if (cqx)
		ibv_destroy_cq(ibv_cq_ex_to_cq(cqx));
}

/* ------------------------------------------------------------------------------------------ */
/* QP */

static struct ibv_cq *qcq;
static struct ibv_qp_cap last_cap;

static struct ibv_qp *mkqp(enum ibv_qp_type t, int wr, int sge, int inl)
{
	struct ibv_qp_init_attr a;
	struct ibv_qp *qp;
	memset(&a, 0, sizeof a);
	a.qp_type = t;
	a.send_cq = a.recv_cq = qcq;
	a.cap.max_send_wr = a.cap.max_recv_wr = wr;
	a.cap.max_send_sge = a.cap.max_recv_sge = sge;
	a.cap.max_inline_data = inl;
	qp = ibv_create_qp(pd, &a);
	last_cap = a.cap;
	return qp;
}

static void qp_create_case(const char *name, enum ibv_qp_type t, int swr, int rwr, int ssge, int rsge, int inl, int use_srq)
{
	struct ibv_qp_init_attr a;
	struct ibv_qp *qp;
	struct ibv_srq *srq = NULL;
	struct ibv_srq_init_attr sa;
	memset(&a, 0, sizeof a);
	a.qp_type = t;
	a.send_cq = a.recv_cq = qcq;
	a.cap.max_send_wr = swr;
	a.cap.max_recv_wr = rwr;
	a.cap.max_send_sge = ssge;
	a.cap.max_recv_sge = rsge;
	a.cap.max_inline_data = inl;
	if (use_srq) {
		memset(&sa, 0, sizeof sa);
		sa.attr.max_wr = 16;
		sa.attr.max_sge = 1;
		srq = ibv_create_srq(pd, &sa);
		a.srq = srq;
	}
	errno = 0;
	qp = ibv_create_qp(pd, &a);
	if (!qp)
		line(name, "NULL %s", en(errno));
	else {
		line(name, "ok state=%d type=%d qpn=%s cap=%s/%s/%s/%s inline=%s", qp->state, qp->qp_type, qp->qp_num > 1 ? "set" : "low",
		     a.cap.max_send_wr >= (uint32_t)swr ? ">=" : "<", a.cap.max_recv_wr >= (uint32_t)rwr ? ">=" : "<",
		     a.cap.max_send_sge >= (uint32_t)ssge ? ">=" : "<", a.cap.max_recv_sge >= (uint32_t)rsge ? ">=" : "<",
		     a.cap.max_inline_data >= (uint32_t)inl ? ">=" : "<");
		ibv_destroy_qp(qp);
	}
	if (srq)
		ibv_destroy_srq(srq);
}

static const char *qps(int s)
{
	static const char *n[] = { "RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR", "UNKNOWN" };
	return s >= 0 && s <= 7 ? n[s] : "?";
}

static void show_qp(const char *name, struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	int r;
	memset(&a, 0, sizeof a);
	memset(&ia, 0, sizeof ia);
	errno = 0;
	r = ibv_query_qp(qp, &a, IBV_QP_STATE | IBV_QP_CUR_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS | IBV_QP_QKEY |
				       IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				       IBV_QP_RQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER | IBV_QP_SQ_PSN |
				       IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_DEST_QPN | IBV_QP_CAP,
			 &ia);
	if (r) {
		pr_int(name, r, errno, "");
		return;
	}
	line(name, "ok state=%s qp.state=%s", qps(a.qp_state), qps(qp->state));
	line(fmt("%s.cur", name), "%s", qps(a.cur_qp_state));
	line(fmt("%s.attrs", name), "pkey=%u port=%u access=0x%x qkey=0x%x timeout=%u retry=%u rnr_retry=%u min_rnr=%u rd=%u dest_rd=%u",
	     a.pkey_index, a.port_num, a.qp_access_flags, a.qkey, a.timeout, a.retry_cnt, a.rnr_retry, a.min_rnr_timer,
	     a.max_rd_atomic, a.max_dest_rd_atomic);
	/* (a UD QP has no path MTU of its own: not compared) */
	if (qp->qp_type != IBV_QPT_UD)
		line(fmt("%s.mtu", name), "%d", a.path_mtu);
	line(fmt("%s.av", name), "global=%u sgid=%u hop=%u tclass=%u flow=%u sl=%u port=%u dgid=%s", a.ah_attr.is_global,
	     a.ah_attr.grh.sgid_index, a.ah_attr.grh.hop_limit, a.ah_attr.grh.traffic_class, a.ah_attr.grh.flow_label, a.ah_attr.sl,
	     a.ah_attr.port_num, !memcmp(&a.ah_attr.grh.dgid, &own_gid, 16) ? "own" : gidstr(&a.ah_attr.grh.dgid));
	line(fmt("%s.init", name), "type=%d sq_sig_all=%d", ia.qp_type, ia.sq_sig_all);
	line(fmt("%s.caps", name), "%u/%u/%u/%u inline=%s", ia.cap.max_send_wr, ia.cap.max_recv_wr, ia.cap.max_send_sge, ia.cap.max_recv_sge,
	     ia.cap.max_inline_data ? "set" : "0");
}

/* Masks of the transitions (IB spec table; what the kernel's ib_modify_qp_is_ok requires). */
#define M_INIT_RC (IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)
#define M_INIT_UD (IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY)
#define M_RTR_RC (IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)
#define M_RTR_UC (IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN)
#define M_RTS_RC (IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC)
#define M_RTS_UD (IBV_QP_STATE | IBV_QP_SQ_PSN)

static void fill_attr(struct ibv_qp_attr *a, int state, uint32_t dqpn)
{
	memset(a, 0, sizeof *a);
	a->qp_state = state;
	a->pkey_index = 0;
	a->port_num = 1;
	a->qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	a->qkey = 0x11111111;
	a->path_mtu = IBV_MTU_1024;
	a->dest_qp_num = dqpn;
	a->rq_psn = 0x123;
	a->sq_psn = 0x456;
	a->max_dest_rd_atomic = 1;
	a->max_rd_atomic = 1;
	a->min_rnr_timer = 12;
	a->timeout = 14;
	a->retry_cnt = 7;
	a->rnr_retry = 7;
	a->ah_attr.is_global = 1;
	a->ah_attr.grh.dgid = own_gid;
	a->ah_attr.grh.sgid_index = ipv4_gid;
	a->ah_attr.grh.hop_limit = 64;
	a->ah_attr.port_num = 1;
}

static int modq(const char *name, struct ibv_qp *qp, int state, int mask, uint32_t dqpn)
{
	struct ibv_qp_attr a;
	fill_attr(&a, state, dqpn);
	return CI(name, ibv_modify_qp(qp, &a, mask));
}

struct walk {
	const char *t;
	enum ibv_qp_type type;
	int m_init, m_rtr, m_rts;
	uint32_t dq;
};

/* A fresh QP of the walk's type moved (with the right masks) to `state`. */
static struct ibv_qp *qp_at(struct walk *w, int state)
{
	struct ibv_qp *qp = mkqp(w->type, 4, 1, 0);
	struct ibv_qp_attr a;
	if (!qp || state == IBV_QPS_RESET)
		return qp;
	fill_attr(&a, IBV_QPS_INIT, w->dq);
	if (ibv_modify_qp(qp, &a, w->m_init))
		goto fail;
	if (state == IBV_QPS_ERR) {
		fill_attr(&a, IBV_QPS_ERR, w->dq);
		if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
			goto fail;
		return qp;
	}
	if (state == IBV_QPS_INIT)
		return qp;
	fill_attr(&a, IBV_QPS_RTR, w->dq);
	if (ibv_modify_qp(qp, &a, w->m_rtr))
		goto fail;
	if (state == IBV_QPS_RTR)
		return qp;
	fill_attr(&a, IBV_QPS_RTS, w->dq);
	if (ibv_modify_qp(qp, &a, w->m_rts))
		goto fail;
	if (state == IBV_QPS_RTS)
		return qp;
	fill_attr(&a, IBV_QPS_SQD, w->dq);
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
		goto fail;
	usleep(10000);
	return qp;
fail:
	ibv_destroy_qp(qp);
	return NULL;
}

/* One modify of a fresh QP in state `from`: the outcome and the state it leaves. */
static void try_case(struct walk *w, const char *step, int from, struct ibv_qp_attr *a, int mask)
{
	char name[96];
	struct ibv_qp *qp = qp_at(w, from);
	struct ibv_qp_attr q;
	struct ibv_qp_init_attr qi;
	int r, e;
	snprintf(name, sizeof name, "qp.%s.%s", w->t, step);
	if (!qp) {
		line(name, "setup to %s failed", qps(from));
		return;
	}
	errno = 0;
	r = ibv_modify_qp(qp, a, mask);
	e = errno;
	memset(&q, 0, sizeof q);
	ibv_query_qp(qp, &q, IBV_QP_STATE, &qi);
	pr_int(name, r, e, fmt(" -> %s", qps(q.qp_state)));
	ibv_destroy_qp(qp);
}

/* Every transition of one QP type from every state, each with missing and extra mask bits
 * and out-of-range values, each on a fresh QP; then the good path on one QP, queried at each
 * state. */
static void qp_walk(const char *t, enum ibv_qp_type type, int m_init, int m_rtr, int m_rts)
{
	struct ibv_qp *peer = mkqp(type, 4, 1, 0), *qp;
	struct walk w = { t, type, m_init, m_rtr, m_rts, 0 };
	struct ibv_qp_attr a;
	char n[64];
	int i;
	if (!peer) {
		line(fmt("qp.%s.walk", t), "create failed %s", en(errno));
		return;
	}
	w.dq = peer->qp_num;
#define TRY(step, from, to, mask)                    \
	do {                                         \
		fill_attr(&a, to, w.dq);             \
		try_case(&w, step, from, &a, mask);  \
	} while (0)
#define TRYA(step, from, to, mask, field, value)     \
	do {                                         \
		fill_attr(&a, to, w.dq);             \
		a.field = value;                     \
		try_case(&w, step, from, &a, mask);  \
	} while (0)
	/* from RESET */
	TRY("reset_to_rtr", IBV_QPS_RESET, IBV_QPS_RTR, m_rtr);
	TRY("reset_to_rts", IBV_QPS_RESET, IBV_QPS_RTS, m_rts);
	TRY("reset_to_sqd", IBV_QPS_RESET, IBV_QPS_SQD, IBV_QP_STATE);
	TRY("reset_to_err", IBV_QPS_RESET, IBV_QPS_ERR, IBV_QP_STATE);
	TRY("reset_to_reset", IBV_QPS_RESET, IBV_QPS_RESET, IBV_QP_STATE);
	TRY("reset.bad_state", IBV_QPS_RESET, 9, IBV_QP_STATE);
	TRY("reset.no_state_bit", IBV_QPS_RESET, IBV_QPS_INIT, m_init & ~IBV_QP_STATE);
	TRY("reset.mask0", IBV_QPS_RESET, IBV_QPS_INIT, 0);
	TRY("init.no_port", IBV_QPS_RESET, IBV_QPS_INIT, m_init & ~IBV_QP_PORT);
	TRY("init.no_pkey", IBV_QPS_RESET, IBV_QPS_INIT, m_init & ~IBV_QP_PKEY_INDEX);
	TRY("init.no_access_or_qkey", IBV_QPS_RESET, IBV_QPS_INIT, m_init & ~(IBV_QP_ACCESS_FLAGS | IBV_QP_QKEY));
	TRY("init.extra_sq_psn", IBV_QPS_RESET, IBV_QPS_INIT, m_init | IBV_QP_SQ_PSN);
	TRY("init.extra_av", IBV_QPS_RESET, IBV_QPS_INIT, m_init | IBV_QP_AV);
	TRY("init.extra_qkey_or_access", IBV_QPS_RESET, IBV_QPS_INIT, m_init | IBV_QP_QKEY | IBV_QP_ACCESS_FLAGS);
	TRYA("init.port0", IBV_QPS_RESET, IBV_QPS_INIT, m_init, port_num, 0);
	TRYA("init.port2", IBV_QPS_RESET, IBV_QPS_INIT, m_init, port_num, 2);
	TRYA("init.pkey1", IBV_QPS_RESET, IBV_QPS_INIT, m_init, pkey_index, 1);
	TRYA("init.pkey64", IBV_QPS_RESET, IBV_QPS_INIT, m_init, pkey_index, 64);
	TRYA("init.access_all", IBV_QPS_RESET, IBV_QPS_INIT, m_init, qp_access_flags, 0xf);
	TRYA("init.access_bad", IBV_QPS_RESET, IBV_QPS_INIT, m_init, qp_access_flags, 1 << 12);
	TRYA("init.cur_state_right", IBV_QPS_RESET, IBV_QPS_INIT, m_init | IBV_QP_CUR_STATE, cur_qp_state, IBV_QPS_RESET);
	TRYA("init.cur_state_wrong", IBV_QPS_RESET, IBV_QPS_INIT, m_init | IBV_QP_CUR_STATE, cur_qp_state, IBV_QPS_RTS);
	/* from INIT */
	TRY("init_to_init", IBV_QPS_INIT, IBV_QPS_INIT, m_init & ~IBV_QP_PORT);
	TRY("init_to_init.state_only", IBV_QPS_INIT, IBV_QPS_INIT, IBV_QP_STATE);
	TRY("init_to_rts", IBV_QPS_INIT, IBV_QPS_RTS, m_rts);
	TRY("init_to_sqd", IBV_QPS_INIT, IBV_QPS_SQD, IBV_QP_STATE);
	TRY("init_to_reset", IBV_QPS_INIT, IBV_QPS_RESET, IBV_QP_STATE);
	TRY("init_to_err", IBV_QPS_INIT, IBV_QPS_ERR, IBV_QP_STATE);
	TRY("init.no_state.pkey", IBV_QPS_INIT, IBV_QPS_INIT, IBV_QP_PKEY_INDEX);
	if (m_rtr != IBV_QP_STATE) {
		TRY("rtr.no_av", IBV_QPS_INIT, IBV_QPS_RTR, m_rtr & ~IBV_QP_AV);
		TRY("rtr.no_mtu", IBV_QPS_INIT, IBV_QPS_RTR, m_rtr & ~IBV_QP_PATH_MTU);
		TRY("rtr.no_dest_qpn", IBV_QPS_INIT, IBV_QPS_RTR, m_rtr & ~IBV_QP_DEST_QPN);
		TRY("rtr.no_rq_psn", IBV_QPS_INIT, IBV_QPS_RTR, m_rtr & ~IBV_QP_RQ_PSN);
		if (m_rtr & IBV_QP_MIN_RNR_TIMER) {
			TRY("rtr.no_min_rnr", IBV_QPS_INIT, IBV_QPS_RTR, m_rtr & ~IBV_QP_MIN_RNR_TIMER);
			TRY("rtr.no_max_dest_rd", IBV_QPS_INIT, IBV_QPS_RTR, m_rtr & ~IBV_QP_MAX_DEST_RD_ATOMIC);
		}
		TRY("rtr.extra_sq_psn", IBV_QPS_INIT, IBV_QPS_RTR, m_rtr | IBV_QP_SQ_PSN);
		TRY("rtr.extra_timeout", IBV_QPS_INIT, IBV_QPS_RTR, m_rtr | IBV_QP_TIMEOUT);
		TRY("rtr.extra_access_pkey", IBV_QPS_INIT, IBV_QPS_RTR, m_rtr | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX);
		TRYA("rtr.not_global", IBV_QPS_INIT, IBV_QPS_RTR, m_rtr, ah_attr.is_global, 0);
		TRYA("rtr.sgid_past_end", IBV_QPS_INIT, IBV_QPS_RTR, m_rtr, ah_attr.grh.sgid_index, gid_len + 5);
		TRYA("rtr.port2", IBV_QPS_INIT, IBV_QPS_RTR, m_rtr, ah_attr.port_num, 2);
		TRYA("rtr.port0", IBV_QPS_INIT, IBV_QPS_RTR, m_rtr, ah_attr.port_num, 0);
		TRYA("rtr.hop0", IBV_QPS_INIT, IBV_QPS_RTR, m_rtr, ah_attr.grh.hop_limit, 0);
		TRYA("rtr.mtu0", IBV_QPS_INIT, IBV_QPS_RTR, m_rtr, path_mtu, 0);
		TRYA("rtr.mtu4096", IBV_QPS_INIT, IBV_QPS_RTR, m_rtr, path_mtu, IBV_MTU_4096);
		TRYA("rtr.mtu2048", IBV_QPS_INIT, IBV_QPS_RTR, m_rtr, path_mtu, IBV_MTU_2048);
		TRYA("rtr.mtu7", IBV_QPS_INIT, IBV_QPS_RTR, m_rtr, path_mtu, 7);
		TRYA("rtr.dest_rd_200", IBV_QPS_INIT, IBV_QPS_RTR, m_rtr, max_dest_rd_atomic, 200);
		TRYA("rtr.dest_rd_0", IBV_QPS_INIT, IBV_QPS_RTR, m_rtr, max_dest_rd_atomic, 0);
		TRYA("rtr.min_rnr_40", IBV_QPS_INIT, IBV_QPS_RTR, m_rtr, min_rnr_timer, 40);
		TRYA("rtr.dest_qpn_25bit", IBV_QPS_INIT, IBV_QPS_RTR, m_rtr, dest_qp_num, 0x1000000);
		TRYA("rtr.rq_psn_25bit", IBV_QPS_INIT, IBV_QPS_RTR, m_rtr, rq_psn, 0x1000000);
		TRYA("rtr.dgid_zero", IBV_QPS_INIT, IBV_QPS_RTR, m_rtr, ah_attr.grh.dgid.global.interface_id, 0);
		for (i = 0; i < 4; i++)
			TRYA(fmt("rtr.sgid%d", i), IBV_QPS_INIT, IBV_QPS_RTR, m_rtr, ah_attr.grh.sgid_index, i);
	} else {
		TRY("rtr.extra_av", IBV_QPS_INIT, IBV_QPS_RTR, IBV_QP_STATE | IBV_QP_AV);
		TRY("rtr.extra_qkey", IBV_QPS_INIT, IBV_QPS_RTR, IBV_QP_STATE | IBV_QP_QKEY);
	}
	/* from RTR */
	TRY("rtr_to_init", IBV_QPS_RTR, IBV_QPS_INIT, IBV_QP_STATE);
	TRY("rtr_to_sqd", IBV_QPS_RTR, IBV_QPS_SQD, IBV_QP_STATE);
	TRY("rtr_to_rtr", IBV_QPS_RTR, IBV_QPS_RTR, IBV_QP_STATE);
	TRY("rtr_to_reset", IBV_QPS_RTR, IBV_QPS_RESET, IBV_QP_STATE);
	TRY("rtr_to_err", IBV_QPS_RTR, IBV_QPS_ERR, IBV_QP_STATE);
	TRY("rts.no_sq_psn", IBV_QPS_RTR, IBV_QPS_RTS, m_rts & ~IBV_QP_SQ_PSN);
	if (m_rts & IBV_QP_TIMEOUT) {
		TRY("rts.no_timeout", IBV_QPS_RTR, IBV_QPS_RTS, m_rts & ~IBV_QP_TIMEOUT);
		TRY("rts.no_retry", IBV_QPS_RTR, IBV_QPS_RTS, m_rts & ~IBV_QP_RETRY_CNT);
		TRY("rts.no_rnr_retry", IBV_QPS_RTR, IBV_QPS_RTS, m_rts & ~IBV_QP_RNR_RETRY);
		TRY("rts.no_max_rd", IBV_QPS_RTR, IBV_QPS_RTS, m_rts & ~IBV_QP_MAX_QP_RD_ATOMIC);
		TRYA("rts.max_rd_200", IBV_QPS_RTR, IBV_QPS_RTS, m_rts, max_rd_atomic, 200);
		TRYA("rts.retry_8", IBV_QPS_RTR, IBV_QPS_RTS, m_rts, retry_cnt, 8);
		TRYA("rts.rnr_retry_8", IBV_QPS_RTR, IBV_QPS_RTS, m_rts, rnr_retry, 8);
		TRYA("rts.timeout_40", IBV_QPS_RTR, IBV_QPS_RTS, m_rts, timeout, 40);
	}
	TRY("rts.extra_av", IBV_QPS_RTR, IBV_QPS_RTS, m_rts | IBV_QP_AV);
	TRY("rts.extra_dest_qpn", IBV_QPS_RTR, IBV_QPS_RTS, m_rts | IBV_QP_DEST_QPN);
	TRY("rts.extra_min_rnr", IBV_QPS_RTR, IBV_QPS_RTS, m_rts | IBV_QP_MIN_RNR_TIMER);
	TRY("rts.extra_qkey", IBV_QPS_RTR, IBV_QPS_RTS, m_rts | IBV_QP_QKEY);
	TRY("rts.extra_access", IBV_QPS_RTR, IBV_QPS_RTS, m_rts | IBV_QP_ACCESS_FLAGS);
	TRYA("rts.sq_psn_25bit", IBV_QPS_RTR, IBV_QPS_RTS, m_rts, sq_psn, 0x1000000);
	/* from RTS */
	TRY("rts_to_rts", IBV_QPS_RTS, IBV_QPS_RTS, IBV_QP_STATE);
	TRY("rts_to_rts.min_rnr", IBV_QPS_RTS, IBV_QPS_RTS, IBV_QP_STATE | IBV_QP_MIN_RNR_TIMER);
	TRY("rts_to_rts.timeout", IBV_QPS_RTS, IBV_QPS_RTS, IBV_QP_STATE | IBV_QP_TIMEOUT);
	TRY("rts_to_rts.access", IBV_QPS_RTS, IBV_QPS_RTS, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS);
	TRY("rts_to_rts.qkey", IBV_QPS_RTS, IBV_QPS_RTS, IBV_QP_STATE | IBV_QP_QKEY);
	TRY("rts_to_rts.av", IBV_QPS_RTS, IBV_QPS_RTS, IBV_QP_STATE | IBV_QP_AV);
	TRY("rts_to_rts.sq_psn", IBV_QPS_RTS, IBV_QPS_RTS, IBV_QP_STATE | IBV_QP_SQ_PSN);
	TRY("rts.no_state.min_rnr", IBV_QPS_RTS, IBV_QPS_RTS, IBV_QP_MIN_RNR_TIMER);
	TRYA("rts.cur_state", IBV_QPS_RTS, IBV_QPS_RTS, IBV_QP_STATE | IBV_QP_CUR_STATE, cur_qp_state, IBV_QPS_RTS);
	TRYA("rts.cur_state_sqe", IBV_QPS_RTS, IBV_QPS_RTS, IBV_QP_STATE | IBV_QP_CUR_STATE, cur_qp_state, IBV_QPS_SQE);
	TRY("rts_to_rtr", IBV_QPS_RTS, IBV_QPS_RTR, IBV_QP_STATE);
	TRY("rts_to_init", IBV_QPS_RTS, IBV_QPS_INIT, IBV_QP_STATE);
	TRY("rts_to_sqd", IBV_QPS_RTS, IBV_QPS_SQD, IBV_QP_STATE);
	TRY("rts_to_sqd.notify", IBV_QPS_RTS, IBV_QPS_SQD, IBV_QP_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY);
	TRY("rts_to_sqe", IBV_QPS_RTS, IBV_QPS_SQE, IBV_QP_STATE);
	TRY("rts_to_err", IBV_QPS_RTS, IBV_QPS_ERR, IBV_QP_STATE);
	TRY("rts_to_reset", IBV_QPS_RTS, IBV_QPS_RESET, IBV_QP_STATE);
	/* from SQD */
	TRY("sqd_to_sqd", IBV_QPS_SQD, IBV_QPS_SQD, IBV_QP_STATE);
	TRY("sqd_to_sqd.timeout", IBV_QPS_SQD, IBV_QPS_SQD, IBV_QP_STATE | IBV_QP_TIMEOUT);
	TRY("sqd_to_rts", IBV_QPS_SQD, IBV_QPS_RTS, IBV_QP_STATE);
	TRY("sqd_to_rts.av", IBV_QPS_SQD, IBV_QPS_RTS, IBV_QP_STATE | IBV_QP_AV);
	TRY("sqd_to_init", IBV_QPS_SQD, IBV_QPS_INIT, IBV_QP_STATE);
	TRY("sqd_to_err", IBV_QPS_SQD, IBV_QPS_ERR, IBV_QP_STATE);
	TRY("sqd_to_reset", IBV_QPS_SQD, IBV_QPS_RESET, IBV_QP_STATE);
	/* from ERR */
	TRY("err_to_rts", IBV_QPS_ERR, IBV_QPS_RTS, IBV_QP_STATE);
	TRY("err_to_init", IBV_QPS_ERR, IBV_QPS_INIT, m_init);
	TRY("err_to_err", IBV_QPS_ERR, IBV_QPS_ERR, IBV_QP_STATE);
	TRY("err_to_sqd", IBV_QPS_ERR, IBV_QPS_SQD, IBV_QP_STATE);
	TRY("err_to_reset", IBV_QPS_ERR, IBV_QPS_RESET, IBV_QP_STATE);
#undef TRY
#undef TRYA
	/* the good path on one QP, queried at each state */
	qp = mkqp(type, 4, 1, 0);
	if (qp) {
#define Q(step) (snprintf(n, sizeof n, "qp.%s.%s", t, step), n)
		show_qp(Q("reset"), qp);
		modq(Q("init"), qp, IBV_QPS_INIT, m_init, w.dq);
		show_qp(Q("init.query"), qp);
		modq(Q("rtr"), qp, IBV_QPS_RTR, m_rtr, w.dq);
		show_qp(Q("rtr.query"), qp);
		modq(Q("rts"), qp, IBV_QPS_RTS, m_rts, w.dq);
		show_qp(Q("rts.query"), qp);
		modq(Q("sqd"), qp, IBV_QPS_SQD, IBV_QP_STATE, w.dq);
		usleep(50000);
		show_qp(Q("sqd.query"), qp);
		modq(Q("sqd_rts"), qp, IBV_QPS_RTS, IBV_QP_STATE, w.dq);
		modq(Q("err"), qp, IBV_QPS_ERR, IBV_QP_STATE, w.dq);
		show_qp(Q("err.query"), qp);
		modq(Q("reset_again"), qp, IBV_QPS_RESET, IBV_QP_STATE, w.dq);
		show_qp(Q("reset_again.query"), qp);
		modq(Q("init_again"), qp, IBV_QPS_INIT, m_init, w.dq);
		CI(Q("destroy"), ibv_destroy_qp(qp));
#undef Q
	}
	CI(fmt("qp.%s.destroy_peer", t), ibv_destroy_qp(peer));
}

static void sec_qp(void)
{
	qcq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	qp_create_case("qp.create.rc", IBV_QPT_RC, 16, 16, 1, 1, 0, 0);
	qp_create_case("qp.create.uc", IBV_QPT_UC, 16, 16, 1, 1, 0, 0);
	qp_create_case("qp.create.ud", IBV_QPT_UD, 16, 16, 1, 1, 0, 0);
	qp_create_case("qp.create.xrc_send", IBV_QPT_XRC_SEND, 16, 0, 1, 0, 0, 0);
	qp_create_case("qp.create.raw_packet", IBV_QPT_RAW_PACKET, 16, 16, 1, 1, 0, 0);
	qp_create_case("qp.create.type_99", 99, 16, 16, 1, 1, 0, 0);
	qp_create_case("qp.create.wr0", IBV_QPT_RC, 0, 0, 1, 1, 0, 0);
	qp_create_case("qp.create.sge0", IBV_QPT_RC, 4, 4, 0, 0, 0, 0);
	qp_create_case("qp.create.max_wr", IBV_QPT_RC, dattr.max_qp_wr, 4, 1, 1, 0, 0);
	qp_create_case("qp.create.max_wr_plus_1", IBV_QPT_RC, dattr.max_qp_wr + 1, 4, 1, 1, 0, 0);
	qp_create_case("qp.create.recv_max_wr_plus_1", IBV_QPT_RC, 4, dattr.max_qp_wr + 1, 1, 1, 0, 0);
	qp_create_case("qp.create.max_sge", IBV_QPT_RC, 4, 4, dattr.max_sge, dattr.max_sge, 0, 0);
	qp_create_case("qp.create.max_sge_plus_1", IBV_QPT_RC, 4, 4, dattr.max_sge + 1, 1, 0, 0);
	qp_create_case("qp.create.recv_sge_plus_1", IBV_QPT_RC, 4, 4, 1, dattr.max_sge + 1, 0, 0);
	qp_create_case("qp.create.inline_64", IBV_QPT_RC, 4, 4, 1, 1, 64, 0);
	qp_create_case("qp.create.inline_4096", IBV_QPT_RC, 4, 4, 1, 1, 4096, 0);
	qp_create_case("qp.create.inline_1M", IBV_QPT_RC, 4, 4, 1, 1, 1 << 20, 0);
	qp_create_case("qp.create.rc_srq", IBV_QPT_RC, 4, 4, 1, 1, 0, 1);
	qp_create_case("qp.create.ud_srq", IBV_QPT_UD, 4, 4, 1, 1, 0, 1);
	{
		struct ibv_qp_init_attr a;
		struct ibv_qp *qp;
		memset(&a, 0, sizeof a);
		a.qp_type = IBV_QPT_RC;
		a.send_cq = qcq;
		a.recv_cq = qcq;
		a.cap.max_send_wr = a.cap.max_recv_wr = 1;
		a.cap.max_send_sge = a.cap.max_recv_sge = 1;
		a.sq_sig_all = 1;
		qp = CP("qp.create.sq_sig_all", ibv_create_qp(pd, &a));
		if (qp) {
			line("qp.create.sq_sig_all.fields", "context=%d pd=%d send_cq=%d srq=%d events=%u", qp->context == ctx, qp->pd == pd,
			     qp->send_cq == qcq, qp->srq == NULL, qp->events_completed);
			line("qp.to_qp_ex.plain", "%s", ibv_qp_to_qp_ex(qp) ? "ptr" : "NULL");
			ibv_destroy_qp(qp);
		}
	}
	{
		struct ibv_qp_init_attr_ex x;
		struct ibv_qp *qp;
		memset(&x, 0, sizeof x);
		x.qp_type = IBV_QPT_RC;
		x.send_cq = x.recv_cq = qcq;
		x.cap.max_send_wr = x.cap.max_recv_wr = 4;
		x.cap.max_send_sge = x.cap.max_recv_sge = 1;
		x.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
		x.pd = pd;
		x.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_READ;
		qp = CP("qp.create_ex.send_ops", ibv_create_qp_ex(ctx, &x));
		if (qp) {
			line("qp.to_qp_ex.ex", "%s", ibv_qp_to_qp_ex(qp) ? "ptr" : "NULL");
			ibv_destroy_qp(qp);
		}
		x.comp_mask = IBV_QP_INIT_ATTR_PD;
		qp = CP("qp.create_ex.pd_only", ibv_create_qp_ex(ctx, &x));
		if (qp)
			ibv_destroy_qp(qp);
		x.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS;
		x.create_flags = IBV_QP_CREATE_BLOCK_SELF_MCAST_LB;
		qp = CP("qp.create_ex.create_flags", ibv_create_qp_ex(ctx, &x));
		if (qp)
			ibv_destroy_qp(qp);
		x.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
		x.create_flags = 0;
		x.send_ops_flags = IBV_QP_EX_WITH_TSO;
		qp = CP("qp.create_ex.tso", ibv_create_qp_ex(ctx, &x));
		if (qp)
			ibv_destroy_qp(qp);
		x.send_ops_flags = IBV_QP_EX_WITH_ATOMIC_WRITE;
		qp = CP("qp.create_ex.atomic_write", ibv_create_qp_ex(ctx, &x));
		if (qp)
			ibv_destroy_qp(qp);
	}
	qp_walk("rc", IBV_QPT_RC, M_INIT_RC, M_RTR_RC, M_RTS_RC);
	qp_walk("uc", IBV_QPT_UC, M_INIT_RC, M_RTR_UC, M_RTS_UD);
	qp_walk("ud", IBV_QPT_UD, M_INIT_UD, IBV_QP_STATE, M_RTS_UD);
	{
		/* The CQ of a destroyed QP: its completions (a flushed receive) remain pollable. */
		struct ibv_qp *qp = mkqp(IBV_QPT_RC, 4, 1, 0);
		struct ibv_wc wc[4];
		struct ibv_recv_wr rw, *bad;
		struct ibv_sge sge;
		char *buf = malloc(64);
		struct ibv_mr *mr = ibv_reg_mr(pd, buf, 64, IBV_ACCESS_LOCAL_WRITE);
		int n, tries = 0;
		if (qp && mr) {
			modq("qp.flush.init", qp, IBV_QPS_INIT, M_INIT_RC, qp->qp_num);
			sge.addr = (uintptr_t)buf;
			sge.length = 64;
			sge.lkey = mr->lkey;
			memset(&rw, 0, sizeof rw);
			rw.wr_id = 77;
			rw.sg_list = &sge;
			rw.num_sge = 1;
			CI("qp.flush.post_recv", ibv_post_recv(qp, &rw, &bad));
			modq("qp.flush.to_err", qp, IBV_QPS_ERR, IBV_QP_STATE, 0);
			do {
				n = ibv_poll_cq(qcq, 4, wc);
				if (n == 0)
					usleep(10000);
			} while (n == 0 && ++tries < 100);
			line("qp.flush.poll", "=%d wr_id=%llu status=%s qp=%s", n, n > 0 ? (unsigned long long)wc[0].wr_id : 0ULL,
			     n > 0 ? ibv_wc_status_str(wc[0].status) : "-", n > 0 && wc[0].qp_num == qp->qp_num ? "same" : "other");
			line("qp.flush.poll.opcode", "%d", n > 0 ? (int)wc[0].opcode : -1);
			CI("qp.flush.post_recv.in_err", ibv_post_recv(qp, &rw, &bad));
			CI("qp.flush.destroy", ibv_destroy_qp(qp));
			CV("qp.flush.poll_after_destroy", ibv_poll_cq(qcq, 4, wc));
			CI("qp.flush.dereg", ibv_dereg_mr(mr));
		}
		free(buf);
	}
	{
		/* A CQ with a QP on it cannot be destroyed. */
		struct ibv_cq *c = ibv_create_cq(ctx, 4, NULL, NULL, 0);
		struct ibv_qp_init_attr a;
		struct ibv_qp *qp;
		memset(&a, 0, sizeof a);
		a.qp_type = IBV_QPT_RC;
		a.send_cq = a.recv_cq = c;
		a.cap.max_send_wr = a.cap.max_recv_wr = 1;
		a.cap.max_send_sge = a.cap.max_recv_sge = 1;
		qp = ibv_create_qp(pd, &a);
		CI("qp.cq_busy.destroy_cq", ibv_destroy_cq(c));
		if (qp)
			ibv_destroy_qp(qp);
		CI("qp.cq_busy.destroy_cq_after", ibv_destroy_cq(c));
		/* and a PD with a QP cannot be deallocated */
		{
			struct ibv_pd *p = ibv_alloc_pd(ctx);
			struct ibv_qp *q;
			c = ibv_create_cq(ctx, 4, NULL, NULL, 0);
			a.send_cq = a.recv_cq = c;
			q = ibv_create_qp(p, &a);
			CI("qp.pd_busy.dealloc", ibv_dealloc_pd(p));
			if (q)
				ibv_destroy_qp(q);
			CI("qp.pd_busy.dealloc_after", ibv_dealloc_pd(p));
			ibv_destroy_cq(c);
		}
	}
	ibv_destroy_cq(qcq);
}

/* ------------------------------------------------------------------------------------------ */
/* SRQ */

static void sec_srq(void)
{
	struct ibv_srq_init_attr a;
	struct ibv_srq_attr sa;
	struct ibv_srq *srq;
	int cases[][2] = { { 0, 1 }, { 1, 1 }, { 16, 0 }, { 16, 1 }, { -1, 1 } };
	size_t i;

	for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		memset(&a, 0, sizeof a);
		a.attr.max_wr = cases[i][0] == -1 ? (uint32_t)dattr.max_srq_wr + 1 : (uint32_t)cases[i][0];
		a.attr.max_sge = cases[i][1];
		errno = 0;
		srq = ibv_create_srq(pd, &a);
		if (!srq)
			line(fmt("srq.create.%d_%d", cases[i][0], cases[i][1]), "NULL %s", en(errno));
		else {
			line(fmt("srq.create.%d_%d", cases[i][0], cases[i][1]), "ok max_wr=%s max_sge=%s", a.attr.max_wr >= (uint32_t)cases[i][0] ? ">=" : "<",
			     a.attr.max_sge >= (uint32_t)cases[i][1] ? ">=" : "<");
			ibv_destroy_srq(srq);
		}
	}
	memset(&a, 0, sizeof a);
	a.attr.max_wr = 16;
	a.attr.max_sge = dattr.max_srq_sge + 1;
	srq = CP("srq.create.sge_plus_1", ibv_create_srq(pd, &a));
	if (srq)
		ibv_destroy_srq(srq);
	memset(&a, 0, sizeof a);
	a.attr.max_wr = 16;
	a.attr.max_sge = 1;
	a.attr.srq_limit = 20;
	srq = CP("srq.create.limit_above", ibv_create_srq(pd, &a));
	if (srq)
		ibv_destroy_srq(srq);
	a.attr.srq_limit = 4;
	srq = CP("srq.create", ibv_create_srq(pd, &a));
	if (!srq)
		return;
	memset(&sa, 0, sizeof sa);
	if (CI("srq.query", ibv_query_srq(srq, &sa)) == 0)
		line("srq.query.attr", "max_wr=%s max_sge=%u limit=%u", sa.max_wr >= 16 ? ">= 16" : "<", sa.max_sge, sa.srq_limit);
	sa.srq_limit = 8;
	CI("srq.modify.limit", ibv_modify_srq(srq, &sa, IBV_SRQ_LIMIT));
	sa.srq_limit = 5000;
	CI("srq.modify.limit_above", ibv_modify_srq(srq, &sa, IBV_SRQ_LIMIT));
	sa.max_wr = 64;
	CI("srq.modify.max_wr", ibv_modify_srq(srq, &sa, IBV_SRQ_MAX_WR));
	sa.max_wr = 2;
	CI("srq.modify.max_wr_smaller", ibv_modify_srq(srq, &sa, IBV_SRQ_MAX_WR));
	sa.max_wr = dattr.max_srq_wr + 1;
	CI("srq.modify.max_wr_above", ibv_modify_srq(srq, &sa, IBV_SRQ_MAX_WR));
	CI("srq.modify.mask0", ibv_modify_srq(srq, &sa, 0));
	CI("srq.modify.badmask", ibv_modify_srq(srq, &sa, 1 << 5));
	memset(&sa, 0, sizeof sa);
	if (CI("srq.query.after", ibv_query_srq(srq, &sa)) == 0)
		line("srq.query.after.attr", "max_wr=%s limit=%u", sa.max_wr >= 64 ? ">= 64" : fmt("%u", sa.max_wr), sa.srq_limit);
	{
		struct ibv_recv_wr w, *bad;
		struct ibv_sge sge;
		char buf[64];
		struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
		memset(&w, 0, sizeof w);
		sge.addr = (uintptr_t)buf;
		sge.length = sizeof buf;
		sge.lkey = mr ? mr->lkey : 0;
		w.sg_list = &sge;
		w.num_sge = 1;
		CI("srq.post_recv", ibv_post_srq_recv(srq, &w, &bad));
		w.num_sge = 5;
		CI("srq.post_recv.too_many_sge", ibv_post_srq_recv(srq, &w, &bad));
		if (mr)
			ibv_dereg_mr(mr);
	}
	{
		struct ibv_cq *c = ibv_create_cq(ctx, 4, NULL, NULL, 0);
		struct ibv_qp_init_attr qa;
		struct ibv_qp *qp;
		memset(&qa, 0, sizeof qa);
		qa.qp_type = IBV_QPT_RC;
		qa.send_cq = qa.recv_cq = c;
		qa.srq = srq;
		qa.cap.max_send_wr = 1;
		qa.cap.max_send_sge = 1;
		qp = ibv_create_qp(pd, &qa);
		line("srq.qp", "%s", qp ? fmt("ok srq=%d", qp->srq == srq) : en(errno));
		CI("srq.destroy.busy", ibv_destroy_srq(srq));
		if (qp)
			ibv_destroy_qp(qp);
		ibv_destroy_cq(c);
	}
	CI("srq.destroy", ibv_destroy_srq(srq));
}

/* ------------------------------------------------------------------------------------------ */
/* AH */

static void ah_case(const char *name, struct ibv_ah_attr *a)
{
	struct ibv_ah *ah;
	errno = 0;
	ah = ibv_create_ah(pd, a);
	if (!ah)
		line(name, "NULL %s", en(errno));
	else {
		line(name, "ok");
		CI(fmt("%s.destroy", name), ibv_destroy_ah(ah));
	}
}

static void sec_ah(void)
{
	struct ibv_ah_attr a;
	int i;
	memset(&a, 0, sizeof a);
	a.is_global = 1;
	a.grh.dgid = own_gid;
	a.grh.hop_limit = 64;
	a.port_num = 1;
	for (i = 0; i < 6; i++) {
		a.grh.sgid_index = i;
		ah_case(fmt("ah.grh.sgid%d", i), &a);
	}
	a.grh.sgid_index = ipv4_gid;
	a.port_num = 0;
	ah_case("ah.port0", &a);
	a.port_num = 2;
	ah_case("ah.port2", &a);
	a.port_num = 1;
	a.sl = 7;
	ah_case("ah.sl7", &a);
	a.sl = 16;
	ah_case("ah.sl16", &a);
	a.sl = 0;
	a.static_rate = IBV_RATE_10_GBPS;
	ah_case("ah.rate", &a);
	a.static_rate = 0;
	a.grh.traffic_class = 0x20;
	a.grh.flow_label = 0x12345;
	ah_case("ah.tclass_flow", &a);
	a.grh.hop_limit = 0;
	ah_case("ah.hop0", &a);
	a.grh.hop_limit = 64;
	memset(&a.grh.dgid, 0, sizeof a.grh.dgid);
	ah_case("ah.dgid_zero", &a);
	a.grh.dgid = own_gid;
	a.is_global = 0;
	a.dlid = 1;
	ah_case("ah.no_grh", &a);
	a.dlid = 0;
	ah_case("ah.no_grh.lid0", &a);
	a.is_global = 1;
	/* ::ffff:127.0.0.1 and an IPv6 loopback */
	{
		union ibv_gid g;
		memset(&g, 0, sizeof g);
		g.raw[10] = g.raw[11] = 0xff;
		g.raw[12] = 127;
		g.raw[15] = 1;
		a.grh.dgid = g;
		ah_case("ah.dgid_127", &a);
		a.grh.dgid = own_gid;
	}
	{
		/* ibv_init_ah_from_wc with a GRH from the peer's own address */
		struct ibv_wc wc;
		struct ibv_grh grh;
		struct ibv_ah_attr out;
		memset(&wc, 0, sizeof wc);
		memset(&grh, 0, sizeof grh);
		memset(&out, 0, sizeof out);
		wc.wc_flags = IBV_WC_GRH;
		wc.src_qp = 5;
		wc.sl = 0;
		/* an IPv4 header in the GRH's last 20 bytes, as rxe delivers */
		{
			unsigned char *ip = (unsigned char *)&grh + 20;
			struct in_addr in;
			inet_pton(AF_INET, local_ip, &in);
			ip[0] = 0x45;
			ip[8] = 64;
			ip[9] = 17;
			memcpy(ip + 12, &in, 4);
			memcpy(ip + 16, &in, 4);
		}
		errno = 0;
		i = ibv_init_ah_from_wc(ctx, 1, &wc, &grh, &out);
		pr_int("ah.init_from_wc", i, errno, i ? "" : fmt(" global=%u dgid=%s sgid=%u hop=%u port=%u", out.is_global,
								      !memcmp(&out.grh.dgid, &own_gid, 16) ? "own" : gidstr(&out.grh.dgid),
								      out.grh.sgid_index, out.grh.hop_limit, out.port_num));
		wc.wc_flags = 0;
		memset(&out, 0, sizeof out);
		errno = 0;
		i = ibv_init_ah_from_wc(ctx, 1, &wc, &grh, &out);
		pr_int("ah.init_from_wc.no_grh", i, errno, i ? "" : fmt(" global=%u", out.is_global));
	}
}

/* ------------------------------------------------------------------------------------------ */
/* MW */

static void sec_mw(void)
{
	struct ibv_mw *mw;
	mw = CP("mw.alloc.type1", ibv_alloc_mw(pd, IBV_MW_TYPE_1));
	if (mw) {
		line("mw.type1.fields", "type=%d pd=%d", mw->type, mw->pd == pd);
		CI("mw.dealloc.type1", ibv_dealloc_mw(mw));
	}
	mw = CP("mw.alloc.type2", ibv_alloc_mw(pd, IBV_MW_TYPE_2));
	if (mw) {
		line("mw.type2.fields", "type=%d", mw->type);
		CI("mw.dealloc.type2", ibv_dealloc_mw(mw));
	}
	mw = CP("mw.alloc.type3", ibv_alloc_mw(pd, 3));
	if (mw)
		ibv_dealloc_mw(mw);
	mw = CP("mw.alloc.type0", ibv_alloc_mw(pd, 0));
	if (mw)
		ibv_dealloc_mw(mw);
}

/* ------------------------------------------------------------------------------------------ */
/* Data path: two RC QPs of this device connected to each other, and two UD QPs */

static int poll1(struct ibv_cq *cq, struct ibv_wc *wc)
{
	int n, i;
	for (i = 0; i < 500; i++) {
		n = ibv_poll_cq(cq, 1, wc);
		if (n)
			return n;
		usleep(2000);
	}
	return 0;
}

static int wc_cmp(const void *a, const void *b)
{
	const struct ibv_wc *x = a, *y = b;
	return x->wr_id < y->wr_id ? -1 : x->wr_id > y->wr_id;
}

/* `n` completions (waiting up to a second), in wr_id order, each printed as case name.<wr_id>. */
static void poll_show(const char *name, struct ibv_cq *cq, int n)
{
	struct ibv_wc wc[8];
	int got = 0, i, tries = 0;
	while (got < n && tries++ < 500) {
		int r = ibv_poll_cq(cq, n - got, wc + got);
		if (r > 0)
			got += r;
		else
			usleep(2000);
	}
	qsort(wc, got, sizeof wc[0], wc_cmp);
	line(name, "=%d", got);
	for (i = 0; i < got; i++) {
		struct ibv_wc *w = &wc[i];
		if (w->status != IBV_WC_SUCCESS)
			line(fmt("%s.%llu", name, (unsigned long long)w->wr_id), "%s vendor_err=%s", ibv_wc_status_str(w->status), w->vendor_err ? "set" : "0");
		else
			line(fmt("%s.%llu", name, (unsigned long long)w->wr_id), "success op=%d len=%u flags=0x%x imm=0x%x src_qp=%s sl=%u pkey=%u slid=%u path_bits=%u",
			     (int)w->opcode, w->byte_len, w->wc_flags, be32toh(w->imm_data), w->src_qp ? "set" : "0", w->sl, w->pkey_index, w->slid, w->dlid_path_bits);
	}
}

static void sec_data(void)
{
	struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_qp *a = NULL, *b = NULL;
	char *buf = aligned_alloc(4096, 65536);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 65536, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
	struct ibv_qp_cap bcap;
	struct ibv_sge sge;
	struct ibv_send_wr sw, *sbad;
	struct ibv_recv_wr rw, *rbad;
	struct ibv_wc wc;

	qcq = cq;
	a = mkqp(IBV_QPT_RC, 16, 2, 64);
	b = mkqp(IBV_QPT_RC, 16, 2, 64);
	bcap = last_cap;
	if (!cq || !mr || !a || !b) {
		line("data.setup", "failed %s", en(errno));
		return;
	}
	modq("data.a.init", a, IBV_QPS_INIT, M_INIT_RC, 0);
	modq("data.b.init", b, IBV_QPS_INIT, M_INIT_RC, 0);
	modq("data.a.rtr", a, IBV_QPS_RTR, M_RTR_RC, b->qp_num);
	modq("data.b.rtr", b, IBV_QPS_RTR, M_RTR_RC, a->qp_num);
	{
		struct ibv_qp_attr at;
		fill_attr(&at, IBV_QPS_RTS, 0);
		at.sq_psn = 0x123;
		CI("data.a.rts", ibv_modify_qp(a, &at, M_RTS_RC));
		at.sq_psn = 0x123;
		CI("data.b.rts", ibv_modify_qp(b, &at, M_RTS_RC));
	}
	memset(buf, 0, 65536);
	/* SEND with immediate a -> b */
	sge.addr = (uintptr_t)buf + 4096;
	sge.length = 1000;
	sge.lkey = mr->lkey;
	memset(&rw, 0, sizeof rw);
	rw.wr_id = 1;
	rw.sg_list = &sge;
	rw.num_sge = 1;
	CI("data.post_recv", ibv_post_recv(b, &rw, &rbad));
	memset(buf, 'x', 100);
	{
		struct ibv_sge s2 = { (uintptr_t)buf, 100, mr->lkey };
		memset(&sw, 0, sizeof sw);
		sw.wr_id = 2;
		sw.sg_list = &s2;
		sw.num_sge = 1;
		sw.opcode = IBV_WR_SEND_WITH_IMM;
		sw.imm_data = htobe32(0xabcd);
		sw.send_flags = IBV_SEND_SIGNALED;
		CI("data.send", ibv_post_send(a, &sw, &sbad));
	}
	poll_show("data.send.wc", cq, 2);
	line("data.send.data", "%s", buf[4096] == 'x' && buf[4195] == 'x' && buf[4196] == 0 ? "ok" : "bad");
	{
		struct ibv_sge s2 = { (uintptr_t)buf, 8, mr->lkey };
		memset(&sw, 0, sizeof sw);
		sw.wr_id = 3;
		sw.sg_list = &s2;
		sw.num_sge = 1;
		sw.opcode = IBV_WR_RDMA_WRITE;
		sw.wr.rdma.remote_addr = (uintptr_t)buf + 8192;
		sw.wr.rdma.rkey = mr->rkey;
		sw.send_flags = IBV_SEND_SIGNALED;
		CI("data.write", ibv_post_send(a, &sw, &sbad));
		poll_show("data.write.wc", cq, 1);
		sw.wr_id = 4;
		sw.opcode = IBV_WR_RDMA_READ;
		CI("data.read", ibv_post_send(a, &sw, &sbad));
		poll_show("data.read.wc", cq, 1);
		sw.wr_id = 5;
		sw.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
		sw.wr.atomic.remote_addr = (uintptr_t)buf + 8192;
		sw.wr.atomic.rkey = mr->rkey;
		sw.wr.atomic.compare_add = 5;
		CI("data.fadd.unaligned", (sw.wr.atomic.remote_addr += 1, ibv_post_send(a, &sw, &sbad)));
		sw.wr.atomic.remote_addr -= 1;
		/* (no remote atomic right on b: a remote invalid request, and a's QP goes to error) */
		CI("data.fadd", ibv_post_send(a, &sw, &sbad));
		poll_show("data.fadd.wc", cq, 1);
	}
	{
		/* more SGEs than the QP was granted, inline data larger than granted, an unknown opcode */
		struct ibv_sge s3[64];
		int k;
		for (k = 0; k < 64; k++) {
			s3[k].addr = (uintptr_t)buf;
			s3[k].length = 8;
			s3[k].lkey = mr->lkey;
		}
		memset(&sw, 0, sizeof sw);
		sw.sg_list = s3;
		sw.num_sge = bcap.max_send_sge + 1 < 64 ? bcap.max_send_sge + 1 : 64;
		sw.opcode = IBV_WR_SEND;
		CI("data.send.too_many_sge", ibv_post_send(b, &sw, &sbad));
		sw.num_sge = 1;
		s3[0].length = bcap.max_inline_data + 1;
		sw.send_flags = IBV_SEND_INLINE;
		CI("data.send.inline_too_big", ibv_post_send(b, &sw, &sbad));
		memset(&rw, 0, sizeof rw);
		rw.sg_list = s3;
		rw.num_sge = bcap.max_recv_sge + 1 < 64 ? bcap.max_recv_sge + 1 : 64;
		CI("data.recv.too_many_sge", ibv_post_recv(b, &rw, &rbad));
	}
	while (ibv_poll_cq(cq, 1, &wc) > 0)
		;
	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	/* UD: b receives from a, the GRH area first */
	a = mkqp(IBV_QPT_UD, 16, 1, 0);
	b = mkqp(IBV_QPT_UD, 16, 1, 0);
	if (a && b) {
		struct ibv_ah_attr ah_attr;
		struct ibv_ah *ah;
		modq("data.ud.a.init", a, IBV_QPS_INIT, M_INIT_UD, 0);
		modq("data.ud.b.init", b, IBV_QPS_INIT, M_INIT_UD, 0);
		modq("data.ud.a.rtr", a, IBV_QPS_RTR, IBV_QP_STATE, 0);
		modq("data.ud.b.rtr", b, IBV_QPS_RTR, IBV_QP_STATE, 0);
		modq("data.ud.a.rts", a, IBV_QPS_RTS, M_RTS_UD, 0);
		modq("data.ud.b.rts", b, IBV_QPS_RTS, M_RTS_UD, 0);
		sge.addr = (uintptr_t)buf + 4096;
		sge.length = 1000;
		sge.lkey = mr->lkey;
		memset(&rw, 0, sizeof rw);
		rw.wr_id = 11;
		rw.sg_list = &sge;
		rw.num_sge = 1;
		CI("data.ud.post_recv", ibv_post_recv(b, &rw, &rbad));
		memset(&ah_attr, 0, sizeof ah_attr);
		ah_attr.is_global = 1;
		ah_attr.grh.dgid = own_gid;
		ah_attr.grh.sgid_index = ipv4_gid;
		ah_attr.grh.hop_limit = 64;
		ah_attr.port_num = 1;
		ah = ibv_create_ah(pd, &ah_attr);
		{
			struct ibv_sge s2 = { (uintptr_t)buf, 100, mr->lkey };
			memset(&sw, 0, sizeof sw);
			sw.wr_id = 12;
			sw.sg_list = &s2;
			sw.num_sge = 1;
			sw.opcode = IBV_WR_SEND_WITH_IMM;
			sw.imm_data = htobe32(0x1234);
			sw.send_flags = IBV_SEND_SIGNALED;
			sw.wr.ud.ah = ah;
			sw.wr.ud.remote_qpn = b->qp_num;
			sw.wr.ud.remote_qkey = 0x11111111;
			CI("data.ud.send", ibv_post_send(a, &sw, &sbad));
			sw.wr_id = 13;
			sw.wr.ud.remote_qkey = 0x22222222;
			CI("data.ud.send.bad_qkey", ibv_post_send(a, &sw, &sbad));
		}
		poll_show("data.ud.wc", cq, 3);
		{
			unsigned char *g = (unsigned char *)buf + 4096;
			struct in_addr in;
			struct ibv_wc w;
			struct ibv_ah_attr out;
			inet_pton(AF_INET, local_ip, &in);
			line("data.ud.grh", "ipv4=%d proto=%u src=%s dst=%s zero20=%d", g[20] == 0x45, g[29], !memcmp(g + 32, &in, 4) ? "own" : "other",
			     !memcmp(g + 36, &in, 4) ? "own" : "other", !memcmp(g, "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 20));
			memset(&w, 0, sizeof w);
			w.wc_flags = IBV_WC_GRH;
			w.src_qp = a->qp_num;
			memset(&out, 0, sizeof out);
			errno = 0;
			int n = ibv_init_ah_from_wc(ctx, 1, &w, (struct ibv_grh *)g, &out);
			pr_int("data.ud.init_ah_from_wc", n, errno, n ? "" : fmt(" global=%u dgid=%s sgid=%u hop=%u tclass=%u flow=%u", out.is_global,
								       !memcmp(&out.grh.dgid, &own_gid, 16) ? "own" : gidstr(&out.grh.dgid),
								       out.grh.sgid_index, out.grh.hop_limit, out.grh.traffic_class, out.grh.flow_label));
		}
		if (ah)
			ibv_destroy_ah(ah);
	}
	if (a)
		ibv_destroy_qp(a);
	if (b)
		ibv_destroy_qp(b);
	/* Traffic from and to every GID the port lists (the first four): a UD datagram and an RC
	 * SEND between two QPs of this device, each addressed by GID index i. */
	for (int i = 0; i < gid_len && i < 4; i++) {
		union ibv_gid g;
		struct ibv_qp_attr at;
		if (ibv_query_gid(ctx, 1, i, &g) || !memcmp(g.raw, "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 16))
			continue;
		line(fmt("data.gid%d", i), "%s", !memcmp(&g, &own_gid, 16) ? "own ipv4" : g.raw[0] == 0xfe ? "link-local" : "other");
		/* UD */
		a = mkqp(IBV_QPT_UD, 4, 1, 0);
		b = mkqp(IBV_QPT_UD, 4, 1, 0);
		if (a && b) {
			struct ibv_ah_attr aa;
			struct ibv_ah *ah;
			modq(fmt("data.gid%d.ud.init", i), a, IBV_QPS_INIT, M_INIT_UD, 0);
			modq(fmt("data.gid%d.ud.init_b", i), b, IBV_QPS_INIT, M_INIT_UD, 0);
			fill_attr(&at, IBV_QPS_RTR, 0);
			ibv_modify_qp(a, &at, IBV_QP_STATE);
			ibv_modify_qp(b, &at, IBV_QP_STATE);
			fill_attr(&at, IBV_QPS_RTS, 0);
			ibv_modify_qp(a, &at, M_RTS_UD);
			ibv_modify_qp(b, &at, M_RTS_UD);
			sge.addr = (uintptr_t)buf + 4096;
			sge.length = 1000;
			sge.lkey = mr->lkey;
			memset(&rw, 0, sizeof rw);
			rw.wr_id = 21;
			rw.sg_list = &sge;
			rw.num_sge = 1;
			ibv_post_recv(b, &rw, &rbad);
			memset(&aa, 0, sizeof aa);
			aa.is_global = 1;
			aa.grh.dgid = g;
			aa.grh.sgid_index = i;
			aa.grh.hop_limit = 64;
			aa.port_num = 1;
			ah = CP(fmt("data.gid%d.ud.ah", i), ibv_create_ah(pd, &aa));
			if (ah) {
				struct ibv_sge s2 = { (uintptr_t)buf, 64, mr->lkey };
				memset(&sw, 0, sizeof sw);
				sw.wr_id = 22;
				sw.sg_list = &s2;
				sw.num_sge = 1;
				sw.opcode = IBV_WR_SEND;
				sw.send_flags = IBV_SEND_SIGNALED;
				sw.wr.ud.ah = ah;
				sw.wr.ud.remote_qpn = b->qp_num;
				sw.wr.ud.remote_qkey = 0x11111111;
				CI(fmt("data.gid%d.ud.send", i), ibv_post_send(a, &sw, &sbad));
				poll_show(fmt("data.gid%d.ud.wc", i), cq, 2);
				ibv_destroy_ah(ah);
			}
		}
		if (a)
			ibv_destroy_qp(a);
		if (b)
			ibv_destroy_qp(b);
		/* RC */
		a = mkqp(IBV_QPT_RC, 4, 1, 0);
		b = mkqp(IBV_QPT_RC, 4, 1, 0);
		if (a && b) {
			modq(fmt("data.gid%d.rc.init", i), a, IBV_QPS_INIT, M_INIT_RC, 0);
			modq(fmt("data.gid%d.rc.init_b", i), b, IBV_QPS_INIT, M_INIT_RC, 0);
			fill_attr(&at, IBV_QPS_RTR, b->qp_num);
			at.ah_attr.grh.dgid = g;
			at.ah_attr.grh.sgid_index = i;
			CI(fmt("data.gid%d.rc.rtr", i), ibv_modify_qp(a, &at, M_RTR_RC));
			at.dest_qp_num = a->qp_num;
			CI(fmt("data.gid%d.rc.rtr_b", i), ibv_modify_qp(b, &at, M_RTR_RC));
			fill_attr(&at, IBV_QPS_RTS, 0);
			at.sq_psn = 0x123;
			ibv_modify_qp(a, &at, M_RTS_RC);
			ibv_modify_qp(b, &at, M_RTS_RC);
			sge.addr = (uintptr_t)buf + 4096;
			sge.length = 1000;
			sge.lkey = mr->lkey;
			memset(&rw, 0, sizeof rw);
			rw.wr_id = 31;
			rw.sg_list = &sge;
			rw.num_sge = 1;
			ibv_post_recv(b, &rw, &rbad);
			{
				struct ibv_sge s2 = { (uintptr_t)buf, 64, mr->lkey };
				memset(&sw, 0, sizeof sw);
				sw.wr_id = 32;
				sw.sg_list = &s2;
				sw.num_sge = 1;
				sw.opcode = IBV_WR_SEND;
				sw.send_flags = IBV_SEND_SIGNALED;
				CI(fmt("data.gid%d.rc.send", i), ibv_post_send(a, &sw, &sbad));
			}
			poll_show(fmt("data.gid%d.rc.wc", i), cq, 2);
		}
		if (a)
			ibv_destroy_qp(a);
		if (b)
			ibv_destroy_qp(b);
	}
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	free(buf);
}

/* ------------------------------------------------------------------------------------------ */
/* rdma_cm: one id at a time */

static struct sockaddr_in sin4(const char *ip, int port)
{
	struct sockaddr_in a;
	memset(&a, 0, sizeof a);
	a.sin_family = AF_INET;
	a.sin_port = htons(port);
	inet_pton(AF_INET, ip, &a.sin_addr);
	return a;
}

static struct sockaddr_in6 sin6(const char *ip, int port)
{
	struct sockaddr_in6 a;
	memset(&a, 0, sizeof a);
	a.sin6_family = AF_INET6;
	a.sin6_port = htons(port);
	inet_pton(AF_INET6, ip, &a.sin6_addr);
	return a;
}

#define SA(x) ((struct sockaddr *)&(x))

/* An address as "own:P", "any:eph", ... (P when the port is `port`). */
static const char *sastr(struct sockaddr *sa, int port)
{
	static char b[4][80];
	static int i;
	char ip[INET6_ADDRSTRLEN] = "?";
	const char *host = ip;
	int p = 0;
	i = (i + 1) % 4;
	if (sa->sa_family == AF_INET) {
		struct sockaddr_in *s = (struct sockaddr_in *)sa;
		struct in_addr own;
		inet_pton(AF_INET, local_ip, &own);
		p = ntohs(s->sin_port);
		if (s->sin_addr.s_addr == own.s_addr)
			host = "own";
		else if (s->sin_addr.s_addr == 0)
			host = "any";
		else
			inet_ntop(AF_INET, &s->sin_addr, ip, sizeof ip);
	} else if (sa->sa_family == AF_INET6) {
		struct sockaddr_in6 *s = (struct sockaddr_in6 *)sa;
		p = ntohs(s->sin6_port);
		if (IN6_IS_ADDR_UNSPECIFIED(&s->sin6_addr))
			host = "any6";
		else
			inet_ntop(AF_INET6, &s->sin6_addr, ip, sizeof ip);
	} else if (sa->sa_family == 0)
		return "unset";
	else
		host = fmt("family%d", sa->sa_family);
	snprintf(b[i], sizeof b[i], "%s:%s", host, p == 0 ? "0" : p == port ? "P" : "eph");
	return b[i];
}

static const char *idstr(struct rdma_cm_id *id, int port)
{
	return fmt("src=%s dst=%s verbs=%s port_num=%u", sastr(rdma_get_local_addr(id), port), sastr(rdma_get_peer_addr(id), port),
		   id->verbs == NULL ? "NULL" : id->verbs->device == dev ? "dev" : "other", id->port_num);
}

static struct rdma_event_channel *mkch(void)
{
	struct rdma_event_channel *c = rdma_create_event_channel();
	if (c)
		fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK);
	return c;
}

/* The next event within `ms` (TIMEWAIT_EXIT skipped: when the kernel reports it depends on
 * its timers), or NULL. */
static struct rdma_cm_event *ev_wait(struct rdma_event_channel *c, int ms)
{
	struct rdma_cm_event *e;
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		struct pollfd p = { c->fd, POLLIN, 0 };
		long el;
		if (rdma_get_cm_event(c, &e) == 0) {
			if (e->event == RDMA_CM_EVENT_TIMEWAIT_EXIT) {
				rdma_ack_cm_event(e);
				continue;
			}
			return e;
		}
		if (errno != EAGAIN)
			return NULL;
		clock_gettime(CLOCK_MONOTONIC, &t);
		el = (t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000;
		if (el >= ms)
			return NULL;
		poll(&p, 1, ms - el < 50 ? ms - el : 50);
	}
}

static const char *evname(int e)
{
	const char *s = rdma_event_str(e);
	return strncmp(s, "RDMA_CM_EVENT_", 14) == 0 ? s + 14 : s;
}

static uint8_t pdbyte(int i)
{
	return (uint8_t)(i * 7 + 1);
}

/* Whether `len` bytes of private data are the pattern for `sent` bytes (then zeros). */
static const char *pdcheck(const void *p, int len, int sent)
{
	const uint8_t *b = p;
	int i;
	if (len && !p)
		return "NULL";
	for (i = 0; i < len; i++)
		if (b[i] != (i < sent ? pdbyte(i) : 0))
			return "bad";
	return "ok";
}

/* Prints the next event on `c` as case `name`; returns it (not acknowledged) or NULL. */
static struct rdma_cm_event *ev_line(const char *name, struct rdma_event_channel *c, int ms, int sent)
{
	struct rdma_cm_event *e = ev_wait(c, ms);
	if (!e) {
		line(name, "no event");
		return NULL;
	}
	if (e->event == RDMA_CM_EVENT_CONNECT_REQUEST || e->event == RDMA_CM_EVENT_ESTABLISHED || e->event == RDMA_CM_EVENT_REJECTED ||
	    e->event == RDMA_CM_EVENT_CONNECT_RESPONSE || e->event == RDMA_CM_EVENT_UNREACHABLE) {
		if (e->id->qp_type == IBV_QPT_UD || (e->id->ps == RDMA_PS_UDP))
			line(name, "%s status=%d pd=%d data=%s", evname(e->event), e->status, e->param.ud.private_data_len,
			     pdcheck(e->param.ud.private_data, e->param.ud.private_data_len, sent));
		else
			line(name, "%s status=%d pd=%d data=%s", evname(e->event), e->status, e->param.conn.private_data_len,
			     pdcheck(e->param.conn.private_data, e->param.conn.private_data_len, sent));
	} else
		line(name, "%s status=%d", evname(e->event), e->status);
	return e;
}

/* The next event, printed, then acknowledged; its type (-1: none). */
static int ev_ack(const char *name, struct rdma_event_channel *c, int ms)
{
	struct rdma_cm_event *e = ev_line(name, c, ms, 0);
	int t;
	if (!e)
		return -1;
	t = e->event;
	rdma_ack_cm_event(e);
	return t;
}

static void init_attr_case(const char *name, struct rdma_cm_id *id, int state, uint32_t peer_qpn)
{
	struct ibv_qp_attr a;
	int mask = 0, r;
	char s[512] = "";
	memset(&a, 0, sizeof a);
	a.qp_state = state;
	errno = 0;
	r = rdma_init_qp_attr(id, &a, &mask);
	if (r) {
		pr_int(name, r, errno, "");
		return;
	}
#define ADD(...) snprintf(s + strlen(s), sizeof s - strlen(s), __VA_ARGS__)
	ADD(" mask=0x%x state=%s", mask, qps(a.qp_state));
	if (mask & IBV_QP_ACCESS_FLAGS)
		ADD(" access=0x%x", a.qp_access_flags);
	if (mask & IBV_QP_PKEY_INDEX)
		ADD(" pkey=%u", a.pkey_index);
	if (mask & IBV_QP_PORT)
		ADD(" port=%u", a.port_num);
	if (mask & IBV_QP_QKEY)
		ADD(" qkey=0x%x", a.qkey);
	if (mask & IBV_QP_AV)
		ADD(" av=global:%u,sgid:%u,hop:%u,tclass:%u,sl:%u,port:%u,dgid:%s,rate:%u", a.ah_attr.is_global, a.ah_attr.grh.sgid_index,
		    a.ah_attr.grh.hop_limit, a.ah_attr.grh.traffic_class, a.ah_attr.sl, a.ah_attr.port_num,
		    !memcmp(&a.ah_attr.grh.dgid, &own_gid, 16) ? "own" : gidstr(&a.ah_attr.grh.dgid), a.ah_attr.static_rate);
	if (mask & IBV_QP_PATH_MTU)
		ADD(" mtu=%d", a.path_mtu);
	if (mask & IBV_QP_DEST_QPN)
		ADD(" dqpn=%s", a.dest_qp_num == peer_qpn ? "peer" : "other");
	if (mask & IBV_QP_RQ_PSN)
		ADD(" rq_psn=%s", a.rq_psn <= 0xffffff ? "24bit" : "big");
	if (mask & IBV_QP_SQ_PSN)
		ADD(" sq_psn=%s", a.sq_psn <= 0xffffff ? "24bit" : "big");
	if (mask & IBV_QP_MAX_DEST_RD_ATOMIC)
		ADD(" dest_rd=%u", a.max_dest_rd_atomic);
	if (mask & IBV_QP_MIN_RNR_TIMER)
		ADD(" min_rnr=%u", a.min_rnr_timer);
	if (mask & IBV_QP_MAX_QP_RD_ATOMIC)
		ADD(" rd=%u", a.max_rd_atomic);
	if (mask & IBV_QP_RETRY_CNT)
		ADD(" retry=%u", a.retry_cnt);
	if (mask & IBV_QP_RNR_RETRY)
		ADD(" rnr_retry=%u", a.rnr_retry);
	if (mask & IBV_QP_TIMEOUT)
		ADD(" timeout=%u", a.timeout);
	if (mask & IBV_QP_PATH_MIG_STATE)
		ADD(" mig=%u", a.path_mig_state);
#undef ADD
	line(name, "ok%s", s);
}

static void init_attrs(const char *name, struct rdma_cm_id *id, uint32_t peer_qpn)
{
	static const int st[] = { IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS, IBV_QPS_SQD, IBV_QPS_ERR };
	size_t i;
	for (i = 0; i < sizeof st / sizeof st[0]; i++)
		init_attr_case(fmt("%s.%s", name, qps(st[i])), id, st[i], peer_qpn);
}

static void show_route(const char *name, struct rdma_cm_id *id)
{
	struct ibv_sa_path_rec *p = id->route.path_rec;
	line(name, "num_paths=%d", id->route.num_paths);
	if (p && id->route.num_paths > 0)
		line(fmt("%s.path", name), "dgid=%s sgid=%s pkey=0x%x mtu=%u rate=%u hop=%u tclass=%u sl=%u plt=%u reversible=%u flow=%s",
		     !memcmp(&p->dgid, &own_gid, 16) ? "own" : gidstr(&p->dgid), !memcmp(&p->sgid, &own_gid, 16) ? "own" : gidstr(&p->sgid),
		     be16toh(p->pkey), p->mtu, p->rate, p->hop_limit, p->traffic_class, p->sl, p->packet_life_time, p->reversible,
		     p->flow_label ? "set" : "0");
	line(fmt("%s.addr", name), "sgid=%s dgid=%s pkey=0x%x", !memcmp(&id->route.addr.addr.ibaddr.sgid, &own_gid, 16) ? "own" : gidstr(&id->route.addr.addr.ibaddr.sgid),
	     !memcmp(&id->route.addr.addr.ibaddr.dgid, &own_gid, 16) ? "own" : gidstr(&id->route.addr.addr.ibaddr.dgid), be16toh(id->route.addr.addr.ibaddr.pkey));
}

static int port(int n)
{
	return port_base + n;
}

static void sec_cm(void)
{
	struct rdma_event_channel *ch = mkch(), *ch2;
	struct rdma_cm_id *id, *id2, *id3, *l;
	struct sockaddr_in a;
	struct sockaddr_in6 a6;
	int ps[] = { RDMA_PS_TCP, RDMA_PS_UDP, RDMA_PS_IB, RDMA_PS_IPOIB, 0x0001, 0, 0x9999 };
	size_t i;
	int r, v;
	uint8_t b;

	line("cm.channel", "%s", ch ? "ok" : en(errno));
	for (i = 0; i < sizeof ps / sizeof ps[0]; i++) {
		id = NULL;
		errno = 0;
		r = rdma_create_id(ch, &id, (void *)0x55, ps[i]);
		pr_int(fmt("cm.create_id.ps_0x%x", ps[i]), r, errno,
		       r ? "" : fmt(" qp_type=%d ps=0x%x context=%d channel=%d verbs=%s qp=%s", id->qp_type, id->ps, id->context == (void *)0x55, id->channel == ch,
				    id->verbs ? "set" : "NULL", id->qp ? "set" : "NULL"));
		if (!r)
			CI(fmt("cm.destroy_id.ps_0x%x", ps[i]), rdma_destroy_id(id));
	}
	r = CI("cm.create_id.sync", rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP));
	if (!r) {
		line("cm.create_id.sync.channel", "%s", id->channel ? "own" : "NULL");
		CI("cm.destroy_id.sync", rdma_destroy_id(id));
	}

	/* bind */
	rdma_create_id(ch, &id, NULL, RDMA_PS_TCP);
	a = sin4("0.0.0.0", port(1));
	CI("cm.bind.wildcard", rdma_bind_addr(id, SA(a)));
	line("cm.bind.wildcard.id", "%s", idstr(id, port(1)));
	CI("cm.bind.again", rdma_bind_addr(id, SA(a)));
	rdma_create_id(ch, &id2, NULL, RDMA_PS_TCP);
	a = sin4(local_ip, port(1));
	CI("cm.bind.specific_on_wildcard_port", rdma_bind_addr(id2, SA(a)));
	rdma_destroy_id(id2);
	rdma_create_id(ch, &id2, NULL, RDMA_PS_TCP);
	a = sin4("0.0.0.0", port(1));
	CI("cm.bind.wildcard_in_use", rdma_bind_addr(id2, SA(a)));
	rdma_destroy_id(id2);
	rdma_destroy_id(id);

	rdma_create_id(ch, &id, NULL, RDMA_PS_TCP);
	a = sin4(local_ip, port(2));
	CI("cm.bind.specific", rdma_bind_addr(id, SA(a)));
	line("cm.bind.specific.id", "%s", idstr(id, port(2)));
	line("cm.bind.specific.ports", "src=%s dst=%u", ntohs(rdma_get_src_port(id)) == port(2) ? "P" : "other", ntohs(rdma_get_dst_port(id)));
	rdma_create_id(ch, &id2, NULL, RDMA_PS_TCP);
	CI("cm.bind.specific_in_use", rdma_bind_addr(id2, SA(a)));
	rdma_destroy_id(id2);
	rdma_create_id(ch, &id2, NULL, RDMA_PS_TCP);
	a = sin4("0.0.0.0", port(2));
	CI("cm.bind.wildcard_on_specific_port", rdma_bind_addr(id2, SA(a)));
	rdma_destroy_id(id2);
	rdma_create_id(ch, &id2, NULL, RDMA_PS_UDP);
	a = sin4(local_ip, port(2));
	CI("cm.bind.same_port_other_ps", rdma_bind_addr(id2, SA(a)));
	rdma_destroy_id(id2);
	rdma_create_id(ch, &id2, NULL, RDMA_PS_TCP);
	v = 1;
	CI("cm.bind.reuseaddr.set", rdma_set_option(id2, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &v, sizeof v));
	CI("cm.bind.reuseaddr.in_use", rdma_bind_addr(id2, SA(a)));
	rdma_destroy_id(id2);
	rdma_destroy_id(id);

	rdma_create_id(ch, &id, NULL, RDMA_PS_TCP);
	a = sin4(local_ip, 0);
	CI("cm.bind.port0", rdma_bind_addr(id, SA(a)));
	line("cm.bind.port0.id", "%s", idstr(id, 0));
	rdma_destroy_id(id);
	rdma_create_id(ch, &id, NULL, RDMA_PS_TCP);
	a = sin4("0.0.0.0", 0);
	CI("cm.bind.wildcard_port0", rdma_bind_addr(id, SA(a)));
	line("cm.bind.wildcard_port0.id", "%s", idstr(id, 0));
	rdma_destroy_id(id);
	{
		static const char *other[] = { "127.0.0.1", "10.77.0.99", "192.0.2.1" };
		for (i = 0; i < 3; i++) {
			rdma_create_id(ch, &id, NULL, RDMA_PS_TCP);
			a = sin4(other[i], port(3));
			CI(fmt("cm.bind.%s", other[i]), rdma_bind_addr(id, SA(a)));
			rdma_destroy_id(id);
		}
	}
	rdma_create_id(ch, &id, NULL, RDMA_PS_TCP);
	a6 = sin6("::", port(4));
	CI("cm.bind.wildcard6", rdma_bind_addr(id, SA(a6)));
	line("cm.bind.wildcard6.id", "%s", idstr(id, port(4)));
	rdma_create_id(ch, &id2, NULL, RDMA_PS_TCP);
	a = sin4("0.0.0.0", port(4));
	CI("cm.bind.wildcard4_on_wildcard6", rdma_bind_addr(id2, SA(a)));
	rdma_destroy_id(id2);
	rdma_destroy_id(id);
	rdma_create_id(ch, &id, NULL, RDMA_PS_TCP);
	a6 = sin6("::1", port(5));
	CI("cm.bind.loopback6", rdma_bind_addr(id, SA(a6)));
	rdma_destroy_id(id);
	rdma_create_id(ch, &id, NULL, RDMA_PS_TCP);
	a = sin4(local_ip, port(5));
	a.sin_family = AF_UNSPEC;
	CI("cm.bind.unspec", rdma_bind_addr(id, SA(a)));
	rdma_destroy_id(id);

	/* listen */
	rdma_create_id(ch, &id, NULL, RDMA_PS_TCP);
	CI("cm.listen.unbound", rdma_listen(id, 1));
	line("cm.listen.unbound.id", "%s", idstr(id, 0));
	CI("cm.listen.twice", rdma_listen(id, 1));
	rdma_destroy_id(id);
	rdma_create_id(ch, &l, NULL, RDMA_PS_TCP);
	a = sin4(local_ip, port(6));
	rdma_bind_addr(l, SA(a));
	CI("cm.listen.bound", rdma_listen(l, 0));
	line("cm.listen.bound.id", "%s", idstr(l, port(6)));
	rdma_create_id(ch, &id2, NULL, RDMA_PS_TCP);
	CI("cm.bind.listening_port", rdma_bind_addr(id2, SA(a)));
	rdma_destroy_id(id2);
	rdma_create_id(ch, &id, NULL, RDMA_PS_TCP);
	a = sin4(local_ip, port(7));
	rdma_bind_addr(id, SA(a));
	CI("cm.listen.backlog_neg", rdma_listen(id, -1));
	rdma_destroy_id(id);
	rdma_create_id(ch, &id, NULL, RDMA_PS_UDP);
	a = sin4(local_ip, port(6));
	rdma_bind_addr(id, SA(a));
	CI("cm.listen.udp", rdma_listen(id, 4));
	init_attrs("cm.init_qp_attr.udp_listen", id, 0);
	rdma_destroy_id(id);

	/* resolve_addr and resolve_route */
	rdma_create_id(ch, &id, NULL, RDMA_PS_TCP);
	/* (rdma_resolve_route on an id without a device: librdmacm dereferences id->verbs) */
	init_attrs("cm.init_qp_attr.idle", id, 0);
	a = sin4(local_ip, port(6));
	CI("cm.resolve_addr", rdma_resolve_addr(id, NULL, SA(a), 2000));
	ev_ack("cm.resolve_addr.event", ch, 5000);
	line("cm.resolve_addr.id", "%s", idstr(id, port(6)));
	init_attrs("cm.init_qp_attr.addr_resolved", id, 0);
	CI("cm.listen.resolved", rdma_listen(id, 1));
	CI("cm.resolve_addr.again", rdma_resolve_addr(id, NULL, SA(a), 2000));
	ev_ack("cm.resolve_addr.again.event", ch, 1000);
	CI("cm.resolve_route", rdma_resolve_route(id, 2000));
	ev_ack("cm.resolve_route.event", ch, 5000);
	show_route("cm.resolve_route.route", id);
	init_attrs("cm.init_qp_attr.route_resolved", id, 0);
	CI("cm.resolve_route.again", rdma_resolve_route(id, 2000));
	ev_ack("cm.resolve_route.again.event", ch, 1000);
	CI("cm.resolve_addr.after_route", rdma_resolve_addr(id, NULL, SA(a), 2000));
	ev_ack("cm.resolve_addr.after_route.event", ch, 1000);
	rdma_destroy_id(id);

	{
		static const struct {
			const char *n, *ip;
			int port, ms;
		} dst[] = {
			{ "port0", NULL, 0, 2000 },
			{ "timeout0", NULL, 9, 0 },
			{ "any", "0.0.0.0", 9, 2000 },
			{ "loopback", "127.0.0.1", 9, 2000 },
			{ "unreachable", "10.77.0.99", 9, 1000 },
			{ "noroute", "192.0.2.1", 9, 1000 },
		};
		for (i = 0; i < sizeof dst / sizeof dst[0]; i++) {
			rdma_create_id(ch, &id, NULL, RDMA_PS_TCP);
			a = sin4(dst[i].ip ? dst[i].ip : local_ip, dst[i].port ? port(dst[i].port) : 0);
			r = CI(fmt("cm.resolve_addr.%s", dst[i].n), rdma_resolve_addr(id, NULL, SA(a), dst[i].ms));
			if (r == 0) {
				int t = ev_ack(fmt("cm.resolve_addr.%s.event", dst[i].n), ch, 8000);
				line(fmt("cm.resolve_addr.%s.id", dst[i].n), "%s", idstr(id, port(dst[i].port)));
				if (t == RDMA_CM_EVENT_ADDR_RESOLVED) {
					CI(fmt("cm.resolve_addr.%s.route", dst[i].n), rdma_resolve_route(id, 2000));
					ev_ack(fmt("cm.resolve_addr.%s.route.event", dst[i].n), ch, 5000);
				}
			}
			rdma_destroy_id(id);
		}
	}
	rdma_create_id(ch, &id, NULL, RDMA_PS_TCP);
	a = sin4(local_ip, port(6));
	{
		struct sockaddr_in s = sin4(local_ip, 0);
		CI("cm.resolve_addr.src", rdma_resolve_addr(id, SA(s), SA(a), 2000));
		ev_ack("cm.resolve_addr.src.event", ch, 5000);
		line("cm.resolve_addr.src.id", "%s", idstr(id, port(6)));
	}
	rdma_destroy_id(id);
	rdma_create_id(ch, &id, NULL, RDMA_PS_TCP);
	{
		struct sockaddr_in s = sin4(local_ip, port(8));
		CI("cm.resolve_addr.src_port", rdma_resolve_addr(id, SA(s), SA(a), 2000));
		ev_ack("cm.resolve_addr.src_port.event", ch, 5000);
		line("cm.resolve_addr.src_port.id", "%s", idstr(id, port(8)));
	}
	rdma_destroy_id(id);
	rdma_create_id(ch, &id, NULL, RDMA_PS_TCP);
	a6 = sin6("::", 0);
	CI("cm.resolve_addr.src6_dst4", rdma_resolve_addr(id, SA(a6), SA(a), 2000));
	ev_ack("cm.resolve_addr.src6_dst4.event", ch, 1000);
	rdma_destroy_id(id);
	rdma_create_id(ch, &id, NULL, RDMA_PS_TCP);
	a.sin_family = AF_UNSPEC;
	CI("cm.resolve_addr.unspec", rdma_resolve_addr(id, NULL, SA(a), 2000));
	rdma_destroy_id(id);
	rdma_create_id(ch, &id, NULL, RDMA_PS_TCP);
	a6 = sin6("::1", port(6));
	r = CI("cm.resolve_addr.loopback6", rdma_resolve_addr(id, NULL, SA(a6), 2000));
	if (!r)
		ev_ack("cm.resolve_addr.loopback6.event", ch, 5000);
	rdma_destroy_id(id);
	rdma_create_id(ch, &id, NULL, RDMA_PS_TCP);
	a = sin4(local_ip, port(6));
	a6 = sin6("::", port(9));
	rdma_bind_addr(id, SA(a6));
	r = CI("cm.resolve_addr.bound6_dst4", rdma_resolve_addr(id, NULL, SA(a), 2000));
	if (!r)
		ev_ack("cm.resolve_addr.bound6_dst4.event", ch, 5000);
	rdma_destroy_id(id);
	rdma_create_id(ch, &id, NULL, RDMA_PS_UDP);
	r = CI("cm.resolve_addr.udp", rdma_resolve_addr(id, NULL, SA(a), 2000));
	if (!r) {
		ev_ack("cm.resolve_addr.udp.event", ch, 5000);
		init_attrs("cm.init_qp_attr.udp_addr_resolved", id, 0);
		CI("cm.resolve_route.udp", rdma_resolve_route(id, 2000));
		ev_ack("cm.resolve_route.udp.event", ch, 5000);
		init_attrs("cm.init_qp_attr.udp_route_resolved", id, 0);
	}
	rdma_destroy_id(id);
	rdma_create_id(ch, &id, NULL, RDMA_PS_IPOIB);
	r = CI("cm.resolve_addr.ipoib", rdma_resolve_addr(id, NULL, SA(a), 2000));
	if (!r) {
		ev_ack("cm.resolve_addr.ipoib.event", ch, 5000);
		init_attrs("cm.init_qp_attr.ipoib", id, 0);
	}
	rdma_destroy_id(id);
	/* a bound id: device known, no connection */
	rdma_create_id(ch, &id, NULL, RDMA_PS_TCP);
	a = sin4(local_ip, 0);
	rdma_bind_addr(id, SA(a));
	init_attrs("cm.init_qp_attr.bound", id, 0);
	rdma_destroy_id(id);

	/* set_option */
	rdma_create_id(ch, &id, NULL, RDMA_PS_TCP);
	b = 32;
	CI("cm.set_option.tos", rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &b, 1));
	v = 32;
	CI("cm.set_option.tos_int", rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &v, sizeof v));
	b = 18;
	CI("cm.set_option.ack_timeout", rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &b, 1));
	b = 40;
	CI("cm.set_option.ack_timeout_40", rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &b, 1));
	v = 1;
	CI("cm.set_option.reuseaddr", rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &v, sizeof v));
	CI("cm.set_option.reuseaddr_byte", rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &b, 1));
	CI("cm.set_option.afonly", rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &v, sizeof v));
	CI("cm.set_option.unknown_name", rdma_set_option(id, RDMA_OPTION_ID, 42, &v, sizeof v));
	CI("cm.set_option.unknown_level", rdma_set_option(id, 42, RDMA_OPTION_ID_TOS, &b, 1));
	CI("cm.set_option.null", rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, NULL, 1));
	CI("cm.set_option.len0", rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &b, 0));
	{
		struct ibv_path_data pd0;
		memset(&pd0, 0, sizeof pd0);
		CI("cm.set_option.ib_path.idle", rdma_set_option(id, RDMA_OPTION_IB, RDMA_OPTION_IB_PATH, &pd0, sizeof pd0));
		CI("cm.set_option.ib_path.badlen", rdma_set_option(id, RDMA_OPTION_IB, RDMA_OPTION_IB_PATH, &pd0, 3));
	}
	a = sin4(local_ip, 0);
	rdma_bind_addr(id, SA(a));
	v = 0;
	CI("cm.set_option.afonly.bound", rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &v, sizeof v));
	CI("cm.set_option.reuseaddr.bound", rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &v, sizeof v));
	rdma_listen(id, 1);
	v = 1;
	CI("cm.set_option.reuseaddr.listening", rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &v, sizeof v));
	CI("cm.set_option.afonly.listening", rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &v, sizeof v));
	b = 64;
	CI("cm.set_option.tos.listening", rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &b, 1));
	rdma_destroy_id(id);
	rdma_create_id(ch, &id, NULL, RDMA_PS_UDP);
	b = 18;
	CI("cm.set_option.ack_timeout.udp", rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &b, 1));
	rdma_destroy_id(id);
	/* the TOS shows in the route */
	rdma_create_id(ch, &id, NULL, RDMA_PS_TCP);
	b = 32;
	rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &b, 1);
	b = 18;
	rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &b, 1);
	a = sin4(local_ip, port(6));
	rdma_resolve_addr(id, NULL, SA(a), 2000);
	ev_ack("cm.tos.addr", ch, 5000);
	rdma_resolve_route(id, 2000);
	ev_ack("cm.tos.route.event", ch, 5000);
	show_route("cm.tos.route", id);
	rdma_destroy_id(id);

	/* migrate */
	ch2 = mkch();
	rdma_create_id(ch, &id, NULL, RDMA_PS_TCP);
	CI("cm.migrate", rdma_migrate_id(id, ch2));
	line("cm.migrate.channel", "%d", id->channel == ch2);
	a = sin4(local_ip, port(6));
	rdma_resolve_addr(id, NULL, SA(a), 2000);
	line("cm.migrate.old_channel", "%s", ev_wait(ch, 300) ? "event" : "none");
	ev_ack("cm.migrate.new_channel", ch2, 5000);
	CI("cm.migrate.same", rdma_migrate_id(id, ch2));
	rdma_resolve_route(id, 2000);
	/* an event queued on the old channel moves with the id */
	usleep(200000);
	CI("cm.migrate.back", rdma_migrate_id(id, ch));
	ev_ack("cm.migrate.queued_event", ch, 5000);
	line("cm.migrate.queued_event.old", "%s", ev_wait(ch2, 100) ? "event" : "none");
	CI("cm.migrate.to_sync", rdma_migrate_id(id, NULL));
	line("cm.migrate.to_sync.channel", "%s", id->channel == NULL ? "NULL" : id->channel == ch || id->channel == ch2 ? "old" : "own");
	CI("cm.migrate.from_sync", rdma_migrate_id(id, ch));
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch2);

	/* destroy with events not taken: they go with it */
	rdma_create_id(ch, &id, NULL, RDMA_PS_TCP);
	a = sin4(local_ip, port(6));
	rdma_resolve_addr(id, NULL, SA(a), 2000);
	usleep(300000);
	CI("cm.destroy.with_pending_event", rdma_destroy_id(id));
	line("cm.destroy.with_pending_event.after", "%s", ev_wait(ch, 300) ? "event" : "none");

	/* rdma_create_qp on ids in various states */
	rdma_create_id(ch, &id, NULL, RDMA_PS_TCP);
	a = sin4(local_ip, port(6));
	rdma_resolve_addr(id, NULL, SA(a), 2000);
	ev_ack("cm.create_qp.addr", ch, 5000);
	line("cm.create_qp.pd", "%s", id->pd ? "set" : "NULL");
	{
		struct ibv_qp_init_attr qa;
		memset(&qa, 0, sizeof qa);
		qa.qp_type = IBV_QPT_UD;
		qa.cap.max_send_wr = qa.cap.max_recv_wr = 2;
		qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
		r = CI("cm.create_qp.ud_on_tcp", rdma_create_qp(id, NULL, &qa));
		if (!r) {
			line("cm.create_qp.ud_on_tcp.state", "%s", qps(id->qp->state));
			rdma_destroy_qp(id);
		}
		line("cm.create_qp.ud_on_tcp.attr_cqs", "%s", qa.send_cq ? "written" : "NULL");
		memset(&qa, 0, sizeof qa);
		qa.cap.max_send_wr = qa.cap.max_recv_wr = 2;
		qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
		qa.qp_type = IBV_QPT_RC;
		r = CI("cm.create_qp.rc", rdma_create_qp(id, NULL, &qa));
		line("cm.create_qp.rc.attr_cqs", "%s", qa.send_cq ? "written" : "NULL");
		if (!r) {
			line("cm.create_qp.rc.fields", "state=%s cqs=%d/%d channels=%d/%d pd=%s", qps(id->qp->state), id->send_cq != NULL, id->recv_cq != NULL,
			     id->send_cq_channel != NULL, id->recv_cq_channel != NULL, id->qp->pd == id->pd ? "id" : "other");
			show_qp("cm.create_qp.rc.query", id->qp);
			CI("cm.create_qp.twice", rdma_create_qp(id, NULL, &qa));
			rdma_destroy_qp(id);
			line("cm.destroy_qp.fields", "qp=%s", id->qp ? "set" : "NULL");
		}
	}
	rdma_destroy_id(id);
	rdma_create_id(ch, &id, NULL, RDMA_PS_UDP);
	rdma_resolve_addr(id, NULL, SA(a), 2000);
	ev_ack("cm.create_qp.udp.addr", ch, 5000);
	{
		struct ibv_qp_init_attr qa;
		memset(&qa, 0, sizeof qa);
		qa.qp_type = IBV_QPT_UD;
		qa.cap.max_send_wr = qa.cap.max_recv_wr = 2;
		qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
		r = CI("cm.create_qp.udp", rdma_create_qp(id, NULL, &qa));
		if (!r) {
			show_qp("cm.create_qp.udp.query", id->qp);
			rdma_destroy_qp(id);
		}
		memset(&qa, 0, sizeof qa);
		qa.cap.max_send_wr = qa.cap.max_recv_wr = 2;
		qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
		qa.qp_type = IBV_QPT_RC;
		r = CI("cm.create_qp.rc_on_udp", rdma_create_qp(id, NULL, &qa));
		if (!r) {
			show_qp("cm.create_qp.rc_on_udp.query", id->qp);
			rdma_destroy_qp(id);
		}
	}
	rdma_destroy_id(id);

	/* devices */
	{
		int n = -1;
		struct ibv_context **list = rdma_get_devices(&n);
		int found = 0;
		for (i = 0; list && list[i]; i++)
			found |= list[i]->device == dev;
		line("cm.get_devices", "%s n>=1:%d found:%d", list ? "ok" : en(errno), n >= 1, found);
		rdma_free_devices(list);
	}
	line("cm.event_str", "%s %s", rdma_event_str(RDMA_CM_EVENT_ESTABLISHED), rdma_event_str(99));
	rdma_destroy_id(l);
	(void)id3;
	rdma_destroy_event_channel(ch);
}

/* ------------------------------------------------------------------------------------------ */
/* rdma_cm: both sides of connections in this process */

static struct rdma_event_channel *pch, *ach;
static uint8_t pattern[256];

/* An id on the active channel, address and route resolved to LOCAL_IPV4:port. */
static struct rdma_cm_id *active(int ps, int p)
{
	struct rdma_cm_id *id;
	struct sockaddr_in a = sin4(local_ip, p);
	struct rdma_cm_event *e;
	if (rdma_create_id(ach, &id, NULL, ps))
		return NULL;
	if (rdma_resolve_addr(id, NULL, SA(a), 2000) || !(e = ev_wait(ach, 5000)))
		goto fail;
	if (e->event != RDMA_CM_EVENT_ADDR_RESOLVED) {
		rdma_ack_cm_event(e);
		goto fail;
	}
	rdma_ack_cm_event(e);
	if (rdma_resolve_route(id, 2000) || !(e = ev_wait(ach, 5000)))
		goto fail;
	if (e->event != RDMA_CM_EVENT_ROUTE_RESOLVED) {
		rdma_ack_cm_event(e);
		goto fail;
	}
	rdma_ack_cm_event(e);
	return id;
fail:
	line("cmconn.active", "setup failed %s", en(errno));
	rdma_destroy_id(id);
	return NULL;
}

static int mk_cm_qp(struct rdma_cm_id *id, enum ibv_qp_type t)
{
	struct ibv_qp_init_attr qa;
	memset(&qa, 0, sizeof qa);
	qa.qp_type = t;
	qa.cap.max_send_wr = qa.cap.max_recv_wr = 4;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	return rdma_create_qp(id, NULL, &qa);
}

static struct rdma_conn_param cparam(int len)
{
	struct rdma_conn_param c;
	memset(&c, 0, sizeof c);
	c.private_data = len ? pattern : NULL;
	c.private_data_len = len;
	c.responder_resources = 1;
	c.initiator_depth = 1;
	c.retry_count = 7;
	c.rnr_retry_count = 7;
	return c;
}

/* The passive side's CONNECT_REQUEST, printed; the new id (acknowledged), or NULL. */
static struct rdma_cm_id *request(const char *name, struct rdma_cm_id *listener, uint32_t active_qpn, int sent)
{
	struct rdma_cm_event *e = ev_line(name, pch, 5000, sent);
	struct rdma_cm_id *id;
	if (!e)
		return NULL;
	if (e->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
		rdma_ack_cm_event(e);
		return NULL;
	}
	id = e->id;
	if (e->id->ps == RDMA_PS_UDP)
		line(fmt("%s.param", name), "listen_id=%d ud.qp_num=%u qkey=0x%x ah.global=%u", e->listen_id == listener, e->param.ud.qp_num,
		     e->param.ud.qkey, e->param.ud.ah_attr.is_global);
	else
		line(fmt("%s.param", name), "listen_id=%d resp=%u init=%u flow=%u retry=%u rnr=%u srq=%u qpn=%s", e->listen_id == listener,
		     e->param.conn.responder_resources, e->param.conn.initiator_depth, e->param.conn.flow_control, e->param.conn.retry_count,
		     e->param.conn.rnr_retry_count, e->param.conn.srq, e->param.conn.qp_num == active_qpn ? "active" : "other");
	line(fmt("%s.id", name), "%s channel=%s context=%s ps=0x%x qp_type=%d", idstr(id, 0), id->channel == pch ? "listener's" : "other",
	     id->context == listener->context ? "listener's" : "other", id->ps, id->qp_type);
	rdma_ack_cm_event(e);
	return id;
}

static void conn_free(struct rdma_cm_id *id)
{
	if (!id)
		return;
	if (id->qp)
		rdma_destroy_qp(id);
	rdma_destroy_id(id);
}

/* Connect with `len` bytes, accept with `alen` (-1: NULL param), disconnect from `who`
 * (0 active, 1 passive, 2 both, 3 none: destroy the active id). */
static void rc_conn(const char *name_, struct rdma_cm_id *lis, int p, int len, int alen, int who)
{
	char name[96];
	snprintf(name, sizeof name, "%s", name_);
	struct rdma_cm_id *A = active(RDMA_PS_TCP, p), *P;
	struct rdma_conn_param c = cparam(len), ac = cparam(alen < 0 ? 0 : alen);
	int r;
	if (!A)
		return;
	mk_cm_qp(A, IBV_QPT_RC);
	r = CI(fmt("%s.connect", name), rdma_connect(A, &c));
	if (r) {
		conn_free(A);
		return;
	}
	P = request(fmt("%s.request", name), lis, A->qp->qp_num, len);
	if (!P) {
		conn_free(A);
		return;
	}
	mk_cm_qp(P, IBV_QPT_RC);
	r = CI(fmt("%s.accept", name), rdma_accept(P, alen < 0 ? NULL : &ac));
	if (r) {
		ev_ack(fmt("%s.accept_failed.active", name), ach, 3000);
		conn_free(P);
		conn_free(A);
		return;
	}
	rdma_ack_cm_event(ev_line(fmt("%s.established.active", name), ach, 5000, alen < 0 ? 0 : alen) ?: (struct rdma_cm_event *)0);
	ev_ack(fmt("%s.established.passive", name), pch, 5000);
	line(fmt("%s.states", name), "active=%s passive=%s", qps(A->qp->state), qps(P->qp->state));
	if (who == 0 || who == 2)
		CI(fmt("%s.disconnect.active", name), rdma_disconnect(A));
	if (who == 1 || who == 2)
		CI(fmt("%s.disconnect.passive", name), rdma_disconnect(P));
	if (who == 3) {
		conn_free(A);
		A = NULL;
		ev_ack(fmt("%s.destroyed.passive", name), pch, 5000);
	} else {
		/* the side that did not disconnect hears of it first */
		if (who == 1) {
			ev_ack(fmt("%s.disconnected.active", name), ach, 5000);
			ev_ack(fmt("%s.disconnected.passive", name), pch, 1000);
		} else {
			ev_ack(fmt("%s.disconnected.passive", name), pch, 5000);
			ev_ack(fmt("%s.disconnected.active", name), ach, who == 2 ? 5000 : 1000);
		}
		if (who == 0)
			CI(fmt("%s.disconnect.again", name), rdma_disconnect(A));
	}
	if (A)
		line(fmt("%s.after.states", name), "active=%s passive=%s", qps(A->qp->state), qps(P->qp->state));
	conn_free(P);
	conn_free(A);
}

static void rc_reject(const char *name_, struct rdma_cm_id *lis, int p, int len)
{
	char name[96];
	int r;
	snprintf(name, sizeof name, "%s", name_);
	struct rdma_cm_id *A = active(RDMA_PS_TCP, p), *P;
	struct rdma_conn_param c = cparam(0);
	if (!A)
		return;
	mk_cm_qp(A, IBV_QPT_RC);
	if (CI(fmt("%s.connect", name), rdma_connect(A, &c)))
		goto out;
	P = request(fmt("%s.request", name), lis, A->qp->qp_num, 0);
	if (!P)
		goto out;
	r = CI(fmt("%s.reject", name), rdma_reject(P, len ? pattern : NULL, len));
	{
		struct rdma_cm_event *e = ev_line(fmt("%s.rejected", name), ach, r ? 1000 : 5000, len);
		if (e)
			rdma_ack_cm_event(e);
	}
	CI(fmt("%s.reject.again", name), rdma_reject(P, NULL, 0));
	rdma_destroy_id(P);
out:
	conn_free(A);
}

/* The application's own QPs (UCX, libfabric, rping -q): created on id->verbs, moved with
 * rdma_init_qp_attr, their numbers in rdma_conn_param.qp_num. */
static void own_qp(const char *name_, struct rdma_cm_id *lis, int p)
{
	char name[96];
	snprintf(name, sizeof name, "%s", name_);
	struct rdma_cm_id *A = active(RDMA_PS_TCP, p), *P = NULL;
	struct ibv_pd *apd = NULL, *ppd = NULL;
	struct ibv_cq *acq = NULL, *pcq = NULL;
	struct ibv_qp *aqp = NULL, *pqp = NULL;
	struct ibv_qp_init_attr qa;
	struct ibv_qp_attr at;
	struct rdma_conn_param c = cparam(0);
	struct rdma_cm_event *e;
	int mask, st;
	static const int states[] = { IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS };
	size_t i;
	char *buf = NULL;
	struct ibv_mr *amr = NULL, *pmr = NULL;

	if (!A)
		return;
	apd = ibv_alloc_pd(A->verbs);
	acq = ibv_create_cq(A->verbs, 8, NULL, NULL, 0);
	memset(&qa, 0, sizeof qa);
	qa.qp_type = IBV_QPT_RC;
	qa.send_cq = qa.recv_cq = acq;
	qa.cap.max_send_wr = qa.cap.max_recv_wr = 4;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	aqp = ibv_create_qp(apd, &qa);
	line(fmt("%s.active.qp", name), "%s", aqp ? "ok" : en(errno));
	if (!aqp)
		goto out;
	memset(&at, 0, sizeof at);
	at.qp_state = IBV_QPS_INIT;
	if (CI(fmt("%s.active.init_attr", name), rdma_init_qp_attr(A, &at, &mask)) == 0)
		CI(fmt("%s.active.modify_init", name), ibv_modify_qp(aqp, &at, mask));
	c.qp_num = aqp->qp_num;
	if (CI(fmt("%s.connect", name), rdma_connect(A, &c)))
		goto out;
	init_attrs(fmt("%s.init_qp_attr.req_sent", name), A, 0);
	P = request(fmt("%s.request", name), lis, aqp->qp_num, 0);
	if (!P)
		goto out;
	init_attrs(fmt("%s.init_qp_attr.req_rcvd", name), P, aqp->qp_num);
	ppd = ibv_alloc_pd(P->verbs);
	pcq = ibv_create_cq(P->verbs, 8, NULL, NULL, 0);
	qa.send_cq = qa.recv_cq = pcq;
	pqp = ibv_create_qp(ppd, &qa);
	line(fmt("%s.passive.qp", name), "%s", pqp ? "ok" : en(errno));
	if (!pqp)
		goto out;
	for (i = 0; i < 3; i++) {
		memset(&at, 0, sizeof at);
		at.qp_state = states[i];
		st = CI(fmt("%s.passive.init_attr.%s", name, qps(states[i])), rdma_init_qp_attr(P, &at, &mask));
		if (st == 0)
			CI(fmt("%s.passive.modify.%s", name, qps(states[i])), ibv_modify_qp(pqp, &at, mask));
	}
	buf = calloc(1, 256);
	pmr = ibv_reg_mr(ppd, buf, 128, IBV_ACCESS_LOCAL_WRITE);
	amr = ibv_reg_mr(apd, buf + 128, 128, IBV_ACCESS_LOCAL_WRITE);
	if (pmr) {
		struct ibv_sge s = { (uintptr_t)buf, 128, pmr->lkey };
		struct ibv_recv_wr w, *bad;
		memset(&w, 0, sizeof w);
		w.sg_list = &s;
		w.num_sge = 1;
		ibv_post_recv(pqp, &w, &bad);
	}
	c = cparam(0);
	c.qp_num = pqp->qp_num;
	{
		struct rdma_conn_param none = cparam(0);
		none.responder_resources = 200;
		none.qp_num = pqp->qp_num;
		CI(fmt("%s.accept.responder_resources_200", name), rdma_accept(P, &none));
		/* (rdma_accept(P, NULL) without a QP: librdmacm dereferences the NULL parameter) */
	}
	if (CI(fmt("%s.accept", name), rdma_accept(P, &c)))
		goto out;
	e = ev_line(fmt("%s.response", name), ach, 5000, 0);
	if (!e)
		goto out;
	line(fmt("%s.response.param", name), "resp=%u init=%u flow=%u rnr=%u srq=%u qpn=%s", e->param.conn.responder_resources,
	     e->param.conn.initiator_depth, e->param.conn.flow_control, e->param.conn.rnr_retry_count, e->param.conn.srq,
	     e->param.conn.qp_num == pqp->qp_num ? "passive" : "other");
	rdma_ack_cm_event(e);
	init_attrs(fmt("%s.init_qp_attr.rep_rcvd", name), A, pqp->qp_num);
	for (i = 1; i < 3; i++) {
		memset(&at, 0, sizeof at);
		at.qp_state = states[i];
		st = CI(fmt("%s.active.init_attr.%s", name, qps(states[i])), rdma_init_qp_attr(A, &at, &mask));
		if (st == 0)
			CI(fmt("%s.active.modify.%s", name, qps(states[i])), ibv_modify_qp(aqp, &at, mask));
	}
	CI(fmt("%s.establish", name), rdma_establish(A));
	ev_ack(fmt("%s.established.passive", name), pch, 5000);
	line(fmt("%s.established.active", name), "%s", (e = ev_wait(ach, 300)) ? evname(e->event) : "none");
	if (e)
		rdma_ack_cm_event(e);
	init_attrs(fmt("%s.init_qp_attr.established.active", name), A, pqp->qp_num);
	init_attrs(fmt("%s.init_qp_attr.established.passive", name), P, aqp->qp_num);
	if (amr && pmr) {
		struct ibv_sge s = { (uintptr_t)buf + 128, 64, amr->lkey };
		struct ibv_send_wr w, *bad;
		struct ibv_wc wc;
		int n;
		memset(&w, 0, sizeof w);
		strcpy(buf + 128, "own qp");
		w.sg_list = &s;
		w.num_sge = 1;
		w.opcode = IBV_WR_SEND;
		w.send_flags = IBV_SEND_SIGNALED;
		CI(fmt("%s.send", name), ibv_post_send(aqp, &w, &bad));
		n = poll1(acq, &wc);
		line(fmt("%s.send.wc", name), "=%d %s", n, n ? ibv_wc_status_str(wc.status) : "-");
		n = poll1(pcq, &wc);
		line(fmt("%s.recv.wc", name), "=%d %s len=%u data=%s", n, n ? ibv_wc_status_str(wc.status) : "-", n ? wc.byte_len : 0,
		     strcmp(buf, "own qp") ? "bad" : "ok");
	}
	CI(fmt("%s.disconnect.passive", name), rdma_disconnect(P));
	ev_ack(fmt("%s.disconnected.active", name), ach, 5000);
	ev_ack(fmt("%s.disconnected.passive", name), pch, 1000);
	line(fmt("%s.after.states", name), "active=%s passive=%s", qps(aqp->state), qps(pqp->state));
	init_attrs(fmt("%s.init_qp_attr.disconnected", name), A, pqp->qp_num);
out:
	if (P)
		rdma_destroy_id(P);
	rdma_destroy_id(A);
	if (aqp)
		ibv_destroy_qp(aqp);
	if (pqp)
		ibv_destroy_qp(pqp);
	if (amr)
		ibv_dereg_mr(amr);
	if (pmr)
		ibv_dereg_mr(pmr);
	if (acq)
		ibv_destroy_cq(acq);
	if (pcq)
		ibv_destroy_cq(pcq);
	if (apd)
		ibv_dealloc_pd(apd);
	if (ppd)
		ibv_dealloc_pd(ppd);
	free(buf);
}

static void ud_conn(const char *name_, struct rdma_cm_id *lis, int p, int len, int alen, int reject)
{
	char name[96];
	snprintf(name, sizeof name, "%s", name_);
	struct rdma_cm_id *A = active(RDMA_PS_UDP, p), *P;
	struct rdma_conn_param c = cparam(len), ac = cparam(alen);
	struct rdma_cm_event *e;
	if (!A)
		return;
	init_attrs(fmt("%s.init_qp_attr.route", name), A, 0);
	mk_cm_qp(A, IBV_QPT_UD);
	if (CI(fmt("%s.connect", name), rdma_connect(A, &c)))
		goto out;
	init_attrs(fmt("%s.init_qp_attr.req_sent", name), A, 0);
	P = request(fmt("%s.request", name), lis, 0, len);
	if (!P)
		goto out;
	init_attrs(fmt("%s.init_qp_attr.req_rcvd", name), P, 0);
	mk_cm_qp(P, IBV_QPT_UD);
	if (P->qp)
		show_qp(fmt("%s.passive.qp", name), P->qp);
	if (reject)
		CI(fmt("%s.reject", name), rdma_reject(P, alen ? pattern : NULL, alen));
	else
		CI(fmt("%s.accept", name), rdma_accept(P, &ac));
	e = ev_line(fmt("%s.outcome", name), ach, 5000, alen);
	if (e && e->event == RDMA_CM_EVENT_ESTABLISHED) {
		struct ibv_ah_attr *h = &e->param.ud.ah_attr;
		line(fmt("%s.outcome.ud", name), "qpn=%s qkey=0x%x global=%u dgid=%s sgid=%u hop=%u tclass=%u flow=%s sl=%u port=%u dlid=%u",
		     P->qp && e->param.ud.qp_num == P->qp->qp_num ? "passive" : "other", e->param.ud.qkey, h->is_global,
		     !memcmp(&h->grh.dgid, &own_gid, 16) ? "own" : gidstr(&h->grh.dgid), h->grh.sgid_index, h->grh.hop_limit, h->grh.traffic_class,
		     h->grh.flow_label ? "set" : "0", h->sl, h->port_num, h->dlid);
		{
			struct ibv_ah *ah = ibv_create_ah(A->pd, h);
			line(fmt("%s.outcome.ah", name), "%s", ah ? "ok" : en(errno));
			if (ah)
				ibv_destroy_ah(ah);
		}
	}
	if (e)
		rdma_ack_cm_event(e);
	line(fmt("%s.passive.established", name), "%s", (e = ev_wait(pch, 300)) ? evname(e->event) : "none");
	if (e)
		rdma_ack_cm_event(e);
	CI(fmt("%s.disconnect", name), rdma_disconnect(A));
	line(fmt("%s.disconnect.event", name), "%s", (e = ev_wait(ach, 300)) ? evname(e->event) : "none");
	if (e)
		rdma_ack_cm_event(e);
	conn_free(P);
out:
	conn_free(A);
}

static void sec_cmconn(void)
{
	struct rdma_cm_id *lis, *ulis, *A, *P;
	struct sockaddr_in a;
	int i;
	int lens[] = { 0, 1, 56, 57, 92 };
	int alens[] = { -1, 1, 196, 197 };
	int rlens[] = { 0, 1, 148, 149 };

	for (i = 0; i < 256; i++)
		pattern[i] = pdbyte(i);
	pch = mkch();
	ach = mkch();
	rdma_create_id(pch, &lis, (void *)0x77, RDMA_PS_TCP);
	a = sin4(local_ip, port(20));
	CI("cmconn.listen.bind", rdma_bind_addr(lis, SA(a)));
	CI("cmconn.listen", rdma_listen(lis, 8));
	init_attrs("cmconn.init_qp_attr.listen", lis, 0);
	rdma_create_id(pch, &ulis, (void *)0x77, RDMA_PS_UDP);
	a = sin4(local_ip, port(21));
	rdma_bind_addr(ulis, SA(a));
	CI("cmconn.listen.udp", rdma_listen(ulis, 8));

	for (i = 0; i < 5; i++)
		rc_conn(fmt("cmconn.rc.pd%d", lens[i]), lis, port(20), lens[i], -1, 0);
	for (i = 0; i < 4; i++)
		rc_conn(fmt("cmconn.rc.accept_pd%d", alens[i]), lis, port(20), 0, alens[i], 0);
	rc_conn("cmconn.rc.disconnect_passive", lis, port(20), 0, -1, 1);
	rc_conn("cmconn.rc.disconnect_both", lis, port(20), 0, -1, 2);
	rc_conn("cmconn.rc.destroy_active", lis, port(20), 0, -1, 3);
	for (i = 0; i < 4; i++)
		rc_reject(fmt("cmconn.rc.reject_pd%d", rlens[i]), lis, port(20), rlens[i]);
	own_qp("cmconn.own_qp", lis, port(20));

	/* connect with parameters librdmacm checks, to a listener of its own */
	{
		struct rdma_cm_id *pl;
		struct rdma_event_channel *plc = mkch();
		rdma_create_id(plc, &pl, NULL, RDMA_PS_TCP);
		a = sin4(local_ip, port(25));
		rdma_bind_addr(pl, SA(a));
		rdma_listen(pl, 4);
		CI("cmconn.get_request.async", rdma_get_request(pl, &P));
		A = active(RDMA_PS_TCP, port(25));
		if (A) {
			struct rdma_conn_param c = cparam(0);
			struct rdma_cm_event *e;
			CI("cmconn.connect.no_qp_no_param", rdma_connect(A, NULL));
			c.initiator_depth = 200;
			mk_cm_qp(A, IBV_QPT_RC);
			CI("cmconn.connect.initiator_depth_200", rdma_connect(A, &c));
			c = cparam(0);
			c.responder_resources = 200;
			CI("cmconn.connect.responder_resources_200", rdma_connect(A, &c));
			c = cparam(0);
			CI("cmconn.connect.ok", rdma_connect(A, &c));
			CI("cmconn.connect.twice", rdma_connect(A, &c));
			e = ev_wait(plc, 5000);
			line("cmconn.connect.request", "%s", e ? evname(e->event) : "none");
			if (e && e->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
				P = e->id;
				rdma_ack_cm_event(e);
				CI("cmconn.connect.request.reject", rdma_reject(P, NULL, 0));
				rdma_destroy_id(P);
			} else if (e)
				rdma_ack_cm_event(e);
			ev_ack("cmconn.connect.rejected", ach, 5000);
			conn_free(A);
		}
		rdma_destroy_id(pl);
		rdma_destroy_event_channel(plc);
	}
	/* no listener on the port */
	A = active(RDMA_PS_TCP, port(22));
	if (A) {
		struct rdma_conn_param c = cparam(0);
		struct rdma_cm_event *e;
		mk_cm_qp(A, IBV_QPT_RC);
		CI("cmconn.no_listener.connect", rdma_connect(A, &c));
		e = ev_line("cmconn.no_listener.event", ach, 8000, 0);
		if (e)
			rdma_ack_cm_event(e);
		init_attrs("cmconn.init_qp_attr.rejected", A, 0);
		CI("cmconn.no_listener.disconnect", rdma_disconnect(A));
		conn_free(A);
	}
	/* a listener destroyed with a request it never took */
	{
		struct rdma_cm_id *tl;
		struct rdma_event_channel *tch = mkch();
		rdma_create_id(tch, &tl, NULL, RDMA_PS_TCP);
		a = sin4(local_ip, port(23));
		rdma_bind_addr(tl, SA(a));
		rdma_listen(tl, 4);
		A = active(RDMA_PS_TCP, port(23));
		if (A) {
			struct rdma_conn_param c = cparam(0);
			struct rdma_cm_event *e;
			mk_cm_qp(A, IBV_QPT_RC);
			rdma_connect(A, &c);
			usleep(500000);
			CI("cmconn.listener_destroyed.destroy", rdma_destroy_id(tl));
			e = ev_line("cmconn.listener_destroyed.event", ach, 8000, 0);
			if (e)
				rdma_ack_cm_event(e);
			conn_free(A);
		} else
			rdma_destroy_id(tl);
		rdma_destroy_event_channel(tch);
	}
	/* UD through SIDR */
	ud_conn("cmconn.ud.pd0", ulis, port(21), 0, 0, 0);
	ud_conn("cmconn.ud.pd180", ulis, port(21), 180, 136, 0);
	ud_conn("cmconn.ud.pd181", ulis, port(21), 181, 0, 0);
	ud_conn("cmconn.ud.accept_pd137", ulis, port(21), 0, 137, 0);
	ud_conn("cmconn.ud.reject", ulis, port(21), 0, 0, 1);
	ud_conn("cmconn.ud.reject_pd136", ulis, port(21), 0, 136, 1);
	A = active(RDMA_PS_UDP, port(24));
	if (A) {
		struct rdma_conn_param c = cparam(0);
		struct rdma_cm_event *e;
		mk_cm_qp(A, IBV_QPT_UD);
		CI("cmconn.ud.no_listener.connect", rdma_connect(A, &c));
		e = ev_line("cmconn.ud.no_listener.event", ach, 8000, 0);
		if (e)
			rdma_ack_cm_event(e);
		conn_free(A);
	}
	/* notify */
	A = active(RDMA_PS_TCP, port(20));
	if (A) {
		CI("cmconn.notify.route_resolved", rdma_notify(A, IBV_EVENT_COMM_EST));
		CI("cmconn.notify.other_event", rdma_notify(A, IBV_EVENT_QP_FATAL));
		CI("cmconn.establish.no_rep", rdma_establish(A));
		conn_free(A);
	}
	rdma_destroy_id(ulis);
	rdma_destroy_id(lis);
	line("cmconn.leftover.passive", "%s", ev_wait(pch, 300) ? "event" : "none");
	line("cmconn.leftover.active", "%s", ev_wait(ach, 300) ? "event" : "none");
}

/* ------------------------------------------------------------------------------------------ */
/* rdma_getaddrinfo, with the hints rping, perftest, librdmacm's examples, libfabric and UCX pass */

static void ai_case(const char *name, const char *node, const char *service, struct rdma_addrinfo *hints)
{
	struct rdma_addrinfo *res = NULL;
	int r;
	errno = 0;
	r = rdma_getaddrinfo(node, service, hints, &res);
	if (r) {
		if (r == -1)
			line(name, "-1 %s", en(errno));
		else
			line(name, "=%d %s", r, gai_strerror(r));
		return;
	}
	line(name, "ok flags=0x%x family=%d qp_type=%d ps=0x%x src=%s/%u dst=%s/%u canon=%s/%s route=%zu connect=%zu next=%s", res->ai_flags,
	     res->ai_family, res->ai_qp_type, res->ai_port_space, res->ai_src_addr ? sastr(res->ai_src_addr, 7471) : "NULL", res->ai_src_len,
	     res->ai_dst_addr ? sastr(res->ai_dst_addr, 7471) : "NULL", res->ai_dst_len, res->ai_src_canonname ? "set" : "NULL",
	     res->ai_dst_canonname ? "set" : "NULL", res->ai_route_len, res->ai_connect_len, res->ai_next ? "set" : "NULL");
	rdma_freeaddrinfo(res);
}

static void sec_addrinfo(void)
{
	struct rdma_addrinfo h;
	struct sockaddr_in s = sin4(local_ip, 0), d = sin4(local_ip, 7471);

	ai_case("addrinfo.all_null", NULL, NULL, NULL);
	ai_case("addrinfo.node_only", local_ip, NULL, NULL);
	ai_case("addrinfo.service_only", NULL, "7471", NULL);
	ai_case("addrinfo.node_service", local_ip, "7471", NULL);
	memset(&h, 0, sizeof h);
	ai_case("addrinfo.zero_hints", local_ip, "7471", &h);
	/* rdma_client / rdma_server / rdma_xclient */
	h.ai_port_space = RDMA_PS_TCP;
	ai_case("addrinfo.rdma_client", local_ip, "7471", &h);
	h.ai_flags = RAI_PASSIVE;
	ai_case("addrinfo.rdma_server", local_ip, "7471", &h);
	ai_case("addrinfo.rdma_server.no_node", NULL, "7471", &h);
	/* perftest -R: the client with the family, the server passive */
	memset(&h, 0, sizeof h);
	h.ai_family = AF_INET;
	h.ai_port_space = RDMA_PS_TCP;
	ai_case("addrinfo.perftest.client", local_ip, "7471", &h);
	h.ai_flags = RAI_PASSIVE;
	ai_case("addrinfo.perftest.server", NULL, "7471", &h);
	h.ai_port_space = RDMA_PS_UDP;
	h.ai_qp_type = IBV_QPT_UD;
	ai_case("addrinfo.perftest.server.ud", NULL, "7471", &h);
	/* udpong / rdma_xserver style */
	memset(&h, 0, sizeof h);
	h.ai_port_space = RDMA_PS_UDP;
	ai_case("addrinfo.udp", local_ip, "7471", &h);
	h.ai_qp_type = IBV_QPT_UD;
	ai_case("addrinfo.udp.ud", local_ip, "7471", &h);
	memset(&h, 0, sizeof h);
	h.ai_qp_type = IBV_QPT_UD;
	ai_case("addrinfo.ud_only", local_ip, "7471", &h);
	memset(&h, 0, sizeof h);
	h.ai_flags = RAI_NUMERICHOST;
	ai_case("addrinfo.numerichost", local_ip, "7471", &h);
	ai_case("addrinfo.numerichost.name", "localhost", "7471", &h);
	memset(&h, 0, sizeof h);
	/* (a name the resolver cannot find: its answer depends on the host's DNS setup, EAI_NONAME
	 * or EAI_AGAIN, so only the numeric-host refusal above is compared) */
	ai_case("addrinfo.bad_service", local_ip, "no-such-service-x", &h);
	h.ai_family = AF_INET6;
	ai_case("addrinfo.family_mismatch", local_ip, "7471", &h);
	h.ai_family = AF_INET;
	h.ai_flags = RAI_NOROUTE;
	ai_case("addrinfo.noroute", local_ip, "7471", &h);
	/* libfabric's verbs provider: no node, no service, everything in the hints */
	memset(&h, 0, sizeof h);
	h.ai_flags = RAI_FAMILY;
	h.ai_family = AF_INET;
	h.ai_qp_type = IBV_QPT_RC;
	h.ai_port_space = RDMA_PS_TCP;
	h.ai_dst_addr = SA(d);
	h.ai_dst_len = sizeof d;
	ai_case("addrinfo.libfabric.client", NULL, NULL, &h);
	h.ai_src_addr = SA(s);
	h.ai_src_len = sizeof s;
	ai_case("addrinfo.libfabric.client_src", NULL, NULL, &h);
	h.ai_flags = RAI_FAMILY | RAI_PASSIVE;
	h.ai_dst_addr = NULL;
	h.ai_dst_len = 0;
	ai_case("addrinfo.libfabric.server", NULL, NULL, &h);
	h.ai_src_addr = NULL;
	h.ai_src_len = 0;
	ai_case("addrinfo.libfabric.server_nothing", NULL, NULL, &h);
	h.ai_src_addr = SA(s);
	h.ai_src_len = 0;
	ai_case("addrinfo.libfabric.src_len0", NULL, NULL, &h);
	/* libfabric with a node: the name and the hints' family */
	memset(&h, 0, sizeof h);
	h.ai_flags = RAI_FAMILY | RAI_NUMERICHOST;
	h.ai_family = AF_INET;
	h.ai_qp_type = IBV_QPT_RC;
	h.ai_port_space = RDMA_PS_TCP;
	ai_case("addrinfo.libfabric.node", local_ip, "7471", &h);
	h.ai_flags |= RAI_PASSIVE;
	ai_case("addrinfo.libfabric.node_passive", local_ip, "7471", &h);
	memset(&h, 0, sizeof h);
	h.ai_flags = RAI_PASSIVE;
	ai_case("addrinfo.passive.service_0", NULL, "0", &h);
	ai_case("addrinfo.passive.node_no_service", local_ip, NULL, &h);
	/* rdma_create_ep from the results (synchronous ids) */
	{
		struct rdma_addrinfo *res;
		struct rdma_cm_id *sid, *cid;
		struct ibv_qp_init_attr qa;
		memset(&h, 0, sizeof h);
		h.ai_flags = RAI_PASSIVE;
		h.ai_port_space = RDMA_PS_TCP;
		if (rdma_getaddrinfo(local_ip, fmt("%d", port(30)), &h, &res) == 0) {
			memset(&qa, 0, sizeof qa);
			qa.cap.max_send_wr = qa.cap.max_recv_wr = 1;
			qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
			CI("addrinfo.create_ep.passive", rdma_create_ep(&sid, res, NULL, &qa));
			rdma_freeaddrinfo(res);
			CI("addrinfo.create_ep.listen", rdma_listen(sid, 1));
			line("addrinfo.create_ep.passive.id", "%s qp=%s", idstr(sid, port(30)), sid->qp ? "set" : "NULL");
			memset(&h, 0, sizeof h);
			h.ai_port_space = RDMA_PS_TCP;
			if (rdma_getaddrinfo(local_ip, fmt("%d", port(30)), &h, &res) == 0) {
				CI("addrinfo.create_ep.active", rdma_create_ep(&cid, res, NULL, &qa));
				rdma_freeaddrinfo(res);
				line("addrinfo.create_ep.active.id", "%s qp=%s state=%s", idstr(cid, port(30)), cid->qp ? "set" : "NULL",
				     cid->qp ? qps(cid->qp->state) : "-");
				rdma_destroy_ep(cid);
			}
			rdma_destroy_ep(sid);
		}
	}
}

/* ------------------------------------------------------------------------------------------ */

static void watchdog(int sig)
{
	(void)sig;
	printf("TIMEOUT: the probe did not finish\n");
	fflush(stdout);
	_exit(3);
}

int main(int argc, char **argv)
{
	struct ibv_device **list;
	int o, i, n;

	while ((o = getopt(argc, argv, "d:a:p:s:")) != -1) {
		switch (o) {
		case 'd':
			devname_arg = optarg;
			break;
		case 'a':
			local_ip = optarg;
			break;
		case 'p':
			port_base = atoi(optarg);
			break;
		case 's':
			sections = optarg;
			break;
		default:
			fprintf(stderr, "usage: probe -d DEVICE -a LOCAL_IPV4 [-p PORT_BASE] [-s SECTIONS]\n");
			return 2;
		}
	}
	if (!devname_arg || !local_ip) {
		fprintf(stderr, "usage: probe -d DEVICE -a LOCAL_IPV4 [-p PORT_BASE] [-s SECTIONS]\n");
		return 2;
	}
	signal(SIGALRM, watchdog);
	alarm(300);
	list = ibv_get_device_list(&n);
	for (i = 0; list && i < n; i++)
		if (strcmp(ibv_get_device_name(list[i]), devname_arg) == 0)
			dev = list[i];
	if (!dev) {
		printf("no device %s\n", devname_arg);
		return 1;
	}
	ctx = ibv_open_device(dev);
	pd = ctx ? ibv_alloc_pd(ctx) : NULL;
	if (!pd) {
		printf("cannot open %s: %s\n", devname_arg, strerror(errno));
		return 1;
	}
	ibv_query_device(ctx, &dattr);
	ibv_query_port(ctx, 1, &pattr);
	gid_len = pattr.gid_tbl_len;
	{
		union ibv_gid want;
		memset(&want, 0, sizeof want);
		want.raw[10] = want.raw[11] = 0xff;
		inet_pton(AF_INET, local_ip, &want.raw[12]);
		own_gid = want;
		for (i = 0; i < gid_len && i < 256; i++) {
			union ibv_gid g;
			if (ibv_query_gid(ctx, 1, i, &g) == 0 && !memcmp(&g, &want, 16)) {
				ipv4_gid = i;
				break;
			}
		}
	}
	line("setup", "ipv4 gid index %d", ipv4_gid);
	if (on("dev"))
		sec_dev();
	if (on("query"))
		sec_query();
	if (on("pd"))
		sec_pd();
	if (on("mr"))
		sec_mr();
	if (on("cq"))
		sec_cq();
	if (on("qp"))
		sec_qp();
	if (on("srq"))
		sec_srq();
	if (on("ah"))
		sec_ah();
	if (on("mw"))
		sec_mw();
	if (on("data"))
		sec_data();
	if (on("cm"))
		sec_cm();
	if (on("cmconn"))
		sec_cmconn();
	if (on("addrinfo"))
		sec_addrinfo();
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	line("done", "ok");
	return 0;
}
