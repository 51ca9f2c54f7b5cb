// Content hashes (OpenSSL): sha256 of buffers and files, hex encoded.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace brl {

std::string sha256_hex(std::string_view data);
std::string sha256_hex(const void* data, size_t n);
// Streams the file; throws UserError naming the path if it cannot be read.
std::string sha256_file_hex(const std::string& path);
std::string to_hex(const unsigned char* p, size_t n);

}  // namespace brl
