// Strict reading of the JSON files users write (clusters, profiles, later
// models and plans).
//
// Every error names the file, the dotted path of the field and what is wrong:
//   clusters/mine.json: fabric.oversubscription: must be a number >= 1, got 0.5
// Unknown keys are errors too (a misspelt key silently ignored is worse than
// a refusal), so a reader must be finish()ed after the caller took every field
// it knows. The CLI maps InputError to exit code 2.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace shardsim {

class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws InputError("<file>: <path>: <what>").
[[noreturn]] void throw_input_error(const std::string& file, const std::string& path,
                                    const std::string& what);

// Reads and parses a JSON file; a missing file or malformed JSON is an InputError.
nlohmann::json load_json_file(const std::string& file);

// Parses JSON text that came from `file`; malformed JSON is an InputError.
// Nesting deeper than kMaxJsonDepth is refused while parsing: no input of
// shardsim's nests past a dozen levels, and nlohmann's dump() recurses per
// level, so a document 60,000 levels deep would overflow the stack the
// moment an error message quoted it.
nlohmann::json parse_json_text(const std::string& text, const std::string& file);
inline constexpr int kMaxJsonDepth = 256;

inline constexpr double kMaxLatencySeconds = 1.0;
// The most GPUs (or ranks) any input may count: far above any cluster built,
// and small enough that products of GPU counts and sizes stay in range.
inline constexpr std::int64_t kMaxGpuCount = 1 << 24;

class JsonObjectReader {
 public:
  // `path` is the dotted location of this object inside the file ("" for the root).
  JsonObjectReader(const nlohmann::json& value, std::string file, std::string path = "");

  std::string string(const std::string& key);
  bool boolean(const std::string& key);
  // A number > 0 (zero and negative values are the classic typo in bandwidths).
  double positive_number(const std::string& key);
  // A number >= 0.
  double non_negative_number(const std::string& key);
  double number_at_least(const std::string& key, double minimum);
  // A latency: from 0 to kMaxLatencySeconds. Links, switches and software
  // steps take micro- to milliseconds; a second or more is a unit mistake,
  // and a value past the picosecond clock's range would wrap to nonsense.
  double latency_seconds(const std::string& key);
  std::int64_t positive_integer(const std::string& key);
  std::int64_t non_negative_integer(const std::string& key);
  // The same, for fields kept in an int: above INT_MAX is refused, not narrowed.
  int positive_int(const std::string& key);
  int non_negative_int(const std::string& key);
  std::vector<std::string> string_list(const std::string& key);
  JsonObjectReader object(const std::string& key);
  // One of `allowed`, e.g. "split" | "hash".
  std::string choice(const std::string& key, const std::vector<std::string>& allowed);

  bool has(const std::string& key) const;
  // The value itself, for fields that take more than one type; marks it taken.
  const nlohmann::json& value(const std::string& key) { return require(key); }
  // Keys of this object in file order, each marked as taken.
  std::vector<std::string> take_all_keys();

  // Rejects any key no accessor asked for.
  void finish() const;

  const std::string& file() const { return file_; }
  std::string field_path(const std::string& key) const;
  [[noreturn]] void fail(const std::string& key, const std::string& what) const;

 private:
  const nlohmann::json& require(const std::string& key);

  const nlohmann::json& value_;
  std::string file_;
  std::string path_;
  std::set<std::string> taken_;
};

}  // namespace shardsim
