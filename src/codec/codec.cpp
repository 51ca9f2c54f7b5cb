// Update payload codecs: blockwise absmax quantization, safetensors body, zstd frame.
#include "codec/codec.h"

#include <zstd.h>

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

#include "util/error.h"
#include "util/hash.h"
#include "util/safetensors.h"

namespace brl::codec {

static_assert(std::endian::native == std::endian::little,
              "payload buffers are little-endian and copied as-is");

namespace {

constexpr char kMagic[4] = {'B', 'R', 'L', 'C'};
constexpr uint8_t kFrameVersion = 1;
constexpr size_t kPrefixSize = 24;  // magic, version, compression, 2 reserved, u64 length, 8 checksum
constexpr size_t kChecksumSize = 8;
constexpr const char* kFormat = "1";  // body layout version, in __metadata__["format"]
constexpr int kMinBlock = 8, kMaxBlock = 4096, kMaxLevel = 19;
constexpr int kMinChunk = 16, kMaxChunk = 32768;  // a run's indices fit I16
constexpr const char* kValidKinds = "fp32, bf16, int8, int4, topk_int2, topk_int4";

bool quantized(Kind k) { return k == Kind::int8 || k == Kind::int4; }
int qmax(Kind k) { return k == Kind::int8 ? 127 : 7; }
int code_bits(Kind k) { return k == Kind::topk_int2 ? 2 : 4; }
int levels(Kind k) { return 1 << (code_bits(k) - 1); }  // magnitude levels; the top code bit is the sign
// The extra body tensors of each tensor, per kind (their names must not collide).
std::vector<std::string> suffixes(Kind k) {
  if (quantized(k)) return {".scale"};
  if (is_sparse(k)) return {".count", ".index", ".range"};
  return {};
}

// Decode failures: a status code and a message, turned into a Status at the API boundary.
struct DecodeError : std::runtime_error {
  StatusCode code;
  DecodeError(StatusCode c, const std::string& m) : std::runtime_error(m), code(c) {}
};
[[noreturn]] void corrupt(const std::string& what) {
  throw DecodeError(StatusCode::kCorrupt, "update payload: " + what);
}
[[noreturn]] void too_big(const std::string& what, uint64_t n, uint64_t limit) {
  throw DecodeError(StatusCode::kInvalidArgument,
                    "update payload: " + what + " is " + std::to_string(n) +
                        " bytes, over the max_decoded_bytes limit of " + std::to_string(limit));
}

std::string checksum_hex(std::string_view body) {
  return sha256_hex(body).substr(0, 2 * kChecksumSize);
}

// a * b, or false on overflow.
bool mul_ok(uint64_t a, uint64_t b, uint64_t* out) {
  if (a != 0 && b > UINT64_MAX / a) return false;
  *out = a * b;
  return true;
}

uint64_t num_blocks(uint64_t n, int block) { return n / block + (n % block != 0); }

// Round to nearest, ties to even, for |v| <= 2^22: adding 1.5 * 2^23 moves v to where the
// float spacing is 1. Unlike nearbyint this vectorizes without SSE4.1.
inline float round_ne(float v) {
  constexpr float kMagic = 12582912.0f;
  return (v + kMagic) - kMagic;
}

// The largest scale whose products with every code stay finite (FLT_MAX / q itself may
// round up). Encoders clamp to it; decoders reject anything above it.
float max_scale(int qm) {
  float s = FLT_MAX / static_cast<float>(qm);
  while (!std::isfinite(s * static_cast<float>(qm))) s = std::nextafter(s, 0.0f);
  return s;
}

// Symmetric absmax: per block scale = absmax / qmax, code = round(x / scale) in
// [-qmax, qmax]; a zero block (or one whose scale underflows to 0) gets all-zero codes.
// Returns false (codes unusable) if x holds a non-finite value.
bool quantize(const float* x, uint64_t n, int block, int qm, int8_t* codes, float* scales) {
  const uint64_t nb = num_blocks(n, block);
  const float fq = static_cast<float>(qm), smax = max_scale(qm);
  for (uint64_t b = 0; b < nb; ++b) {
    const uint64_t lo = b * block, hi = std::min<uint64_t>(n, lo + block);
    // Absmax on the bits of |x|: non-negative floats order like their bit patterns, so an
    // integer max (which vectorizes, unlike a float max without -ffast-math) finds it, and
    // inf/nan show up as bits >= 0x7f800000.
    uint32_t mb = 0;
    for (uint64_t i = lo; i < hi; ++i) mb = std::max(mb, std::bit_cast<uint32_t>(x[i]) & 0x7fffffffu);
    if (mb >= 0x7f800000u) return false;
    const float s = std::min(std::bit_cast<float>(mb) / fq, smax);
    scales[b] = s;
    if (s == 0) {
      std::fill(codes + lo, codes + hi, int8_t{0});
      continue;
    }
    for (uint64_t i = lo; i < hi; ++i)
      codes[i] = static_cast<int8_t>(std::clamp(round_ne(x[i] / s), -fq, fq));
  }
  return true;
}

void dequantize(const int8_t* codes, uint64_t n, int block, const float* scales, float* out) {
  const uint64_t nb = num_blocks(n, block);
  for (uint64_t b = 0; b < nb; ++b) {
    const uint64_t lo = b * block, hi = std::min<uint64_t>(n, lo + block);
    const float s = scales[b];
    for (uint64_t i = lo; i < hi; ++i) out[i] = static_cast<float>(codes[i]) * s;
  }
}

// ---- topk kinds ---------------------------------------------------------------------

// Elements a run of len sends: ceil(density * len), at least 1, at most len.
uint64_t topk_count(uint64_t len, double density) {
  const double k = std::ceil(density * static_cast<double>(len));
  return std::clamp<uint64_t>(static_cast<uint64_t>(k), 1, len);
}

struct Sparse {
  std::vector<int32_t> count;  // per run
  std::vector<int16_t> index;  // per sent element, its index in the run
  std::vector<float> range;    // per run: lo, hi
  std::vector<uint8_t> codes;  // per sent element, unpacked
};

// Chunked top-k of x (finite) with the codes of the sent elements.
Sparse sparsify(const float* x, uint64_t n, Kind kind, int chunk, double density) {
  Sparse sp;
  const int L = levels(kind);
  std::vector<uint32_t> order;
  for (uint64_t lo_i = 0; lo_i < n; lo_i += chunk) {
    const uint64_t len = std::min<uint64_t>(chunk, n - lo_i), k = topk_count(len, density);
    const float* r = x + lo_i;
    order.resize(len);
    for (uint32_t i = 0; i < len; ++i) order[i] = i;
    // A total order (magnitude down, then index up), so the choice never depends on the library.
    auto before = [r](uint32_t a, uint32_t b) {
      const float ma = std::abs(r[a]), mb = std::abs(r[b]);
      return ma > mb || (ma == mb && a < b);
    };
    if (k < len) std::nth_element(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k - 1), order.end(), before);
    order.resize(k);
    // Zeros are not sent (they decode as 0 anyway; sent, one would come back as a level's centre).
    order.erase(std::remove_if(order.begin(), order.end(), [r](uint32_t i) { return r[i] == 0; }), order.end());
    std::sort(order.begin(), order.end());
    float lo = order.empty() ? 0.0f : std::abs(r[order[0]]), hi = lo;
    for (uint32_t i : order) lo = std::min(lo, std::abs(r[i])), hi = std::max(hi, std::abs(r[i]));
    const double w = (static_cast<double>(hi) - lo) / L;
    sp.count.push_back(static_cast<int32_t>(order.size()));
    sp.range.push_back(lo);
    sp.range.push_back(hi);
    for (uint32_t i : order) {
      const int j = w > 0 ? static_cast<int>(std::min<double>(L - 1, std::floor((std::abs(r[i]) - lo) / w))) : 0;
      sp.index.push_back(static_cast<int16_t>(i));
      sp.codes.push_back(static_cast<uint8_t>((std::signbit(r[i]) ? L : 0) + j));
    }
  }
  return sp;
}

uint64_t packed_bytes(uint64_t codes, int bits) { return (codes * bits + 7) / 8; }

std::string pack_codes(const std::vector<uint8_t>& codes, int bits) {
  std::string out(packed_bytes(codes.size(), bits), '\0');
  for (size_t i = 0; i < codes.size(); ++i)
    out[i * bits / 8] = static_cast<char>(static_cast<uint8_t>(out[i * bits / 8]) | (codes[i] << (i * bits % 8)));
  return out;
}

// Index of the first element for which bad() holds, or n. The all-good case, the common
// one, runs as a branch-free reduction the compiler vectorizes; the scan for the index only
// runs on failure.
template <class T, class Bad>
uint64_t first_bad(const T* p, uint64_t n, Bad bad) {
  unsigned any = 0;
  for (uint64_t i = 0; i < n; ++i) any |= bad(p[i]);
  if (!any) return n;
  for (uint64_t i = 0; i < n; ++i)
    if (bad(p[i])) return i;
  return n;
}
inline unsigned non_finite(float x) { return (std::bit_cast<uint32_t>(x) & 0x7f800000u) == 0x7f800000u; }

// memcpy that accepts the null data() of empty vectors (memcpy itself may not).
void copy_bytes(void* dst, const void* src, size_t n) {
  if (n) std::memcpy(dst, src, n);
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) r += ',';
    r += std::to_string(s[i]);
  }
  return r + "]";
}

// ---- the frame ----------------------------------------------------------------------

uint64_t read_u64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

std::string zstd_decompress(std::string_view src, uint64_t expect) {
  std::unique_ptr<ZSTD_DCtx, size_t (*)(ZSTD_DCtx*)> d(ZSTD_createDCtx(), ZSTD_freeDCtx);
  if (!d) throw std::bad_alloc();
  // Grow the output with what actually decompresses (a forged length on a few bytes of
  // input must not allocate gigabytes); one spare byte detects output beyond `expect`.
  const uint64_t limit = expect + 1;
  std::string out(std::min<uint64_t>(limit, std::max<uint64_t>(1 << 16, 4 * src.size())), '\0');
  ZSTD_inBuffer in{src.data(), src.size(), 0};
  ZSTD_outBuffer o{out.data(), out.size(), 0};
  for (;;) {
    const size_t r = ZSTD_decompressStream(d.get(), &o, &in);
    if (ZSTD_isError(r)) corrupt(std::string("zstd: ") + ZSTD_getErrorName(r));
    if (r == 0 && in.pos == in.size) break;  // last frame complete, input consumed
    if (o.pos == o.size) {
      if (out.size() >= limit) corrupt("body decompresses to more than the " +
                                       std::to_string(expect) + " bytes the prefix declares");
      out.resize(std::min<uint64_t>(limit, 2 * out.size()));
      o.dst = out.data();
      o.size = out.size();
    } else if (in.pos == in.size) {
      corrupt("zstd stream is truncated");
    }
  }
  if (o.pos != expect)
    corrupt("body decompresses to " + std::to_string(o.pos) + " bytes, the prefix declares " +
            std::to_string(expect));
  out.resize(o.pos);
  return out;
}

// Checks the prefix and returns the body: a view into `bytes` when stored, else into
// `storage`.
std::string_view unframe_view(std::string_view bytes, uint64_t max_body, std::string& storage) {
  if (bytes.size() < kPrefixSize)
    corrupt(std::to_string(bytes.size()) + " bytes, shorter than the " +
            std::to_string(kPrefixSize) + "-byte prefix (truncated?)");
  const char* p = bytes.data();
  if (std::memcmp(p, kMagic, 4) != 0) corrupt("does not start with the magic \"BRLC\"");
  if (static_cast<uint8_t>(p[4]) != kFrameVersion)
    corrupt("frame version " + std::to_string(static_cast<uint8_t>(p[4])) +
            " is not supported (this build reads " + std::to_string(kFrameVersion) + ")");
  const uint8_t comp = static_cast<uint8_t>(p[5]);
  if (comp > 1) corrupt("compression flag " + std::to_string(comp) + " is neither 0 (stored) nor 1 (zstd)");
  if (p[6] != 0 || p[7] != 0) corrupt("reserved prefix bytes are not zero");
  const uint64_t len = read_u64(p + 8);
  if (len > max_body) too_big("the body", len, max_body);
  const std::string_view rest = bytes.substr(kPrefixSize);
  std::string_view body;
  if (comp == 0) {
    if (rest.size() != len)
      corrupt("stored body is " + std::to_string(rest.size()) + " bytes, the prefix declares " +
              std::to_string(len));
    body = rest;
  } else {
    storage = zstd_decompress(rest, len);
    body = storage;
  }
  if (checksum_hex(body) != to_hex(reinterpret_cast<const unsigned char*>(p + 16), kChecksumSize))
    corrupt("body checksum mismatch (corrupted in transit or storage)");
  return body;
}

// ---- the body ------------------------------------------------------------------------

const std::string& meta(const std::map<std::string, std::string>& md, const std::string& key) {
  auto it = md.find(key);
  if (it == md.end()) corrupt("__metadata__ has no \"" + key + "\"");
  return it->second;
}

nlohmann::json parse_json(const std::string& s, const std::string& key) {
  try {
    return nlohmann::json::parse(s);
  } catch (const nlohmann::json::exception&) {
    corrupt("__metadata__[\"" + key + "\"] is not valid JSON");
  }
}

int parse_block(const std::string& s) {
  if (s.empty() || s.size() > 4 || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }))
    corrupt("block_size \"" + s + "\" is not an integer in [" + std::to_string(kMinBlock) + ", " +
            std::to_string(kMaxBlock) + "]");
  const int b = std::stoi(s);
  if (b < kMinBlock || b > kMaxBlock)
    corrupt("block_size " + s + " is outside [" + std::to_string(kMinBlock) + ", " +
            std::to_string(kMaxBlock) + "]");
  return b;
}

// A logical shape from the "shapes" metadata: non-negative integers whose product fits.
std::vector<int64_t> parse_shape(const nlohmann::json& j, const std::string& name, uint64_t* numel) {
  if (!j.is_array()) corrupt("shapes[\"" + name + "\"] is not an array");
  std::vector<int64_t> shape;
  uint64_t n = 1;
  for (auto& d : j) {
    if (!d.is_number_unsigned() || d.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      corrupt("shapes[\"" + name + "\"] = " + j.dump() + " must hold non-negative integers");
    if (!mul_ok(n, d.get<uint64_t>(), &n)) corrupt("shapes[\"" + name + "\"] = " + j.dump() + " overflows");
    shape.push_back(d.get<int64_t>());
  }
  *numel = n;
  return shape;
}

const st::TensorView& view(const st::SafetensorsFile& f, const std::string& name, st::DType dt, Kind k) {
  const st::TensorView* v = f.find(name);
  if (!v) corrupt("tensor \"" + name + "\" is listed in the metadata but missing");
  if (v->dtype != dt)
    corrupt("tensor \"" + name + "\" is " + st::dtype_name(v->dtype) + ", codec " + kind_name(k) +
            " stores " + st::dtype_name(dt));
  return *v;
}

// Writes the sent elements of a topk tensor into out (zeros), checking what no encoder writes:
// indices out of their run or not ascending, ranges that are not 0 <= lo <= hi < inf, set
// padding bits. Counts and sizes were checked in pass 1.
void decode_sparse(const uint8_t* codes, const uint8_t* count, const uint8_t* index, const uint8_t* range, Kind kind,
                   int chunk, const std::string& name, std::vector<float>& out) {
  const uint64_t n = out.size();
  const int bits = code_bits(kind), L = levels(kind);
  uint64_t e = 0;  // sent elements so far
  for (uint64_t r = 0, lo_i = 0; lo_i < n; ++r, lo_i += chunk) {
    int32_t c;
    float lo, hi;
    std::memcpy(&c, count + 4 * r, 4);
    std::memcpy(&lo, range + 8 * r, 4);
    std::memcpy(&hi, range + 8 * r + 4, 4);
    if (!(lo >= 0 && lo <= hi && hi <= FLT_MAX))
      corrupt("tensor \"" + name + "\" run " + std::to_string(r) + " has range [" + std::to_string(lo) + ", " +
              std::to_string(hi) + "] (must be finite, 0 <= lo <= hi)");
    const uint64_t len = std::min<uint64_t>(chunk, n - lo_i);
    const double w = (static_cast<double>(hi) - lo) / L;
    int64_t prev = -1;
    for (int32_t k = 0; k < c; ++k, ++e) {
      int16_t i;
      std::memcpy(&i, index + 2 * e, 2);
      if (i <= prev || static_cast<uint64_t>(i) >= len)
        corrupt("tensor \"" + name + "\" run " + std::to_string(r) + " index " + std::to_string(i) +
                (i <= prev ? " is not above the one before it" : " is outside the run"));
      prev = i;
      const int code = (codes[e * bits / 8] >> (e * bits % 8)) & ((1 << bits) - 1);
      const float m = std::min(hi, static_cast<float>(lo + (code % L + 0.5) * w));
      out[lo_i + static_cast<uint64_t>(i)] = code >= L ? -m : m;
    }
  }
  if (const uint64_t used = e * bits; used % 8 && (codes[used / 8] >> (used % 8)) != 0)
    corrupt("tensor \"" + name + "\" has non-zero padding bits after its last code");
}

std::vector<Tensor> decode_body(std::string_view body, uint64_t max_out, Kind* kind_out) {
  const auto f = st::SafetensorsFile::from_buffer(body.data(), body.size(), "update payload body");
  const auto& md = f.metadata();
  if (meta(md, "format") != kFormat)
    corrupt("format \"" + meta(md, "format") + "\" is not supported (this build reads " + kFormat + ")");
  Kind kind;
  try {
    kind = parse_kind(meta(md, "codec"));
  } catch (const UserError&) {
    corrupt("codec \"" + meta(md, "codec") + "\" is unknown (valid: " + kValidKinds + ")");
  }
  const int block = parse_block(meta(md, "block_size"));
  const bool q = quantized(kind);
  if (kind_out) *kind_out = kind;

  const nlohmann::json list = parse_json(meta(md, "tensors"), "tensors");
  if (!list.is_array()) corrupt("__metadata__[\"tensors\"] is not an array of names");
  std::vector<std::string> names;
  std::set<std::string> seen;
  for (auto& e : list) {
    if (!e.is_string()) corrupt("__metadata__[\"tensors\"] holds a non-string");
    if (!seen.insert(e.get<std::string>()).second)
      corrupt("tensor \"" + e.get<std::string>() + "\" is listed twice");
    names.push_back(e.get<std::string>());
  }
  const bool sparse = is_sparse(kind);
  int chunk = 0;
  if (sparse) {
    const std::string& c = meta(md, "topk_chunk");
    if (c.empty() || c.size() > 5 || !std::all_of(c.begin(), c.end(), [](char ch) { return ch >= '0' && ch <= '9'; }) ||
        std::stoi(c) < kMinChunk || std::stoi(c) > kMaxChunk)
      corrupt("topk_chunk \"" + c + "\" is not an integer in [" + std::to_string(kMinChunk) + ", " + std::to_string(kMaxChunk) + "]");
    chunk = std::stoi(c);
  }
  nlohmann::json shapes;
  if (kind == Kind::int4 || sparse) {
    shapes = parse_json(meta(md, "shapes"), "shapes");
    if (!shapes.is_object() || shapes.size() != names.size())
      corrupt("__metadata__[\"shapes\"] is not an object with one shape per listed tensor");
  }

  // Pass 1: validate every tensor's layout and the total output size before allocating.
  struct Plan {
    const st::TensorView* codes = nullptr;
    const st::TensorView* scales = nullptr;
    const st::TensorView *count = nullptr, *index = nullptr, *range = nullptr;  // topk kinds
    std::vector<int64_t> shape;
    uint64_t numel;
  };
  std::vector<Plan> plans;
  std::set<std::string> used;  // body tensors the listed names account for
  uint64_t total = 0;
  for (auto& name : names) {
    Plan p;
    switch (kind) {
      case Kind::fp32: p.codes = &view(f, name, st::DType::F32, kind); break;
      case Kind::bf16: p.codes = &view(f, name, st::DType::BF16, kind); break;
      case Kind::int8: p.codes = &view(f, name, st::DType::I8, kind); break;
      case Kind::int4:
      case Kind::topk_int2:
      case Kind::topk_int4: p.codes = &view(f, name, st::DType::U8, kind); break;
    }
    if (sparse) {
      if (!shapes.contains(name)) corrupt("__metadata__[\"shapes\"] has no entry for \"" + name + "\"");
      p.shape = parse_shape(shapes[name], name, &p.numel);
      const uint64_t runs = num_blocks(p.numel, chunk);
      p.count = &view(f, name + ".count", st::DType::I32, kind);
      p.index = &view(f, name + ".index", st::DType::I16, kind);
      p.range = &view(f, name + ".range", st::DType::F32, kind);
      if (p.count->shape != std::vector<int64_t>{static_cast<int64_t>(runs)} ||
          p.range->shape != std::vector<int64_t>{static_cast<int64_t>(runs), 2})
        corrupt("tensor \"" + name + "\": " + std::to_string(p.numel) + " elements in runs of " + std::to_string(chunk) +
                " need .count [" + std::to_string(runs) + "] and .range [" + std::to_string(runs) + ", 2], not " +
                shape_str(p.count->shape) + " and " + shape_str(p.range->shape));
      uint64_t sent = 0;
      for (uint64_t r = 0; r < runs; ++r) {
        int32_t c;
        std::memcpy(&c, p.count->data + 4 * r, 4);
        const uint64_t len = std::min<uint64_t>(chunk, p.numel - r * chunk);
        if (c < 0 || static_cast<uint64_t>(c) > len)
          corrupt("tensor \"" + name + "\" run " + std::to_string(r) + " sends " + std::to_string(c) + " of its " +
                  std::to_string(len) + " elements");
        sent += static_cast<uint64_t>(c);
      }
      if (p.index->shape.size() != 1 || static_cast<uint64_t>(p.index->shape[0]) != sent ||
          p.codes->shape.size() != 1 || static_cast<uint64_t>(p.codes->shape[0]) != packed_bytes(sent, code_bits(kind)))
        corrupt("tensor \"" + name + "\" sends " + std::to_string(sent) + " elements: .index " + shape_str(p.index->shape) +
                " and codes " + shape_str(p.codes->shape) + " do not match");
    } else if (kind == Kind::int4) {
      if (!shapes.contains(name)) corrupt("__metadata__[\"shapes\"] has no entry for \"" + name + "\"");
      p.shape = parse_shape(shapes[name], name, &p.numel);
      const uint64_t packed = p.numel / 2 + p.numel % 2;
      if (p.codes->shape.size() != 1 || static_cast<uint64_t>(p.codes->shape[0]) != packed)
        corrupt("tensor \"" + name + "\" packs " + shape_str(p.codes->shape) + " bytes, its shape " +
                shapes[name].dump() + " needs [" + std::to_string(packed) + "]");
    } else {
      p.shape = p.codes->shape;
      p.numel = static_cast<uint64_t>(p.codes->numel());  // the parser checked it against the bytes
    }
    if (q) {
      p.scales = &view(f, name + ".scale", st::DType::F32, kind);
      const uint64_t nb = num_blocks(p.numel, block);
      if (p.scales->shape.size() != 1 || static_cast<uint64_t>(p.scales->shape[0]) != nb)
        corrupt("tensor \"" + name + ".scale\" has shape " + shape_str(p.scales->shape) + ", " +
                std::to_string(p.numel) + " elements in blocks of " + std::to_string(block) +
                " need [" + std::to_string(nb) + "]");
    }
    used.insert(name);
    for (auto& sfx : suffixes(kind)) used.insert(name + sfx);
    uint64_t bytes;
    if (!mul_ok(p.numel, sizeof(float), &bytes) || (total += bytes) < bytes)
      too_big("the decoded tensors", UINT64_MAX, max_out);
    plans.push_back(std::move(p));
  }
  for (auto& n : f.names())
    if (!used.count(n)) corrupt("body tensor \"" + n + "\" is not in the metadata's tensor list");
  if (total > max_out) too_big("the decoded tensors", total, max_out);

  // Pass 2: decode, rejecting what no encoder writes (codes out of range, bad scales,
  // non-finite floats), so a corrupt payload never reaches the adapter as numbers.
  std::vector<Tensor> out;
  out.reserve(names.size());
  std::vector<float> scales;
  std::vector<int8_t> codes;
  for (size_t t = 0; t < names.size(); ++t) {
    const Plan& p = plans[t];
    const std::string& name = names[t];
    Tensor o{name, p.shape, std::vector<float>(p.numel)};
    if (q) {
      scales.resize(p.scales->numel());
      copy_bytes(scales.data(), p.scales->data, p.scales->nbytes);
      const float smax = max_scale(qmax(kind));
      for (size_t b = 0; b < scales.size(); ++b)
        if (!(scales[b] >= 0 && scales[b] <= smax))  // also catches NaN
          corrupt("tensor \"" + name + "\" block " + std::to_string(b) + " has scale " +
                  std::to_string(scales[b]) + " (must be finite, >= 0 and at most ~FLT_MAX / " +
                  std::to_string(qmax(kind)) + ")");
    }
    const uint8_t* src = p.codes->data;
    switch (kind) {
      case Kind::fp32:
      case Kind::bf16: {
        if (kind == Kind::fp32) {
          copy_bytes(o.data.data(), src, p.codes->nbytes);
        } else {
          from_bf16(src, p.numel, o.data.data());
        }
        const uint64_t i = first_bad(o.data.data(), p.numel, non_finite);  // bf16 -> f32 keeps inf/nan
        if (i < p.numel) corrupt("tensor \"" + name + "\" element " + std::to_string(i) + " is not finite");
        break;
      }
      case Kind::int8: {
        const int8_t* c = reinterpret_cast<const int8_t*>(src);
        const uint64_t i = first_bad(c, p.numel, [](int8_t v) { return unsigned{v == -128}; });
        if (i < p.numel)
          corrupt("tensor \"" + name + "\" element " + std::to_string(i) + " has int8 code -128 (valid: -127..127)");
        dequantize(c, p.numel, block, scales.data(), o.data.data());
        break;
      }
      case Kind::int4: {
        const uint64_t pairs = p.numel / 2;
        const uint64_t j = first_bad(src, pairs, [](uint8_t b) { return unsigned{(b & 0x0f) == 0 || (b & 0xf0) == 0}; });
        if (j < pairs)
          corrupt("tensor \"" + name + "\" element " + std::to_string(2 * j + ((src[j] & 0x0f) != 0)) +
                  " has int4 nibble 0 (valid: 1..15 = code + 8)");
        if (p.numel % 2) {
          if ((src[pairs] & 0x0f) == 0)
            corrupt("tensor \"" + name + "\" element " + std::to_string(p.numel - 1) + " has int4 nibble 0 (valid: 1..15 = code + 8)");
          if ((src[pairs] >> 4) != 0) corrupt("tensor \"" + name + "\" has a non-zero padding nibble");
        }
        codes.resize(p.numel);
        for (uint64_t k = 0; k < pairs; ++k) {
          codes[2 * k] = static_cast<int8_t>((src[k] & 0x0f) - 8);
          codes[2 * k + 1] = static_cast<int8_t>((src[k] >> 4) - 8);
        }
        if (p.numel % 2) codes[p.numel - 1] = static_cast<int8_t>((src[pairs] & 0x0f) - 8);
        dequantize(codes.data(), p.numel, block, scales.data(), o.data.data());
        break;
      }
      case Kind::topk_int2:
      case Kind::topk_int4:
        decode_sparse(p.codes->data, p.count->data, p.index->data, p.range->data, kind, chunk, name, o.data);
        break;
    }
    out.push_back(std::move(o));
  }
  return out;
}

}  // namespace

namespace {
// Round to nearest even; a finite value that rounds past the largest bf16 is clamped to it
// (still within 2^-8 relative), so bf16 payloads never hold infinities.
uint16_t bf16_bits(float x) {
  uint32_t u = std::bit_cast<uint32_t>(x);
  u += 0x7fffu + ((u >> 16) & 1u);
  uint16_t h = static_cast<uint16_t>(u >> 16);
  if ((h & 0x7f80u) == 0x7f80u) h = static_cast<uint16_t>((h & 0x8000u) | 0x7f7fu);
  return h;
}
float bf16_value(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }
}  // namespace

void to_bf16(const float* x, uint64_t n, void* out) {
  auto* o = static_cast<uint8_t*>(out);
  for (uint64_t i = 0; i < n; ++i) {
    const uint16_t h = bf16_bits(x[i]);
    std::memcpy(o + 2 * i, &h, 2);
  }
}

void from_bf16(const void* in, uint64_t n, float* out) {
  const auto* p = static_cast<const uint8_t*>(in);
  for (uint64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    out[i] = bf16_value(h);
  }
}

float round_bf16(float x) { return bf16_value(bf16_bits(x)); }

Kind parse_kind(const std::string& s) {
  if (s == "fp32") return Kind::fp32;
  if (s == "bf16") return Kind::bf16;
  if (s == "int8") return Kind::int8;
  if (s == "int4") return Kind::int4;
  if (s == "topk_int2") return Kind::topk_int2;
  if (s == "topk_int4") return Kind::topk_int4;
  throw UserError("unknown update codec \"" + s + "\"", std::string("valid codecs: ") + kValidKinds);
}

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::fp32: return "fp32";
    case Kind::bf16: return "bf16";
    case Kind::int8: return "int8";
    case Kind::int4: return "int4";
    case Kind::topk_int2: return "topk_int2";
    case Kind::topk_int4: return "topk_int4";
  }
  BRL_ASSERT(false, "bad codec kind " + std::to_string(static_cast<int>(k)));
}

bool is_sparse(Kind k) { return k == Kind::topk_int2 || k == Kind::topk_int4; }

void validate(const Options& opt) {
  kind_name(opt.kind);
  if (opt.block_size < kMinBlock || opt.block_size > kMaxBlock)
    throw UserError("codec block_size " + std::to_string(opt.block_size) + " is outside [" +
                    std::to_string(kMinBlock) + ", " + std::to_string(kMaxBlock) + "]",
                    "64 or 128 are typical: smaller blocks track outliers better, larger ones "
                    "spend fewer bytes on scales");
  if (opt.zstd_level < 0 || opt.zstd_level > kMaxLevel)
    throw UserError("codec zstd_level " + std::to_string(opt.zstd_level) + " is outside [0, " +
                    std::to_string(kMaxLevel) + "]", "0 stores the payload uncompressed; 3 is zstd's default");
  if (opt.topk_chunk < kMinChunk || opt.topk_chunk > kMaxChunk)
    throw UserError("codec topk_chunk " + std::to_string(opt.topk_chunk) + " is outside [" + std::to_string(kMinChunk) +
                    ", " + std::to_string(kMaxChunk) + "]", "SparseLoCo uses 4096");
  if (!(opt.topk_density > 0 && opt.topk_density <= 1))
    throw UserError("codec topk_density " + std::to_string(opt.topk_density) + " is outside (0, 1]",
                    "the fraction of each run sent; SparseLoCo sends 64 of 4096 (0.015625)");
}

double error_bound(Kind k, double absmax) {
  switch (k) {
    case Kind::fp32: return 0;
    case Kind::bf16: return absmax * kBf16RelativeError;
    case Kind::int8:
    case Kind::int4: return absmax / qmax(k) / 2;
    case Kind::topk_int2:
    case Kind::topk_int4: return absmax / levels(k) / 2;
  }
  BRL_ASSERT(false, "bad codec kind");
}

std::string frame(std::string_view body, int zstd_level) {
  if (zstd_level < 0 || zstd_level > kMaxLevel)
    throw UserError("codec zstd_level " + std::to_string(zstd_level) + " is outside [0, " +
                    std::to_string(kMaxLevel) + "]");
  std::string out(kPrefixSize, '\0');
  std::memcpy(out.data(), kMagic, 4);
  out[4] = static_cast<char>(kFrameVersion);
  const uint64_t n = body.size();
  for (int i = 0; i < 8; ++i) out[8 + i] = static_cast<char>((n >> (8 * i)) & 0xff);
  const std::string sum = sha256_hex(body);
  for (size_t i = 0; i < kChecksumSize; ++i)
    out[16 + i] = static_cast<char>(std::stoi(sum.substr(2 * i, 2), nullptr, 16));
  if (zstd_level > 0) {
    std::string z(ZSTD_compressBound(body.size()), '\0');
    const size_t r = ZSTD_compress(z.data(), z.size(), body.data(), body.size(), zstd_level);
    BRL_ASSERT(!ZSTD_isError(r), std::string("zstd: ") + ZSTD_getErrorName(r));
    if (r < body.size()) {  // incompressible bodies (e.g. random fp32) go out stored
      out[5] = 1;
      out.append(z.data(), r);
      return out;
    }
  }
  out.append(body);
  return out;
}

Result<std::string> unframe(std::string_view bytes, uint64_t max_body_bytes) {
  try {
    std::string storage;
    std::string_view body = unframe_view(bytes, max_body_bytes, storage);
    if (storage.empty()) return std::string(body);
    return storage;
  } catch (const DecodeError& e) {
    return Status(e.code, e.what());
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kInternal, "update payload: out of memory unframing the body");
  }
}

std::string encode(const std::vector<Tensor>& tensors, const Options& opt) {
  validate(opt);
  const bool q = quantized(opt.kind);
  std::set<std::string> stored;  // every name the body will hold, to catch "w" vs "w.scale"
  for (auto& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__")
      throw UserError("codec encode: bad tensor name \"" + t.name + "\"",
                      "names must be non-empty and not \"__metadata__\"");
    bool fresh = stored.insert(t.name).second;
    for (auto& sfx : suffixes(opt.kind)) fresh = stored.insert(t.name + sfx).second && fresh;
    if (!fresh)
      throw UserError("codec encode: tensor name \"" + t.name + "\" is duplicated or collides with the extra " +
                      "entries (<name>.scale, .count, .index, .range) of codec " + kind_name(opt.kind));
  }

  // Owning buffers first, views after, so no reallocation moves what a view points to.
  struct Enc {
    std::string codes, scales;
    Sparse sparse;
  };
  std::vector<Enc> enc(tensors.size());
  nlohmann::json list = nlohmann::json::array(), shapes = nlohmann::json::object();
  for (size_t t = 0; t < tensors.size(); ++t) {
    const Tensor& x = tensors[t];
    uint64_t n = 1;
    for (auto d : x.shape)
      if (d < 0 || !mul_ok(n, static_cast<uint64_t>(d), &n))
        throw UserError("codec encode: tensor \"" + x.name + "\" has bad shape " + shape_str(x.shape));
    if (n != x.data.size())
      throw UserError("codec encode: tensor \"" + x.name + "\" has shape " + shape_str(x.shape) + " (" +
                      std::to_string(n) + " elements) but " + std::to_string(x.data.size()) + " values");
    // int8/int4 find non-finite values while quantizing; the scan for the index runs on failure.
    const auto check_finite = [&] {
      if (uint64_t i = first_bad(x.data.data(), n, non_finite); i < n)
        throw UserError("codec encode: tensor \"" + x.name + "\" element " + std::to_string(i) + " is " +
                            std::to_string(x.data[i]),
                        "a non-finite delta means the training step diverged; it cannot be encoded");
    };
    list.push_back(x.name);
    Enc& e = enc[t];
    switch (opt.kind) {
      case Kind::fp32:  // the view points at x.data
        check_finite();
        break;
      case Kind::bf16: {
        check_finite();
        e.codes.resize(2 * n);
        to_bf16(x.data.data(), n, e.codes.data());
        break;
      }
      case Kind::int8:
      case Kind::int4: {
        const uint64_t nb = num_blocks(n, opt.block_size);
        e.scales.resize(nb * sizeof(float));
        std::vector<int8_t> codes(n);
        std::vector<float> sc(nb);
        if (!quantize(x.data.data(), n, opt.block_size, qmax(opt.kind), codes.data(), sc.data())) check_finite();
        copy_bytes(e.scales.data(), sc.data(), e.scales.size());
        if (opt.kind == Kind::int8) {
          e.codes.assign(reinterpret_cast<const char*>(codes.data()), n);
        } else {
          e.codes.resize(n / 2 + n % 2);
          for (uint64_t k = 0; k < n / 2; ++k)
            e.codes[k] = static_cast<char>((codes[2 * k] + 8) | ((codes[2 * k + 1] + 8) << 4));
          if (n % 2) e.codes[n / 2] = static_cast<char>(codes[n - 1] + 8);  // spare high nibble 0
          shapes[x.name] = x.shape;
        }
        break;
      }
      case Kind::topk_int2:
      case Kind::topk_int4:
        check_finite();
        e.sparse = sparsify(x.data.data(), n, opt.kind, opt.topk_chunk, opt.topk_density);
        e.codes = pack_codes(e.sparse.codes, code_bits(opt.kind));
        shapes[x.name] = x.shape;
        break;
    }
  }

  std::vector<st::TensorData> tds;
  for (size_t t = 0; t < tensors.size(); ++t) {
    const Tensor& x = tensors[t];
    const Enc& e = enc[t];
    switch (opt.kind) {
      case Kind::fp32:
        tds.push_back({x.name, st::DType::F32, x.shape, x.data.data(), x.data.size() * sizeof(float)});
        break;
      case Kind::bf16:
        tds.push_back({x.name, st::DType::BF16, x.shape, e.codes.data(), e.codes.size()});
        break;
      case Kind::int8:
        tds.push_back({x.name, st::DType::I8, x.shape, e.codes.data(), e.codes.size()});
        break;
      case Kind::int4:
        tds.push_back({x.name, st::DType::U8, {static_cast<int64_t>(e.codes.size())}, e.codes.data(),
                       e.codes.size()});
        break;
      case Kind::topk_int2:
      case Kind::topk_int4: {
        const auto& sp = e.sparse;
        const int64_t runs = static_cast<int64_t>(sp.count.size());
        tds.push_back({x.name, st::DType::U8, {static_cast<int64_t>(e.codes.size())}, e.codes.data(), e.codes.size()});
        tds.push_back({x.name + ".count", st::DType::I32, {runs}, sp.count.data(), sp.count.size() * 4});
        tds.push_back({x.name + ".index", st::DType::I16, {static_cast<int64_t>(sp.index.size())}, sp.index.data(),
                       sp.index.size() * 2});
        tds.push_back({x.name + ".range", st::DType::F32, {runs, 2}, sp.range.data(), sp.range.size() * 4});
        break;
      }
    }
    if (q)
      tds.push_back({x.name + ".scale", st::DType::F32,
                     {static_cast<int64_t>(e.scales.size() / sizeof(float))}, e.scales.data(),
                     e.scales.size()});
  }
  std::map<std::string, std::string> md{{"format", kFormat},
                                        {"codec", kind_name(opt.kind)},
                                        {"block_size", std::to_string(opt.block_size)},
                                        {"tensors", list.dump()}};
  if (opt.kind == Kind::int4 || is_sparse(opt.kind)) md["shapes"] = shapes.dump();
  if (is_sparse(opt.kind)) md["topk_chunk"] = std::to_string(opt.topk_chunk);
  return frame(st::serialize_safetensors(tds, md), opt.zstd_level);
}

Result<std::vector<Tensor>> decode(std::string_view bytes, uint64_t max_decoded_bytes, Kind* kind) {
  try {
    std::string storage;
    return decode_body(unframe_view(bytes, max_decoded_bytes, storage), max_decoded_bytes, kind);
  } catch (const DecodeError& e) {
    return Status(e.code, e.what());
  } catch (const UserError& e) {  // the safetensors parser names what is wrong
    return Status(StatusCode::kCorrupt, std::string("update payload: ") + e.what());
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kInternal, "update payload: out of memory while decoding");
  } catch (const std::exception& e) {  // e.g. a JSON type error in a forged header
    return Status(StatusCode::kCorrupt, std::string("update payload: ") + e.what());
  }
}

std::string ErrorFeedback::encode(const std::vector<Tensor>& delta, const Options& opt) {
  std::vector<Tensor> corrected = delta;
  for (auto& t : corrected) {
    auto it = residual_.find(t.name);
    if (it == residual_.end()) continue;
    if (it->second.size() != t.data.size())
      throw UserError("error feedback: tensor \"" + t.name + "\" has " + std::to_string(t.data.size()) +
                          " elements, its stored residual " + std::to_string(it->second.size()),
                      "the adapter shape changed; call reset() first");
    for (size_t i = 0; i < t.data.size(); ++i) t.data[i] += it->second[i];
  }
  std::string bytes = codec::encode(corrected, opt);
  auto decoded = codec::decode(bytes);
  BRL_ASSERT(decoded.is_ok(), "a payload we just encoded does not decode: " + decoded.status().to_string());
  for (size_t t = 0; t < corrected.size(); ++t) {
    std::vector<float>& r = corrected[t].data;  // becomes the residual in place
    const std::vector<float>& d = decoded->at(t).data;
    for (size_t i = 0; i < r.size(); ++i) r[i] -= d[i];
  }
  for (auto& t : corrected) residual_[t.name] = std::move(t.data);
  return bytes;
}

double ErrorFeedback::residual_norm() const {
  double s = 0;
  for (auto& [name, r] : residual_)
    for (float v : r) s += static_cast<double>(v) * v;
  return std::sqrt(s);
}

}  // namespace brl::codec
