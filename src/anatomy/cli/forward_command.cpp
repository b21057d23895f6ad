// forward_command.cpp: `anatomy forward`: one batch from a safetensors file
// through the model; writes logits, the loss (with labels) and, with
// --backward, the gradient of every parameter as grad.<Hugging Face name>.
#include <fmt/format.h>

#include "anatomy/cli/commands.h"
#include "anatomy/cli/engine_flags.h"
#include "anatomy/data/dataset.h"
#include "anatomy/io/safetensors.h"
#include "anatomy/model/checkpoint.h"
#include "anatomy/model/registry.h"
#include "anatomy/train/trainer.h"

namespace anatomy::cli {

namespace {
struct ForwardFlags {
  std::string model, inputs, output, device = "cpu", task;
  bool backward = false;
  uint64_t seed = 42;
  EngineFlags engine;
};
}  // namespace

Command add_forward_command(CLI::App& app) {
  auto f = std::make_shared<ForwardFlags>();
  app.add_option("--model,--model_name_or_path", f->model,
                 "Directory with config.json + weights, a Hugging Face id in the local hub cache, or a preset (seeded)")->required();
  app.add_option("--task", f->task,
                 "The head: sequence-classification, token-classification, question-answering, masked-lm or multiple-choice "
                 "(default: the --model directory's config.json architectures, *ForMaskedLM aside)")
      ->check(CLI::IsMember({"sequence-classification", "token-classification", "question-answering", "masked-lm",
                             "multiple-choice"}));
  app.add_option("--inputs", f->inputs, "safetensors with input_ids [B, L] and optional token_type_ids, "
                                        "attention_mask, labels")->required();
  app.add_option("--output", f->output, "safetensors to write: logits, loss, grad.<name>")->required();
  app.add_flag("--backward", f->backward, "Also compute and write the gradient of every parameter");
  app.add_option("--device", f->device, "cpu, cuda or auto")->capture_default_str()
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}));
  app.add_option("--seed", f->seed, "Seed for a preset's initial weights")
      ->capture_default_str()->check(non_negative_number());
  add_engine_flags(app, f->engine, /*training=*/false);

  return [f]() -> int {
    // The kernels' choices (and their ANATOMY_* aliases, the last layer's included), as train reads them.
    DeviceChoice device = choose_device(f->device, Fp32Products::Float32, 0, resolve_engine_options(f->engine));
    Backend& backend = *device.backend;
    ModelSource source = resolve_model(f->model);
    if (!f->task.empty()) set_model_task(source.config, f->task);
    const Dataset data = load_tensor_dataset(f->inputs);
    validate_dataset(data, source.config, model_task(source.config));
    if (f->backward && !data.has_labels()) fail("{}: --backward needs a 'labels' tensor", f->inputs);

    const std::unique_ptr<Model> made = make_model(backend, source.config);
    Model& model = *made;
    if (source.directory.empty()) init_weights(model, f->seed);
    else load_weights(model, source.directory, f->seed);

    const ModelInputs inputs = upload_dataset(backend, data);
    std::vector<std::vector<float>> host;
    std::vector<io::StWriteTensor> tensors;
    auto add = [&](const std::string& name, const Tensor& t) {
      host.emplace_back(t.numel());
      backend.copy_to_host(t, host.back().data());
      tensors.push_back({name, io::StDType::F32, t.shape(), nullptr});
    };
    // The masked-LM head computes its loss without whole logits: they come
    // from a forward without labels first.
    if (model.task() == kMaskedLm && inputs.labels.defined()) {
      ModelInputs bare = inputs;
      bare.labels = Tensor();
      const ForwardOutput whole = model.forward(bare, ForwardOptions{});
      for (const auto& [name, tensor] : whole.named()) add(name, tensor);
    }
    ForwardOptions options;
    options.training = false;  // dropout off, as model.eval()
    options.save_for_backward = f->backward;
    const ForwardOutput out = model.forward(inputs, options);
    if (out.logits.defined())
      for (const auto& [name, tensor] : out.named()) add(name, tensor);  // "logits", or the start and end logits
    std::vector<float> loss;
    if (out.loss) loss.push_back(static_cast<float>(*out.loss));
    if (f->backward) {
      model.zero_gradients();
      model.backward();
      const ParameterSet& grads = model.gradients();
      for (size_t i = 0; i < grads.specs().size(); ++i) add("grad." + grads.specs()[i].name, grads.tensors()[i]);
    }
    for (size_t i = 0; i < tensors.size(); ++i) tensors[i].data = host[i].data();
    if (out.loss) tensors.push_back({"loss", io::StDType::F32, {1}, loss.data()});
    io::write_safetensors(f->output, tensors, {{"format", "pt"}});
    if (out.loss) fmt::print("loss {:.8g}\n", *out.loss);
    return 0;
  };
}

}  // namespace anatomy::cli
