// Update payload codecs: how a worker's LoRA delta travels to the proxy. Torch-free, so the
// proxy and the fuzzers link it cheaply.
//
// Codecs: fp32 (exact), bf16 (round to nearest even), int8 and int4 (symmetric blockwise
// absmax: each run of block_size consecutive elements of the flattened tensor gets the F32
// scale absmax/127 resp. absmax/7 and codes round(x / scale), so |error| <= scale / 2), and
// the sparse topk_int2 / topk_int4 (SparseLoCo's chunked top-k): each run of topk_chunk
// elements sends only its k = ceil(topk_density * run length) largest in magnitude (ties: the
// lower index; zeros are never sent), as a bit in a mask and a 2- or 4-bit code: a sign bit and a magnitude
// level j of L = 2 resp. 8 uniform levels between the smallest (lo) and largest (hi) sent
// magnitude of the run, decoded as lo + (j + 1/2)(hi - lo) / L (|error| <= (hi - lo) / 2L);
// the rest decode as 0. With error feedback (below) what is not sent is sent later.
//
// Wire format (self-describing: the proxy decodes any codec without being told which):
//   prefix (24 bytes): "BRLC", u8 frame version (1), u8 compression (0 stored, 1 zstd),
//     2 zero bytes, u64 LE body length, first 8 bytes of sha256(body)
//   then the body, zstd-compressed or stored: a safetensors buffer holding per tensor
//     <name>        the codes: F32 (fp32), BF16 (bf16), I8 in [-127, 127] (int8),
//                   U8 (int4: two codes per byte, element 2i in the low nibble, stored as
//                   code + 8 in 1..15; the spare high nibble of an odd count is 0)
//     <name>.scale  F32 per-block scales [ceil(numel / block_size)] (int8, int4 only)
//   topk kinds instead three arrays, each the tensors' slices in list order:
//     mask  U8 per tensor ceil(numel / 8) bytes, bit i % 8 of byte i / 8 (from the low bit) set
//           when element i is sent, bits past the last element 0 (zstd takes a mask at density
//           1/8 to ~4.7 bits a sent element);
//     codes U8 per tensor the codes of its sent elements in element order, packed 4 (int2) or 2
//           (int4) per byte from the low bits, the spare high bits of its last byte 0;
//     range F32 [runs, 2] per run of each tensor lo, hi.
//   and __metadata__ {"format": "1" ("3" for topk kinds), "codec": "int4", "block_size": "64",
//     "tensors": JSON array of the names in order, "shapes": JSON object name -> logical
//     shape (int4 and topk kinds, where packing changes the stored shape), "topk_chunk"
//     (topk kinds)}.
// The checksum makes every corruption of the prefix or body a decode error rather than a
// silently different delta.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "util/status.h"

namespace brl::codec {

struct Tensor {
  std::string name;
  std::vector<int64_t> shape;  // row-major; data.size() == product of shape (1 for [])
  std::vector<float> data;
};

enum class Kind { fp32, bf16, int8, int4, topk_int2, topk_int4 };
bool is_sparse(Kind k);

// n floats to bfloat16 (2 bytes each, little-endian, any alignment), rounded to nearest even
// (a finite value beyond the largest bf16 clamps to it, so a finite input never becomes
// infinite), and back (exact). round_bf16(x) = x there and back.
void to_bf16(const float* x, uint64_t n, void* out);
void from_bf16(const void* in, uint64_t n, float* out);
float round_bf16(float x);

// "fp32" | "bf16" | "int8" | "int4" | "topk_int2" | "topk_int4"; throws UserError naming the
// bad value and the valid ones.
Kind parse_kind(const std::string& s);
const char* kind_name(Kind k);

struct Options {
  Kind kind = Kind::int8;
  int block_size = 64;  // elements per scale, 8 .. 4096 (int8/int4 only; recorded for all)
  int zstd_level = 3;   // 0 = stored uncompressed, 1 .. 19 = zstd level
  // topk kinds: elements per run (16 .. 32768) and the fraction of each run sent, (0, 1]
  // (SparseLoCo: 64 of 4096).
  int topk_chunk = 4096;
  double topk_density = 1.0 / 64;
};
// Throws UserError naming the bad field and its valid range.
void validate(const Options& opt);

// Encodes the tensors. Throws UserError for bad options, empty/duplicate/colliding names
// (e.g. "w" and "w.scale" under int8), shape/data size mismatches and non-finite values
// (naming the tensor and the element).
std::string encode(const std::vector<Tensor>& tensors, const Options& opt);

// Decodes any codec. Never crashes or reads out of bounds on hostile input: truncation,
// bit flips, wrong sizes, absurd shapes, out-of-range codes, non-finite or negative scales
// give kCorrupt naming what is wrong. Payloads whose decompressed body or decoded floats
// would exceed max_decoded_bytes give kInvalidArgument before anything that large is
// allocated.
// kind (optional): set to the payload's codec (what its body says) on success.
Result<std::vector<Tensor>> decode(std::string_view bytes, uint64_t max_decoded_bytes = 1ull << 32,
                                   Kind* kind = nullptr);

// The container layer alone, for tools and tests that craft bodies: frame() wraps a body
// (zstd_level 0 = stored) in the prefix; unframe() checks and strips it.
std::string frame(std::string_view body, int zstd_level);
Result<std::string> unframe(std::string_view bytes, uint64_t max_body_bytes = 1ull << 32);

// Worst-case |x - decoded| for an element of a block whose absmax is m, in exact arithmetic:
// fp32 0, bf16 m * 2^-8 (bf16 keeps 8 significant bits, so per element |x| * 2^-8 for
// normal numbers), int8 m / 127 / 2, int4 m / 7 / 2; topk_int2 m / 4, topk_int4 m / 16 for the
// elements a run sends (hi - lo <= m; the others are not bounded by m: they are dropped, and
// error feedback carries them). Float rounding of the scale and the
// product adds a few ulps of m on top (and blocks with m below ~1e-36, whose scale is
// subnormal, can be off by ~1e-43 absolute).
double error_bound(Kind k, double absmax);
constexpr double kBf16RelativeError = 1.0 / 256;

// Worker-side error feedback: the part of each delta the codec lost is kept per tensor name
// and added to the next delta of that name, so the sum of decoded deltas tracks the sum of
// true deltas to within one round's quantization error instead of drifting.
class ErrorFeedback {
 public:
  // Encodes delta + stored residual, decodes it, and stores (delta + residual) - decoded as
  // the new residual. Returns the payload; `sent`, if given, receives the decoded tensors (what
  // a reader of the payload gets). On a throw (bad input) the state is unchanged.
  // Throws UserError when a tensor's element count differs from its stored residual's.
  std::string encode(const std::vector<Tensor>& delta, const Options& opt, std::vector<Tensor>* sent = nullptr);
  void reset() { residual_.clear(); }
  // L2 norm of all stored residuals.
  double residual_norm() const;
  const std::map<std::string, std::vector<float>>& residuals() const { return residual_; }

 private:
  std::map<std::string, std::vector<float>> residual_;
};

}  // namespace brl::codec
