/* A real MPI program for the MPI e2e tests and the launch benchmark.

   Each rank prints "rank R/N host H t=T" (H: gethostname; T: CLOCK_MONOTONIC
   seconds read first thing in main, before MPI_Init, comparable across the
   netns hosts of one machine since they share the kernel's clock). Then an
   MPI_Allreduce(MPI_SUM) of rank+1; rank 0 prints
   "allreduce sum=S expected=E" and exits 1 when they differ.

   Usage: mpi_allreduce [SECONDS]   SECONDS (optional): sleep that long after
   the allreduce, before MPI_Finalize (tests that kill a host mid-job).

   Single-threaded; one line per printf, flushed, so mpirun forwards whole
   lines. */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char** argv) {
  struct timespec started;
  clock_gettime(CLOCK_MONOTONIC, &started);
  double sleep_seconds = 0;
  if (argc > 1) {
    char* end = NULL;
    sleep_seconds = strtod(argv[1], &end);
    if (end == argv[1] || *end != '\0' || sleep_seconds < 0) {
      fprintf(stderr, "mpi_allreduce: SECONDS must be a number >= 0, got '%s'\n", argv[1]);
      return 2;
    }
  }
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  char host[256] = "";
  gethostname(host, sizeof(host) - 1);
  printf("rank %d/%d host %s t=%ld.%09ld\n", rank, size, host, (long)started.tv_sec,
         (long)started.tv_nsec);
  fflush(stdout);

  int value = rank + 1, sum = 0;
  MPI_Allreduce(&value, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  int expected = size * (size + 1) / 2;
  if (rank == 0) {
    printf("allreduce sum=%d expected=%d\n", sum, expected);
    fflush(stdout);
  }
  if (sleep_seconds > 0) {
    struct timespec ts = {(time_t)sleep_seconds,
                          (long)((sleep_seconds - (double)(time_t)sleep_seconds) * 1e9)};
    nanosleep(&ts, NULL);
  }
  MPI_Finalize();
  return (rank == 0 && sum != expected) ? 1 : 0;
}
