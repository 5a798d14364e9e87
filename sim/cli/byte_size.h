// Sizes in bytes on the command line: "8", "64K", "8M", "80GiB" (binary
// multiples, as nccl-tests reads -b and -e).
#pragma once

#include <string>

namespace shardsim::cli {

// Throws std::invalid_argument naming `option` when `text` is not a size.
long long parse_byte_size(const std::string& option, const std::string& text);

}  // namespace shardsim::cli
