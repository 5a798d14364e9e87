#include "topology/base/json_input.h"

#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

namespace shardsim {

void throw_input_error(const std::string& file, const std::string& path, const std::string& what) {
  std::string message = file;
  if (!path.empty()) message += ": " + path;
  message += ": " + what;
  throw InputError(message);
}

namespace {

template <typename Input>
nlohmann::json parse_limited(Input&& input, const std::string& file) {
  const nlohmann::json::parser_callback_t depth_limit = [&file](int depth, nlohmann::json::parse_event_t event,
                                                                 nlohmann::json&) {
    if (depth > kMaxJsonDepth && (event == nlohmann::json::parse_event_t::object_start ||
                                  event == nlohmann::json::parse_event_t::array_start)) {
      throw_input_error(file, "", "malformed JSON: nested more than " + std::to_string(kMaxJsonDepth) +
                                      " levels deep (no input of shardsim's nests past a dozen)");
    }
    return true;
  };
  try {
    return nlohmann::json::parse(std::forward<Input>(input), depth_limit);
  } catch (const nlohmann::json::exception& e) {
    // A syntax error (its message carries the line and column) or a number
    // beyond a double (1e999); the message without nlohmann's exception id.
    std::string what = e.what();
    const auto pos = what.find("] ");
    throw_input_error(file, "", "malformed JSON: " + (pos == std::string::npos ? what : what.substr(pos + 2)));
  }
}

}  // namespace

nlohmann::json load_json_file(const std::string& file) {
  std::ifstream in(file);
  if (!in) throw_input_error(file, "", "cannot open file");
  return parse_limited(in, file);
}

nlohmann::json parse_json_text(const std::string& text, const std::string& file) { return parse_limited(text, file); }

namespace {

std::string describe(const nlohmann::json& value) {
  std::string text = value.dump();
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return text;
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

}  // namespace

JsonObjectReader::JsonObjectReader(const nlohmann::json& value, std::string file, std::string path)
    : value_(value), file_(std::move(file)), path_(std::move(path)) {
  if (!value_.is_object()) {
    throw_input_error(file_, path_.empty() ? "(root)" : path_,
                      "must be a JSON object, got " + describe(value_));
  }
}

std::string JsonObjectReader::field_path(const std::string& key) const {
  return path_.empty() ? key : path_ + "." + key;
}

void JsonObjectReader::fail(const std::string& key, const std::string& what) const {
  throw_input_error(file_, field_path(key), what);
}

bool JsonObjectReader::has(const std::string& key) const { return value_.contains(key); }

const nlohmann::json& JsonObjectReader::require(const std::string& key) {
  taken_.insert(key);
  const auto it = value_.find(key);
  if (it == value_.end()) fail(key, "missing required field");
  return *it;
}

std::string JsonObjectReader::string(const std::string& key) {
  const auto& v = require(key);
  if (!v.is_string()) fail(key, "must be a string, got " + describe(v));
  return v.get<std::string>();
}

bool JsonObjectReader::boolean(const std::string& key) {
  const auto& v = require(key);
  if (!v.is_boolean()) fail(key, "must be true or false, got " + describe(v));
  return v.get<bool>();
}

double JsonObjectReader::number_at_least(const std::string& key, double minimum) {
  const auto& v = require(key);
  if (!v.is_number()) fail(key, "must be a number, got " + describe(v));
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < minimum) {
    std::ostringstream what;
    what << "must be a number >= " << minimum << ", got " << describe(v);
    fail(key, what.str());
  }
  return x;
}

double JsonObjectReader::positive_number(const std::string& key) {
  const auto& v = require(key);
  if (!v.is_number()) fail(key, "must be a number, got " + describe(v));
  const double x = v.get<double>();
  if (!std::isfinite(x) || x <= 0) fail(key, "must be a positive number, got " + describe(v));
  return x;
}

double JsonObjectReader::non_negative_number(const std::string& key) {
  return number_at_least(key, 0.0);
}

double JsonObjectReader::latency_seconds(const std::string& key) {
  const double seconds = number_at_least(key, 0.0);
  if (seconds >= kMaxLatencySeconds) {
    fail(key, "must be a latency under 1 s, got " + describe(value(key)) +
                  " (links, switches and software steps take micro- to milliseconds: a unit mistake?)");
  }
  return seconds;
}

namespace {

int within_int(JsonObjectReader& reader, const std::string& key, std::int64_t value) {
  if (value > std::numeric_limits<int>::max()) {
    reader.fail(key, "must be at most " + std::to_string(std::numeric_limits<int>::max()) + ", got " +
                         std::to_string(value));
  }
  return static_cast<int>(value);
}

}  // namespace

int JsonObjectReader::positive_int(const std::string& key) { return within_int(*this, key, positive_integer(key)); }

int JsonObjectReader::non_negative_int(const std::string& key) {
  return within_int(*this, key, non_negative_integer(key));
}

std::int64_t JsonObjectReader::positive_integer(const std::string& key) {
  const auto& v = require(key);
  if (!v.is_number_integer() || v.get<std::int64_t>() <= 0) {
    fail(key, "must be a positive integer, got " + describe(v));
  }
  return v.get<std::int64_t>();
}

std::int64_t JsonObjectReader::non_negative_integer(const std::string& key) {
  const auto& v = require(key);
  if (!v.is_number_integer() || v.get<std::int64_t>() < 0) {
    fail(key, "must be a non-negative integer, got " + describe(v));
  }
  return v.get<std::int64_t>();
}

std::vector<std::string> JsonObjectReader::string_list(const std::string& key) {
  const auto& v = require(key);
  if (!v.is_array()) fail(key, "must be a list of strings, got " + describe(v));
  std::vector<std::string> out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string()) {
      fail(key + "[" + std::to_string(i) + "]", "must be a string, got " + describe(v[i]));
    }
    out.push_back(v[i].get<std::string>());
  }
  return out;
}

JsonObjectReader JsonObjectReader::object(const std::string& key) {
  const auto& v = require(key);
  if (!v.is_object()) fail(key, "must be a JSON object, got " + describe(v));
  return JsonObjectReader(v, file_, field_path(key));
}

std::string JsonObjectReader::choice(const std::string& key, const std::vector<std::string>& allowed) {
  const std::string value = string(key);
  for (const auto& a : allowed) {
    if (value == a) return value;
  }
  fail(key, "must be one of " + join(allowed) + ", got \"" + value + "\"");
}

std::vector<std::string> JsonObjectReader::take_all_keys() {
  std::vector<std::string> keys;
  for (auto it = value_.begin(); it != value_.end(); ++it) {
    keys.push_back(it.key());
    taken_.insert(it.key());
  }
  return keys;
}

void JsonObjectReader::finish() const {
  for (auto it = value_.begin(); it != value_.end(); ++it) {
    if (!taken_.count(it.key())) fail(it.key(), "unknown field");
  }
}

}  // namespace shardsim
