// Fuzzes what an S3 endpoint sends back and src/store parses (src/store/s3_store.h s3_detail):
// ListObjectsV2 and error XML, XML entities, and the two date formats. The first input byte
// picks the parser; the rest is the answer (for listings: a strip prefix, a newline, the XML).
// Invariants, beyond "no crash":
//   listing: a page parses or is kInternal; a parsed page re-serialized (keys and ETags
//     escaped) parses to the same page, and a truncated page has a continuation token;
//   entities: unescape never grows its input, and inverts xml_escape for any string;
//   dates: a parsed time formats back to a string that parses to the same time.
#include <cstdint>
#include <ctime>
#include <string>

#include "store/s3_store.h"
#include "util/xml.h"

using namespace brl;
using namespace brl::store::s3_detail;

namespace {
void listing(const std::string& in) {
  size_t nl = in.find('\n');
  const std::string prefix = nl == std::string::npos ? "" : in.substr(0, nl);
  const std::string xml = nl == std::string::npos ? in : in.substr(nl + 1);
  auto r = parse_list_v2(xml, prefix);
  if (!r.is_ok()) {
    if (r.status().code() != StatusCode::kInternal) __builtin_trap();
    return;
  }
  const auto& page = r.value();
  std::string out = "<ListBucketResult>";
  for (auto& o : page.objects) {
    if (o.mtime_ms < 0) __builtin_trap();
    // Times re-serialize exactly only in the ISO range parse_iso8601_ms reads back (years 0-9999).
    out += "<Contents><Key>" + xml_escape(o.key) + "</Key><Size>" + std::to_string(o.size) + "</Size><ETag>\"" +
           xml_escape(o.etag) + "\"</ETag></Contents>";
  }
  if (!page.next.empty())
    out +=
        "<IsTruncated>true</IsTruncated><NextContinuationToken>" + xml_escape(page.next) + "</NextContinuationToken>";
  out += "</ListBucketResult>";
  auto back = parse_list_v2(out, "");
  if (!back.is_ok() || back.value().objects.size() != page.objects.size() || back.value().next != page.next)
    __builtin_trap();
  for (size_t i = 0; i < page.objects.size(); ++i) {
    const auto &a = page.objects[i], &b = back.value().objects[i];
    // We wrote the ETag inside one pair of quotes and the parser strips one pair, so it comes back
    // as parsed, quotes of its own included (seed list_etag_in_two_quote_pairs).
    if (a.key != b.key || a.size != b.size || a.etag != b.etag) __builtin_trap();
  }
}

void entities(const std::string& s) {
  if (xml_unescape(s).size() > s.size()) __builtin_trap();
  if (xml_unescape(xml_escape(s)) != s) __builtin_trap();
  (void)xml_text(s, "Code");
  (void)xml_text(s, "Message");
}

void dates(const std::string& s, bool http) {
  const int64_t ms = http ? parse_http_date_ms(s) : parse_iso8601_ms(s);
  if (ms < 0) return;
  const time_t t = static_cast<time_t>(ms / 1000);
  std::tm tm{};
  if (!gmtime_r(&t, &tm) || tm.tm_year + 1900 > 9999) return;  // outside what the formats write
  char buf[64];
  if (http) {
    std::strftime(buf, sizeof buf, "%a, %d %b %Y %H:%M:%S GMT", &tm);
  } else {
    char date[40];
    std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%S", &tm);
    std::snprintf(buf, sizeof buf, "%s.%03dZ", date, static_cast<int>(ms % 1000));
  }
  const int64_t again = http ? parse_http_date_ms(buf) : parse_iso8601_ms(buf);
  if (again != (http ? ms / 1000 * 1000 : ms)) __builtin_trap();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 4) {
    case 0: listing(rest); break;
    case 1: entities(rest); break;
    case 2: dates(rest, false); break;
    case 3: dates(rest, true); break;
  }
  return 0;
}
