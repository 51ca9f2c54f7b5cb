#include "launch/run_setup.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "worker/adapter_state.h"
#include "lora/lora.h"
#include "model/loader.h"
#include "protocol/bucket.h"
#include "protocol/layout.h"
#include "util/error.h"
#include "util/file.h"
#include "util/hash.h"
#include "util/log.h"
#include "util/progress.h"

namespace brl::launch {

namespace fs = std::filesystem;

protocol::RunDescription init_run(store::ObjectStore& s, RunConfig cfg) {
  cfg.validate();
  cfg.security.resolve_key_file();  // run.json carries the keys themselves, not a local path
  const std::string dir = cfg.model.path;
  if (dir.empty() || !fs::is_directory(dir))
    throw UserError("init: base model folder '" + dir + "' does not exist", "set [model] path or --set model.path=DIR");
  if (auto h = s.head(protocol::run_key()); h)
    throw UserError("init: " + s.describe() + " already holds a run (run.json exists)",
                    "use another bucket prefix, or remove the old run first");
  // Leftovers of an init that died before run.json: remove them so version 0 can be created.
  if (auto old = s.list_all(protocol::global_prefix()); old && !old->empty()) {
    LOG_WARN("init: removing {} objects of an unfinished init in {}", old->size(), s.describe());
    for (auto& o : *old) s.remove(o.key).throw_if_error();
  }

  protocol::RunDescription run;
  std::vector<fs::directory_entry> base;
  ProgressOptions po;
  po.label = "init: upload base";
  po.unit = ProgressUnit::kBytes;
  for (auto& e : fs::directory_iterator(dir)) {
    std::string name = e.path().filename().string();
    if (!e.is_regular_file() || name[0] == '.') continue;
    base.push_back(e);
    po.total += static_cast<int64_t>(e.file_size());
  }
  Progress bar(po);
  for (auto& e : base) {
    std::string name = e.path().filename().string();
    protocol::BaseFile f{name, sha256_file_hex(e.path().string()), static_cast<uint64_t>(e.file_size())};
    LOG_INFO("init: uploading base/{} ({} bytes)", name, f.size);
    bar.add(0, protocol::base_key(name));
    s.put_file(protocol::base_key(name), e.path().string()).throw_if_error();
    bar.add(static_cast<int64_t>(f.size));
    run.base_files.push_back(f);
  }
  bar.finish(std::to_string(base.size()) + " files");
  std::sort(run.base_files.begin(), run.base_files.end(), [](auto& a, auto& b) { return a.name < b.name; });
  run.base_sha256 = sha256_hex(protocol::base_digest(run.base_files));

  // Task files travel with the run: workers on other machines have no copy of them.
  for (std::string* path : {&cfg.task.dataset_path, &cfg.task.eval_path}) {
    if (path->empty()) continue;
    if (!fs::is_regular_file(*path)) throw UserError("init: task file '" + *path + "' does not exist");
    protocol::BaseFile f{"", sha256_file_hex(*path), static_cast<uint64_t>(fs::file_size(*path))};
    f.name = f.sha256.substr(0, 16) + "-" + fs::path(*path).filename().string();
    s.put_file(protocol::data_key(f.name), *path).throw_if_error();
    run.data_files.push_back(f);
    *path = protocol::data_key(f.name);
  }

  // Version 0: the adapter as PEFT initializes it, so every worker starts from the same A.
  // (Only the model and adapter are needed here; the task is not opened.)
  auto m0 = model::load_model(cfg.model.path);
  lora::attach(m0, cfg.lora);
  protocol::Manifest m;
  m.version = 0;
  m.parent = -1;
  m.created_ms = protocol::now_ms();
  m.proxy = "init";
  const bool bf16 = cfg.aggregation.publish_bf16();
  m.stats = {{"init_seed", cfg.lora.init_seed}};
  m.payload_dtype = kPublishDtypes(cfg.aggregation.publish_dtype);
  // A bf16 version 0 needs no master copy: its rounded values are where everyone starts.
  protocol::publish_version(s, m,
                            protocol::encode_adapter(worker::snapshot(m0), bf16 ? st::DType::BF16 : st::DType::F32))
      .throw_if_error();

  std::random_device rd;
  char id[32];
  std::snprintf(id, sizeof id, "%08x%08x", rd(), rd());
  run.run_id = id;
  run.created_ms = protocol::now_ms();
  run.config = cfg.to_json();
  store::PutOptions once;
  once.create_only = true;
  once.content_type = "application/json";
  s.put(protocol::run_key(), run.to_json().dump(1), once).throw_if_error();
  LOG_INFO("init: run {} in {}: base {} ({} files), version 0 published; {}", run.run_id, s.describe(),
           run.base_sha256.substr(0, 16), run.base_files.size(),
           cfg.security.allowed_keys.empty()
               ? std::string("unsigned updates accepted (no [security] allowed_keys)")
               : "only updates signed by one of " + std::to_string(cfg.security.allowed_keys.size()) +
                     " allowed keys are folded");
  return run;
}

}  // namespace brl::launch
