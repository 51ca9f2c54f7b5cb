// The S3 ObjectStore: s3://bucket/prefix over SigV4 + libcurl.
// Integrity: every request signs the real sha256 of its body in x-amz-content-sha256, which
// the server verifies (RGW and AWS answer 400 XAmzContentSHA256Mismatch); PUTs also send
// Content-MD5 and check the returned ETag equals that MD5; whole-object GETs check the body's
// MD5 against a plain-MD5 ETag; get_file checks the size. Multipart uploads are checked by a
// HEAD of the final size (RGW returns an empty ETag from CompleteMultipartUpload).
// Retries: exponential backoff with full jitter on 5xx, 429/SlowDown, connection errors and
// timeouts, bounded in attempts and total time; 403 and 404 are final at once.
#include "store/s3_store.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <random>
#include <thread>

#include "store/s3_request.h"
#include "util/hash.h"
#include "util/clock.h"
#include "util/log.h"

namespace brl::store {

namespace {

// md5 (raw) and sha256 (hex) of a buffer or a file range, in one pass.
struct Digests {
  std::string md5_raw, md5_hex, sha256_hex;
  std::string content_md5() const { return base64_encode(md5_raw); }
};

class Hasher {
 public:
  Hasher() : md5_(EVP_MD_CTX_new()), sha_(EVP_MD_CTX_new()) {
    EVP_DigestInit_ex(md5_, EVP_md5(), nullptr);
    EVP_DigestInit_ex(sha_, EVP_sha256(), nullptr);
  }
  ~Hasher() {
    EVP_MD_CTX_free(md5_);
    EVP_MD_CTX_free(sha_);
  }
  void update(const void* p, size_t n) {
    EVP_DigestUpdate(md5_, p, n);
    EVP_DigestUpdate(sha_, p, n);
  }
  Digests finish() {
    unsigned char a[EVP_MAX_MD_SIZE], b[EVP_MAX_MD_SIZE];
    unsigned na = 0, nb = 0;
    EVP_DigestFinal_ex(md5_, a, &na);
    EVP_DigestFinal_ex(sha_, b, &nb);
    return {std::string(reinterpret_cast<char*>(a), na), to_hex(a, na), to_hex(b, nb)};
  }

 private:
  EVP_MD_CTX* md5_;
  EVP_MD_CTX* sha_;
};

Digests digest(std::string_view s) {
  Hasher h;
  h.update(s.data(), s.size());
  return h.finish();
}

Result<Digests> digest_file(const std::string& path, uint64_t offset, uint64_t length) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status(StatusCode::kIOError, "cannot open '" + path + "': " + std::strerror(errno));
  Hasher h;
  std::vector<char> buf(1 << 20);
  uint64_t done = 0;
  while (done < length) {
    size_t want = static_cast<size_t>(std::min<uint64_t>(buf.size(), length - done));
    ssize_t got = ::pread(fd, buf.data(), want, static_cast<off_t>(offset + done));
    if (got <= 0) {
      ::close(fd);
      return Status(StatusCode::kIOError,
                    "reading '" + path + "' failed (" + (got < 0 ? std::strerror(errno) : "file shrank") + ")");
    }
    h.update(buf.data(), static_cast<size_t>(got));
    done += static_cast<uint64_t>(got);
  }
  ::close(fd);
  return h.finish();
}

std::string unquote(std::string s) {
  if (s.size() >= 2 && s.front() == '"' && s.back() == '"') s = s.substr(1, s.size() - 2);
  return s;
}

bool is_plain_md5(const std::string& etag) {
  if (etag.size() != 32) return false;
  for (char c : etag)
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

long env_long(const EnvLookup& env, const std::string& name, long fallback) {
  auto v = env(name);
  if (!v || v->empty()) return fallback;
  char* end = nullptr;
  long x = std::strtol(v->c_str(), &end, 10);
  if (*end != '\0' || x < 0) throw UserError(name + "='" + *v + "' is not a non-negative integer");
  return x;
}

class S3Store final : public ObjectStore {
 public:
  S3Store(std::string bucket, std::string prefix, S3Config cfg, S3Options opt)
      : client_(std::move(bucket), std::move(cfg), opt), prefix_(std::move(prefix)), opt_(opt) {}

  std::string describe() const override {
    std::string p = prefix_;
    if (!p.empty()) p.pop_back();
    return "s3://" + client_.bucket() + (p.empty() ? "" : "/" + p) + " (" + client_.endpoint() + ")";
  }

  Status put(const std::string& key, const std::string& data, const PutOptions& opt) override {
    if (auto st = validate_key(key); !st) return st;
    S3Call call = put_call(key, opt);
    Digests d = digest(data);
    call.headers.emplace_back("Content-MD5", d.content_md5());
    call.payload_hash = d.sha256_hex;
    call.has_body = true;
    call.body = &data;
    return finish_put(call, d, key);
  }

  Status put_file(const std::string& key, const std::string& path, const PutOptions& opt) override {
    if (auto st = validate_key(key); !st) return st;
    struct stat sb;
    if (::stat(path.c_str(), &sb) != 0 || !S_ISREG(sb.st_mode))
      return Status(StatusCode::kIOError,
                    "cannot upload '" + path + "': " + (errno ? std::strerror(errno) : "not a regular file"));
    uint64_t size = static_cast<uint64_t>(sb.st_size);
    if (size > opt_.multipart_threshold) return put_multipart(key, path, size, opt);
    auto d = digest_file(path, 0, size);
    if (!d) return d.status();
    S3Call call = put_call(key, opt);
    call.headers.emplace_back("Content-MD5", d->content_md5());
    call.payload_hash = d->sha256_hex;
    call.upload_path = path;
    call.upload_length = size;
    return finish_put(call, *d, key);
  }

  Result<std::string> get(const std::string& key, const GetOptions& opt) override {
    if (auto st = validate_key(key); !st) return st;
    if (opt.length && *opt.length == 0) {  // an empty range: S3 has no way to ask; check existence
      auto h = head(key);
      if (!h) return h.status();
      return std::string();
    }
    S3Call call = object_call("GET", key);
    bool whole = opt.offset == 0 && !opt.length;
    if (!whole) {
      std::string r = "bytes=" + std::to_string(opt.offset) + "-";
      if (opt.length) r += std::to_string(opt.offset + *opt.length - 1);
      call.headers.emplace_back("Range", r);
    }
    auto resp = client_.execute(call);
    if (!resp) return resp.status();
    std::string cl = resp->header("content-length");
    if (!cl.empty() && std::to_string(resp->body.size()) != cl)
      return Status(StatusCode::kCorrupt,
                    call.what + ": got " + std::to_string(resp->body.size()) + " bytes, Content-Length says " + cl);
    if (whole && opt_.verify_etag_md5) {
      std::string etag = unquote(resp->header("etag"));
      if (is_plain_md5(etag) && digest(resp->body).md5_hex != etag)
        return Status(StatusCode::kCorrupt, call.what + ": body MD5 does not match ETag " + etag);
    }
    return std::move(resp->body);
  }

  Status get_file(const std::string& key, const std::string& path) override {
    if (auto st = validate_key(key); !st) return st;
    std::filesystem::path dest(path);
    std::string dir = dest.parent_path().empty() ? "." : dest.parent_path().string();
    std::string tmpl = dir + "/" + std::string(kTempPrefix) + dest.filename().string() + ".XXXXXX";
    std::vector<char> name(tmpl.begin(), tmpl.end());
    name.push_back('\0');
    int fd = ::mkstemp(name.data());
    if (fd < 0)
      return Status(StatusCode::kIOError, "cannot create a temporary file in '" + dir + "': " + std::strerror(errno));
    std::string tmp(name.data());
    S3Call call = object_call("GET", key);
    call.download_fd = fd;
    call.before_attempt = [fd] {  // a retry starts the file over
      if (::ftruncate(fd, 0) != 0 || ::lseek(fd, 0, SEEK_SET) != 0) return false;
      return true;
    };
    auto fail = [&](Status st) {
      ::close(fd);
      ::unlink(tmp.c_str());
      return st;
    };
    auto resp = client_.execute(call);
    if (!resp) return fail(resp.status());
    std::string cl = resp->header("content-length");
    if (!cl.empty() && std::to_string(resp->downloaded) != cl)
      return fail(Status(StatusCode::kCorrupt, call.what + ": got " + std::to_string(resp->downloaded) +
                                                   " bytes, Content-Length says " + cl));
    std::string etag = unquote(resp->header("etag"));
    if (opt_.verify_etag_md5 && is_plain_md5(etag)) {
      auto d = digest_file(tmp, 0, resp->downloaded);
      if (!d) return fail(d.status());
      if (d->md5_hex != etag)
        return fail(Status(StatusCode::kCorrupt, call.what + ": downloaded MD5 does not match ETag " + etag));
    }
    if (::fsync(fd) != 0) return fail(Status(StatusCode::kIOError, "fsync '" + tmp + "': " + std::strerror(errno)));
    ::close(fd);
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
      Status st(StatusCode::kIOError, "rename to '" + path + "': " + std::strerror(errno));
      ::unlink(tmp.c_str());
      return st;
    }
    return Status::ok();
  }

  Result<ObjectInfo> head(const std::string& key) override {
    if (auto st = validate_key(key); !st) return st;
    S3Call call = object_call("HEAD", key);
    auto resp = client_.execute(call);
    if (!resp) return resp.status();
    ObjectInfo info;
    info.key = key;
    info.size = std::strtoull(resp->header("content-length").c_str(), nullptr, 10);
    info.etag = unquote(resp->header("etag"));
    info.mtime_ms = std::max<int64_t>(0, s3_detail::parse_http_date_ms(resp->header("last-modified")));
    return info;
  }

  Result<ListPage> list(const ListOptions& opt) override {
    if (auto st = validate_prefix(opt.prefix); !st) return st;
    S3Call call = client_.bucket_call("GET", "LIST " + client_.url_of(prefix_ + opt.prefix) + "*");
    call.query = {{"list-type", "2"},
                  {"prefix", prefix_ + opt.prefix},
                  {"max-keys", std::to_string(std::clamp(opt.max_keys, 1, 1000))}};
    if (!opt.start_after.empty()) call.query.emplace_back("start-after", prefix_ + opt.start_after);
    if (!opt.continuation.empty()) call.query.emplace_back("continuation-token", opt.continuation);
    auto resp = client_.execute(call);
    if (!resp) return resp.status();
    auto page = s3_detail::parse_list_v2(resp->body, prefix_);
    if (!page) return Status(page.status().code(), call.what + ": " + page.status().message());
    return page;
  }

  Status remove(const std::string& key) override {
    if (auto st = validate_key(key); !st) return st;
    S3Call call = object_call("DELETE", key);
    auto resp = client_.execute(call);
    if (!resp && resp.status().code() != StatusCode::kNotFound) return resp.status();
    return Status::ok();
  }

 private:
  S3Call object_call(const std::string& method, const std::string& key) const {
    return client_.object_call(method, prefix_ + key);
  }

  S3Call put_call(const std::string& key, const PutOptions& opt) const {
    S3Call call = object_call("PUT", key);
    call.headers.emplace_back("Content-Type", opt.content_type.empty() ? "application/octet-stream" : opt.content_type);
    if (opt.create_only) call.headers.emplace_back("If-None-Match", "*");
    return call;
  }

  Status finish_put(S3Call& call, const Digests& d, const std::string& key) {
    auto resp = client_.execute(call);
    // A create-only PUT that the server applied but whose answer was lost (reset, cut off)
    // meets its own object on the retry: 412. It is ours when the object holds our bytes
    // (callers put something unique to the writer in create-only bodies, retry_store.h);
    // reporting a failure would make a worker upload the same progress again.
    if (!resp && call.retried && resp.status().code() == StatusCode::kPreconditionFailed && holds(key, d))
      return Status::ok();
    if (!resp) return resp.status();
    std::string etag = unquote(resp->header("etag"));
    if (is_plain_md5(etag) && etag != d.md5_hex)
      return Status(StatusCode::kCorrupt,
                    call.what + ": server ETag " + etag + " is not the MD5 of what was sent (" + d.md5_hex + ")");
    return Status::ok();
  }

  // Whether the object at key has the bytes whose digests are d.
  bool holds(const std::string& key, const Digests& d) {
    auto h = head(key);
    if (!h) return false;
    if (is_plain_md5(h->etag)) return h->etag == d.md5_hex;
    auto got = get(key, {});  // an ETag that is not the MD5 (SSE-KMS): compare the bytes
    return got && digest(*got).md5_hex == d.md5_hex;
  }

  Status put_multipart(const std::string& key, const std::string& path, uint64_t size, const PutOptions& opt);

  S3Client client_;
  std::string prefix_;  // "" or "dir/" (always ends with '/')
  S3Options opt_;
};

Status S3Store::put_multipart(const std::string& key, const std::string& path, uint64_t size, const PutOptions& opt) {
  const std::string full = prefix_ + key;
  if (opt.create_only) {
    // CompleteMultipartUpload with If-None-Match is atomic on AWS, but RGW 16 ignores the
    // header there; checking first makes the common case right on both.
    auto h = head(key);
    if (h)
      return Status(StatusCode::kPreconditionFailed,
                    "s3://" + client_.bucket() + "/" + full + " already exists (create-only put)");
    if (h.status().code() != StatusCode::kNotFound) return h.status();
  }
  S3Call create = put_call(key, opt);
  create.method = "POST";
  create.what = "CreateMultipartUpload " + client_.url_of(full);
  create.headers.erase(
      std::remove_if(create.headers.begin(), create.headers.end(), [](auto& h) { return h.first == "If-None-Match"; }),
      create.headers.end());
  create.query = {{"uploads", ""}};
  auto cr = client_.execute(create);
  if (!cr) return cr.status();
  std::string upload_id = s3_detail::xml_text(cr->body, "UploadId");
  if (upload_id.empty()) return Status(StatusCode::kInternal, create.what + ": no UploadId in the answer");

  const uint64_t part = std::max<uint64_t>(opt_.part_size, 5ull << 20);
  const int n_parts = static_cast<int>((size + part - 1) / part);
  if (n_parts > 10000)
    return Status(StatusCode::kInvalidArgument,
                  "'" + path + "' needs more than 10000 parts; raise BRL_S3_PART_SIZE_MIB");
  std::vector<std::string> etags(n_parts);
  std::atomic<int> next{0};
  std::atomic<bool> failed{false};
  std::mutex mu;
  Status first_error;
  auto worker = [&] {
    for (int i; !failed && (i = next++) < n_parts;) {
      uint64_t off = static_cast<uint64_t>(i) * part, len = std::min(part, size - off);
      Status st;
      auto d = digest_file(path, off, len);
      if (!d) {
        st = d.status();
      } else {
        S3Call up = client_.object_call("PUT", full);
        up.what = "UploadPart " + std::to_string(i + 1) + "/" + std::to_string(n_parts) + " " + client_.url_of(full);
        up.query = {{"partNumber", std::to_string(i + 1)}, {"uploadId", upload_id}};
        up.headers.emplace_back("Content-MD5", d->content_md5());
        up.payload_hash = d->sha256_hex;
        up.upload_path = path;
        up.upload_offset = off;
        up.upload_length = len;
        auto r = client_.execute(up);
        if (!r) st = r.status();
        else etags[i] = r->header("etag");
        if (st.is_ok() && unquote(etags[i]) != d->md5_hex)
          st = Status(StatusCode::kCorrupt, up.what + ": part ETag is not the MD5 of the part");
      }
      if (!st.is_ok()) {
        std::lock_guard lk(mu);
        if (!failed.exchange(true)) first_error = st;
      }
    }
  };
  std::vector<std::thread> pool;
  int threads = std::clamp(opt_.upload_threads, 1, n_parts);
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();

  auto abort_upload = [&](Status st) {
    S3Call ab = client_.object_call("DELETE", full);
    ab.what = "AbortMultipartUpload " + client_.url_of(full);
    ab.query = {{"uploadId", upload_id}};
    auto r = client_.execute(ab);
    if (!r)
      LOG_WARN("{} failed: {} (the parts stay until a lifecycle rule removes them)", ab.what, r.status().to_string());
    return st;
  };
  if (failed) return abort_upload(first_error);

  std::string xml = "<CompleteMultipartUpload>";
  for (int i = 0; i < n_parts; ++i)
    xml += "<Part><PartNumber>" + std::to_string(i + 1) + "</PartNumber><ETag>" + etags[i] + "</ETag></Part>";
  xml += "</CompleteMultipartUpload>";
  S3Call done = client_.object_call("POST", full);
  done.what = "CompleteMultipartUpload " + client_.url_of(full);
  done.query = {{"uploadId", upload_id}};
  done.headers.emplace_back("Content-Type", "application/xml");
  if (opt.create_only) done.headers.emplace_back("If-None-Match", "*");
  done.has_body = true;
  done.body = &xml;
  done.payload_hash = sha256_hex(xml);
  auto r = client_.execute(done);
  if (!r) return abort_upload(r.status());
  if (r->body.find("<Error>") != std::string::npos)  // S3 may report failure inside a 200
    return abort_upload(Status(StatusCode::kTransient, done.what + ": " + s3_detail::xml_text(r->body, "Code") + " " +
                                                           s3_detail::xml_text(r->body, "Message")));
  auto h = head(key);
  if (!h) return h.status();
  if (h->size != size)
    return Status(StatusCode::kCorrupt,
                  done.what + ": object has " + std::to_string(h->size) + " bytes, the file " + std::to_string(size));
  return Status::ok();
}

}  // namespace

S3Options s3_options_from_env(const EnvLookup& env) {
  S3Options o;
  o.max_attempts = static_cast<int>(std::max(1L, env_long(env, "BRL_S3_MAX_ATTEMPTS", o.max_attempts)));
  o.max_retry_s = static_cast<double>(env_long(env, "BRL_S3_MAX_RETRY_S", static_cast<long>(o.max_retry_s)));
  long part_mib = env_long(env, "BRL_S3_PART_SIZE_MIB", static_cast<long>(o.part_size >> 20));
  if (part_mib < 5)
    throw UserError("BRL_S3_PART_SIZE_MIB=" + std::to_string(part_mib) + " is below S3's 5 MiB minimum part size");
  o.part_size = static_cast<uint64_t>(part_mib) << 20;
  o.multipart_threshold = std::max(o.multipart_threshold, o.part_size);
  o.verify_etag_md5 = env_long(env, "BRL_S3_VERIFY_ETAG", 1) != 0;
  return o;
}

std::unique_ptr<ObjectStore> open_s3_store(const std::string& url, const S3Options& opt, const EnvLookup& env) {
  const std::string hint = "write it as s3://bucket or s3://bucket/prefix";
  if (url.rfind("s3://", 0) != 0) throw UserError("'" + url + "' is not an s3:// URL", hint);
  std::string rest = url.substr(5);
  size_t slash = rest.find('/');
  std::string bucket = rest.substr(0, slash);
  std::string prefix = slash == std::string::npos ? "" : rest.substr(slash + 1);
  if (bucket.empty()) throw UserError("S3 URL '" + url + "' has no bucket name", hint);
  for (char c : bucket)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_'))
      throw UserError("S3 URL '" + url + "': bucket name '" + bucket + "' has a character S3 does not allow", hint);
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  if (!prefix.empty()) {
    if (auto st = validate_key(prefix); !st) throw UserError("S3 URL '" + url + "': prefix " + st.message(), hint);
    prefix += '/';
  }
  return std::make_unique<S3Store>(bucket, prefix, resolve_s3_config(bucket, env), opt);
}

std::unique_ptr<ObjectStore> open_s3_store(const std::string& url) {
  return open_s3_store(url, s3_options_from_env(), process_env());
}

}  // namespace brl::store
