// Index lists on the command line: "0,3,8-15" (ranges inclusive), in the
// order written.
#pragma once

#include <string>
#include <vector>

namespace shardsim::cli {

// Throws std::invalid_argument naming `option` when `text` is not such a list.
std::vector<int> parse_index_list(const std::string& option, const std::string& text);

}  // namespace shardsim::cli
