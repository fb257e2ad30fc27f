/* Runs the ibv_copy_*_kern conversions on patterned inputs and prints every output byte; run
 * against Debian's libibverbs and ours, the outputs must be identical. */
#include <stdio.h>
#include <string.h>
#include <infiniband/verbs.h>
#include <infiniband/sa.h>
#include <rdma/ib_user_verbs.h>
#include <rdma/ib_user_sa.h>

/* marshall.h is not installed; these are the exported IBVERBS_1.0/1.1 functions. */
void ibv_copy_ah_attr_from_kern(struct ibv_ah_attr *dst, struct ib_uverbs_ah_attr *src);
void ibv_copy_qp_attr_from_kern(struct ibv_qp_attr *dst, struct ib_uverbs_qp_attr *src);
void ibv_copy_path_rec_from_kern(struct ibv_sa_path_rec *dst, struct ib_user_path_rec *src);
void ibv_copy_path_rec_to_kern(struct ib_user_path_rec *dst, struct ibv_sa_path_rec *src);

static void pattern(void *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		((unsigned char *)p)[i] = (unsigned char)(seed + 37 * i + (i >> 3));
}

static void dump(const char *what, const void *p, size_t n)
{
	printf("%s", what);
	for (size_t i = 0; i < n; i++)
		printf("%s%02x", i % 16 ? "" : "\n  ", ((const unsigned char *)p)[i]);
	printf("\n");
}

int main(void)
{
	for (unsigned seed = 1; seed < 4; seed++) {
		struct ib_uverbs_ah_attr kah;
		struct ibv_ah_attr ah;
		pattern(&kah, sizeof kah, seed);
		memset(&ah, 0xcc, sizeof ah);
		ibv_copy_ah_attr_from_kern(&ah, &kah);
		dump("ah_attr", &ah, sizeof ah);

		struct ib_uverbs_qp_attr kqp;
		struct ibv_qp_attr qp;
		pattern(&kqp, sizeof kqp, seed);
		memset(&qp, 0xcc, sizeof qp);
		ibv_copy_qp_attr_from_kern(&qp, &kqp);
		dump("qp_attr", &qp, sizeof qp);

		struct ib_user_path_rec kpr;
		struct ibv_sa_path_rec pr;
		pattern(&kpr, sizeof kpr, seed);
		memset(&pr, 0xcc, sizeof pr);
		ibv_copy_path_rec_from_kern(&pr, &kpr);
		dump("path_rec_from_kern", &pr, sizeof pr);

		pattern(&pr, sizeof pr, seed + 100);
		memset(&kpr, 0xcc, sizeof kpr);
		ibv_copy_path_rec_to_kern(&kpr, &pr);
		dump("path_rec_to_kern", &kpr, sizeof kpr);
	}
	return 0;
}
