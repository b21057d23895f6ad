// host_memory.h: the memory this process holds in host RAM, the CPU-run
// counterpart of the GPU memory NVML reports.
#pragma once

#include <cstdint>

namespace anatomy::gpu {

// The largest resident set this process has had, in bytes (getrusage's
// ru_maxrss); 0 if it cannot be read.
uint64_t process_peak_rss_bytes();

// The resident set now, in bytes (/proc/self/statm); 0 if it cannot be read.
uint64_t process_rss_bytes();

}  // namespace anatomy::gpu
