/* The exports rdma-core implements as plain reads and writes of the caller's struct, on structs
 * the caller built (unit tests mock devices and objects this way): ibv_get_device_name reads
 * device->name, ibv_ack_cq_events and ibv_ack_async_event count under the object's own mutex,
 * ibv_qp_to_qp_ex reads the comp_mask of a struct verbs_qp. Run against Debian's libibverbs and
 * ours (abi/ibverbs/tests/device_verbs.rs), the outputs must be identical. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <infiniband/verbs.h>

/* rdma-core's struct verbs_qp (libibverbs/driver.h): the QP, then comp_mask and the XRC domain. */
struct mock_verbs_qp {
	union {
		struct ibv_qp qp;
		struct ibv_qp_ex qp_ex;
	};
	uint32_t comp_mask;
	void *xrcd;
};

int main(void)
{
	struct ibv_device dev;
	struct ibv_cq cq;
	struct ibv_qp qp;
	struct ibv_srq srq;
	struct mock_verbs_qp vqp;
	struct ibv_async_event ev;
	const char *name;

	memset(&dev, 0, sizeof dev);
	strcpy(dev.name, "mock0");
	strcpy(dev.dev_name, "uverbs7");
	name = ibv_get_device_name(&dev);
	printf("device_name %s same_pointer %d\n", name ? name : "NULL", name == dev.name);
	strcpy(dev.name, "renamed");
	printf("device_name.after_rename %s\n", ibv_get_device_name(&dev));

	memset(&cq, 0, sizeof cq);
	pthread_mutex_init(&cq.mutex, NULL);
	pthread_cond_init(&cq.cond, NULL);
	ibv_ack_cq_events(&cq, 3);
	ibv_ack_cq_events(&cq, 0);
	ibv_ack_cq_events(&cq, 2);
	printf("ack_cq_events comp %u async %u\n", cq.comp_events_completed, cq.async_events_completed);

	memset(&ev, 0, sizeof ev);
	ev.event_type = IBV_EVENT_CQ_ERR;
	ev.element.cq = &cq;
	ibv_ack_async_event(&ev);
	printf("ack_async_event.cq comp %u async %u\n", cq.comp_events_completed, cq.async_events_completed);

	memset(&qp, 0, sizeof qp);
	pthread_mutex_init(&qp.mutex, NULL);
	pthread_cond_init(&qp.cond, NULL);
	for (int t = IBV_EVENT_CQ_ERR; t <= IBV_EVENT_WQ_FATAL; t++) {
		if (t == IBV_EVENT_CQ_ERR || t == IBV_EVENT_SRQ_ERR || t == IBV_EVENT_SRQ_LIMIT_REACHED || t == IBV_EVENT_WQ_FATAL)
			continue;
		ev.event_type = t;
		ev.element.qp = &qp;
		ibv_ack_async_event(&ev);
		printf("ack_async_event.%d qp %u\n", t, qp.events_completed);
	}
	memset(&srq, 0, sizeof srq);
	pthread_mutex_init(&srq.mutex, NULL);
	pthread_cond_init(&srq.cond, NULL);
	ev.event_type = IBV_EVENT_SRQ_LIMIT_REACHED;
	ev.element.srq = &srq;
	ibv_ack_async_event(&ev);
	ev.event_type = IBV_EVENT_SRQ_ERR;
	ibv_ack_async_event(&ev);
	printf("ack_async_event.srq %u\n", srq.events_completed);

	memset(&vqp, 0, sizeof vqp);
	printf("qp_to_qp_ex.plain %s\n", ibv_qp_to_qp_ex(&vqp.qp) ? "ptr" : "NULL");
	vqp.comp_mask = 2; /* VERBS_QP_EX */
	printf("qp_to_qp_ex.ex %s\n", ibv_qp_to_qp_ex(&vqp.qp) == &vqp.qp_ex ? "same" : "other");
	vqp.comp_mask = 1; /* VERBS_QP_XRCD only */
	printf("qp_to_qp_ex.xrcd_only %s\n", ibv_qp_to_qp_ex(&vqp.qp) ? "ptr" : "NULL");
	return 0;
}
