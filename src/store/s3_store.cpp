// Placeholder until the S3 backend lands.
#include "store/s3_store.h"

namespace brl::store {
std::unique_ptr<ObjectStore> open_s3_store(const std::string& url) {
  throw UserError("S3 backend not built yet for '" + url + "'");
}
}  // namespace brl::store
