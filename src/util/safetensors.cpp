// safetensors reader (mmap + validated header) and writer (temp file + rename).
#include "util/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "util/error.h"

namespace brl::st {

namespace {
struct DTypeInfo {
  DType d;
  const char* name;
  size_t size;
};
constexpr DTypeInfo kDTypes[] = {
    {DType::F64, "F64", 8}, {DType::F32, "F32", 4},   {DType::F16, "F16", 2}, {DType::BF16, "BF16", 2},
    {DType::I64, "I64", 8}, {DType::I32, "I32", 4},   {DType::I16, "I16", 2}, {DType::I8, "I8", 1},
    {DType::U8, "U8", 1},   {DType::BOOL, "BOOL", 1},
};
// The reference implementation refuses headers over 100 MB; so do we (a corrupt length
// field must not make us allocate gigabytes).
constexpr uint64_t kMaxHeader = 100ull << 20;

std::string supported_dtypes() {
  std::string s;
  for (auto& i : kDTypes) s += (s.empty() ? "" : ", ") + std::string(i.name);
  return s;
}

[[noreturn]] void fail(const std::string& label, const std::string& what, const std::string& hint = "") {
  throw UserError("safetensors " + label + ": " + what,
                  hint.empty() ? "the file is not a valid safetensors file (truncated or corrupt?)" : hint);
}

// a * b, or nullopt on overflow.
std::optional<uint64_t> mul_checked(uint64_t a, uint64_t b) {
  if (a != 0 && b > UINT64_MAX / a) return std::nullopt;
  return a * b;
}
}  // namespace

size_t dtype_size(DType d) {
  for (auto& i : kDTypes)
    if (i.d == d) return i.size;
  BRL_ASSERT(false, "bad dtype");
}
const char* dtype_name(DType d) {
  for (auto& i : kDTypes)
    if (i.d == d) return i.name;
  BRL_ASSERT(false, "bad dtype");
}
std::optional<DType> dtype_from_name(std::string_view name) {
  for (auto& i : kDTypes)
    if (name == i.name) return i.d;
  return std::nullopt;
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (auto s : shape) n *= s;
  return n;
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw UserError("cannot open safetensors file " + path + ": " + std::strerror(errno),
                    "check the path and its permissions");
  struct stat sb {};
  if (fstat(fd, &sb) != 0) {
    int e = errno;
    ::close(fd);
    throw UserError("cannot stat " + path + ": " + std::strerror(e));
  }
  size_t size = static_cast<size_t>(sb.st_size);
  SafetensorsFile f;
  f.label_ = path;
  void* p = nullptr;
  if (size > 0) {
    p = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      throw UserError("cannot mmap " + path + ": " + std::strerror(e));
    }
  }
  ::close(fd);  // the mapping stays valid without the descriptor
  if (p) f.mapping_ = std::shared_ptr<void>(p, [size](void* q) { munmap(q, size); });
  f.parse(static_cast<const uint8_t*>(p), size);
  return f;
}

SafetensorsFile SafetensorsFile::from_buffer(const void* data, size_t size, const std::string& label) {
  SafetensorsFile f;
  f.label_ = label;
  f.parse(static_cast<const uint8_t*>(data), size);
  return f;
}

void SafetensorsFile::parse(const uint8_t* data, size_t size) {
  if (size < 8) fail(label_, "file is " + std::to_string(size) + " bytes, shorter than the 8-byte header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | data[i];  // little-endian regardless of host
  if (n > kMaxHeader) fail(label_, "header length " + std::to_string(n) + " exceeds the 100 MB limit");
  if (n > size - 8)
    fail(label_,
         "header length " + std::to_string(n) + " runs past the end of the file (" + std::to_string(size) + " bytes)");
  const char* hp = reinterpret_cast<const char*>(data + 8);
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(hp, hp + n);
  } catch (const nlohmann::json::exception& e) {
    fail(label_, std::string("header is not valid JSON: ") + e.what());
  }
  if (!header.is_object()) fail(label_, "header is not a JSON object");
  const uint8_t* buf = data + 8 + n;
  const uint64_t buf_size = size - 8 - n;

  struct Entry {
    uint64_t begin, end;
    size_t idx;
  };
  std::vector<Entry> entries;
  for (auto& [name, v] : header.items()) {
    if (name == "__metadata__") {
      if (!v.is_object()) fail(label_, "__metadata__ is not an object of strings");
      for (auto& [k, mv] : v.items()) {
        if (!mv.is_string()) fail(label_, "__metadata__[\"" + k + "\"] is not a string");
        metadata_[k] = mv.get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor \"" + name + "\"";
    if (!v.is_object()) fail(label_, where + ": entry is not an object");
    if (!v.contains("dtype") || !v["dtype"].is_string()) fail(label_, where + ": missing string field \"dtype\"");
    auto dt = dtype_from_name(v["dtype"].get<std::string>());
    if (!dt)
      fail(label_, where + ": unsupported dtype \"" + v["dtype"].get<std::string>() + "\"",
           "supported dtypes: " + supported_dtypes());
    if (!v.contains("shape") || !v["shape"].is_array()) fail(label_, where + ": missing array field \"shape\"");
    TensorView tv;
    tv.name = name;
    tv.dtype = *dt;
    uint64_t numel = 1;
    for (auto& d : v["shape"]) {
      if (!d.is_number_unsigned() && !(d.is_number_integer() && d.get<int64_t>() >= 0))
        fail(label_, where + ": shape " + v["shape"].dump() + " must hold non-negative integers");
      uint64_t dim = d.get<uint64_t>();
      auto m = mul_checked(numel, dim);
      if (!m || dim > INT64_MAX) fail(label_, where + ": shape " + v["shape"].dump() + " overflows");
      numel = *m;
      tv.shape.push_back(static_cast<int64_t>(dim));
    }
    const nlohmann::json off = v.contains("data_offsets") ? v["data_offsets"] : nlohmann::json();
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      fail(label_, where + ": \"data_offsets\" must be [begin, end] with non-negative integers");
    uint64_t b = off[0].get<uint64_t>(), e = off[1].get<uint64_t>();
    if (b > e || e > buf_size)
      fail(label_, where + ": data_offsets [" + std::to_string(b) + ", " + std::to_string(e) +
                       "] outside the data buffer of " + std::to_string(buf_size) + " bytes");
    auto bytes = mul_checked(numel, dtype_size(*dt));
    if (!bytes || *bytes != e - b)
      fail(label_, where + ": data_offsets span " + std::to_string(e - b) + " bytes, expected " +
                       std::to_string(numel) + " elements x " + std::to_string(dtype_size(*dt)) + " bytes (" +
                       dtype_name(*dt) + ", shape " + v["shape"].dump() + ")");
    tv.data = buf + b;
    tv.nbytes = e - b;
    entries.push_back({b, e, views_.size()});
    views_.push_back(std::move(tv));
  }
  // The offsets must tile the buffer exactly: sorted, each starting where the last ended.
  std::sort(entries.begin(), entries.end(),
            [](auto& a, auto& c) { return a.begin != c.begin ? a.begin < c.begin : a.end < c.end; });
  uint64_t pos = 0;
  for (auto& en : entries) {
    const std::string& nm = views_[en.idx].name;
    if (en.begin < pos)
      fail(label_, "tensor \"" + nm + "\" overlaps the previous tensor (begins at " + std::to_string(en.begin) +
                       ", previous ends at " + std::to_string(pos) + ")");
    if (en.begin > pos)
      fail(label_, "hole in the data buffer before tensor \"" + nm + "\" (bytes " + std::to_string(pos) + ".." +
                       std::to_string(en.begin) + " unused)");
    pos = en.end;
    names_.push_back(nm);
  }
  if (pos != buf_size)
    fail(label_, "data buffer is " + std::to_string(buf_size) + " bytes but the tensors cover " + std::to_string(pos));
  for (size_t i = 0; i < views_.size(); ++i) index_[views_[i].name] = i;
}

const TensorView* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &views_[it->second];
}

const TensorView& SafetensorsFile::get(const std::string& name) const {
  if (auto* v = find(name)) return *v;
  throw UserError("safetensors " + label_ + ": no tensor \"" + name + "\"",
                  "the file holds " + std::to_string(names_.size()) + " tensors" +
                      (names_.empty() ? "" : ", e.g. \"" + names_.front() + "\""));
}

namespace {
// The header (with its 8-byte length prefix) for tensors laid out in the given order.
std::string build_header(const std::vector<TensorData>& tensors, const std::map<std::string, std::string>& metadata) {
  nlohmann::json h = nlohmann::json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  uint64_t off = 0;
  for (auto& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__" || h.contains(t.name))
      throw UserError("safetensors writer: bad or duplicate tensor name \"" + t.name + "\"");
    uint64_t numel = 1;
    for (auto s : t.shape) {
      BRL_ASSERT(s >= 0, "negative dim");
      numel *= static_cast<uint64_t>(s);
    }
    BRL_ASSERT(numel * dtype_size(t.dtype) == t.nbytes, "tensor " + t.name + ": nbytes does not match shape x dtype");
    h[t.name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {off, off + t.nbytes}}};
    off += t.nbytes;
  }
  std::string js = h.dump();
  js.append((8 - js.size() % 8) % 8, ' ');  // pad so the data buffer is 8-byte aligned
  std::string out(8, '\0');
  uint64_t n = js.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + js;
}
}  // namespace

std::string serialize_safetensors(const std::vector<TensorData>& tensors,
                                  const std::map<std::string, std::string>& metadata) {
  std::string out = build_header(tensors, metadata);
  for (auto& t : tensors) out.append(static_cast<const char*>(t.data), t.nbytes);
  return out;
}

void write_safetensors(const std::string& path, const std::vector<TensorData>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::string header = build_header(tensors, metadata);
  std::string tmp = path + ".tmp." + std::to_string(getpid());
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f)
    throw UserError("cannot create " + tmp + ": " + std::strerror(errno),
                    "check that the folder exists and is writable");
  bool ok = std::fwrite(header.data(), 1, header.size(), f) == header.size();
  for (auto& t : tensors)
    if (ok && t.nbytes) ok = std::fwrite(t.data, 1, t.nbytes, f) == t.nbytes;
  ok = ok && std::fflush(f) == 0 && fsync(fileno(f)) == 0;
  int e = errno;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    if (ok) e = errno;
    std::remove(tmp.c_str());
    throw UserError("cannot write safetensors file " + path + ": " + std::strerror(e),
                    "check free disk space and permissions");
  }
}

}  // namespace brl::st
