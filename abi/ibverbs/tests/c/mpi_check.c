/* An MPI job whose every byte is checked: point-to-point (a ring of MPI_Sendrecv, then every
 * pair both ways with MPI_Isend/MPI_Irecv, 0 B to 4 MiB, then a blocking ping-pong, 0 B to
 * 4 KiB, and MPI_Barrier), MPI_Allreduce (sums and maxima of
 * rank-dependent arrays, up to 2 MiB) and MPI_Alltoall (every element names its sender,
 * receiver and position, up to 256 KiB per pair). Each rank prints "rank R of N on DEV: ok"
 * (DEV: $SOFTROCE_DEVICES, else the host name); rank 0 prints "PASSED: ..." when every rank
 * passed, and the exit status is 0 only then. Built with mpicc by tests/middleware.rs. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int fails;
#define CHECK(c, ...)                                                                      \
    do {                                                                                   \
        if (!(c)) {                                                                        \
            if (fails++ < 10)                                                              \
                fprintf(stderr, __VA_ARGS__);                                              \
        }                                                                                  \
    } while (0)

static uint8_t pat(int from, int to, size_t i, int round)
{
    return (uint8_t)(from * 31 + to * 7 + i * 13 + round);
}

static void point_to_point(int rank, int size)
{
    static const size_t sizes[] = {0, 1, 8, 1000, 4096, 65536, 1 << 20, 4 << 20};
    for (int round = 0; round < 3; round++) {
        for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
            size_t n = sizes[s];
            int to = (rank + 1) % size, from = (rank + size - 1) % size;
            uint8_t *out = malloc(n + 1), *in = malloc(n + 1);
            for (size_t i = 0; i < n; i++)
                out[i] = pat(rank, to, i, round);
            memset(in, 0xEE, n + 1);
            MPI_Status st;
            MPI_Sendrecv(out, (int)n, MPI_BYTE, to, 7, in, (int)n, MPI_BYTE, from, 7, MPI_COMM_WORLD, &st);
            int got;
            MPI_Get_count(&st, MPI_BYTE, &got);
            CHECK((size_t)got == n, "rank %d: ring %zu B: got %d bytes\n", rank, n, got);
            for (size_t i = 0; i < n; i++)
                CHECK(in[i] == pat(from, rank, i, round), "rank %d: ring %zu B: byte %zu is %u\n", rank, n, i,
                      in[i]);
            free(out);
            free(in);

            MPI_Request *rq = malloc(sizeof(MPI_Request) * 2 * size);
            uint8_t **ins = malloc(sizeof(uint8_t *) * size), **outs = malloc(sizeof(uint8_t *) * size);
            int k = 0;
            for (int p = 0; p < size; p++) {
                ins[p] = malloc(n + 1);
                outs[p] = malloc(n + 1);
                for (size_t i = 0; i < n; i++)
                    outs[p][i] = pat(rank, p, i, round + 100);
                MPI_Irecv(ins[p], (int)n, MPI_BYTE, p, 9, MPI_COMM_WORLD, &rq[k++]);
                MPI_Isend(outs[p], (int)n, MPI_BYTE, p, 9, MPI_COMM_WORLD, &rq[k++]);
            }
            MPI_Waitall(k, rq, MPI_STATUSES_IGNORE);
            for (int p = 0; p < size; p++) {
                for (size_t i = 0; i < n; i++)
                    CHECK(ins[p][i] == pat(p, rank, i, round + 100), "rank %d: from %d, %zu B: byte %zu\n", rank,
                          p, n, i);
                free(ins[p]);
                free(outs[p]);
            }
            free(ins);
            free(outs);
            free(rq);
        }
    }
}

/* Ping-pong with blocking MPI_Send/MPI_Recv between rank r and rank r + size/2 (on the other
 * host when ranks are placed by host): empty messages from NULL, then small ones back to back
 * (UCX posts these as inline sends). */
static void ping_pong(int rank, int size)
{
    static const size_t sizes[] = {0, 8, 64, 4096};
    int half = size / 2;
    if (size < 2 || rank >= 2 * half)
        return;
    int peer = rank < half ? rank + half : rank - half;
    /* Empty messages from a NULL buffer, as MPI_Barrier's are: UCX posts them as inline sends
     * whose one SGE is NULL with length 0. */
    for (int i = 0; i < 100; i++) {
        if (rank < half) {
            MPI_Send(NULL, 0, MPI_BYTE, peer, 10, MPI_COMM_WORLD);
            MPI_Recv(NULL, 0, MPI_BYTE, peer, 10, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(NULL, 0, MPI_BYTE, peer, 10, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(NULL, 0, MPI_BYTE, peer, 10, MPI_COMM_WORLD);
        }
    }
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        size_t n = sizes[s];
        uint8_t out[4096], in[4096];
        for (int i = 0; i < 500; i++) {
            for (size_t k = 0; k < n; k++)
                out[k] = pat(rank, peer, k, i);
            if (rank < half) {
                MPI_Send(out, (int)n, MPI_BYTE, peer, 11, MPI_COMM_WORLD);
                MPI_Recv(in, (int)n, MPI_BYTE, peer, 11, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else {
                MPI_Recv(in, (int)n, MPI_BYTE, peer, 11, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                MPI_Send(out, (int)n, MPI_BYTE, peer, 11, MPI_COMM_WORLD);
            }
            for (size_t k = 0; k < n; k++)
                CHECK(in[k] == pat(peer, rank, k, i), "rank %d: ping-pong %zu B, round %d: byte %zu\n", rank, n, i,
                      k);
        }
    }
}

static void allreduce(int rank, int size)
{
    static const int lens[] = {1, 1000, 262144};
    for (int l = 0; l < 3; l++) {
        int n = lens[l];
        long long *v = malloc(sizeof(long long) * n), *r = malloc(sizeof(long long) * n);
        double *dv = malloc(sizeof(double) * n), *dr = malloc(sizeof(double) * n);
        for (int i = 0; i < n; i++) {
            v[i] = (long long)(rank + 1) * (i + 1);
            dv[i] = rank + i * 0.5;
        }
        MPI_Allreduce(v, r, n, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
        MPI_Allreduce(dv, dr, n, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        long long tri = (long long)size * (size + 1) / 2;
        for (int i = 0; i < n; i++) {
            CHECK(r[i] == tri * (i + 1), "rank %d: allreduce sum[%d] = %lld\n", rank, i, r[i]);
            CHECK(dr[i] == (size - 1) + i * 0.5, "rank %d: allreduce max[%d] = %f\n", rank, i, dr[i]);
        }
        free(v);
        free(r);
        free(dv);
        free(dr);
    }
}

static void alltoall(int rank, int size)
{
    static const int per[] = {1, 256, 65536};
    for (int l = 0; l < 3; l++) {
        int m = per[l];
        int *sb = malloc(sizeof(int) * m * size), *rb = malloc(sizeof(int) * m * size);
        for (int p = 0; p < size; p++)
            for (int j = 0; j < m; j++)
                sb[p * m + j] = rank * 1000003 + p * 10007 + j;
        memset(rb, 0xEE, sizeof(int) * m * size);
        MPI_Alltoall(sb, m, MPI_INT, rb, m, MPI_INT, MPI_COMM_WORLD);
        for (int p = 0; p < size; p++)
            for (int j = 0; j < m; j++)
                CHECK(rb[p * m + j] == p * 1000003 + rank * 10007 + j, "rank %d: alltoall from %d [%d] = %d\n",
                      rank, p, j, rb[p * m + j]);
        free(sb);
        free(rb);
    }
}

int main(int argc, char **argv)
{
    int rank, size, all;
    char host[256];
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *dev = getenv("SOFTROCE_DEVICES");
    if (dev)
        snprintf(host, sizeof host, "%s", dev);
    else
        gethostname(host, sizeof host);
    point_to_point(rank, size);
    ping_pong(rank, size);
    MPI_Barrier(MPI_COMM_WORLD);
    allreduce(rank, size);
    alltoall(rank, size);
    MPI_Allreduce(&fails, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    printf("rank %d of %d on %s: %s\n", rank, size, host, fails ? "FAILED" : "ok");
    if (rank == 0)
        printf("%s: point-to-point, MPI_Allreduce, MPI_Alltoall, %d ranks\n", all ? "FAILED" : "PASSED", size);
    MPI_Finalize();
    return all ? 1 : 0;
}
