// Update payload codecs: the kinds, the safetensors body (encode, decode). The frame, the
// quantizers, bf16 and error feedback are in files of their own (codec/internal.h).
#include "codec/codec.h"

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

#include "codec/internal.h"
#include "util/error.h"
#include "util/hash.h"
#include "util/safetensors.h"

namespace brl::codec {

static_assert(std::endian::native == std::endian::little, "payload buffers are little-endian and copied as-is");

namespace detail {

std::vector<std::string> suffixes(Kind k) {
  if (quantized(k)) return {".scale"};
  return {};
}
[[noreturn]] void corrupt(const std::string& what) {
  throw DecodeError(StatusCode::kCorrupt, "update payload: " + what);
}
[[noreturn]] void too_big(const std::string& what, uint64_t n, uint64_t limit) {
  throw DecodeError(StatusCode::kInvalidArgument, "update payload: " + what + " is " + std::to_string(n) +
                                                      " bytes, over the max_decoded_bytes limit of " +
                                                      std::to_string(limit));
}

}  // namespace detail

using namespace detail;

namespace {

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
    corrupt("block_size " + s + " is outside [" + std::to_string(kMinBlock) + ", " + std::to_string(kMaxBlock) + "]");
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
    corrupt("tensor \"" + name + "\" is " + st::dtype_name(v->dtype) + ", codec " + kind_name(k) + " stores " +
            st::dtype_name(dt));
  return *v;
}

// Writes the sent elements of a topk tensor into out (zeros), checking what no encoder writes:
// ranges that are not 0 <= lo <= hi < inf, set padding bits. The mask's size, its bits past the
// last element and the codes' size were checked in pass 1.
void decode_sparse(const uint8_t* codes, const uint8_t* mask, const uint8_t* range, Kind kind, int chunk,
                   const std::string& name, std::vector<float>& out) {
  const uint64_t n = out.size();
  const int bits = code_bits(kind), L = levels(kind);
  uint64_t e = 0;  // sent elements so far
  for (uint64_t r = 0, lo_i = 0; lo_i < n; ++r, lo_i += chunk) {
    float lo, hi;
    std::memcpy(&lo, range + 8 * r, 4);
    std::memcpy(&hi, range + 8 * r + 4, 4);
    if (!(lo >= 0 && lo <= hi && hi <= FLT_MAX))
      corrupt("tensor \"" + name + "\" run " + std::to_string(r) + " has range [" + std::to_string(lo) + ", " +
              std::to_string(hi) + "] (must be finite, 0 <= lo <= hi)");
    const uint64_t end = std::min<uint64_t>(lo_i + chunk, n);
    const double w = (static_cast<double>(hi) - lo) / L;
    for (uint64_t i = lo_i; i < end; ++i) {
      const uint8_t mask_byte = mask[i / 8];
      if (mask_byte == 0 && i % 8 == 0 && i + 8 <= end) {  // eight unsent elements at once
        i += 7;
        continue;
      }
      if (!((mask_byte >> (i % 8)) & 1)) continue;
      const int code = (codes[e * bits / 8] >> (e * bits % 8)) & ((1 << bits) - 1);
      const float m = std::min(hi, static_cast<float>(lo + (code % L + 0.5) * w));
      out[i] = code >= L ? -m : m;
      ++e;
    }
  }
  if (const uint64_t used = e * bits; used % 8 && (codes[used / 8] >> (used % 8)) != 0)
    corrupt("tensor \"" + name + "\" has non-zero padding bits after its last code");
}

std::vector<Tensor> decode_body(std::string_view body, uint64_t max_out, Kind* kind_out) {
  const auto f = st::SafetensorsFile::from_buffer(body.data(), body.size(), "update payload body");
  const auto& md = f.metadata();
  Kind kind;
  try {
    kind = parse_kind(meta(md, "codec"));
  } catch (const UserError&) {
    corrupt("codec \"" + meta(md, "codec") + "\" is unknown (valid: " + kValidKinds + ")");
  }
  if (const std::string want = is_sparse(kind) ? kSparseFormat : kFormat; meta(md, "format") != want)
    corrupt("format \"" + meta(md, "format") + "\" is not supported for codec " + kind_name(kind) +
            " (this build reads " + want +
            (is_sparse(kind) ? "; formats 1 and 2 came from older builds: update the worker" : "") + ")");
  const int block = parse_block(meta(md, "block_size"));
  const bool q = quantized(kind);
  if (kind_out) *kind_out = kind;

  const nlohmann::json list = parse_json(meta(md, "tensors"), "tensors");
  if (!list.is_array()) corrupt("__metadata__[\"tensors\"] is not an array of names");
  std::vector<std::string> names;
  std::set<std::string> seen;
  for (auto& e : list) {
    if (!e.is_string()) corrupt("__metadata__[\"tensors\"] holds a non-string");
    if (!seen.insert(e.get<std::string>()).second) corrupt("tensor \"" + e.get<std::string>() + "\" is listed twice");
    names.push_back(e.get<std::string>());
  }
  const bool sparse = is_sparse(kind);
  int chunk = 0;
  if (sparse) {
    const std::string& c = meta(md, "topk_chunk");
    if (c.empty() || c.size() > 5 || !std::all_of(c.begin(), c.end(), [](char ch) { return ch >= '0' && ch <= '9'; }) ||
        std::stoi(c) < kMinChunk || std::stoi(c) > kMaxChunk)
      corrupt("topk_chunk \"" + c + "\" is not an integer in [" + std::to_string(kMinChunk) + ", " +
              std::to_string(kMaxChunk) + "]");
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
    uint64_t mask_at = 0, code_at = 0, run_at = 0;  // topk kinds: this tensor's slices of the shared arrays
    std::vector<int64_t> shape;
    uint64_t numel;
  };
  std::vector<Plan> plans;
  std::set<std::string> used;  // body tensors the listed names account for
  uint64_t total = 0;
  // topk kinds: the three arrays every tensor has a slice of, and how far the slices reach.
  const st::TensorView *codes_all = nullptr, *mask_all = nullptr, *range_all = nullptr;
  uint64_t code_len = 0, mask_len = 0, run_len = 0;  // their sizes: bytes, bytes, runs
  uint64_t mask_end = 0, code_end = 0, run_end = 0;
  if (sparse) {
    codes_all = &view(f, kSparseCodes, st::DType::U8, kind);
    mask_all = &view(f, kSparseMask, st::DType::U8, kind);
    range_all = &view(f, kSparseRange, st::DType::F32, kind);
    if (codes_all->shape.size() != 1 || mask_all->shape.size() != 1 || range_all->shape.size() != 2 ||
        range_all->shape[1] != 2)
      corrupt(std::string("topk arrays must be codes [bytes], mask [bytes] and range [runs, 2], not ") +
              shape_str(codes_all->shape) + ", " + shape_str(mask_all->shape) + " and " + shape_str(range_all->shape));
    code_len = static_cast<uint64_t>(codes_all->shape[0]);
    mask_len = static_cast<uint64_t>(mask_all->shape[0]);
    run_len = static_cast<uint64_t>(range_all->shape[0]);
    used.insert({kSparseCodes, kSparseMask, kSparseRange});
  }
  for (auto& name : names) {
    Plan p;
    switch (kind) {
      case Kind::fp32: p.codes = &view(f, name, st::DType::F32, kind); break;
      case Kind::bf16: p.codes = &view(f, name, st::DType::BF16, kind); break;
      case Kind::int8: p.codes = &view(f, name, st::DType::I8, kind); break;
      case Kind::int4: p.codes = &view(f, name, st::DType::U8, kind); break;
      case Kind::topk_int2:
      case Kind::topk_int4: break;
    }
    if (sparse) {
      if (!shapes.contains(name)) corrupt("__metadata__[\"shapes\"] has no entry for \"" + name + "\"");
      p.shape = parse_shape(shapes[name], name, &p.numel);
      // Each slice is checked against what is left of its array, so no sum can overflow.
      const uint64_t mask_bytes = packed_bytes(p.numel, 1), runs = num_blocks(p.numel, chunk);
      if (mask_bytes > mask_len - mask_end || runs > run_len - run_end)
        corrupt("tensor \"" + name + "\": " + std::to_string(p.numel) + " elements in runs of " +
                std::to_string(chunk) + " need " + std::to_string(mask_bytes) + " mask bytes and " +
                std::to_string(runs) + " ranges, past the end of mask " + shape_str(mask_all->shape) + " and range " +
                shape_str(range_all->shape));
      p.mask_at = mask_end, p.run_at = run_end, p.code_at = code_end;
      mask_end += mask_bytes, run_end += runs;
      const uint8_t* m = mask_all->data + p.mask_at;
      if (p.numel % 8 && (m[p.numel / 8] >> (p.numel % 8)) != 0)
        corrupt("tensor \"" + name + "\" has mask bits set past its " + std::to_string(p.numel) + " elements");
      uint64_t sent = 0;
      for (uint64_t b = 0; b < mask_bytes; ++b) sent += static_cast<uint64_t>(std::popcount(m[b]));
      const uint64_t code_bytes = packed_bytes(sent, code_bits(kind));
      if (code_bytes > code_len - code_end)
        corrupt("tensor \"" + name + "\" sends " + std::to_string(sent) + " elements (its mask): its " +
                std::to_string(code_bytes) + " code bytes run past the end of codes " + shape_str(codes_all->shape));
      code_end += code_bytes;
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
                std::to_string(p.numel) + " elements in blocks of " + std::to_string(block) + " need [" +
                std::to_string(nb) + "]");
    }
    if (!sparse) used.insert(name);  // topk names are metadata only
    for (auto& sfx : suffixes(kind)) used.insert(name + sfx);
    uint64_t bytes;
    if (!mul_ok(p.numel, sizeof(float), &bytes) || (total += bytes) < bytes)
      too_big("the decoded tensors", UINT64_MAX, max_out);
    plans.push_back(std::move(p));
  }
  if (sparse && (mask_end != mask_len || code_end != code_len || run_end != run_len))
    corrupt("the listed tensors use " + std::to_string(code_end) + " code bytes, " + std::to_string(mask_end) +
            " mask bytes and " + std::to_string(run_end) + " ranges; the body holds codes " +
            shape_str(codes_all->shape) + ", mask " + shape_str(mask_all->shape) + ", range " +
            shape_str(range_all->shape));
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
          corrupt("tensor \"" + name + "\" block " + std::to_string(b) + " has scale " + std::to_string(scales[b]) +
                  " (must be finite, >= 0 and at most ~FLT_MAX / " + std::to_string(qmax(kind)) + ")");
    }
    const uint8_t* src = sparse ? nullptr : p.codes->data;
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
        const uint64_t j =
            first_bad(src, pairs, [](uint8_t b) { return unsigned{(b & 0x0f) == 0 || (b & 0xf0) == 0}; });
        if (j < pairs)
          corrupt("tensor \"" + name + "\" element " + std::to_string(2 * j + ((src[j] & 0x0f) != 0)) +
                  " has int4 nibble 0 (valid: 1..15 = code + 8)");
        if (p.numel % 2) {
          if ((src[pairs] & 0x0f) == 0)
            corrupt("tensor \"" + name + "\" element " + std::to_string(p.numel - 1) +
                    " has int4 nibble 0 (valid: 1..15 = code + 8)");
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
        decode_sparse(codes_all->data + p.code_at, mask_all->data + p.mask_at, range_all->data + 8 * p.run_at, kind,
                      chunk, name, o.data);
        break;
    }
    out.push_back(std::move(o));
  }
  return out;
}

}  // namespace

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
    throw UserError("codec block_size " + std::to_string(opt.block_size) + " is outside [" + std::to_string(kMinBlock) +
                        ", " + std::to_string(kMaxBlock) + "]",
                    "64 or 128 are typical: smaller blocks track outliers better, larger ones "
                    "spend fewer bytes on scales");
  if (opt.zstd_level < 0 || opt.zstd_level > kMaxLevel)
    throw UserError(
        "codec zstd_level " + std::to_string(opt.zstd_level) + " is outside [0, " + std::to_string(kMaxLevel) + "]",
        "0 stores the payload uncompressed; 3 is zstd's default");
  if (opt.topk_chunk < kMinChunk || opt.topk_chunk > kMaxChunk)
    throw UserError("codec topk_chunk " + std::to_string(opt.topk_chunk) + " is outside [" + std::to_string(kMinChunk) +
                        ", " + std::to_string(kMaxChunk) + "]",
                    "SparseLoCo uses 4096");
  if (!(opt.topk_density > 0 && opt.topk_density <= 1))
    throw UserError("codec topk_density " + std::to_string(opt.topk_density) + " is outside (0, 1]",
                    "the fraction of each run sent; SparseLoCo sends 64 of 4096 (0.015625)");
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
                      "entries (<name>.scale) of codec " + kind_name(opt.kind));
  }

  // Owning buffers first, views after, so no reallocation moves what a view points to.
  struct Enc {
    std::string codes, scales;
  };
  std::vector<Enc> enc(tensors.size());
  std::string all_codes, all_mask;  // topk kinds: every tensor's slice, in order
  std::vector<float> all_range;
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
        throw UserError(
            "codec encode: tensor \"" + x.name + "\" element " + std::to_string(i) + " is " + std::to_string(x.data[i]),
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
      case Kind::topk_int4: {
        check_finite();
        const Sparse sp = sparsify(x.data.data(), n, opt.kind, opt.topk_chunk, opt.topk_density);
        all_codes += pack_codes(sp.codes, code_bits(opt.kind));
        all_mask += sp.mask;
        all_range.insert(all_range.end(), sp.range.begin(), sp.range.end());
        shapes[x.name] = x.shape;
        break;
      }
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
      case Kind::bf16: tds.push_back({x.name, st::DType::BF16, x.shape, e.codes.data(), e.codes.size()}); break;
      case Kind::int8: tds.push_back({x.name, st::DType::I8, x.shape, e.codes.data(), e.codes.size()}); break;
      case Kind::int4:
        tds.push_back({x.name, st::DType::U8, {static_cast<int64_t>(e.codes.size())}, e.codes.data(), e.codes.size()});
        break;
      case Kind::topk_int2:
      case Kind::topk_int4: break;  // below
    }
    if (q)
      tds.push_back({x.name + ".scale",
                     st::DType::F32,
                     {static_cast<int64_t>(e.scales.size() / sizeof(float))},
                     e.scales.data(),
                     e.scales.size()});
  }
  if (is_sparse(opt.kind)) {
    tds.push_back(
        {kSparseCodes, st::DType::U8, {static_cast<int64_t>(all_codes.size())}, all_codes.data(), all_codes.size()});
    tds.push_back(
        {kSparseMask, st::DType::U8, {static_cast<int64_t>(all_mask.size())}, all_mask.data(), all_mask.size()});
    tds.push_back({kSparseRange,
                   st::DType::F32,
                   {static_cast<int64_t>(all_range.size() / 2), 2},
                   all_range.data(),
                   all_range.size() * sizeof(float)});
  }
  std::map<std::string, std::string> md{{"format", is_sparse(opt.kind) ? kSparseFormat : kFormat},
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

}  // namespace brl::codec
