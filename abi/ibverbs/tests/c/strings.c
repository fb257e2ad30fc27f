/* Prints every value of the pure helpers (strings, rate conversions); run against Debian's
 * libibverbs and ours, the outputs must be identical. */
#include <stdio.h>
#include <infiniband/verbs.h>

int main(void)
{
	for (int i = -3; i < 40; i++) {
		printf("%d wc_status %s\n", i, ibv_wc_status_str(i));
		printf("%d node_type %s\n", i, ibv_node_type_str(i));
		printf("%d port_state %s\n", i, ibv_port_state_str(i));
		printf("%d event_type %s\n", i, ibv_event_type_str(i));
		printf("%d rate_to_mult %d\n", i, ibv_rate_to_mult(i));
		printf("%d rate_to_mbps %d\n", i, ibv_rate_to_mbps(i));
	}
	for (int m = -2; m < 600; m++) {
		int r = mult_to_ibv_rate(m);
		if (r)
			printf("mult %d -> %d\n", m, r);
	}
	for (int i = -3; i < 40; i++) {
		int mbps = ibv_rate_to_mbps(i);
		printf("mbps %d -> %d, %d -> %d\n", mbps, mbps_to_ibv_rate(mbps), mbps + 1,
		       mbps_to_ibv_rate(mbps + 1));
	}
	printf("mbps 0 -> %d\n", mbps_to_ibv_rate(0));
	return 0;
}
