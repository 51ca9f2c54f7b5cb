// S3 backend (AWS Signature Version 4 over libcurl). See s3_store.cpp.
#pragma once

#include <memory>
#include <string>

#include "store/object_store.h"

namespace brl::store {

// url: "s3://bucket[/prefix]". Settings from the standard AWS environment variables and
// ~/.aws/{credentials,config}: AWS_ENDPOINT_URL (or AWS_ENDPOINT_URL_S3), AWS_REGION /
// AWS_DEFAULT_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_PROFILE.
std::unique_ptr<ObjectStore> open_s3_store(const std::string& url);

}  // namespace brl::store
