// estimate.cpp: the plan on a named device, and its report.
#include "anatomy/analysis/estimate.h"

#include <fmt/format.h>

#include <algorithm>

#include "anatomy/optim/optimizer.h"

namespace anatomy {

namespace {

size_t cat(Category c) { return static_cast<size_t>(c); }

double per_param(int64_t bytes, int64_t params) {
  return params > 0 ? static_cast<double>(bytes) / static_cast<double>(params) : 0.0;
}

std::string precision_name(const TrainingArguments& a, Fp32Products products) {
  if (a.bf16) return "bf16 mixed precision";
  if (a.fp16) return "fp16 mixed precision";
  switch (products) {
    case Fp32Products::Tf32: return "fp32 (TF32 products)";
    case Fp32Products::SplitTf32: return "fp32 (split-TF32 products)";
    case Fp32Products::Float32: break;
  }
  return "fp32";
}

}  // namespace

TextbookBytes textbook_bytes_per_parameter(const TrainingArguments& args) {
  // "Model weights: 4 bytes * number of parameters for fp32 training; 6 bytes
  // for mixed precision training (a model in fp32 and one in fp16 in memory).
  // Optimizer States: 8 bytes * number of parameters for normal AdamW
  // (maintains 2 states); 2 bytes * number of parameters for 8-bit AdamW
  // optimizers like bitsandbytes; 4 bytes * number of parameters for
  // optimizers like SGD with momentum (maintains only 1 state). Gradients: 4
  // bytes * number of parameters for either fp32 or mixed precision training
  // (gradients are always kept in fp32)." — the seed's Model training anatomy.
  const double weights = args.bf16 || args.fp16 ? 6 : 4;
  OptimizerOptions o;
  parse_optimizer_kind(args.optim, &o.kind);
  parse_optim_args(args.optim_args, &o);
  switch (o.kind) {
    case OptimizerKind::AdamW8bit: return {weights, 2, 4, "8-bit AdamW"};
    case OptimizerKind::Sgd:
      return o.momentum > 0 ? TextbookBytes{weights, 4, 4, "SGD, momentum"} : TextbookBytes{weights, 0, 4, "SGD"};
    case OptimizerKind::Adafactor: return {weights, -1, 4, "Adafactor"};
    case OptimizerKind::AdamW: break;
  }
  return {weights, 8, 4, "AdamW"};
}

double zero_paper_bytes(int stage, double psi, int ranks) {
  const double n = ranks, k = 12.0;
  switch (stage) {
    case 0: return (2 + 2 + k) * psi;
    case 1: return (2 + 2) * psi + k * psi / n;
    case 2: return 2 * psi + (2 + k) * psi / n;
    default: return (2 + 2 + k) * psi / n;
  }
}

namespace {

PlanTarget target_of(const EstimateRequest& request) {
  PlanTarget target;
  target.world = request.nproc;
  target.gpu = request.gpu;
  target.fp32_products = request.fp32_products;
  target.hopper_attention = request.hopper_attention;
  target.options = request.options;
  // Outside the ledger, NCCL's buffers are counted with the context, as a run's plan counts what it measures.
  target.context_bytes = request.gpu ? request.context_bytes + request.nccl_bytes : 0;
  return target;
}
// What the pool may take: the device less the context and what others use.
int64_t capacity_of(const EstimateRequest& request, const PlanTarget& target) {
  return std::max<int64_t>(0, request.device_total - target.context_bytes - request.other_processes);
}

}  // namespace

int64_t estimate_auto_batch(const EstimateRequest& request) {
  if (request.device_total <= 0) return -1;
  PlanTarget target = target_of(request);
  target.capacity = capacity_of(request, target);
  return auto_batch_size(request.config, request.args, request.shape, target);
}

Estimate estimate_training(const EstimateRequest& request) {
  Estimate e;
  PlanTarget target = target_of(request);
  e.plan = plan_training(request.config, request.args, request.shape, target);
  if (request.device_total > 0) {
    e.capacity = capacity_of(request, target);
    e.fits = e.plan.ledger.reserved_peak <= e.capacity;
    target.capacity = e.capacity;
    e.largest_batch = largest_fitting_batch(request.config, request.args, request.shape, target, request.batch_limit);
    TrainingArguments other = request.args;
    other.gradient_checkpointing = !request.args.gradient_checkpointing;
    const int64_t other_largest =
        largest_fitting_batch(request.config, other, request.shape, target, request.batch_limit);
    e.largest_plain = request.args.gradient_checkpointing ? other_largest : e.largest_batch;
    e.largest_checkpointed = request.args.gradient_checkpointing ? e.largest_batch : other_largest;
    // The same effective batch in equal micro-batches that fit.
    const int64_t effective = request.args.per_device_train_batch_size * request.args.gradient_accumulation_steps;
    if (e.largest_batch > 0) {
      e.accumulate_batch = largest_divisor_at_most(effective, e.largest_batch);
      e.accumulate_steps = effective / e.accumulate_batch;
    }
  }
  return e;
}

std::string format_estimate(const EstimateRequest& r, const Estimate& e) {
  const MemoryPlan& p = e.plan;
  const LedgerSnapshot& m = p.ledger;
  std::string out;
  auto line = [&out](const std::string& s) { out += s + "\n"; };
  line(fmt::format("Memory plan: {} ({} parameters), {}, {}, batch {} x {} tokens{}{}, on {}", r.model_name,
                   p.parameters, precision_name(r.args, r.fp32_products), r.args.optim, r.args.per_device_train_batch_size,
                   r.shape.seq_len,
                   r.args.gradient_accumulation_steps > 1
                       ? fmt::format(", {} batches per update", r.args.gradient_accumulation_steps)
                       : "",
                   r.args.gradient_checkpointing ? ", gradient checkpointing" : "", r.device_name));
  line("");
  line(fmt::format("  {:<34} {:>12} {:>10}", "at the peak", "bytes", "per param"));
  static constexpr Category kOrder[] = {Category::Weights,       Category::WeightsHalf, Category::OptimizerStates,
                                        Category::Gradients,     Category::Activations, Category::Temporary,
                                        Category::Functionality, Category::Data,        Category::Workspace,
                                        Category::Communication};
  for (Category c : kOrder) {
    const int64_t b = m.at_peak[cat(c)];
    if (b == 0 && (c == Category::WeightsHalf || c == Category::Communication || c == Category::Workspace))
      continue;
    line(fmt::format("  {:<34} {:>12} {:>10.2f}", category_name(c), format_bytes(b), per_param(b, p.parameters)));
  }
  line(fmt::format("  {:<34} {:>12}", "ledger total (peak)", format_bytes(m.peak_total)));
  line(fmt::format("  the peak: \"{}\"{}", m.peak_phase,
                   m.peak_step >= 0 ? fmt::format(" of step {}", m.peak_step + 1) : ""));
  if (r.gpu) {
    line(fmt::format("  {:<34} {:>12}", "free inside the pool", format_bytes(m.reserved_at_peak - m.peak_total)));
    line(fmt::format("  {:<34} {:>12}", "pool segments (peak)", format_bytes(m.reserved_peak)));
    line(fmt::format("  {:<34} {:>12}  ({})", "CUDA context and kernels", format_bytes(r.context_bytes),
                     r.context_source));
    if (r.nccl_bytes > 0)
      line(fmt::format("  {:<34} {:>12}  ({})", "NCCL's own buffers", format_bytes(r.nccl_bytes), r.nccl_source));
    line(fmt::format("  {:<34} {:>12}", "predicted NVML use", format_bytes(p.nvml_total())));
  }
  line("");
  // The seed's textbook figures beside this engine's.
  const TextbookBytes t = textbook_bytes_per_parameter(r.args);
  const double weights = per_param(m.at_peak[cat(Category::Weights)] + m.at_peak[cat(Category::WeightsHalf)],
                                    p.parameters);
  const double optimizer = per_param(m.at_peak[cat(Category::OptimizerStates)], p.parameters);
  const double gradients = per_param(m.at_peak[cat(Category::Gradients)], p.parameters);
  line(fmt::format("  bytes per parameter       {:>9} {:>12}", "textbook", "this engine"));
  line(fmt::format("  weights                   {:>9} {:>12.2f}", t.weights, weights));
  const std::string optimizer_label = fmt::format("optimizer ({})", t.optimizer_name);
  const std::string textbook_optimizer = t.optimizer >= 0 ? fmt::format("{}", t.optimizer) : "rows+cols";
  const std::string textbook_total =
      t.optimizer >= 0 ? fmt::format("{}", t.weights + t.optimizer + t.gradients) : "-";
  line(fmt::format("  {:<24}  {:>9} {:>12.2f}", optimizer_label, textbook_optimizer, optimizer));
  line(fmt::format("  gradients                 {:>9} {:>12.2f}", t.gradients, gradients));
  line(fmt::format("  total                     {:>9} {:>12.2f}", textbook_total, weights + optimizer + gradients));
  line("  (textbook, the seed: AdamW 8, 8-bit AdamW 2, SGD with momentum 4 bytes of optimizer state; "
       "mixed-precision inference 6 bytes)");
  if (!p.peak_buffers.largest.empty()) {
    line("");
    out += format_peak_buffers(p.peak_buffers);
  }
  if (r.nproc > 1) {
    // The ZeRO paper's model states per GPU beside this engine's plan for rank 0.
    const double psi = static_cast<double>(p.parameters);
    const int64_t ours = m.at_peak[cat(Category::Weights)] + m.at_peak[cat(Category::WeightsHalf)] +
                         m.at_peak[cat(Category::OptimizerStates)] + m.at_peak[cat(Category::Gradients)];
    line("");
    line(fmt::format("Data parallel: {} ranks, ZeRO stage {} (the plan above is rank 0's, per GPU).", r.nproc,
                     r.args.zero_stage));
    line(fmt::format("  model states per GPU      {:>12} {:>10}", "bytes", "per param"));
    for (int stage = 0; stage <= 3; ++stage) {
      const double b = zero_paper_bytes(stage, psi, r.nproc);
      line(fmt::format("  ZeRO paper, stage {}       {:>12} {:>10.2f}{}", stage,
                       format_bytes(static_cast<int64_t>(b)), b / psi,
                       stage == r.args.zero_stage ? "   <- the stage asked" : ""));
    }
    line(fmt::format("  this engine, stage {}      {:>12} {:>10.2f}", r.args.zero_stage, format_bytes(ours),
                     per_param(ours, p.parameters)));
    line("  (the paper: mixed-precision Adam, fp16 weights and gradients and 12 bytes of fp32 master weights and "
         "moments; this engine keeps float32 gradients and weights (the masters); stage 1 shards the moments "
         "(under mixed precision the masters too, keeping float32 copies of the embeddings, LayerNorms and head), "
         "stage 2 the gradients too (plus, in backward, the whole gradients of one or two units: the embeddings, "
         "a layer, the head), stage 3 the weights too (plus two units gathered at a time); at the plan's peak)");
  }
  if (r.device_total > 0) {
    line("");
    line(fmt::format("Device: {} of {}; in use before this run (driver, other processes) {}; the pool may take {}.",
                     r.device_name, format_bytes(r.device_total), format_bytes(r.other_processes),
                     format_bytes(e.capacity)));
    const int64_t used = p.nvml_total() + r.other_processes;
    const double share = 100.0 * static_cast<double>(used) / static_cast<double>(r.device_total);
    line(fmt::format("{}: predicted {} of {} in use ({:.1f}%), this run's share {}.", e.fits ? "Fits" : "Does NOT fit",
                     format_bytes(used), format_bytes(r.device_total), share, format_bytes(p.nvml_total())));
    auto batch = [&](int64_t b) {
      return b >= r.batch_limit ? fmt::format("{} or more", b) : b > 0 ? fmt::format("{}", b) : std::string("none");
    };
    line(fmt::format("Largest batch that fits: {} plain, {} with --gradient-checkpointing.", batch(e.largest_plain),
                     batch(e.largest_checkpointed)));
    const int64_t effective = r.args.per_device_train_batch_size * r.args.gradient_accumulation_steps;
    if (!e.fits && e.accumulate_batch > 0)
      line(fmt::format("With accumulation the same effective batch of {} fits: --per-device-train-batch-size {} "
                       "--gradient-accumulation-steps {}.",
                       effective, e.accumulate_batch, e.accumulate_steps));
    else if (e.largest_batch > 0)
      line(fmt::format("With accumulation any effective batch trains in batches of at most {} "
                       "(--gradient-accumulation-steps N: N batches per update).",
                       batch(e.largest_batch)));
  }
  return out;
}

std::string estimate_json(const EstimateRequest& r, const Estimate& e) {
  using nlohmann::ordered_json;
  const MemoryPlan& p = e.plan;
  const LedgerSnapshot& m = p.ledger;
  ordered_json at_peak = ordered_json::array();
  for (size_t c = 0; c < kCategoryCount; ++c)
    at_peak.push_back({{"category", category_name(static_cast<Category>(c))},
                       {"bytes", m.at_peak[c]},
                       {"per_parameter", per_param(m.at_peak[c], p.parameters)}});
  const TextbookBytes t = textbook_bytes_per_parameter(r.args);
  const double weights = per_param(m.at_peak[cat(Category::Weights)] + m.at_peak[cat(Category::WeightsHalf)],
                                   p.parameters);
  const double optimizer = per_param(m.at_peak[cat(Category::OptimizerStates)], p.parameters);
  const double gradients = per_param(m.at_peak[cat(Category::Gradients)], p.parameters);
  ordered_json zero = nullptr;
  if (r.nproc > 1) {
    ordered_json paper = ordered_json::array();
    for (int stage = 0; stage <= 3; ++stage)
      paper.push_back(static_cast<int64_t>(zero_paper_bytes(stage, static_cast<double>(p.parameters), r.nproc)));
    zero = {{"ranks", r.nproc},
            {"stage", r.args.zero_stage},
            {"paper_model_state_bytes", paper},
            {"engine_model_state_bytes", m.at_peak[cat(Category::Weights)] + m.at_peak[cat(Category::WeightsHalf)] +
                                             m.at_peak[cat(Category::OptimizerStates)] +
                                             m.at_peak[cat(Category::Gradients)]}};
  }
  const ordered_json j = {
      {"model", r.model_name},
      {"precision", precision_name(r.args, r.fp32_products)},
      {"optimizer", r.args.optim},
      {"batch_size", r.args.per_device_train_batch_size},
      {"sequence_length", r.shape.seq_len},
      {"gradient_accumulation_steps", r.args.gradient_accumulation_steps},
      {"gradient_checkpointing", r.args.gradient_checkpointing},
      {"device",
       {{"gpu", r.gpu},
        {"name", r.device_name},
        {"total", r.device_total},
        {"other_processes", r.other_processes},
        {"context_bytes", r.gpu ? r.context_bytes : 0},
        {"context_source", r.gpu ? r.context_source : ""},
        {"nccl_bytes", r.nccl_bytes},
        {"nccl_source", r.nccl_source}}},
      {"at_peak", at_peak},
      {"peak_total", m.peak_total},
      {"pool_free", r.gpu ? m.reserved_at_peak - m.peak_total : 0},
      {"reserved_peak", m.reserved_peak},
      {"predicted_nvml", r.gpu ? p.nvml_total() : 0},
      {"bytes_per_parameter",
       {{"textbook",
         {{"weights", t.weights},
          {"optimizer", t.optimizer >= 0 ? ordered_json(t.optimizer) : ordered_json(nullptr)},
          {"gradients", t.gradients},
          {"optimizer_name", t.optimizer_name}}},
        {"engine", {{"weights", weights}, {"optimizer", optimizer}, {"gradients", gradients}}}}},
      {"zero", zero},
      {"parameters", p.parameters},
      {"fits", p.fits},
      {"out_of_memory", p.out_of_memory},
      {"context_bytes", p.context_bytes},
      {"ledger", ledger_json(p.ledger)},
      {"timeline", timeline_json(p.timeline)},
      {"peak_buffers", peak_buffers_json(p.peak_buffers)},
      {"device_fits", e.fits},
      {"capacity", e.capacity},
      {"largest_batch", e.largest_batch},
      {"largest_plain", e.largest_plain},
      {"largest_checkpointed", e.largest_checkpointed},
      {"accumulate_batch", e.accumulate_batch},
      {"accumulate_steps", e.accumulate_steps},
  };
  return j.dump(1) + "\n";
}

}  // namespace anatomy
