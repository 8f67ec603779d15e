/* tests/testbed/gs_mpi_probe.c — a tiny MPI ping-pong / exchange probe for the testbed and
 * Slurm script tests, used only when the gradsync-bench target does not exist.
 *
 * It speaks a subset of gradsync-bench's command line and prints the same nccl-tests
 * style table (size count type redop root | time algbw busbw #wrong, out-of-place and
 * in-place), so the tests parse one format whichever program ran:
 *
 *   mpirun -np 2 gs_mpi_probe --op pingpong|exchange -b 4M -e 4M [-f 2] [-n 20] [-w 5]
 *                             [--out FILE.h5]
 *
 * pingpong: rank 0 sends, rank 1 returns; time = half the round trip (one-way).
 * exchange: ranks 0 and 1 MPI_Sendrecv with each other at once (both directions busy);
 *           algbw = bytes each rank sent / time.
 * Every rank first prints "# rank R of N on HOST"; --out makes rank 0 write an HDF5 file
 * (datasets size_bytes, time_us; attributes op, hostnames), via a temporary name + rename.
 * Exit status: 0 ok, 1 run-time error, 2 bad options.
 */
#include <hdf5.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int64_t parse_size(const char *s) {
  char *end = NULL;
  double v = strtod(s, &end);
  if (end == s || v < 0) return -1;
  switch (*end) {
    case 'K': case 'k': v *= 1024.0; ++end; break;
    case 'M': case 'm': v *= 1024.0 * 1024.0; ++end; break;
    case 'G': case 'g': v *= 1024.0 * 1024.0 * 1024.0; ++end; break;
    default: break;
  }
  return *end ? -1 : (int64_t)v;
}

static int write_h5(const char *path, const char *op, int n, const int64_t *sizes,
                    const double *times, const char *hosts, int nranks, int hostlen) {
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
  hid_t f = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (f < 0) return -1;
  hsize_t dim = (hsize_t)n;
  hid_t sp = H5Screate_simple(1, &dim, NULL);
  hid_t d1 = H5Dcreate2(f, "size_bytes", H5T_NATIVE_INT64, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dwrite(d1, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, sizes);
  hid_t d2 = H5Dcreate2(f, "time_us", H5T_NATIVE_DOUBLE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dwrite(d2, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, times);
  H5Dclose(d1); H5Dclose(d2); H5Sclose(sp);

  hid_t st = H5Tcopy(H5T_C_S1);
  H5Tset_size(st, strlen(op) + 1);
  hid_t as = H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate2(f, "op", st, as, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, st, op);
  H5Aclose(a); H5Sclose(as); H5Tclose(st);

  hid_t ht = H5Tcopy(H5T_C_S1);
  H5Tset_size(ht, (size_t)hostlen);
  hsize_t hd = (hsize_t)nranks;
  hid_t hs = H5Screate_simple(1, &hd, NULL);
  hid_t ha = H5Acreate2(f, "hostnames", ht, hs, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(ha, ht, hosts);
  H5Aclose(ha); H5Sclose(hs); H5Tclose(ht);
  if (H5Fclose(f) < 0) return -1;
  return rename(tmp, path);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  const char *op = "pingpong", *out = NULL;
  int64_t minb = 8, maxb = 4 << 20, factor = 2;
  int iters = 20, warmup = 5, bad = 0;
  for (int i = 1; i < argc; ++i) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--op") && v) { op = v; ++i; }
    else if ((!strcmp(a, "-b") || !strcmp(a, "--minbytes")) && v) { minb = parse_size(v); ++i; }
    else if ((!strcmp(a, "-e") || !strcmp(a, "--maxbytes")) && v) { maxb = parse_size(v); ++i; }
    else if ((!strcmp(a, "-f") || !strcmp(a, "--stepfactor")) && v) { factor = atoll(v); ++i; }
    else if ((!strcmp(a, "-n") || !strcmp(a, "--iters")) && v) { iters = atoi(v); ++i; }
    else if ((!strcmp(a, "-w") || !strcmp(a, "--warmup_iters")) && v) { warmup = atoi(v); ++i; }
    else if ((!strcmp(a, "-c") || !strcmp(a, "--check")) && v) { ++i; }
    else if (!strcmp(a, "--out") && v) { out = v; ++i; }
    else { bad = 1; if (rank == 0) fprintf(stderr, "gs_mpi_probe: bad option '%s'\n", a); }
  }
  if (strcmp(op, "pingpong") && strcmp(op, "exchange")) bad = 1;
  if (minb < 0 || maxb < minb || factor < 2 || iters < 1 || warmup < 0 || size < 2) bad = 1;
  if (bad) {
    if (rank == 0) fprintf(stderr, "gs_mpi_probe: bad options (or fewer than 2 ranks)\n");
    MPI_Finalize();
    return 2;
  }

  /* Hostnames of every rank, in rank order. */
  enum { HL = 64 };
  char host[HL] = {0};
  int len = 0;
  MPI_Get_processor_name(host, &len);
  host[HL - 1] = 0;
  char *hosts = calloc((size_t)size, HL);
  MPI_Gather(host, HL, MPI_CHAR, hosts, HL, MPI_CHAR, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    for (int r = 0; r < size; ++r) printf("# rank %d of %d on %s\n", r, size, hosts + (size_t)r * HL);
    printf("# gs_mpi_probe --op %s: ranks 0 and 1 (others idle)\n", op);
    printf("#%79s%34s\n", "out-of-place", "in-place");
    printf("#%11s %12s %8s %6s %6s %9s %7s %7s %6s %9s %7s %7s %6s\n", "size", "count", "type",
           "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
    printf("#%11s %12s %8s %6s %6s %9s %7s %7s %6s %9s %7s %7s %6s\n", "(B)", "(elements)", "", "",
           "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
    fflush(stdout);
  }

  char *sbuf = malloc((size_t)maxb + 1), *rbuf = malloc((size_t)maxb + 1);
  memset(sbuf, rank + 1, (size_t)maxb + 1);
  int nsizes = 0;
  int64_t sizes[64];
  double times[64];
  int exchange = !strcmp(op, "exchange");
  for (int64_t s = minb; s <= maxb && nsizes < 64; s = (s == 0 ? 1 : s * factor)) {
    double t0 = 0;
    for (int it = 0; it < warmup + iters; ++it) {
      if (it == warmup) { MPI_Barrier(MPI_COMM_WORLD); t0 = MPI_Wtime(); }
      if (rank > 1) continue;
      int peer = 1 - rank;
      if (exchange) {
        MPI_Sendrecv(sbuf, (int)s, MPI_BYTE, peer, 7, rbuf, (int)s, MPI_BYTE, peer, 7,
                     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else if (rank == 0) {
        MPI_Send(sbuf, (int)s, MPI_BYTE, 1, 7, MPI_COMM_WORLD);
        MPI_Recv(rbuf, (int)s, MPI_BYTE, 1, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else {
        MPI_Recv(rbuf, (int)s, MPI_BYTE, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(sbuf, (int)s, MPI_BYTE, 0, 7, MPI_COMM_WORLD);
      }
    }
    double dt = MPI_Wtime() - t0, tmax = 0;
    MPI_Allreduce(&dt, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    double us = tmax / iters * 1e6 / (exchange ? 1.0 : 2.0);
    int wrong = 0;
    if (rank <= 1 && s > 0 && rbuf[s - 1] != (char)(2 - rank)) wrong = 1;
    int wrong_all = 0;
    MPI_Allreduce(&wrong, &wrong_all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) {
      double bw = us > 0 ? (double)s / us / 1e3 : 0.0;
      printf(" %11lld %12lld %8s %6s %6d %9.2f %7.3f %7.3f %6d %9s %7s %7s %6s\n", (long long)s,
             (long long)s, "int8", "none", -1, us, bw, bw, wrong_all, "n/a", "", "", "");
      fflush(stdout);
    }
    sizes[nsizes] = s;
    times[nsizes++] = us;
    if (s == 0 && maxb == 0) break;
  }
  int rc = 0;
  if (rank == 0 && out) {
    if (write_h5(out, op, nsizes, sizes, times, hosts, size, HL) != 0) {
      fprintf(stderr, "gs_mpi_probe: could not write %s\n", out);
      rc = 1;
    } else {
      printf("# wrote %s\n", out);
    }
  }
  free(sbuf); free(rbuf); free(hosts);
  MPI_Finalize();
  return rc;
}
