// Text for tables and CSV files: printf-style formatting into a std::string
// (nccl-tests' and the search's layouts are printf layouts), and CSV fields.
#pragma once

#include <cstdio>
#include <string>

namespace shardsim {

template <typename... Values>
std::string printf_string(const char* pattern, Values... values) {
  const int length = std::snprintf(nullptr, 0, pattern, values...);
  if (length <= 0) return {};
  std::string text(static_cast<std::size_t>(length) + 1, '\0');
  std::snprintf(text.data(), text.size(), pattern, values...);
  text.pop_back();
  return text;
}

// `text` as one CSV field (RFC 4180): quoted, inner quotes doubled, when it
// holds a comma, a quote or a line break.
inline std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\n") == std::string::npos) return text;
  std::string quoted = "\"";
  for (char c : text) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

}  // namespace shardsim
