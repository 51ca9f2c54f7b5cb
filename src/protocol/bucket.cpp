#include "protocol/bucket.h"

#include <cmath>
#include <cstring>

#include "protocol/layout.h"
#include "store/retry_store.h"
#include "util/error.h"
#include "util/hash.h"
#include "util/safetensors.h"

namespace brl::protocol {

std::unique_ptr<store::ObjectStore> open_bucket(const std::string& url) {
  return std::make_unique<store::RetryStore>(std::shared_ptr<store::ObjectStore>(store::open_store(url)));
}

Result<RunDescription> read_run(store::ObjectStore& s) {
  auto r = s.get(run_key());
  if (!r) {
    if (r.status().is_not_found())
      return Status(StatusCode::kNotFound,
                    "no run in " + s.describe() + " (run.json is missing): create one with `bucketrl init`");
    return r.status();
  }
  return RunDescription::parse(*r, s.describe() + "/" + run_key());
}

Result<int64_t> read_latest(store::ObjectStore& s) {
  auto r = s.get(latest_key());
  if (!r) return r.status();
  const std::string& t = *r;
  int64_t v = 0;
  size_t i = 0;
  for (; i < t.size() && t[i] >= '0' && t[i] <= '9' && i < 12; ++i) v = v * 10 + (t[i] - '0');
  if (i == 0 || (i < t.size() && t.substr(i) != "\n"))
    return Status(StatusCode::kCorrupt,
                  s.describe() + "/" + latest_key() + ": '" + t.substr(0, 40) + "' is not a version number");
  return v;
}

Result<int64_t> newest_version(store::ObjectStore& s) {
  auto l = read_latest(s);
  if (!l && !l.status().is_not_found()) return l.status();
  int64_t v = l ? *l : -1;
  // Manifests above LATEST: listing starts after this version's folder.
  auto page = s.list_all(global_prefix(), v >= 0 ? version_dir(v) + "~" : "");
  if (!page) return page.status();
  for (auto& o : *page)
    if (auto mv = parse_manifest_key(o.key); mv && *mv > v) v = *mv;
  if (v < 0) return Status(StatusCode::kNotFound, "no published version in " + s.describe());
  return v;
}

Result<Manifest> read_manifest(store::ObjectStore& s, int64_t v) {
  auto r = s.get(manifest_key(v));
  if (!r) return r.status();
  auto m = Manifest::parse(*r, s.describe() + "/" + manifest_key(v));
  if (m && m->version != v)
    return Status(StatusCode::kCorrupt,
                  s.describe() + "/" + manifest_key(v) + ": says version " + std::to_string(m->version));
  return m;
}

Result<Version> read_version(store::ObjectStore& s, int64_t v) {
  auto m = read_manifest(s, v);
  if (!m) return m.status();
  return read_version(s, std::move(*m));
}

Result<Version> read_version(store::ObjectStore& s, Manifest m) {
  auto bytes = read_payload(s, m);
  if (!bytes) return bytes.status();
  auto t = decode_adapter(*bytes, s.describe() + "/" + m.payload_key);
  if (!t) return t.status();
  return Version{std::move(m), std::move(*bytes), std::move(*t)};
}

Result<std::string> read_payload(store::ObjectStore& s, const Manifest& m) {
  auto r = s.get(m.payload_key);
  if (!r) return r.status();
  if (r->size() != m.payload_size || sha256_hex(*r) != m.payload_sha256)
    return Status(StatusCode::kCorrupt, s.describe() + "/" + m.payload_key + ": does not match manifest v" +
                                            std::to_string(m.version) + " (size or sha256)");
  return r;
}

std::string encode_adapter(const std::vector<codec::Tensor>& tensors, st::DType dtype) {
  BRL_ASSERT(dtype == st::DType::F32 || dtype == st::DType::BF16, "encode_adapter: F32 or BF16");
  std::vector<std::vector<uint16_t>> bf16(dtype == st::DType::BF16 ? tensors.size() : 0);
  std::vector<st::TensorData> td;
  for (size_t i = 0; i < tensors.size(); ++i) {
    auto& t = tensors[i];
    if (dtype == st::DType::F32) {
      td.push_back({t.name, dtype, t.shape, t.data.data(), t.data.size() * sizeof(float)});
      continue;
    }
    bf16[i].resize(t.data.size());
    codec::to_bf16(t.data.data(), t.data.size(), bf16[i].data());
    td.push_back({t.name, dtype, t.shape, bf16[i].data(), bf16[i].size() * sizeof(uint16_t)});
  }
  return st::serialize_safetensors(td, {{"format", "pt"}});
}

Result<std::vector<codec::Tensor>> finite_float_tensors(const st::SafetensorsFile& f, const std::string& label,
                                                        bool allow_bf16) {
  std::vector<codec::Tensor> out;
  for (auto& name : f.names()) {
    auto& v = f.get(name);
    const bool bf16 = allow_bf16 && v.dtype == st::DType::BF16;
    if (v.dtype != st::DType::F32 && !bf16)
      return Status(StatusCode::kCorrupt,
                    label + ": tensor " + name + " is not " + (allow_bf16 ? "F32 or BF16" : "F32"));
    codec::Tensor t{name, v.shape, std::vector<float>(static_cast<size_t>(v.numel()))};
    if (bf16) {
      codec::from_bf16(v.data, t.data.size(), t.data.data());
    } else {
      std::memcpy(t.data.data(), v.data, v.nbytes);
    }
    for (float x : t.data)
      if (!std::isfinite(x))
        return Status(StatusCode::kCorrupt, label + ": tensor " + name + " holds a non-finite value");
    out.push_back(std::move(t));
  }
  return out;
}

Result<std::vector<codec::Tensor>> decode_adapter(std::string_view bytes, const std::string& label) {
  try {
    return finite_float_tensors(st::SafetensorsFile::from_buffer(bytes.data(), bytes.size(), label), label, true);
  } catch (const UserError& e) {
    return Status(StatusCode::kCorrupt, e.what());
  }
}

Status publish_version(store::ObjectStore& s, Manifest& m, const std::string& payload) {
  m.payload_sha256 = sha256_hex(payload);
  m.payload_size = payload.size();
  m.payload_key = adapter_key(m.version, m.payload_sha256);
  if (Status st = s.put(m.payload_key, payload); !st) return st;
  store::PutOptions once;
  once.create_only = true;
  once.content_type = "application/json";
  if (Status st = s.put(manifest_key(m.version), m.to_json().dump(1), once); !st) return st;
  return s.put(latest_key(), std::to_string(m.version) + "\n");
}

}  // namespace brl::protocol
