// The protocol's objects through a real directory store: update framing and its integrity
// checks and signatures, manifests, publishing (create-only commit point), newest-version discovery past a
// stale LATEST, and the run verifier catching what it exists to catch.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <functional>

#include "protocol/bucket.h"
#include "protocol/health.h"
#include "protocol/layout.h"
#include "protocol/records.h"
#include "protocol/update.h"
#include "protocol/verify.h"
#include "store/local_store.h"
#include "util/ed25519.h"
#include "util/hash.h"
#include "util/safetensors.h"

using namespace brl;
using namespace brl::protocol;
namespace fs = std::filesystem;

namespace {

struct TempBucket {
  fs::path dir;
  std::unique_ptr<store::ObjectStore> s;
  TempBucket() {
    char t[] = "/tmp/brl_records_XXXXXX";
    dir = mkdtemp(t);
    s = std::make_unique<store::LocalStore>(dir.string());
  }
  ~TempBucket() { fs::remove_all(dir); }
};

UpdateHeader header() {
  UpdateHeader h;
  h.worker = "w1";
  h.id = make_update_id(1700000000123, 0xabcdef12);
  h.base_version = 3;
  h.steps = 5;
  h.samples = 320;
  h.reward_mean = 0.25;
  h.reward_std = 0.5;
  h.accuracy = 0.125;
  h.codec = "int8";
  h.created_ms = 1700000000200;
  return h;
}

std::vector<codec::Tensor> adapter(float v) {
  return {{"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight", {2, 3}, {v, 1, 2, 3, 4, 5}},
          {"base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight", {3, 2}, {0, 0, 0, 0, 0, v}}};
}

void put_run(store::ObjectStore& s) {
  RunDescription r;
  r.run_id = "test";
  r.base_files = {{"config.json", std::string(64, 'a'), 10}};
  r.base_sha256 = sha256_hex(base_digest(r.base_files));
  r.config = nlohmann::json::object();
  ASSERT_TRUE(s.put(run_key(), r.to_json().dump()).is_ok());
}

Manifest manifest(int64_t v, std::vector<FoldedUpdate> ups = {}) {
  Manifest m;
  m.version = v;
  m.parent = v - 1;
  m.proxy = "p";
  m.updates = std::move(ups);
  return m;
}

}  // namespace

TEST(Update, RoundTrip) {
  std::string payload = "\x01\x02payload bytes";
  std::string obj = encode_update(header(), payload);
  auto p = parse_update(obj, "u");
  ASSERT_TRUE(p) << p.status().to_string();
  EXPECT_EQ(p->payload, payload);
  EXPECT_EQ(p->header.worker, "w1");
  EXPECT_EQ(p->header.samples, 320);
  EXPECT_EQ(p->header.payload_sha256, sha256_hex(payload));
  EXPECT_EQ(p->header.frac_reward_zero_std, -1);  // not reported: not written, read back as unknown
  EXPECT_FALSE(p->header.to_json().contains("frac_reward_zero_std"));
  UpdateHeader h = header();
  h.frac_reward_zero_std = 0.25;
  EXPECT_EQ(parse_update(encode_update(h, payload), "u")->header.frac_reward_zero_std, 0.25);
  EXPECT_TRUE(parse_update(encode_update(h, payload), "u")->header.extra.empty());
  EXPECT_EQ(update_id_time(p->header.id), 1700000000123);
  EXPECT_EQ(update_id_time("not-an-id"), std::nullopt);
  // Ids of one worker sort in time order (ListObjects order = creation order).
  EXPECT_LT(make_update_id(999, 0xffffffff), make_update_id(1000, 0));
}

// A header's worker and id name objects (updates/<worker>/<id>.upd), so they must be valid
// ids: fuzz/proxy_admission found a header whose worker was "..".
TEST(Update, HeaderIdsMustBeValidIds) {
  for (const char* bad : {"..", ".", "a/b", "", ".hidden", "sp ace"}) {
    UpdateHeader h = header();
    h.worker = bad;
    auto p = parse_update(encode_update(h, "x"), "u");
    ASSERT_FALSE(p) << bad;
    EXPECT_EQ(p.status().code(), StatusCode::kCorrupt);
    EXPECT_NE(p.status().message().find("is not a valid worker id"), std::string::npos) << p.status().message();
    h = header();
    h.id = bad;
    p = parse_update(encode_update(h, "x"), "u");
    ASSERT_FALSE(p) << bad;
    EXPECT_NE(p.status().message().find("is not a valid update id"), std::string::npos) << p.status().message();
  }
}

TEST(Update, EveryTruncationAndBitFlipIsCaught) {
  std::string obj = encode_update(header(), std::string(100, 'x'));
  for (size_t n = 0; n < obj.size(); ++n) EXPECT_FALSE(parse_update(obj.substr(0, n), "u")) << "prefix " << n;
  int caught = 0, total = 0;
  for (size_t i = 0; i < obj.size(); ++i) {
    std::string bad = obj;
    bad[i] ^= 0x10;
    auto p = parse_update(bad, "u");
    ++total;
    // A flip inside the JSON header may still parse (e.g. a digit of reward_mean changes), but
    // never in the magic, the length or the payload (sha256).
    if (!p) ++caught;
    else EXPECT_GT(i, 12u) << "flip at " << i;
    if (i >= obj.size() - 100) {
      EXPECT_FALSE(p) << "payload flip at " << i << " accepted";
    }
  }
  EXPECT_GT(caught, total / 2);
  auto p = parse_update("BRLUPD1\n\xff\xff\xff\x7f", "u");
  ASSERT_FALSE(p);
  EXPECT_NE(p.status().message().find("header length"), std::string::npos);
}

namespace {
const std::string kPayload = "payload bytes";
UpdateHeader parsed(const std::string& obj) { return parse_update(obj, "u").value().header; }
std::string kind(const std::string& reason) { return reason.substr(0, reason.find(':')); }
// The rejection's reason as a manifest records it; "" when the update may be folded.
std::string why_not(const UpdateHeader& h, const std::set<std::string>& allowed) {
  auto r = check_update_signature(h, allowed);
  return r ? r->reason() : "";
}
}  // namespace

// Signed updates: changing any header field or the payload after signing, a signature by
// another key, an unknown key, a missing signature in a run with an allow-list and malformed
// signature fields are each refused with their reason; unsigned objects keep the old bytes.
TEST(SignedUpdate, RoundTrip) {
  auto key = ed25519::SigningKey::generate();
  std::string obj = encode_update(header(), kPayload, &key);
  auto p = parse_update(obj, "u").value();
  EXPECT_EQ(p.payload, kPayload);
  EXPECT_EQ(p.header.signer, ed25519::format_public_key(key.public_key()));
  EXPECT_EQ(base64_decode(p.header.signature).value().size(), ed25519::kSignatureSize);
  EXPECT_EQ(why_not(p.header, {key.public_key()}), "");
  EXPECT_EQ(why_not(p.header, {}), "");  // no allow-list: verified against its own signer
  // The signature is over the header without it, under the domain tag.
  EXPECT_TRUE(
      ed25519::verify(key.public_key(), update_signing_bytes(p.header), base64_decode(p.header.signature).value()));
  EXPECT_EQ(update_signing_bytes(p.header).rfind("bucketrl update signature v1\n", 0), 0u);
  EXPECT_EQ(update_signing_bytes(p.header).find("\"signature\""), std::string::npos);
  // A field this build does not know (a newer worker's) is kept, and signed like the rest.
  UpdateHeader f = header();
  f.extra["future_field"] = {{"a", 1}};
  UpdateHeader back = parse_update(encode_update(f, kPayload, &key), "u").value().header;
  EXPECT_EQ(back.extra, f.extra);
  EXPECT_EQ(why_not(back, {key.public_key()}), "");
  back.extra["future_field"]["a"] = 2;
  EXPECT_EQ(why_not(back, {key.public_key()}).substr(0, 7), "forged:");
}

TEST(SignedUpdate, UnsignedObjectsAreUnchanged) {
  std::string obj = encode_update(header(), kPayload);
  EXPECT_EQ(obj.find("signer"), std::string::npos);
  EXPECT_EQ(obj.find("signature"), std::string::npos);
  UpdateHeader h = parsed(obj);
  EXPECT_EQ(why_not(h, {}), "");
  auto key = ed25519::SigningKey::generate();
  EXPECT_EQ(kind(why_not(h, {key.public_key()})), "unsigned");
}

// Every field the proxy uses, changed after signing (header re-encoded with the old
// signature, as an attacker with write access to the bucket could).
TEST(SignedUpdate, AnyFieldChangedAfterSigningIsForged) {
  auto key = ed25519::SigningKey::generate();
  const UpdateHeader good = parsed(encode_update(header(), kPayload, &key));
  const std::vector<std::pair<std::string, std::function<void(UpdateHeader&)>>> edits = {
      {"worker", [](UpdateHeader& h) { h.worker = "w2"; }},
      {"id", [](UpdateHeader& h) { h.id = make_update_id(1700000000124, 0xabcdef01); }},
      {"base_version", [](UpdateHeader& h) { h.base_version = 4; }},
      {"steps", [](UpdateHeader& h) { h.steps = 40; }},
      {"samples", [](UpdateHeader& h) { h.samples = 100000; }},
      {"reward_mean", [](UpdateHeader& h) { h.reward_mean = 0.126; }},
      {"reward_std", [](UpdateHeader& h) { h.reward_std = 0; }},
      {"accuracy", [](UpdateHeader& h) { h.accuracy = 1; }},
      {"codec", [](UpdateHeader& h) { h.codec = "fp32"; }},
      {"created_ms", [](UpdateHeader& h) { h.created_ms += 1; }},
      {"seconds", [](UpdateHeader& h) { h.seconds = 2; }},
      {"a field added", [](UpdateHeader& h) { h.extra["note"] = "x"; }},
  };
  for (auto& [field, edit] : edits) {
    UpdateHeader h = good;
    edit(h);
    std::string obj = encode_update(h, kPayload);  // keeps signer + signature as they are
    UpdateHeader back = parsed(obj);
    EXPECT_EQ(back.signature, good.signature) << field;
    std::string why = why_not(back, {key.public_key()});
    EXPECT_EQ(kind(why), "forged") << field << ": " << why;
    EXPECT_EQ(kind(why_not(back, {})), "forged") << field;
  }
  // Another payload: parse_update catches it unless payload_sha256 changes too, which the
  // signature covers.
  std::string other = encode_update(good, "other payload");
  EXPECT_EQ(kind(why_not(parsed(other), {key.public_key()})), "forged");
  std::string same = encode_update(good, kPayload);
  EXPECT_EQ(why_not(parsed(same), {key.public_key()}), "");
}

TEST(SignedUpdate, KeysAndMalformedFields) {
  auto allowed = ed25519::SigningKey::generate(), stranger = ed25519::SigningKey::generate();
  const std::set<std::string> list{allowed.public_key()};
  // A key that is not on the list, with a valid signature.
  std::string why = why_not(parsed(encode_update(header(), kPayload, &stranger)), list);
  EXPECT_EQ(kind(why), "unknown_key");
  EXPECT_NE(why.find(ed25519::format_public_key(stranger.public_key())), std::string::npos);
  // Signed by the stranger but claiming the allowed key.
  UpdateHeader h = parsed(encode_update(header(), kPayload, &stranger));
  h.signer = ed25519::format_public_key(allowed.public_key());
  EXPECT_EQ(kind(why_not(parsed(encode_update(h, kPayload)), list)), "forged");
  // Malformed fields.
  UpdateHeader g = parsed(encode_update(header(), kPayload, &allowed));
  for (auto edit : std::vector<std::function<void(UpdateHeader&)>>{
           [](UpdateHeader& x) { x.signature = ""; },
           [](UpdateHeader& x) { x.signer = ""; },
           [](UpdateHeader& x) { x.signature = "***"; },
           [](UpdateHeader& x) { x.signature = base64_encode("short"); },
           [](UpdateHeader& x) { x.signer = "ed25519:AAAA"; },
       }) {
    UpdateHeader x = g;
    edit(x);
    EXPECT_EQ(kind(why_not(parsed(encode_update(x, kPayload)), list)), "forged");
  }
}

// An integer header field holding a float out of range was a float -> int64 cast, undefined
// behaviour (regression input fuzz/corpus/update/base_version_1e300).
TEST(Update, IntegerHeaderFieldsRefuseFloats) {
  const std::string payload(10, 'x');
  for (const char* v : {"1e300", "3.5"}) {
    nlohmann::json h = header().to_json();
    h["payload_sha256"] = sha256_hex(payload);
    h["payload_size"] = payload.size();
    h["base_version"] = nlohmann::json::parse(v);
    const std::string js = h.dump();
    std::string obj = "BRLUPD1\n";
    for (int i = 0; i < 4; ++i) obj.push_back(static_cast<char>((js.size() >> (8 * i)) & 0xff));
    auto p = parse_update(obj + js + payload, "u");
    ASSERT_FALSE(p) << v;
    EXPECT_EQ(p.status().code(), StatusCode::kCorrupt);
    EXPECT_NE(p.status().message().find("wrong type"), std::string::npos) << p.status().message();
  }
}

TEST(Records, ManifestRoundTripAndValidation) {
  Manifest m = manifest(4, {{"w1", "id1", "s1", "p1", 10, 3, 1, 5, 64, 64, 0.7071, 0.25, 0.125}});
  m.rejected = {{"w2", "id2", "stale: too old"}};
  m.cursors = {{"w1", "id1"}, {"w2", "id2"}};
  auto back = Manifest::parse(m.to_json().dump(), "m");
  ASSERT_TRUE(back) << back.status().to_string();
  EXPECT_EQ(back->updates.size(), 1u);
  EXPECT_EQ(back->updates[0].payload_sha256, "p1");
  EXPECT_DOUBLE_EQ(back->updates[0].weight, 64);
  EXPECT_DOUBLE_EQ(back->updates[0].discount, 0.7071);
  EXPECT_DOUBLE_EQ(back->updates[0].reward_mean, 0.25);
  auto old_manifest = m.to_json();  // written before discounts were recorded: no discount = 1
  old_manifest["updates"][0].erase("discount");
  EXPECT_DOUBLE_EQ(Manifest::parse(old_manifest.dump(), "m").value().updates[0].discount, 1.0);
  EXPECT_EQ(back->updates[0].norm, 0);  // not recorded: unknown
  EXPECT_EQ(back->updates[0].signer, "");
  m.updates[0].norm = 1.5;
  m.updates[0].signer = "ed25519:x";
  auto signed_back = Manifest::parse(m.to_json().dump(), "m").value();
  EXPECT_EQ(signed_back.updates[0].norm, 1.5);
  EXPECT_EQ(signed_back.updates[0].signer, "ed25519:x");
  EXPECT_EQ(back->cursors.at("w2"), "id2");
  EXPECT_EQ(back->rejected[0].reason, "stale: too old");
  auto j = m.to_json();
  j["parent"] = 2;  // not the version before
  EXPECT_FALSE(Manifest::parse(j.dump(), "m"));
  j = m.to_json();
  j["updates"][0].erase("samples");
  auto e = Manifest::parse(j.dump(), "global/v4/manifest.json");
  ASSERT_FALSE(e);
  EXPECT_NE(e.status().message().find("global/v4/manifest.json"), std::string::npos);
  EXPECT_FALSE(Manifest::parse("{not json", "m"));
  EXPECT_FALSE(RunDescription::parse(R"({"protocol_version": 2})", "run.json"));
}

// The typed pointers of a manifest live in its "stats" object on the wire (the bucket protocol
// is unchanged): round trip, old manifests without them, and bad values named.
TEST(Records, ManifestPayloadDtypeAndOuterState) {
  Manifest m = manifest(4);
  m.stats = {{"delta_norm", 0.5}};
  m.payload_dtype = "bfloat16";
  m.outer_state = OuterStateRef{outer_state_key(4, std::string(64, 'a')), std::string(64, 'a'), 123};
  const auto j = m.to_json();
  EXPECT_EQ(j["stats"]["payload_dtype"], "bfloat16");
  EXPECT_EQ(j["stats"]["outer_state"]["key"], "global/v00000004/outer-aaaaaaaaaaaaaaaa.safetensors");
  EXPECT_EQ(j["stats"]["outer_state"]["size"], 123);
  auto back = Manifest::parse(j.dump(), "m").value();
  EXPECT_EQ(back.payload_dtype, "bfloat16");
  ASSERT_TRUE(back.outer_state);
  EXPECT_EQ(back.outer_state->key, m.outer_state->key);
  EXPECT_EQ(back.outer_state->sha256, m.outer_state->sha256);
  EXPECT_EQ(back.outer_state->size, 123u);
  EXPECT_EQ(back.stats, (nlohmann::json{{"delta_norm", 0.5}}));  // the rest of stats as it was
  EXPECT_EQ(back.to_json(), j);

  auto old = j;  // before either field existed
  old["stats"].erase("payload_dtype");
  old["stats"].erase("outer_state");
  auto o = Manifest::parse(old.dump(), "m").value();
  EXPECT_EQ(o.payload_dtype, "");
  EXPECT_FALSE(o.outer_state);

  auto bad = j;
  bad["stats"]["payload_dtype"] = "float16";
  auto e = Manifest::parse(bad.dump(), "global/v4/manifest.json");
  ASSERT_FALSE(e);
  EXPECT_NE(e.status().message().find("stats.payload_dtype 'float16'"), std::string::npos) << e.status().message();
  bad = j;
  bad["stats"]["outer_state"]["key"] = outer_state_key(3, std::string(64, 'a'));  // another version's
  e = Manifest::parse(bad.dump(), "m");
  ASSERT_FALSE(e);
  EXPECT_NE(e.status().message().find("not an outer state of version 4"), std::string::npos) << e.status().message();
  bad = j;
  bad["stats"]["outer_state"] = "global/v00000004/outer-a.safetensors";
  EXPECT_FALSE(Manifest::parse(bad.dump(), "m"));
}

// Integer fields hold JSON integers that fit: 1e300 was a float -> int64 cast, undefined
// behaviour (fuzz/records_fuzz, regression input fuzz/corpus/records/heartbeat_time_1e39).
TEST(Records, IntegerFieldsRefuseFloatsAndOutOfRange) {
  auto m = manifest(4, {{"w1", "id1", "s1", "p1", 10, 3, 1, 5, 64, 64, 0.7071, 0.25, 0.125}}).to_json();
  for (const char* v : {"1e300", "4.0", "-1e300"}) {
    auto j = m;
    j["version"] = nlohmann::json::parse(v);
    EXPECT_FALSE(Manifest::parse(j.dump(), "m")) << v;
    j = m;
    j["updates"][0]["staleness"] = nlohmann::json::parse(v);
    EXPECT_FALSE(Manifest::parse(j.dump(), "m")) << v;
  }
  auto j = m;
  j["payload"]["size"] = -1;
  auto e = Manifest::parse(j.dump(), "global/v4/manifest.json");
  ASSERT_FALSE(e);
  EXPECT_EQ(e.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(e.status().message().find("wrong type"), std::string::npos) << e.status().message();
  EXPECT_FALSE(Heartbeat::parse(R"({"worker": "w", "state": "training", "time_ms": 1.76e39})", "hb"));
  EXPECT_FALSE(Heartbeat::parse(R"({"worker": "w", "state": "training", "time_ms": 1, "pid": 1e300})", "hb"));
  EXPECT_TRUE(Heartbeat::parse(R"({"worker": "w", "state": "training", "time_ms": 1})", "hb"));
  EXPECT_FALSE(
      EvalRecord::parse(R"({"version": 1, "n": 1e19, "time_ms": 1, "accuracy": 0.5, "reward_mean": 0.5})", "ev"));
}

// pass@k travels with an evaluation when measured, and older records without it still parse.
TEST(Records, EvalRecordPassAtK) {
  EvalRecord e{3, 200, 5, 0.5, 0.5, 8, 0.25, 0.75};
  auto back = EvalRecord::parse(e.to_json().dump(), "ev").value();
  EXPECT_EQ(back.k, 8);
  EXPECT_DOUBLE_EQ(back.pass_at_1, 0.25);
  EXPECT_DOUBLE_EQ(back.pass_at_k, 0.75);
  EvalRecord plain{3, 200, 5, 0.5, 0.5};
  EXPECT_FALSE(plain.to_json().contains("k"));
  EXPECT_EQ(EvalRecord::parse(plain.to_json().dump(), "ev").value().k, 0);
  auto bad = e.to_json();
  bad.erase("pass_at_k");
  EXPECT_FALSE(EvalRecord::parse(bad.dump(), "ev"));
}

TEST(Bucket, AdapterEncodingRoundTripsAndRejectsNonFinite) {
  auto a = adapter(0.5f);
  auto back = decode_adapter(encode_adapter(a), "a");
  ASSERT_TRUE(back);
  ASSERT_EQ(back->size(), 2u);
  EXPECT_EQ((*back)[0].data, a[0].data);
  EXPECT_EQ((*back)[1].shape, a[1].shape);
  auto bad = adapter(std::nanf(""));
  EXPECT_FALSE(decode_adapter(encode_adapter(bad), "a"));
}

// bf16 payloads: round to nearest, ties to even (8 significant bits: the neighbours of 1 are
// 1 - 2^-8 below and 1 + 2^-7 above), finite values beyond bf16's largest (0x7f7f: (2 -
// 2^-7) * 2^127) clamp to it; 2 bytes an element; a reader that wants F32 refuses them.
TEST(Bucket, Bf16AdapterEncodingRoundsToNearestEven) {
  const float kMaxBf16 = std::ldexp(2.0f - std::ldexp(1.0f, -7), 127);
  std::vector<float> x{1.0f,
                       1 + std::ldexp(1.0f, -8),
                       1 + 3 * std::ldexp(1.0f, -8),
                       1 + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20),
                       -2.5f,
                       std::numeric_limits<float>::max(),
                       1e-3f};
  std::vector<float> want{1.0f,  1.0f,     1 + std::ldexp(1.0f, -6), 1 + std::ldexp(1.0f, -7),
                          -2.5f, kMaxBf16, 0.00099945068359375f};  // 1e-3 = 1.024 * 2^-10 -> 1.0234375 * 2^-10
  std::vector<codec::Tensor> a{{"t", {static_cast<int64_t>(x.size())}, x}};
  std::string bytes = encode_adapter(a, st::DType::BF16);
  auto f = st::SafetensorsFile::from_buffer(bytes.data(), bytes.size(), "a");
  EXPECT_EQ(f.get("t").dtype, st::DType::BF16);
  EXPECT_EQ(f.get("t").nbytes, 2 * x.size());
  auto back = decode_adapter(bytes, "a");
  ASSERT_TRUE(back) << back.status().to_string();
  EXPECT_EQ((*back)[0].data, want);
  auto strict = finite_float_tensors(f, "state", false);
  ASSERT_FALSE(strict);
  EXPECT_NE(strict.status().message().find("state: tensor t is not F32"), std::string::npos)
      << strict.status().to_string();
}

TEST(Bucket, PublishIsCreateOnlyAndNewestLooksPastLatest) {
  TempBucket b;
  put_run(*b.s);
  Manifest m0 = manifest(0);
  ASSERT_TRUE(publish_version(*b.s, m0, encode_adapter(adapter(0))).is_ok());
  Manifest m1 = manifest(1);
  ASSERT_TRUE(publish_version(*b.s, m1, encode_adapter(adapter(1))).is_ok());
  EXPECT_EQ(*read_latest(*b.s), 1);
  // A second proxy publishing version 1 loses: its manifest is not created.
  Manifest other = manifest(1);
  other.proxy = "other";
  Status st = publish_version(*b.s, other, encode_adapter(adapter(7)));
  EXPECT_EQ(st.code(), StatusCode::kPreconditionFailed);
  auto r1 = read_manifest(*b.s, 1);
  ASSERT_TRUE(r1);
  EXPECT_EQ(r1->proxy, "p");
  auto payload = read_payload(*b.s, *r1);
  ASSERT_TRUE(payload);
  EXPECT_EQ((*decode_adapter(*payload, "x"))[0].data[0], 1.0f);
  // A proxy that died between manifest and LATEST: the manifest counts.
  Manifest m2 = manifest(2);
  ASSERT_TRUE(b.s->put(manifest_key(2), m2.to_json().dump()).is_ok());
  EXPECT_EQ(*read_latest(*b.s), 1);
  EXPECT_EQ(*newest_version(*b.s), 2);
  // A payload changed after publishing is caught.
  ASSERT_TRUE(b.s->put(r1->payload_key, encode_adapter(adapter(9))).is_ok());
  EXPECT_EQ(read_payload(*b.s, *r1).status().code(), StatusCode::kCorrupt);
}

TEST(Verify, AcceptsAGoodRunAndNamesEachViolation) {
  TempBucket b;
  put_run(*b.s);
  Manifest m0 = manifest(0);
  ASSERT_TRUE(publish_version(*b.s, m0, encode_adapter(adapter(0))).is_ok());
  FoldedUpdate u{"w1", "id1", "s1", "p1", 10, 0, 0, 1, 64, 64, 0, 0};
  u.norm = 1;  // a zero delta (norm 0) may repeat: two workers can send the very same one
  Manifest m1 = manifest(1, {u});
  ASSERT_TRUE(publish_version(*b.s, m1, encode_adapter(adapter(1))).is_ok());
  auto ok = verify_run(*b.s);
  EXPECT_TRUE(ok.ok()) << ok.summary();
  EXPECT_EQ(ok.newest, 1);
  EXPECT_EQ(ok.updates_folded, 1);
  EXPECT_EQ(ok.payloads_verified, 2);

  // The same update folded again, and the same content under another id.
  FoldedUpdate again = u, replay = u;
  replay.id = "id9";
  Manifest m2 = manifest(2, {again, replay});
  ASSERT_TRUE(publish_version(*b.s, m2, encode_adapter(adapter(2))).is_ok());
  auto bad = verify_run(*b.s);
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.summary().find("update w1/id1 is folded into v1 and v2"), std::string::npos) << bad.summary();
  EXPECT_NE(bad.summary().find("folded twice"), std::string::npos) << bad.summary();

  // A gap in the chain, and a corrupted payload.
  TempBucket g;
  put_run(*g.s);
  Manifest g0 = manifest(0), g2 = manifest(2);
  ASSERT_TRUE(publish_version(*g.s, g0, encode_adapter(adapter(0))).is_ok());
  ASSERT_TRUE(publish_version(*g.s, g2, encode_adapter(adapter(2))).is_ok());
  ASSERT_TRUE(g.s->put(g0.payload_key, "garbage").is_ok());
  auto gap = verify_run(*g.s);
  EXPECT_NE(gap.summary().find("version 1 is missing"), std::string::npos) << gap.summary();
  EXPECT_NE(gap.summary().find("does not match manifest v0"), std::string::npos) << gap.summary();

  // A proxy state object that does not match the sha256 its manifest names.
  TempBucket o;
  put_run(*o.s);
  Manifest o0 = manifest(0);
  o0.stats["outer_state"] = {{"key", version_dir(0) + "outer-x.safetensors"}, {"sha256", sha256_hex("state")}};
  ASSERT_TRUE(o.s->put(version_dir(0) + "outer-x.safetensors", "state").is_ok());
  ASSERT_TRUE(publish_version(*o.s, o0, encode_adapter(adapter(0))).is_ok());
  EXPECT_TRUE(verify_run(*o.s).ok()) << verify_run(*o.s).summary();
  ASSERT_TRUE(o.s->put(version_dir(0) + "outer-x.safetensors", "tampered").is_ok());
  EXPECT_NE(verify_run(*o.s).summary().find("outer state " + version_dir(0) + "outer-x.safetensors does not match"),
            std::string::npos)
      << verify_run(*o.s).summary();
}

// Accounting: every update in updates/ is recorded in exactly one manifest, or pending after
// its worker's cursor; rejections have reasons.
TEST(Verify, AccountsForEveryUpdateObject) {
  TempBucket b;
  put_run(*b.s);
  Manifest m0 = manifest(0);
  ASSERT_TRUE(publish_version(*b.s, m0, encode_adapter(adapter(0))).is_ok());
  const std::string folded = make_update_id(1000, 1), rejected = make_update_id(2000, 2),
                    skipped = make_update_id(1500, 3), pending = make_update_id(3000, 4);
  Manifest m1 = manifest(1, {FoldedUpdate{"w1", folded, "s1", "p1", 10, 0, 0, 1, 64, 64, 1, 0, 0}});
  m1.rejected = {{"w1", rejected, "stale: too old"}};
  m1.cursors = {{"w1", rejected}};
  ASSERT_TRUE(publish_version(*b.s, m1, encode_adapter(adapter(1))).is_ok());
  for (auto& id : {folded, rejected, pending}) ASSERT_TRUE(b.s->put(update_key("w1", id), "x").is_ok());
  auto ok = verify_run(*b.s);
  EXPECT_TRUE(ok.ok()) << ok.summary();
  EXPECT_EQ(ok.updates_present, 3);
  EXPECT_EQ(ok.updates_pending, 1);

  // Before the cursor yet recorded nowhere: the proxy skipped it.
  ASSERT_TRUE(b.s->put(update_key("w1", skipped), "x").is_ok());
  auto lost = verify_run(*b.s);
  EXPECT_NE(lost.summary().find("update " + update_key("w1", skipped) + " is neither folded nor rejected"),
            std::string::npos)
      << lost.summary();
  ASSERT_TRUE(b.s->remove(update_key("w1", skipped)).is_ok());

  // Recorded twice (rejected after it was folded), a rejection without a reason.
  Manifest m2 = manifest(2);
  m2.rejected = {{"w1", folded, "replay: again"}, {"w1", pending, ""}};
  m2.cursors = {{"w1", pending}};
  ASSERT_TRUE(publish_version(*b.s, m2, encode_adapter(adapter(2))).is_ok());
  auto bad = verify_run(*b.s);
  EXPECT_NE(bad.summary().find("update w1/" + folded + " is recorded (folded or rejected) in 2 manifests: v1, v2"),
            std::string::npos)
      << bad.summary();
  EXPECT_NE(bad.summary().find("without a reason"), std::string::npos) << bad.summary();
  EXPECT_EQ(bad.updates_pending, 0) << bad.summary();
}

TEST(Health, LostStragglingStoppedAlive) {
  auto beat = [](const std::string& w, int64_t t, double rate, const std::string& state = "training") {
    Heartbeat h;
    h.worker = w;
    h.time_ms = t;
    h.samples_per_s = rate;
    h.state = state;
    return h;
  };
  int64_t now = 1000000;
  std::map<std::string, Heartbeat> b{{"a", beat("a", now - 1000, 100)},
                                     {"b", beat("b", now - 2000, 110)},
                                     {"c", beat("c", now - 3000, 20)},
                                     {"d", beat("d", now - 61000, 100)},
                                     {"e", beat("e", now - 500, 0, "stopped")}};
  auto h = classify_health(b, now, {60, 0.25});
  EXPECT_EQ(h["a"], Health::alive);
  EXPECT_EQ(h["b"], Health::alive);
  EXPECT_EQ(h["c"], Health::straggling);  // 20 < 0.25 x median(100, 110, 20) = 25
  EXPECT_EQ(h["d"], Health::lost);        // silent 61 s > 60 s
  EXPECT_EQ(h["e"], Health::stopped);
  // One live worker alone is never a straggler.
  auto one = classify_health({{"c", beat("c", now, 1)}}, now, {60, 0.25});
  EXPECT_EQ(one["c"], Health::alive);
}
