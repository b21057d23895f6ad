// host_memory.cpp: resident-set sizes of this process, read from the kernel.
#include "anatomy/gpu/host_memory.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>

namespace anatomy::gpu {

uint64_t process_peak_rss_bytes() {
  struct rusage usage {};
  if (getrusage(RUSAGE_SELF, &usage) != 0 || usage.ru_maxrss < 0) return 0;
  // Linux reports ru_maxrss in KiB.
  return static_cast<uint64_t>(usage.ru_maxrss) * 1024u;
}

uint64_t process_rss_bytes() {
  // statm: size resident shared text lib data dt, all in pages.
  std::FILE* file = std::fopen("/proc/self/statm", "r");
  if (file == nullptr) return 0;
  unsigned long long size_pages = 0, resident_pages = 0;
  int fields = std::fscanf(file, "%llu %llu", &size_pages, &resident_pages);
  std::fclose(file);
  long page_size = sysconf(_SC_PAGESIZE);
  if (fields != 2 || page_size <= 0) return 0;
  return static_cast<uint64_t>(resident_pages) * static_cast<uint64_t>(page_size);
}

}  // namespace anatomy::gpu
