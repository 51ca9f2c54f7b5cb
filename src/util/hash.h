// Content hashes (OpenSSL): sha256 of buffers and files, hex encoded; hex and base64 codings.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace brl {

std::string sha256_hex(std::string_view data);
std::string sha256_hex(const void* data, size_t n);
// Streams the file; throws UserError naming the path if it cannot be read.
std::string sha256_file_hex(const std::string& path);
std::string to_hex(const unsigned char* p, size_t n);
// Lower- or upper-case hex digits -> bytes; nullopt for an odd length or another character.
std::optional<std::string> from_hex(std::string_view hex);
// Standard base64 (RFC 4648, '+/', padded).
std::string base64_encode(std::string_view bytes);
// Strict: nullopt unless `text` is the canonical padded standard base64 of some bytes (no
// whitespace, zero unused bits).
std::optional<std::string> base64_decode(std::string_view text);

}  // namespace brl
