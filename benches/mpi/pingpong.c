/* MPI ping-pong between ranks 0 and 1: half round trip per size, and the bandwidth it gives.
 * Every echoed message is compared with what was sent. Used by benches/mpi_pingpong.sh. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2) {
        if (rank == 0)
            fprintf(stderr, "pingpong: needs 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const int sizes[] = {8, 65536, 1048576};
    int iters_small = argc > 1 ? atoi(argv[1]) : 10000;
    int bad = 0;
    char *out = malloc(1 << 20), *in = malloc(1 << 20);
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        int n = sizes[s], iters = n >= 65536 ? iters_small / 20 + 1 : iters_small;
        for (int w = 0; w < 2; w++) { /* warm-up round, then the measured one */
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            for (int i = 0; i < iters; i++) {
                if (rank == 0) {
                    memset(out, (char)(i + n), n);
                    MPI_Send(out, n, MPI_CHAR, 1, i, MPI_COMM_WORLD);
                    MPI_Recv(in, n, MPI_CHAR, 1, i, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                    if (memcmp(in, out, n) != 0)
                        bad++;
                } else {
                    MPI_Recv(in, n, MPI_CHAR, 0, i, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                    MPI_Send(in, n, MPI_CHAR, 0, i, MPI_COMM_WORLD);
                }
            }
            double half = (MPI_Wtime() - t0) / iters / 2;
            if (w == 1 && rank == 0)
                printf("pingpong %d B: %.2f us half round trip, %.1f MB/s\n", n, half * 1e6, n / half / 1e6);
        }
    }
    if (rank == 0)
        printf(bad ? "pingpong: %d echoes differ\n" : "pingpong: every echo checked%.0d\n", bad);
    free(out);
    free(in);
    MPI_Finalize();
    return bad != 0;
}
