// child_process.h: runs a program in a process of its own, its stdout and
// stderr going to files, and waits for it while a callback ticks (the bench
// polls NVML and shows the elapsed time there). `anatomy bench` runs each row
// this way so that every row's memory is measured in a clean process.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace anatomy::cli {

struct ChildOutcome {
  int exit_code = 0;     // the exit status; 128 + N when killed by signal N (as a shell says it)
  int signal = 0;        // the signal that killed it, 0 when it exited
  double seconds = 0.0;  // from spawn to exit
};

// Runs `argv` (argv[0] looked up on PATH when it has no '/'; `program`, when
// given, is executed instead of argv[0], which is then only its name) with
// stdout and stderr written to the files named (truncated), and calls `tick`
// with the seconds elapsed about every `tick_seconds` until it exits. Error
// naming the program when it cannot be started.
ChildOutcome run_child(const std::vector<std::string>& argv, const std::string& stdout_path,
                       const std::string& stderr_path, const std::function<void(double)>& tick = {},
                       double tick_seconds = 0.1, const std::string& program = "");

}  // namespace anatomy::cli
