#include "sim/cli/index_list.h"

#include <cctype>
#include <stdexcept>

namespace shardsim::cli {

std::vector<int> parse_index_list(const std::string& option, const std::string& text) {
  std::vector<int> indices;
  std::size_t at = 0;
  auto fail = [&] {
    throw std::invalid_argument(option + ": '" + text + "' is not a list of indices and ranges (example: 0,3,8-15)");
  };
  auto number = [&] {
    std::size_t end = at;
    while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
    if (end == at || end - at > 9) fail();
    const int value = std::stoi(text.substr(at, end - at));
    at = end;
    return value;
  };
  while (at < text.size()) {
    const int first = number();
    int last = first;
    if (at < text.size() && text[at] == '-') {
      ++at;
      last = number();
      if (last < first || last - first > 1'000'000) fail();
    }
    for (int i = first; i <= last; ++i) indices.push_back(i);
    if (at < text.size() && text[at++] != ',') fail();
  }
  if (indices.empty()) fail();
  return indices;
}

}  // namespace shardsim::cli
