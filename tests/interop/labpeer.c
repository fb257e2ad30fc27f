/*
 * labpeer - kernel-rxe side peer for softroce's "RDMA lab sequence".
 *
 * One RC QP, a TCP side channel, and a fixed table of steps (SEND,
 * SEND_WITH_IMM, RDMA_WRITE, RDMA_WRITE_WITH_IMM, RDMA_READ, ATOMIC
 * FETCH_AND_ADD, ATOMIC CMP_AND_SWP) with multi-SGE gather/scatter lists,
 * multi-packet and single-packet messages, every byte and immediate value
 * verified. The wire/TCP protocol is specified in lab-protocol.md next to
 * this file; this program and softroce's lab example both implement it.
 *
 *   labpeer -s [options]            server: passive side, RDMA responder
 *   labpeer [options] SERVER_IP     client: active side, RDMA requester
 *
 *   -p PORT   TCP port (default 18700)
 *   -g IDX    local GID index (default 1: the IPv4-mapped RoCEv2 GID on rxe)
 *   -d DEV    RDMA device (default: the first one)
 *   -i PORT   device port (default 1)
 *   -m MTU    path MTU 256|512|1024|2048|4096 (client default 1024; server:
 *             taken from the client, and must match if given)
 *   -z SIZE   size of the large messages, 100..8388608 (client default 10000;
 *             server: as for -m)
 *   -P PSN    initial send PSN, hex (default random)
 *   -t SECS   completion / side-channel timeout (default 30)
 *   -v        verbose (completions, addresses) on stderr
 *   -F STEP   fault injection for self-tests of the verdict path (not part of
 *             the protocol): corrupt one byte of step STEP's data (client:
 *             outgoing SEND/WRITE data, or the local READ/atomic result before
 *             it is checked; server: the READ source or atomic initial value,
 *             or the received data before it is checked; a zero-length step
 *             gets a wrong immediate value instead)
 *
 * stdout: "info: ..." lines, one "step NAME: ok|FAIL (reason)|skipped" line
 * per step, and "result: PASS|FAIL OK/TOTAL". Exit 0 = every step passed,
 * 1 = a step failed, 2 = usage, setup, connection or protocol error.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_PORT 18700
#define DEFAULT_SIZE 10000
#define SMALL_LEN 100
#define MAX_SIZE 8388608
#define LINE_MAX_LEN 256
#define FILL 0xEE
#define GUARD 64          /* bytes of FILL in front of every buffer used */

/* ------------------------------------------------------------ steps ---- */
enum kind { K_SEND, K_SEND_IMM, K_WRITE, K_WRITE_IMM, K_READ, K_FADD, K_CSWAP };
enum lenclass { L_LARGE, L_SMALL, L_ZERO, L_ATOMIC };

struct step {
    int n;
    const char *name;
    enum kind kind;
    enum lenclass lc;
    uint32_t imm;
    uint64_t init;      /* atomics: responder's initial value */
    uint64_t arg1;      /* FADD: add; CSWAP: compare */
    uint64_t arg2;      /* CSWAP: swap */
    uint64_t final;     /* atomics: responder's value afterwards */
};

static const struct step STEPS[] = {
    { 1, "send", K_SEND, L_LARGE, 0, 0, 0, 0, 0 },
    { 2, "send_imm", K_SEND_IMM, L_LARGE, 0xC0DE0002u, 0, 0, 0, 0 },
    { 3, "write", K_WRITE, L_LARGE, 0, 0, 0, 0, 0 },
    { 4, "write_imm", K_WRITE_IMM, L_LARGE, 0xC0DE0004u, 0, 0, 0, 0 },
    { 5, "read", K_READ, L_LARGE, 0, 0, 0, 0, 0 },
    { 6, "send_small", K_SEND, L_SMALL, 0, 0, 0, 0, 0 },
    { 7, "send_imm_small", K_SEND_IMM, L_SMALL, 0xC0DE0007u, 0, 0, 0, 0 },
    { 8, "write_small", K_WRITE, L_SMALL, 0, 0, 0, 0, 0 },
    { 9, "write_imm_small", K_WRITE_IMM, L_SMALL, 0xC0DE0009u, 0, 0, 0, 0 },
    { 10, "read_small", K_READ, L_SMALL, 0, 0, 0, 0, 0 },
    { 11, "write_imm_zero", K_WRITE_IMM, L_ZERO, 0xC0DE000Bu, 0, 0, 0, 0 },
    { 12, "fetch_add", K_FADD, L_ATOMIC, 0, 0x11223344FFFFFFFFull, 0x0000000100000001ull, 0,
      0x1122334600000000ull },
    { 13, "cmp_swap", K_CSWAP, L_ATOMIC, 0, 0x0102030405060708ull, 0x0102030405060708ull,
      0xA1A2A3A4A5A6A7A8ull, 0xA1A2A3A4A5A6A7A8ull },
    { 14, "cmp_swap_miss", K_CSWAP, L_ATOMIC, 0, 0x1020304050607080ull, 0x1020304150607080ull,
      0xDEADBEEFDEADBEEFull, 0x1020304050607080ull },
};
#define NSTEPS ((int)(sizeof STEPS / sizeof STEPS[0]))

static int has_recv(const struct step *s) { return s->kind == K_SEND || s->kind == K_SEND_IMM || s->kind == K_WRITE_IMM; }
static int is_atomic(const struct step *s) { return s->kind == K_FADD || s->kind == K_CSWAP; }

/* message byte i of step n */
static uint8_t pat(int n, size_t i) { return (uint8_t)((n * 37 + (int)(i % 251)) & 0xff); }

/* ----------------------------------------------------------- globals ---- */
static struct {
    int server, verbose, tcp_port, gidx, ib_port, mtu, mtu_set, size_set, timeout;
    size_t size;
    uint32_t psn;
    int psn_set;
    const char *dev, *peer, *fault;
} opt = { .tcp_port = DEFAULT_PORT, .gidx = 1, .ib_port = 1, .mtu = 1024, .size = DEFAULT_SIZE, .timeout = 30 };

static int faulty(const struct step *s) { return opt.fault && !strcmp(opt.fault, s->name); }

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_comp_channel *chan;
static struct ibv_cq *cq;
static struct ibv_qp *qp;
static struct ibv_mr *mr;
static uint8_t *buf;
static size_t reg;      /* size of one region of buf */
static int sock = -1;
static char rbuf[4096];
static size_t rlen;

static void vlog(const char *fmt, ...)
{
    if (!opt.verbose) return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "labpeer: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static void fatal(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fflush(stdout);
    fprintf(stderr, "labpeer: error: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(2);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* ------------------------------------------------------- TCP channel ---- */
static void send_line(const char *fmt, ...)
{
    char l[LINE_MAX_LEN + 2];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(l, sizeof l - 1, fmt, ap);
    va_end(ap);
    if (n < 0 || n > LINE_MAX_LEN - 1) fatal("internal: line too long");
    vlog("tcp >> %s", l);
    l[n++] = '\n';
    for (int off = 0; off < n;) {
        ssize_t w = send(sock, l + off, (size_t)(n - off), MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) fatal("tcp send: %s", w < 0 ? strerror(errno) : "closed");
        off += (int)w;
    }
}

/* read one '\n'-terminated line (without the '\n') within the timeout */
static void recv_line(char *out, double timeout)
{
    double deadline = now() + timeout;
    for (;;) {
        char *nl = memchr(rbuf, '\n', rlen);
        if (nl) {
            size_t len = (size_t)(nl - rbuf);
            if (len > LINE_MAX_LEN - 1) fatal("protocol: line too long");
            memcpy(out, rbuf, len);
            out[len] = 0;
            memmove(rbuf, nl + 1, rlen - len - 1);
            rlen -= len + 1;
            vlog("tcp << %s", out);
            return;
        }
        if (rlen >= LINE_MAX_LEN) fatal("protocol: line too long");
        double left = deadline - now();
        if (left <= 0) fatal("protocol: no message from the peer within %.0f s", timeout);
        struct pollfd pf = { .fd = sock, .events = POLLIN };
        int r = poll(&pf, 1, (int)(left * 1000) + 1);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) continue;
        ssize_t got = recv(sock, rbuf + rlen, sizeof rbuf - rlen, 0);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) fatal("protocol: peer closed the TCP connection%s%s", got < 0 ? ": " : "",
                            got < 0 ? strerror(errno) : "");
        rlen += (size_t)got;
    }
}

static double tcp_timeout(void) { return opt.timeout + 30.0; }

/* --------------------------------------------------------------- verbs ---- */
static enum ibv_mtu mtu_enum(int m)
{
    switch (m) {
    case 256: return IBV_MTU_256;
    case 512: return IBV_MTU_512;
    case 1024: return IBV_MTU_1024;
    case 2048: return IBV_MTU_2048;
    case 4096: return IBV_MTU_4096;
    }
    return 0;
}

static const char *wc_opcode_str(enum ibv_wc_opcode o)
{
    switch (o) {
    case IBV_WC_SEND: return "SEND";
    case IBV_WC_RDMA_WRITE: return "RDMA_WRITE";
    case IBV_WC_RDMA_READ: return "RDMA_READ";
    case IBV_WC_COMP_SWAP: return "COMP_SWAP";
    case IBV_WC_FETCH_ADD: return "FETCH_ADD";
    case IBV_WC_RECV: return "RECV";
    case IBV_WC_RECV_RDMA_WITH_IMM: return "RECV_RDMA_WITH_IMM";
    default: return "OTHER";
    }
}

/* wait for one completion; 1 = got it, 0 = timeout */
static int wait_wc(struct ibv_wc *wc, double timeout)
{
    double deadline = now() + timeout;
    for (;;) {
        int n = ibv_poll_cq(cq, 1, wc);
        if (n < 0) fatal("ibv_poll_cq failed");
        if (n == 1) break;
        if (ibv_req_notify_cq(cq, 0)) fatal("ibv_req_notify_cq failed");
        n = ibv_poll_cq(cq, 1, wc);
        if (n < 0) fatal("ibv_poll_cq failed");
        if (n == 1) break;
        double left = deadline - now();
        if (left <= 0) return 0;
        struct pollfd pf = { .fd = chan->fd, .events = POLLIN };
        int r = poll(&pf, 1, (int)(left * 1000) + 1);
        if (r > 0) {
            struct ibv_cq *ev_cq;
            void *ev_ctx;
            if (ibv_get_cq_event(chan, &ev_cq, &ev_ctx)) fatal("ibv_get_cq_event failed");
            ibv_ack_cq_events(ev_cq, 1);
        }
    }
    vlog("wc: wr_id %llu status %s opcode %s byte_len %u%s imm 0x%08x", (unsigned long long)wc->wr_id,
         ibv_wc_status_str(wc->status), wc_opcode_str(wc->opcode), wc->byte_len,
         (wc->wc_flags & IBV_WC_WITH_IMM) ? " WITH_IMM" : "", ntohl(wc->imm_data));
    return 1;
}

static void setup_verbs(void)
{
    int num;
    struct ibv_device **dl = ibv_get_device_list(&num);
    struct ibv_device *dev = NULL;
    if (!dl || num == 0) fatal("no RDMA device");
    for (int i = 0; i < num; i++)
        if (!opt.dev || !strcmp(ibv_get_device_name(dl[i]), opt.dev)) { dev = dl[i]; break; }
    if (!dev) fatal("RDMA device %s not found", opt.dev);
    if (!(ctx = ibv_open_device(dev))) fatal("ibv_open_device failed");
    ibv_free_device_list(dl);
    if (!(pd = ibv_alloc_pd(ctx))) fatal("ibv_alloc_pd failed");
    if (!(chan = ibv_create_comp_channel(ctx))) fatal("ibv_create_comp_channel failed");
    if (!(cq = ibv_create_cq(ctx, 64, NULL, chan, 0))) fatal("ibv_create_cq failed");
    struct ibv_qp_init_attr ia = {
        .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC, .sq_sig_all = 0,
        .cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 3, .max_recv_sge = 2, .max_inline_data = 0 },
    };
    if (!(qp = ibv_create_qp(pd, &ia))) fatal("ibv_create_qp: %s", strerror(errno));
    struct ibv_qp_attr a = {
        .qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = (uint8_t)opt.ib_port,
        .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC,
    };
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
        fatal("modify_qp INIT: %s", strerror(errno));
}

/* regions of buf, each `reg` bytes:
 *   requester: 0,1,2 gather SGEs   3,4 READ scatter SGEs   5 atomic result
 *   responder: 0,1 receive SGEs    2 WRITE target          3 READ source   4 atomic words */
#define NREG 6
static uint8_t *region(int r) { return buf + (size_t)r * reg; }

static void setup_mr(void)
{
    reg = (opt.size + 2 * GUARD + 64 + 4095) & ~(size_t)4095;
    buf = aligned_alloc(4096, reg * NREG);
    if (!buf) fatal("out of memory");
    memset(buf, FILL, reg * NREG);
    int access = IBV_ACCESS_LOCAL_WRITE;
    if (opt.server) access |= IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
    if (!(mr = ibv_reg_mr(pd, buf, reg * NREG, access))) fatal("ibv_reg_mr: %s", strerror(errno));
    vlog("mr: addr %p len %zu lkey 0x%x rkey 0x%x", (void *)buf, reg * NREG, mr->lkey, mr->rkey);
}

static void to_rts(uint32_t rqpn, uint32_t rpsn, const uint8_t *rgid)
{
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = mtu_enum(opt.mtu);
    a.dest_qp_num = rqpn;
    a.rq_psn = rpsn;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.is_global = 1;
    memcpy(a.ah_attr.grh.dgid.raw, rgid, 16);
    a.ah_attr.grh.sgid_index = (uint8_t)opt.gidx;
    a.ah_attr.grh.hop_limit = 64;
    a.ah_attr.grh.traffic_class = 0;
    a.ah_attr.grh.flow_label = 0;
    a.ah_attr.sl = 0;
    a.ah_attr.port_num = (uint8_t)opt.ib_port;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                      IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
        fatal("modify_qp RTR: %s", strerror(errno));
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.sq_psn = opt.psn;
    a.max_rd_atomic = 1;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                      IBV_QP_MAX_QP_RD_ATOMIC))
        fatal("modify_qp RTS: %s", strerror(errno));
}

/* --------------------------------------------------------- lengths ---- */
static size_t step_len(const struct step *s)
{
    switch (s->lc) {
    case L_LARGE: return opt.size;
    case L_SMALL: return SMALL_LEN;
    case L_ZERO: return 0;
    default: return 8;
    }
}

/* gather split: 3 SGEs of floor(L/3), floor(L/3), rest (none for L = 0) */
static int gather_split(size_t L, size_t g[3])
{
    if (L == 0) return 0;
    g[0] = L / 3;
    g[1] = L / 3;
    g[2] = L - 2 * (L / 3);
    return 3;
}

/* receive scatter split: r0 = floor(L/2) + 1, r1 = L - r0 + 32 (capacity L + 32) */
static void recv_split(size_t L, size_t *r0, size_t *r1)
{
    *r0 = L / 2 + 1;
    *r1 = L - *r0 + 32;
}

/* READ scatter split: r0 = floor(L/2) + 1, r1 = L - r0 (exactly L) */
static void read_split(size_t L, size_t *r0, size_t *r1)
{
    *r0 = L / 2 + 1;
    *r1 = L - *r0;
}

/* -------------------------------------------------------- checking ---- */
/* check p[0..len) == message bytes [off, off+len) of step n; 0 = ok */
static int check_pat(const uint8_t *p, size_t len, int n, size_t off, const char *what, char *why, size_t wl)
{
    for (size_t i = 0; i < len; i++)
        if (p[i] != pat(n, off + i)) {
            snprintf(why, wl, "%s: message byte %zu is 0x%02x, expected 0x%02x", what, off + i, p[i], pat(n, off + i));
            return -1;
        }
    return 0;
}

static int check_fill(const uint8_t *p, size_t len, const char *what, char *why, size_t wl)
{
    for (size_t i = 0; i < len; i++)
        if (p[i] != FILL) {
            snprintf(why, wl, "%s: byte %zu is 0x%02x, expected untouched 0x%02x", what, i, p[i], FILL);
            return -1;
        }
    return 0;
}

/* region r holds [FILL x off][message x len][FILL ...] */
static int check_region_msg(int r, size_t off, size_t len, int n, const char *what, char *why, size_t wl)
{
    char w2[64];
    snprintf(w2, sizeof w2, "%s (before)", what);
    if (check_fill(region(r), off, w2, why, wl)) return -1;
    if (check_pat(region(r) + off, len, n, 0, what, why, wl)) return -1;
    snprintf(w2, sizeof w2, "%s (after)", what);
    return check_fill(region(r) + off + len, reg - off - len, w2, why, wl);
}

static uint64_t get64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static void put64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }

/* ------------------------------------------------------- responder ---- */
static size_t resp_off(const struct step *s) { return GUARD + (size_t)s->n; }  /* WRITE/READ target offset */
static size_t atom_off(const struct step *s) { return GUARD + 8 * (size_t)s->n; }

static void srv_prepare(const struct step *s, uint64_t *addr, uint32_t *rkey)
{
    size_t L = step_len(s);
    *addr = 0;
    *rkey = 0;
    if (has_recv(s)) {
        size_t r0, r1, Lr = (s->lc == L_ZERO) ? SMALL_LEN : L;
        recv_split(Lr, &r0, &r1);
        memset(region(0), FILL, reg);
        memset(region(1), FILL, reg);
        struct ibv_sge sg[2] = { { (uintptr_t)(region(0) + GUARD), (uint32_t)r0, mr->lkey },
                                 { (uintptr_t)(region(1) + GUARD), (uint32_t)r1, mr->lkey } };
        struct ibv_recv_wr wr = { .wr_id = (uint64_t)s->n, .sg_list = sg, .num_sge = 2 }, *bad;
        if (ibv_post_recv(qp, &wr, &bad)) fatal("ibv_post_recv: %s", strerror(errno));
    }
    if (s->kind == K_WRITE || s->kind == K_WRITE_IMM) {
        memset(region(2), FILL, reg);
        *addr = (uintptr_t)(region(2) + resp_off(s));
        *rkey = mr->rkey;
    } else if (s->kind == K_READ) {
        memset(region(3), FILL, reg);
        for (size_t i = 0; i < L; i++) region(3)[resp_off(s) + i] = pat(s->n, i);
        if (faulty(s)) region(3)[resp_off(s) + L / 2] ^= 0xff;
        *addr = (uintptr_t)(region(3) + resp_off(s));
        *rkey = mr->rkey;
    } else if (is_atomic(s)) {
        memset(region(4), FILL, reg);
        put64(region(4) + atom_off(s), faulty(s) ? s->init ^ 1 : s->init);
        *addr = (uintptr_t)(region(4) + atom_off(s));
        *rkey = mr->rkey;
    }
}

/* 0 = ok, else why[] says what is wrong */
static int srv_verify(const struct step *s, char *why, size_t wl)
{
    size_t L = step_len(s);
    struct ibv_wc wc;
    if (faulty(s) && L > 0 && (s->kind == K_SEND || s->kind == K_SEND_IMM)) region(0)[GUARD] ^= 0xff;
    if (faulty(s) && L > 0 && (s->kind == K_WRITE || s->kind == K_WRITE_IMM)) region(2)[resp_off(s)] ^= 0xff;
    if (has_recv(s)) {
        if (!wait_wc(&wc, opt.timeout)) { snprintf(why, wl, "no receive completion within %d s", opt.timeout); return -1; }
        if (wc.status != IBV_WC_SUCCESS) { snprintf(why, wl, "receive completion status %s", ibv_wc_status_str(wc.status)); return -1; }
        if (wc.wr_id != (uint64_t)s->n) { snprintf(why, wl, "receive completion wr_id %llu, expected %d", (unsigned long long)wc.wr_id, s->n); return -1; }
        enum ibv_wc_opcode want = s->kind == K_WRITE_IMM ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV;
        if (wc.opcode != want) { snprintf(why, wl, "receive completion opcode %s, expected %s", wc_opcode_str(wc.opcode), wc_opcode_str(want)); return -1; }
        if (wc.byte_len != L) { snprintf(why, wl, "receive completion byte_len %u, expected %zu", wc.byte_len, L); return -1; }
        int want_imm = s->kind != K_SEND;
        if (!!(wc.wc_flags & IBV_WC_WITH_IMM) != want_imm) { snprintf(why, wl, "receive completion %s immediate data", want_imm ? "lacks" : "has unexpected"); return -1; }
        if (faulty(s) && L == 0) wc.imm_data ^= htonl(1);
        if (want_imm && ntohl(wc.imm_data) != s->imm) { snprintf(why, wl, "imm_data 0x%08x, expected 0x%08x", ntohl(wc.imm_data), s->imm); return -1; }
        size_t r0, r1;
        if (s->kind == K_WRITE_IMM) {
            if (check_fill(region(0), reg, "receive SGE 0 (must be unused)", why, wl)) return -1;
            if (check_fill(region(1), reg, "receive SGE 1 (must be unused)", why, wl)) return -1;
        } else {
            recv_split(L, &r0, &r1);
            if (check_region_msg(0, GUARD, r0, s->n, "receive SGE 0", why, wl)) return -1;
            /* SGE 1 holds message bytes [r0, L), then 32 untouched bytes */
            if (check_fill(region(1), GUARD, "receive SGE 1 (before)", why, wl)) return -1;
            if (check_pat(region(1) + GUARD, L - r0, s->n, r0, "receive SGE 1", why, wl)) return -1;
            if (check_fill(region(1) + GUARD + (L - r0), reg - GUARD - (L - r0), "receive SGE 1 (after)", why, wl)) return -1;
        }
    }
    if (s->kind == K_WRITE || s->kind == K_WRITE_IMM) {
        if (check_region_msg(2, resp_off(s), L, s->n, "write target", why, wl)) return -1;
    } else if (s->kind == K_READ) {
        if (check_region_msg(3, resp_off(s), L, s->n, "read source (must be unchanged)", why, wl)) return -1;
    } else if (is_atomic(s)) {
        uint64_t v = get64(region(4) + atom_off(s));
        if (v != s->final) { snprintf(why, wl, "atomic word is 0x%016llx, expected 0x%016llx", (unsigned long long)v, (unsigned long long)s->final); return -1; }
        if (check_fill(region(4), atom_off(s), "atomic region (before)", why, wl)) return -1;
        if (check_fill(region(4) + atom_off(s) + 8, reg - atom_off(s) - 8, "atomic region (after)", why, wl)) return -1;
    }
    /* nothing else may have completed */
    int n = ibv_poll_cq(cq, 1, &wc);
    if (n > 0) { snprintf(why, wl, "unexpected extra completion (wr_id %llu opcode %s status %s)", (unsigned long long)wc.wr_id, wc_opcode_str(wc.opcode), ibv_wc_status_str(wc.status)); return -1; }
    return 0;
}

/* ------------------------------------------------------- requester ---- */
static int cli_run(const struct step *s, uint64_t raddr, uint32_t rkey, char *why, size_t wl)
{
    size_t L = step_len(s), g[3], r0 = 0, r1 = 0;
    struct ibv_sge sg[3];
    struct ibv_send_wr wr, *bad;
    memset(&wr, 0, sizeof wr);
    memset(sg, 0, sizeof sg);
    wr.wr_id = (uint64_t)s->n;
    wr.sg_list = sg;
    wr.send_flags = IBV_SEND_SIGNALED;
    switch (s->kind) {
    case K_SEND: wr.opcode = IBV_WR_SEND; break;
    case K_SEND_IMM: wr.opcode = IBV_WR_SEND_WITH_IMM; break;
    case K_WRITE: wr.opcode = IBV_WR_RDMA_WRITE; break;
    case K_WRITE_IMM: wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM; break;
    case K_READ: wr.opcode = IBV_WR_RDMA_READ; break;
    case K_FADD: wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD; break;
    case K_CSWAP: wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP; break;
    }
    if (s->kind == K_SEND_IMM || s->kind == K_WRITE_IMM) wr.imm_data = htonl(faulty(s) && L == 0 ? s->imm ^ 1 : s->imm);
    if (s->kind == K_WRITE || s->kind == K_WRITE_IMM || s->kind == K_READ) {
        wr.wr.rdma.remote_addr = raddr;
        wr.wr.rdma.rkey = rkey;
    }
    if (is_atomic(s)) {
        wr.wr.atomic.remote_addr = raddr;
        wr.wr.atomic.rkey = rkey;
        wr.wr.atomic.compare_add = s->arg1;
        wr.wr.atomic.swap = s->arg2;
        memset(region(5), FILL, reg);
        sg[0] = (struct ibv_sge){ (uintptr_t)(region(5) + GUARD), 8, mr->lkey };
        wr.num_sge = 1;
    } else if (s->kind == K_READ) {
        read_split(L, &r0, &r1);
        memset(region(3), FILL, reg);
        memset(region(4), FILL, reg);
        sg[0] = (struct ibv_sge){ (uintptr_t)(region(3) + GUARD), (uint32_t)r0, mr->lkey };
        sg[1] = (struct ibv_sge){ (uintptr_t)(region(4) + GUARD), (uint32_t)r1, mr->lkey };
        wr.num_sge = 2;
    } else {
        /* gather: SGE k = message bytes [g0+..+g(k-1), +gk) at region k + GUARD + k */
        int ns = gather_split(L, g);
        size_t off = 0;
        for (int k = 0; k < ns; k++) {
            uint8_t *p = region(k) + GUARD + (size_t)k;
            memset(region(k), FILL, reg);
            for (size_t i = 0; i < g[k]; i++) p[i] = pat(s->n, off + i);
            sg[k] = (struct ibv_sge){ (uintptr_t)p, (uint32_t)g[k], mr->lkey };
            off += g[k];
        }
        if (faulty(s) && ns == 3) region(1)[GUARD + 1] ^= 0xff;
        wr.num_sge = ns;
    }
    if (ibv_post_send(qp, &wr, &bad)) { snprintf(why, wl, "ibv_post_send: %s", strerror(errno)); return -1; }
    struct ibv_wc wc;
    if (!wait_wc(&wc, opt.timeout)) { snprintf(why, wl, "no send completion within %d s", opt.timeout); return -1; }
    if (wc.status != IBV_WC_SUCCESS) { snprintf(why, wl, "send completion status %s (vendor_err 0x%x)", ibv_wc_status_str(wc.status), wc.vendor_err); return -1; }
    if (wc.wr_id != (uint64_t)s->n) { snprintf(why, wl, "send completion wr_id %llu, expected %d", (unsigned long long)wc.wr_id, s->n); return -1; }
    enum ibv_wc_opcode want = IBV_WC_SEND;
    switch (s->kind) {
    case K_WRITE: case K_WRITE_IMM: want = IBV_WC_RDMA_WRITE; break;
    case K_READ: want = IBV_WC_RDMA_READ; break;
    case K_FADD: want = IBV_WC_FETCH_ADD; break;
    case K_CSWAP: want = IBV_WC_COMP_SWAP; break;
    default: break;
    }
    if (wc.opcode != want) { snprintf(why, wl, "send completion opcode %s, expected %s", wc_opcode_str(wc.opcode), wc_opcode_str(want)); return -1; }
    if ((s->kind == K_READ || is_atomic(s)) && wc.byte_len != L) { snprintf(why, wl, "send completion byte_len %u, expected %zu", wc.byte_len, L); return -1; }
    if (faulty(s) && s->kind == K_READ) region(4)[GUARD] ^= 0xff;
    if (faulty(s) && is_atomic(s)) region(5)[GUARD] ^= 0xff;
    if (s->kind == K_READ) {
        if (check_region_msg(3, GUARD, r0, s->n, "read SGE 0", why, wl)) return -1;
        if (check_fill(region(4), GUARD, "read SGE 1 (before)", why, wl)) return -1;
        if (check_pat(region(4) + GUARD, r1, s->n, r0, "read SGE 1", why, wl)) return -1;
        if (check_fill(region(4) + GUARD + r1, reg - GUARD - r1, "read SGE 1 (after)", why, wl)) return -1;
    } else if (is_atomic(s)) {
        uint64_t v = get64(region(5) + GUARD);
        if (v != s->init) { snprintf(why, wl, "atomic original value 0x%016llx, expected 0x%016llx", (unsigned long long)v, (unsigned long long)s->init); return -1; }
        if (check_fill(region(5), GUARD, "atomic result (before)", why, wl)) return -1;
        if (check_fill(region(5) + GUARD + 8, reg - GUARD - 8, "atomic result (after)", why, wl)) return -1;
    }
    int n = ibv_poll_cq(cq, 1, &wc);
    if (n > 0) { snprintf(why, wl, "unexpected extra completion (wr_id %llu)", (unsigned long long)wc.wr_id); return -1; }
    return 0;
}

/* ------------------------------------------------------------ hello ---- */
static void gid_hex(const uint8_t *g, char *out)
{
    for (int i = 0; i < 16; i++) sprintf(out + 2 * i, "%02x", g[i]);
}

static int parse_hex(const char *s, size_t digits, uint64_t *v)
{
    if (strlen(s) != digits) return -1;
    *v = 0;
    for (size_t i = 0; i < digits; i++) {
        char c = s[i];
        int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
        if (d < 0) return -1;
        *v = (*v << 4) | (uint64_t)d;
    }
    return 0;
}

static int parse_dec(const char *s, uint64_t *v)
{
    if (!*s || strlen(s) > 10) return -1;
    *v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9') return -1;
        *v = *v * 10 + (uint64_t)(*s - '0');
    }
    return 0;
}

/* split a line into at most max fields at single spaces */
static int split(char *l, char **f, int max)
{
    int n = 0;
    char *save = NULL;
    for (char *t = strtok_r(l, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
        if (n == max) return max + 1;
        f[n++] = t;
    }
    return n;
}

struct hello { uint32_t qpn, psn; uint8_t gid[16]; int mtu; size_t size; };

static void parse_hello(char *l, struct hello *h)
{
    char copy[LINE_MAX_LEN], *f[8];
    uint64_t v;
    snprintf(copy, sizeof copy, "%s", l);
    int n = split(l, f, 7);
    if (n >= 2 && !strcmp(f[0], "LAB1") && !strcmp(f[1], "ERROR")) fatal("peer refused: %s", copy);
    if (n != 7 || strcmp(f[0], "LAB1") || strcmp(f[1], "HELLO")) fatal("protocol: expected HELLO, got '%s'", copy);
    if (parse_hex(f[2], 6, &v)) fatal("protocol: bad qpn in '%s'", copy);
    h->qpn = (uint32_t)v;
    if (parse_hex(f[3], 6, &v)) fatal("protocol: bad psn in '%s'", copy);
    h->psn = (uint32_t)v;
    if (strlen(f[4]) != 32) fatal("protocol: bad gid in '%s'", copy);
    for (int i = 0; i < 16; i++) {
        char b[3] = { f[4][2 * i], f[4][2 * i + 1], 0 };
        if (parse_hex(b, 2, &v)) fatal("protocol: bad gid in '%s'", copy);
        h->gid[i] = (uint8_t)v;
    }
    if (parse_dec(f[5], &v) || !mtu_enum((int)v)) fatal("protocol: bad mtu in '%s'", copy);
    h->mtu = (int)v;
    if (parse_dec(f[6], &v) || v < SMALL_LEN || v > MAX_SIZE) fatal("protocol: bad size in '%s'", copy);
    h->size = (size_t)v;
}

static void send_hello(const uint8_t *gid)
{
    char g[33];
    gid_hex(gid, g);
    send_line("LAB1 HELLO %06x %06x %s %d %zu", qp->qp_num, opt.psn, g, opt.mtu, opt.size);
}

/* ------------------------------------------------------------- main ---- */
static void usage(void)
{
    fprintf(stderr, "usage: labpeer -s [-p PORT] [-g GIDX] [-d DEV] [-i PORT] [-m MTU] [-z SIZE] [-P PSN] [-t SECS] [-v] [-F STEP]\n"
                    "       labpeer [-p PORT] [-g GIDX] [-d DEV] [-i PORT] [-m MTU] [-z SIZE] [-P PSN] [-t SECS] [-v] [-F STEP] SERVER_IP\n");
    exit(2);
}

static void tcp_connect(void)
{
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *ai;
    char port[16];
    snprintf(port, sizeof port, "%d", opt.tcp_port);
    int e = getaddrinfo(opt.peer, port, &hints, &ai);
    if (e) fatal("%s: %s", opt.peer, gai_strerror(e));
    double deadline = now() + 10;
    for (;;) {
        sock = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (sock < 0) fatal("socket: %s", strerror(errno));
        if (connect(sock, ai->ai_addr, ai->ai_addrlen) == 0) break;
        int err = errno;
        close(sock);
        if (now() > deadline || (err != ECONNREFUSED && err != ENETUNREACH && err != EHOSTUNREACH))
            fatal("connect %s port %d: %s", opt.peer, opt.tcp_port, strerror(err));
        usleep(100000);
    }
    freeaddrinfo(ai);
}

static void tcp_accept(void)
{
    int ls = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1, zero = 0;
    struct sockaddr_in6 sa = { .sin6_family = AF_INET6, .sin6_port = htons((uint16_t)opt.tcp_port), .sin6_addr = IN6ADDR_ANY_INIT };
    if (ls < 0) fatal("socket: %s", strerror(errno));
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    setsockopt(ls, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    if (bind(ls, (struct sockaddr *)&sa, sizeof sa) || listen(ls, 1)) fatal("listen on port %d: %s", opt.tcp_port, strerror(errno));
    printf("info: listening on tcp port %d\n", opt.tcp_port);
    fflush(stdout);
    sock = accept(ls, NULL, NULL);
    if (sock < 0) fatal("accept: %s", strerror(errno));
    close(ls);
}

int main(int argc, char **argv)
{
    int c;
    uint64_t v;
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    while ((c = getopt(argc, argv, "sp:g:d:i:m:z:P:t:vF:h")) != -1) {
        switch (c) {
        case 's': opt.server = 1; break;
        case 'p': opt.tcp_port = atoi(optarg); break;
        case 'g': opt.gidx = atoi(optarg); break;
        case 'd': opt.dev = optarg; break;
        case 'i': opt.ib_port = atoi(optarg); break;
        case 'm': opt.mtu = atoi(optarg); opt.mtu_set = 1; break;
        case 'z': if (parse_dec(optarg, &v)) usage(); opt.size = (size_t)v; opt.size_set = 1; break;
        case 'P': {
            char *end;
            unsigned long p = strtoul(optarg, &end, 16);
            if (*end || p > 0xffffff) usage();
            opt.psn = (uint32_t)p;
            opt.psn_set = 1;
            break;
        }
        case 't': opt.timeout = atoi(optarg); break;
        case 'v': opt.verbose = 1; break;
        case 'F': opt.fault = optarg; break;
        default: usage();
        }
    }
    if (opt.server ? optind != argc : optind != argc - 1) usage();
    if (!opt.server) opt.peer = argv[optind];
    if (!mtu_enum(opt.mtu)) fatal("-m must be 256, 512, 1024, 2048 or 4096");
    if (opt.size < SMALL_LEN || opt.size > MAX_SIZE) fatal("-z must be %d..%d", SMALL_LEN, MAX_SIZE);
    if (opt.tcp_port <= 0 || opt.tcp_port > 65535 || opt.timeout <= 0 || opt.gidx < 0 || opt.ib_port <= 0) usage();
    if (!opt.psn_set) {
        srand48(time(NULL) ^ ((long)getpid() << 8));
        opt.psn = (uint32_t)(lrand48() & 0xffffff);
    }

    setup_verbs();
    union ibv_gid gid;
    if (ibv_query_gid(ctx, (uint8_t)opt.ib_port, opt.gidx, &gid)) fatal("ibv_query_gid index %d failed", opt.gidx);
    static const uint8_t zero16[16];
    if (!memcmp(gid.raw, zero16, 16)) fatal("GID index %d is empty", opt.gidx);

    struct hello peer;
    char line[LINE_MAX_LEN], g1[33], g2[33];
    if (opt.server) {
        tcp_accept();
        recv_line(line, tcp_timeout());
        parse_hello(line, &peer);
        if ((opt.mtu_set && peer.mtu != opt.mtu) || (opt.size_set && peer.size != opt.size)) {
            send_line("LAB1 ERROR parameter mismatch: server has mtu %d size %zu", opt.mtu, opt.size);
            fatal("client asked for mtu %d size %zu, server has mtu %d size %zu", peer.mtu, peer.size, opt.mtu, opt.size);
        }
        opt.mtu = peer.mtu;
        opt.size = peer.size;
        setup_mr();
        to_rts(peer.qpn, peer.psn, peer.gid);
        send_hello(gid.raw);
    } else {
        tcp_connect();
        setup_mr();
        send_hello(gid.raw);
        recv_line(line, tcp_timeout());
        parse_hello(line, &peer);
        if (peer.mtu != opt.mtu || peer.size != opt.size)
            fatal("protocol: server answered mtu %d size %zu, asked for %d %zu", peer.mtu, peer.size, opt.mtu, opt.size);
        to_rts(peer.qpn, peer.psn, peer.gid);
    }
    {
        int one = 1;
        setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    gid_hex(gid.raw, g1);
    gid_hex(peer.gid, g2);
    printf("info: role %s, local qpn 0x%06x psn 0x%06x gid %s, remote qpn 0x%06x psn 0x%06x gid %s, mtu %d, size %zu\n",
           opt.server ? "server" : "client", qp->qp_num, opt.psn, g1, peer.qpn, peer.psn, g2, opt.mtu, opt.size);

    int nok = 0, failed = 0;
    for (int i = 0; i < NSTEPS; i++) {
        const struct step *s = &STEPS[i];
        char *f[9], why[200] = "", peerwhy[LINE_MAX_LEN] = "";
        int ok;
        if (failed) {
            printf("step %s: skipped\n", s->name);
            continue;
        }
        if (opt.server) {
            uint64_t addr;
            uint32_t rkey;
            recv_line(line, tcp_timeout());
            char copy[LINE_MAX_LEN];
            snprintf(copy, sizeof copy, "%s", line);
            if (split(line, f, 4) != 4 || strcmp(f[0], "LAB1") || strcmp(f[1], "BEGIN") || parse_dec(f[2], &v) ||
                v != (uint64_t)s->n || strcmp(f[3], s->name))
                fatal("protocol: expected 'LAB1 BEGIN %d %s', got '%s'", s->n, s->name, copy);
            srv_prepare(s, &addr, &rkey);
            send_line("LAB1 READY %d %s %016llx %08x %zu", s->n, s->name, (unsigned long long)addr, rkey, step_len(s));
            recv_line(line, tcp_timeout());
            snprintf(copy, sizeof copy, "%s", line);
            char *rest = NULL;
            int nf = split(line, f, 5);
            if (nf == 6 || (nf >= 5 && !strcmp(f[4], "FAIL"))) {
                /* the reason is everything after "FAIL " */
                rest = strstr(copy, " FAIL ");
                rest = rest ? rest + 6 : NULL;
            }
            if (nf < 5 || strcmp(f[0], "LAB1") || strcmp(f[1], "DONE") || parse_dec(f[2], &v) || v != (uint64_t)s->n ||
                strcmp(f[3], s->name) || (strcmp(f[4], "OK") && strcmp(f[4], "FAIL")) || (!strcmp(f[4], "OK") && nf != 5) ||
                (!strcmp(f[4], "FAIL") && !rest))
                fatal("protocol: expected 'LAB1 DONE %d %s OK|FAIL ...', got '%s'", s->n, s->name, copy);
            if (!strcmp(f[4], "OK")) {
                ok = srv_verify(s, why, sizeof why) == 0;
                if (ok) send_line("LAB1 RESULT %d %s OK", s->n, s->name);
                else send_line("LAB1 RESULT %d %s FAIL %s", s->n, s->name, why);
                if (!ok) snprintf(peerwhy, sizeof peerwhy, "responder: %s", why);
            } else {
                ok = 0;
                send_line("LAB1 RESULT %d %s FAIL requester failed", s->n, s->name);
                snprintf(peerwhy, sizeof peerwhy, "requester: %s", rest);
            }
        } else {
            send_line("LAB1 BEGIN %d %s", s->n, s->name);
            recv_line(line, tcp_timeout());
            char copy[LINE_MAX_LEN];
            snprintf(copy, sizeof copy, "%s", line);
            uint64_t addr, rkey, len;
            if (split(line, f, 7) != 7 || strcmp(f[0], "LAB1") || strcmp(f[1], "READY") || parse_dec(f[2], &v) ||
                v != (uint64_t)s->n || strcmp(f[3], s->name) || parse_hex(f[4], 16, &addr) || parse_hex(f[5], 8, &rkey) ||
                parse_dec(f[6], &len) || len != step_len(s))
                fatal("protocol: expected 'LAB1 READY %d %s ADDR RKEY %zu', got '%s'", s->n, s->name, step_len(s), copy);
            int lok = cli_run(s, addr, (uint32_t)rkey, why, sizeof why) == 0;
            if (lok) send_line("LAB1 DONE %d %s OK", s->n, s->name);
            else send_line("LAB1 DONE %d %s FAIL %s", s->n, s->name, why);
            recv_line(line, tcp_timeout());
            snprintf(copy, sizeof copy, "%s", line);
            int nf = split(line, f, 5);
            char *rest = strstr(copy, " FAIL ");
            if (nf < 5 || strcmp(f[0], "LAB1") || strcmp(f[1], "RESULT") || parse_dec(f[2], &v) || v != (uint64_t)s->n ||
                strcmp(f[3], s->name) || (strcmp(f[4], "OK") && strcmp(f[4], "FAIL")) || (!strcmp(f[4], "OK") && nf != 5) ||
                (!strcmp(f[4], "FAIL") && !rest))
                fatal("protocol: expected 'LAB1 RESULT %d %s OK|FAIL ...', got '%s'", s->n, s->name, copy);
            ok = lok && !strcmp(f[4], "OK");
            if (!lok) snprintf(peerwhy, sizeof peerwhy, "requester: %s", why);
            else if (!ok) snprintf(peerwhy, sizeof peerwhy, "responder: %s", rest + 6);
        }
        if (ok) {
            nok++;
            printf("step %s: ok\n", s->name);
        } else {
            failed = 1;
            printf("step %s: FAIL (%s)\n", s->name, peerwhy);
        }
    }

    /* END exchange: the client speaks first */
    const char *verdict = nok == NSTEPS ? "PASS" : "FAIL";
    if (!opt.server) send_line("LAB1 END %s %d", verdict, nok);
    recv_line(line, tcp_timeout());
    {
        char expect[64];
        snprintf(expect, sizeof expect, "LAB1 END %s %d", verdict, nok);
        if (strcmp(line, expect)) fatal("protocol: expected '%s', got '%s'", expect, line);
    }
    if (opt.server) send_line("LAB1 END %s %d", verdict, nok);
    printf("result: %s %d/%d\n", verdict, nok, NSTEPS);

    close(sock);
    ibv_destroy_qp(qp);
    ibv_dereg_mr(mr);
    ibv_destroy_cq(cq);
    ibv_destroy_comp_channel(chan);
    ibv_dealloc_pd(pd);
    ibv_close_device(ctx);
    free(buf);
    return nok == NSTEPS ? 0 : 1;
}
