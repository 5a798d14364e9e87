// Token counts on the command line, as people write them: "300B", "1.4T",
// "2e12", "500M" (decimal multiples; B and G both a billion).
#pragma once

#include <string>

namespace shardsim::cli {

// Throws std::invalid_argument naming `option` unless `text` is a positive count.
double parse_token_count(const std::string& option, const std::string& text);

}  // namespace shardsim::cli
