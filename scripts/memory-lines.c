// How fast one core gets cache lines from memory, alone and with many
// misses in flight: `chains` independent chains of dependent steps, each
// step reading `lines` consecutive 64-byte lines of a random 4 KiB page of
// a buffer of `mib` MiB (transparent huge pages asked for), the next
// page depending on what was read. Prints nanoseconds per step (page).
//
//   cc -O2 -o /tmp/memory-lines scripts/memory-lines.c
//   for chains in 1 8 16; do for lines in 1 4 8 16; do
//     taskset -c 0 /tmp/memory-lines 128 $chains $lines; done; done
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s MIB CHAINS LINES\n", argv[0]);
    return 2;
  }
  size_t bytes = (size_t)atol(argv[1]) << 20;
  int chains = atoi(argv[2]), lines = atoi(argv[3]);
  if (bytes < 4096 || chains < 1 || chains > 64 || lines < 1 || lines > 64) {
    fprintf(stderr, "MIB >= 1, CHAINS in 1..64, LINES in 1..64\n");
    return 2;
  }
  char *buf = mmap(0, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (buf == MAP_FAILED) {
    perror("mmap");
    return 1;
  }
  madvise(buf, bytes, MADV_HUGEPAGE);
  memset(buf, 1, bytes);
  size_t pages = bytes / 4096, steps = 8000000 / chains;
  uint64_t rng = 88172645463325252ull, at[64];
  for (int c = 0; c < chains; c++) at[c] = c * 7919u;
  double start = now_s();
  for (size_t s = 0; s < steps; s++) {
    for (int c = 0; c < chains; c++) {
      const char *page = buf + (at[c] % pages) * 4096;
      uint64_t sum = 0;
      for (int l = 0; l < lines; l++) sum += *(volatile const uint64_t *)(page + l * 64);
      rng ^= rng << 13;
      rng ^= rng >> 7;
      rng ^= rng << 17;
      at[c] = rng + (sum & 1);  // the next page depends on this one's bytes
    }
  }
  double seconds = now_s() - start;
  printf("chains=%d lines=%d ns_per_page=%.1f\n", chains, lines, seconds * 1e9 / (steps * chains));
  return 0;
}
