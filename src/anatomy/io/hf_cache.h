// hf_cache.h: models that huggingface_hub has already downloaded, found by
// their id ("bert-base-uncased", "sentence-transformers/all-MiniLM-L6-v2")
// without a network: the hub's cache keeps a repository's files under
//   <cache>/models--<org>--<name>/snapshots/<commit>/<file>
// (links into blobs/), and refs/<branch> holds the commit a branch was at
// when it was downloaded.
#pragma once

#include <optional>
#include <string>

namespace anatomy::io {

// The hub cache, as huggingface_hub's constants compute it: $HF_HUB_CACHE,
// else $HUGGINGFACE_HUB_CACHE (its older name), else $HF_HOME/hub, else
// $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub. A leading
// '~' is expanded; a variable set to the empty string counts as unset.
std::string hf_hub_cache_dir();

// Whether `spec` has the form of a model id on the hub: "name" or
// "org/name", of letters, digits, '-', '_' and '.', without "--" or "..",
// neither starting nor ending with '-' or '.', at most 96 characters a part.
bool is_hub_model_id(const std::string& spec);

struct CachedModel {
  std::string repo_dir;   // <cache>/models--org--name
  std::string snapshot;   // <repo_dir>/snapshots/<commit>
  std::string revision;   // the commit
};

// The cached snapshot of `id` at `revision` (a branch or tag named in refs/,
// or a commit hash): nullopt when the cache has no models--org--name folder.
// A folder that is there but unusable (no refs/<revision>, a ref naming a
// snapshot that is missing, a snapshot without config.json) is an Error
// that names the path and says what is wrong.
std::optional<CachedModel> find_cached_model(const std::string& id, const std::string& revision = "main");

}  // namespace anatomy::io
