#include "sim/cli/byte_size.h"

#include <cctype>
#include <stdexcept>

namespace shardsim::cli {

long long parse_byte_size(const std::string& option, const std::string& text) {
  std::size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  std::string suffix = text.substr(digits);
  if (!suffix.empty() && (suffix.back() == 'B' || suffix.back() == 'b')) suffix.pop_back();
  if (suffix.size() == 2 && (suffix[1] == 'i' || suffix[1] == 'I')) suffix.pop_back();
  long long multiplier = 1;
  if (suffix.size() == 1) {
    switch (std::toupper(static_cast<unsigned char>(suffix[0]))) {
      case 'K': multiplier = 1LL << 10; break;
      case 'M': multiplier = 1LL << 20; break;
      case 'G': multiplier = 1LL << 30; break;
      case 'T': multiplier = 1LL << 40; break;
      default: multiplier = 0;
    }
  }
  if (digits == 0 || digits > 15 || multiplier == 0 || suffix.size() > 1) {
    throw std::invalid_argument(option + ": '" + text + "' is not a size in bytes (examples: 8, 64K, 8M, 8G)");
  }
  return std::stoll(text.substr(0, digits)) * multiplier;
}

}  // namespace shardsim::cli
