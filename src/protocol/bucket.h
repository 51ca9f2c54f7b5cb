// Reading and writing the protocol's objects through any ObjectStore: the run description,
// LATEST, manifests, verified version payloads, and the global adapter's encoding (plain
// safetensors with PEFT key names, F32 or BF16, so a version can be used as a PEFT adapter as is).
// Torch-free: the proxy and the verifier work on float vectors.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "codec/codec.h"
#include "protocol/records.h"
#include "store/object_store.h"
#include "util/safetensors.h"

namespace brl::protocol {

// The store for a bucket URL, wrapped in bounded retries (transient errors, throttling).
std::unique_ptr<store::ObjectStore> open_bucket(const std::string& url);

Result<RunDescription> read_run(store::ObjectStore& s);
// The number in global/LATEST (kNotFound when there is none).
Result<int64_t> read_latest(store::ObjectStore& s);
// The newest published version: LATEST, or a higher manifest left by a proxy that died
// between writing the manifest and LATEST.
Result<int64_t> newest_version(store::ObjectStore& s);
Result<Manifest> read_manifest(store::ObjectStore& s, int64_t v);
// The payload of a version, checked against its manifest's size and sha256.
Result<std::string> read_payload(store::ObjectStore& s, const Manifest& m);

// A version's payload: F32, or BF16 (rounded to nearest even) when the run publishes bf16.
std::string encode_adapter(const std::vector<codec::Tensor>& tensors, st::DType dtype = st::DType::F32);
// Every tensor of a parsed safetensors buffer as floats; kCorrupt unless all are F32 (or
// BF16, when allowed) and finite.
Result<std::vector<codec::Tensor>> finite_float_tensors(const st::SafetensorsFile& f, const std::string& label,
                                                        bool allow_bf16);
// A version's payload (F32 or BF16 tensors) as floats.
Result<std::vector<codec::Tensor>> decode_adapter(std::string_view bytes, const std::string& label);

// A published version as every reader takes it: the manifest, the payload checked against it
// (size, sha256) and decoded. Errors: kNotFound when the manifest or the payload is gone
// (collected: a newer version exists), kCorrupt naming the object otherwise.
struct Version {
  Manifest manifest;
  std::string payload;                 // the bytes, as stored (a PEFT adapter file)
  std::vector<codec::Tensor> adapter;  // decoded, F32
};
Result<Version> read_version(store::ObjectStore& s, int64_t v);
Result<Version> read_version(store::ObjectStore& s, Manifest m);  // its manifest already read

// Publishes version m.version with the given payload: payload (content-addressed key), then
// the manifest with a create-only put (the commit point: of two proxies only one wins
// version N; the loser gets kPreconditionFailed), then LATEST. Fills the payload fields of m.
Status publish_version(store::ObjectStore& s, Manifest& m, const std::string& payload);

}  // namespace brl::protocol
