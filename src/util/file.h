// Writing a whole file so that a failure is seen: the data goes to PATH.tmp, which is closed
// (where a full disk or a quota usually shows: the last buffered bytes are written then) and
// checked before it is renamed over PATH. Readers see the old file or the new one, never a
// torn one. Throws UserError naming the path and the system's reason.
#pragma once

#include <string>
#include <string_view>

namespace brl {

void write_file(const std::string& path, std::string_view bytes);

}  // namespace brl
