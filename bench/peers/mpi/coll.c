// coll: MPI's collectives timed the way hiercomm-bench times hiercomm's, so
// that bench/peers/run.sh can set the two side by side (docs/benchmarks.md,
// "Side by side with OpenMPI").
//
// Per operation and size: one checked call (rank-distinct float32 data,
// the result compared on every rank), the rest of -w warmups, the iteration
// count that fills -t ms by the median warmup on the slowest rank (1 to
// 10000), then -r repeats, each an MPI_Barrier and that many back-to-back
// calls. A repeat's time per call is the slowest rank's (hiercomm-bench
// -a 3); the row is the median over the repeats. Sizes are nccl-tests':
// the whole buffer (AllReduce, Broadcast, Reduce to rank 0), the send buffer of
// ReduceScatter and the receive buffer of AllGather, rounded down to P
// elements for those two.
//
// Rank 0 prints CSV on stdout: a "#" line naming the library, the header
// op,size_bytes,count,time_us,iters,repeats,wrong and one line per row.
//
//   mpicc -O2 -o coll coll.c
//   mpirun -np 4 ./coll -b 8 -e 64M -f 2 -o allreduce,reducescatter,broadcast
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ALLREDUCE, REDUCESCATTER, BROADCAST, ALLGATHER, REDUCE, NOPS };
static const char *names[NOPS] = {"allreduce", "reducescatter", "broadcast", "allgather", "reduce"};
enum { MAX_ITERS = 10000, MAX_REPEATS = 64 };

static int P, me;

static long long parse_size(const char *s) {
    char *end;
    double v = strtod(s, &end);
    switch (*end) {
    case 'k': case 'K': v *= 1024; break;
    case 'm': case 'M': v *= 1024 * 1024; break;
    case 'g': case 'G': v *= 1024.0 * 1024 * 1024; break;
    case 0: break;
    default: return -1;
    }
    return (long long)v;
}

static void usage(void) {
    if (me == 0)
        fprintf(stderr, "usage: coll [-b 8] [-e 64M] [-f 2] [-o allreduce,reducescatter,broadcast,allgather,reduce] [-w 5] [-r 3] [-t 30 (ms per repeat)]\n");
    MPI_Finalize();
    exit(2);
}

// run calls op once on n elements (the size's count).
static void run(int op, float *send, float *recv, int n) {
    switch (op) {
    case ALLREDUCE: MPI_Allreduce(send, recv, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); break;
    case REDUCESCATTER: MPI_Reduce_scatter_block(send, recv, n / P, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); break;
    case BROADCAST: MPI_Bcast(recv, n, MPI_FLOAT, 0, MPI_COMM_WORLD); break;
    case ALLGATHER: MPI_Allgather(send, n / P, MPI_FLOAT, recv, n / P, MPI_FLOAT, MPI_COMM_WORLD); break;
    case REDUCE: MPI_Reduce(send, recv, n, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD); break;
    }
}

// value is rank r's element i: small integers, so that float sums are exact.
static float value(int r, long i) { return (float)((r + 1) * (i % 13 + 1)); }

// check fills the buffers, runs op once and returns the wrong elements over
// every rank (on every rank), and that call's time on the slowest rank.
static long long check(int op, float *send, float *recv, int n, double *secs) {
    int nsend = op == ALLGATHER ? n / P : n;
    for (long i = 0; i < nsend; i++) send[i] = value(me, i);
    for (long i = 0; i < n; i++) recv[i] = (op == BROADCAST && me == 0) ? value(0, i) : -1;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    run(op, send, recv, n);
    double t = MPI_Wtime() - t0;
    long long wrong = 0;
    long sum = (long)P * (P + 1) / 2;
    switch (op) {
    case ALLREDUCE:
        for (long i = 0; i < n; i++) wrong += recv[i] != (float)(sum * (i % 13 + 1));
        break;
    case REDUCE: // the root's result only
        for (long i = 0; me == 0 && i < n; i++) wrong += recv[i] != (float)(sum * (i % 13 + 1));
        break;
    case REDUCESCATTER:
        for (long i = 0; i < n / P; i++) wrong += recv[i] != (float)(sum * ((me * (long)(n / P) + i) % 13 + 1));
        break;
    case BROADCAST:
        for (long i = 0; i < n; i++) wrong += recv[i] != value(0, i);
        break;
    case ALLGATHER:
        for (long i = 0; i < n; i++) wrong += recv[i] != value(i / (n / P), i % (n / P));
        break;
    }
    long long all;
    MPI_Allreduce(&wrong, &all, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(&t, secs, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return all;
}

static int cmpd(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, n, sizeof *v, cmpd);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    long long minb = 8, maxb = 64 << 20;
    int factor = 2, warmup = 5, repeats = 3;
    double budget = 0.030;
    int want[NOPS] = {1, 1, 1, 0, 0};
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc || argv[i][0] != '-' || strlen(argv[i]) != 2) usage();
        const char *v = argv[++i];
        switch (argv[i - 1][1]) {
        case 'b': minb = parse_size(v); break;
        case 'e': maxb = parse_size(v); break;
        case 'f': factor = atoi(v); break;
        case 'w': warmup = atoi(v); break;
        case 'r': repeats = atoi(v); break;
        case 't': budget = atof(v) / 1e3; break;
        case 'o': {
            memset(want, 0, sizeof want);
            char *list = strdup(v);
            for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
                int k = 0;
                while (k < NOPS && strcmp(tok, names[k])) k++;
                if (k == NOPS) usage();
                want[k] = 1;
            }
            free(list);
            break;
        }
        default: usage();
        }
    }
    if (minb < 1 || maxb < minb || factor < 2 || warmup < 1 || repeats < 1 || repeats > MAX_REPEATS || budget <= 0) usage();

    long maxn = (long)(maxb / 4);
    float *send = malloc(maxn * sizeof(float) + 4), *recv = malloc(maxn * sizeof(float) + 4);
    double *warm = malloc(warmup * sizeof(double));
    if (!send || !recv || !warm) {
        fprintf(stderr, "coll: out of memory for %lld bytes\n", maxb);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (me == 0) {
        char lib[MPI_MAX_LIBRARY_VERSION_STRING];
        int len;
        MPI_Get_library_version(lib, &len);
        char *nl = strchr(lib, '\n');
        if (nl) *nl = 0;
        char *comma = strchr(lib, ',');
        if (comma) *comma = 0;
        printf("# %s, %d ranks; per size: the slowest rank's time per call, median of %d repeats of ~%.0f ms\n", lib, P, repeats, budget * 1e3);
        printf("op,size_bytes,count,time_us,iters,repeats,wrong\n");
        fflush(stdout);
    }
    for (int op = 0; op < NOPS; op++) {
        if (!want[op]) continue;
        long prev = 0;
        for (long long b = minb; b <= maxb; b *= factor) {
            long n = (long)(b / 4);
            if (op == REDUCESCATTER || op == ALLGATHER) n = n / P * P;
            if (n == 0 || n == prev) continue;
            prev = n;
            double first;
            long long wrong = check(op, send, recv, n, &first);
            // The check's call is the first warmup; a call that outlasts
            // the budget gets one more, as hiercomm-bench does.
            int w = first > budget ? 2 : warmup, nw = 0;
            for (int i = 1; i < w; i++) {
                double t0 = MPI_Wtime();
                run(op, send, recv, n);
                warm[nw++] = MPI_Wtime() - t0;
            }
            double per = nw ? median(warm, nw) : first, slowest;
            MPI_Allreduce(&per, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
            double want_iters = ceil(budget / slowest);
            int iters = want_iters < 1 ? 1 : want_iters > MAX_ITERS ? MAX_ITERS : (int)want_iters;
            double times[MAX_REPEATS];
            for (int r = 0; r < repeats; r++) {
                MPI_Barrier(MPI_COMM_WORLD);
                double t0 = MPI_Wtime();
                for (int i = 0; i < iters; i++) run(op, send, recv, n);
                double t = (MPI_Wtime() - t0) / iters;
                MPI_Allreduce(&t, &times[r], 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
            }
            double us = median(times, repeats) * 1e6;
            if (me == 0) {
                printf("%s,%lld,%ld,%.3f,%d,%d,%lld\n", names[op], (long long)n * 4, n, us, iters, repeats, wrong);
                fflush(stdout);
            }
        }
    }
    free(send);
    free(recv);
    free(warm);
    MPI_Finalize();
    return 0;
}
