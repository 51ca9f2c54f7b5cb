// The project's own safetensors reader and writer, free of torch (raw bytes + dtype + shape),
// so that the model loader, the update decoder and the fuzzers share one validated parser.
//
// Format: u64 little-endian header length N, N bytes of JSON
//   {name: {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}}
// then the data buffer; offsets are relative to it, must tile it without holes or overlaps,
// and each tensor's byte length must equal numel * dtype size. The reader memory-maps the
// file and returns zero-copy views; it never reads past the end of the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace brl::st {

enum class DType { F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL };

size_t dtype_size(DType d);
const char* dtype_name(DType d);
std::optional<DType> dtype_from_name(std::string_view name);

// A view of one tensor's bytes inside a mapped file or caller-owned buffer.
struct TensorView {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  size_t nbytes = 0;
  int64_t numel() const;
};

// A parsed safetensors file or buffer. Views stay valid as long as this object (or a copy of
// it: the mapping is shared) lives; for from_buffer the caller keeps the buffer alive.
class SafetensorsFile {
 public:
  // Memory-maps `path`. Throws UserError naming the file and what is wrong.
  static SafetensorsFile open(const std::string& path);
  // Parses bytes in memory (e.g. a downloaded update payload); `label` names it in errors.
  static SafetensorsFile from_buffer(const void* data, size_t size, const std::string& label);

  const std::string& label() const { return label_; }
  // Tensor names in data-offset order.
  const std::vector<std::string>& names() const { return names_; }
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  const TensorView* find(const std::string& name) const;
  // Throws UserError naming the file and the tensor when absent.
  const TensorView& get(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  void parse(const uint8_t* data, size_t size);
  std::string label_;
  std::shared_ptr<void> mapping_;  // munmap on last release; null for from_buffer
  std::vector<std::string> names_;
  std::vector<TensorView> views_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// One tensor to write: bytes the caller keeps alive until the write returns.
struct TensorData {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t nbytes = 0;
};

// Serializes into memory (update payloads, tests).
std::string serialize_safetensors(const std::vector<TensorData>& tensors,
                                  const std::map<std::string, std::string>& metadata = {});
// Streams to `path` through a temporary file in the same folder, fsync, then rename, so a
// reader never sees half a file. Throws UserError on I/O failure or invalid input.
void write_safetensors(const std::string& path, const std::vector<TensorData>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace brl::st
