// out_of_memory.cpp: the settings that fit, and the out-of-memory report.
#include "anatomy/analysis/out_of_memory.h"

#include <unistd.h>

#include <algorithm>

#include <fmt/format.h>

namespace anatomy {

std::vector<FittingSetting> settings_that_fit(const ModelConfig& config, const TrainingArguments& args,
                                              const DataShape& shape, const PlanTarget& target) {
  std::vector<FittingSetting> out;
  PlanTarget roomy = target;
  roomy.capacity = capacity_with_headroom(target.capacity);
  auto predicted = [&](const TrainingArguments& a) {
    DataShape s = shape;
    s.size = std::min(shape.size, 2 * a.per_device_train_batch_size);
    return plan_training(config, a, s, roomy).nvml_total();
  };
  const std::string precision = args.bf16 ? "--bf16 " : args.fp16 ? "--fp16 " : "";
  const int64_t asked = args.per_device_train_batch_size;
  const int64_t largest = largest_fitting_batch(config, args, shape, roomy, asked);
  // The same effective batch, in equal micro-batches that fit: the same training.
  if (largest > 0) {
    TrainingArguments a = args;
    a.per_device_train_batch_size = largest_divisor_at_most(asked, largest);
    a.gradient_accumulation_steps = args.gradient_accumulation_steps * (asked / a.per_device_train_batch_size);
    out.push_back({fmt::format("{}--per-device-train-batch-size {} --gradient-accumulation-steps {}", precision,
                               a.per_device_train_batch_size, a.gradient_accumulation_steps),
                   predicted(a)});
  }
  // The batch asked for, recomputing each layer in backward.
  if (!args.gradient_checkpointing) {
    TrainingArguments a = args;
    a.gradient_checkpointing = true;
    if (largest_fitting_batch(config, a, shape, roomy, asked) == asked)
      out.push_back({fmt::format("{}--per-device-train-batch-size {} --gradient-checkpointing", precision, asked),
                     predicted(a)});
  }
  // A smaller batch; and bf16, which halves the activations.
  if (largest > 0) {
    TrainingArguments a = args;
    a.per_device_train_batch_size = largest;
    out.push_back({fmt::format("{}--per-device-train-batch-size {}", precision, largest), predicted(a)});
  }
  if (!args.bf16 && !args.fp16 && target.gpu) {
    TrainingArguments a = args;
    a.bf16 = true;
    const int64_t b = largest_fitting_batch(config, a, shape, roomy, asked);
    if (b > 0) {
      a.per_device_train_batch_size = b;
      out.push_back({fmt::format("--bf16 --per-device-train-batch-size {}", b), predicted(a)});
    }
  }
  return out;
}

std::string out_of_memory_report(const OutOfMemory& oom, bool predicted, const std::optional<gpu::GpuMemory>& device,
                                 const std::vector<FittingSetting>& settings, int64_t available) {
  std::string out = fmt::format("error: {}{}{}\n",
                                predicted ? "this run does not fit (the memory plan, before allocating anything): " : "",
                                oom.message(), oom.step >= 0 ? fmt::format(" in step {}", oom.step + 1) : "");
  out += predicted ? "  it would hold at that moment, by category:\n" : "  held at that moment, by category:\n";
  for (size_t c = 0; c < kCategoryCount; ++c)
    if (oom.ledger.live[c] > 0)
      out += fmt::format("    {:<18} {:>12}\n", category_name(static_cast<Category>(c)),
                         format_bytes(oom.ledger.live[c]));
  out += fmt::format("    {:<18} {:>12}\n", "total", format_bytes(oom.ledger.live_total));
  if (oom.ledger.reserved > 0)
    out += fmt::format("    {:<18} {:>12}\n", "pool segments", format_bytes(oom.ledger.reserved));
  if (device) {
    out += fmt::format("  GPU {}: {} free of {} (NVML)\n", oom.device.str(),
                       format_bytes(static_cast<int64_t>(device->free)),
                       format_bytes(static_cast<int64_t>(device->total)));
    const auto processes = gpu::Nvml::instance().processes(oom.device.index);
    const int own = static_cast<int>(getpid());
    std::string others;
    if (processes)
      for (const gpu::GpuProcess& p : *processes)
        if (p.pid != own)
          others += fmt::format("    pid {:<8} {:<24} {}\n", p.pid, p.name.empty() ? "?" : p.name,
                                p.used_bytes >= 0 ? format_bytes(p.used_bytes) : "unknown");
    out += others.empty() ? "  no other process holds memory on it\n" : "  other processes on it:\n" + others;
  }
  if (settings.empty()) {
    out += "  the memory plan finds no batch size that fits; a smaller model or a larger GPU is needed\n";
  } else {
    out += "  settings that fit (the memory plan):\n";
    for (const FittingSetting& s : settings)
      out += fmt::format("    {} fits: predicted {}{}\n", s.flags, format_bytes(s.predicted),
                         available > 0 ? fmt::format(" of the {} this process can have", format_bytes(available)) : "");
  }
  return out;
}

}  // namespace anatomy
