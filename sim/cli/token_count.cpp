#include "sim/cli/token_count.h"

#include <cctype>
#include <cmath>
#include <stdexcept>

namespace shardsim::cli {

double parse_token_count(const std::string& option, const std::string& text) {
  const std::invalid_argument bad(option + ": '" + text + "' is not a token count (examples: 300B, 1.4T, 2e12)");
  std::size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    throw bad;
  }
  double multiplier = 1;
  if (used + 1 == text.size()) {
    switch (std::toupper(static_cast<unsigned char>(text.back()))) {
      case 'K': multiplier = 1e3; break;
      case 'M': multiplier = 1e6; break;
      case 'B':
      case 'G': multiplier = 1e9; break;
      case 'T': multiplier = 1e12; break;
      default: throw bad;
    }
  } else if (used != text.size()) {
    throw bad;
  }
  value *= multiplier;
  // Steps are counted in 64 bits: 1e18 tokens is 1e18 steps at one token a
  // step, and tens of thousands of times any public training run.
  if (!(value >= 1) || !(value <= 1e18)) {
    throw std::invalid_argument(option + ": '" + text + "' is not a token count from 1 to 1e18 (examples: 300B, 1.4T, 2e12)");
  }
  return value;
}

}  // namespace shardsim::cli
