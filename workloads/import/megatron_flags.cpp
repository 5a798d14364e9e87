#include "workloads/import/megatron_flags.h"

#include "topology/base/json_input.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <set>
#include <sstream>

namespace shardsim::workloads {

namespace {

// Megatron's store_true flags that shardsim reads: they never take a value,
// so the token after one is not consumed.
const std::set<std::string> kSwitches = {
    "sequence_parallel",  "use_distributed_optimizer", "overlap_grad_reduce",
    "overlap_param_gather", "tp_comm_overlap",         "bf16",
    "fp16",               "use_flash_attn",            "recompute_activations",
    "swiglu",             "untie_embeddings_and_output_weights",
    "group_query_attention", "disable_bias_linear",    "use_torch_fsdp2",
    "use_custom_fsdp",    "use_megatron_fsdp",         "account_for_embedding_in_pipeline_split",
    "account_for_loss_in_pipeline_split", "no_gradient_accumulation_fusion", "use_tp_pp_dp_mapping",
    "scatter_gather_tensors_in_pipeline", "no_scatter_gather_tensors_in_pipeline", "moe_pad_expert_input_to_capacity",
    "moe_grouped_gemm", "moe_shared_expert_overlap", "overlap_moe_expert_parallel_comm", "delay_wgrad_compute",
    "moe_layer_recompute", "grad_reduce_in_bf16", "fp8_param_gather"};

// Megatron's nargs='*' flags that shardsim reads: every word up to the next
// flag is theirs, kept space-separated.
const std::set<std::string> kListFlags = {"recompute_modules"};

bool is_shell_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_'; }

// A shell word as the flags are concerned: quotes and bash array brackets
// dropped, and a VAR= prefix (VAR="--num-layers 24 ...", ARGS=( ... ) cut off.
// Brackets inside quotes are the value's own (a pipeline layout's groups).
std::string clean_word(const std::string& word) {
  std::size_t begin = 0;
  const auto equals = word.find('=');
  if (equals != std::string::npos && equals > 0 && word[0] != '-' &&
      std::all_of(word.begin(), word.begin() + static_cast<std::ptrdiff_t>(equals), is_shell_name_char)) {
    begin = equals + 1;
  }
  std::string clean;
  char quote = 0;
  for (std::size_t i = begin; i < word.size(); ++i) {
    const char c = word[i];
    if (c == quote) {
      quote = 0;
    } else if (quote == 0 && (c == '"' || c == '\'')) {
      quote = c;
    } else if (quote != 0 || (c != '(' && c != ')')) {
      clean += c;
    }
  }
  return clean;
}

struct Word {
  std::string text;
  int line = 0;
};

// Whitespace-separated words, a backslash-newline joining lines and a # that
// starts a word commenting out the rest of its line.
std::vector<Word> shell_words(const std::string& text) {
  std::vector<Word> words;
  std::string current;
  int line = 1, start_line = 1;
  const auto flush = [&] {
    std::string word = clean_word(std::exchange(current, {}));
    if (!word.empty()) words.push_back({std::move(word), start_line});
  };
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\\' && i + 1 < text.size() && text[i + 1] == '\n') {
      flush();
      ++i;
      ++line;
    } else if (c == '#' && current.empty()) {
      while (i + 1 < text.size() && text[i + 1] != '\n') ++i;
    } else if (std::isspace(static_cast<unsigned char>(c)) != 0) {
      flush();
      if (c == '\n') ++line;
    } else {
      if (current.empty()) start_line = line;
      current += c;
    }
  }
  flush();
  return words;
}

// `parse` (std::stoll, std::stod) over all of `text`; nothing when it throws
// or leaves characters over.
template <typename Parse>
auto parse_whole(const std::string& text, Parse parse) -> std::optional<decltype(parse(text, nullptr))> {
  std::size_t used = 0;
  try {
    const auto number = parse(text, &used);
    if (used == text.size()) return number;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

bool is_flag(const std::string& word) { return word.size() > 2 && word.compare(0, 2, "--") == 0; }

// The script's plain assignments, NAME=value, export NAME="value" or
// NAME=${NAME:-value}, one per line: what "$NAME" and "${NAME}" stand for.
// A name given anything but a literal (another variable, arithmetic, a
// command), or two different literals, stands for nothing.
std::map<std::string, std::optional<std::string>> shell_assignments(const std::string& text) {
  std::map<std::string, std::optional<std::string>> values;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    std::size_t i = line.find_first_not_of(" \t");
    if (i == std::string::npos) continue;
    if (line.compare(i, 7, "export ") == 0) i = line.find_first_not_of(" \t", i + 7);
    std::size_t end = i;
    while (end < line.size() && is_shell_name_char(line[end])) ++end;
    if (end == i || end >= line.size() || line[end] != '=' || std::isdigit(static_cast<unsigned char>(line[i])) != 0) {
      continue;
    }
    const std::string name = line.substr(i, end - i);
    std::string value = line.substr(end + 1);
    if (const auto comment = value.find(" #"); comment != std::string::npos) value.erase(comment);
    while (!value.empty() && std::isspace(static_cast<unsigned char>(value.back())) != 0) value.pop_back();
    if (value.size() >= 2 && (value.front() == '"' || value.front() == '\'') && value.back() == value.front()) {
      value = value.substr(1, value.size() - 2);
    }
    const std::string fallback = "${" + name + ":-";
    if (value.compare(0, fallback.size(), fallback) == 0 && value.back() == '}') {
      value = value.substr(fallback.size(), value.size() - fallback.size() - 1);
    }
    const bool literal = !value.empty() && value.find_first_of("$`()\"' \t") == std::string::npos;
    const auto [it, first] = values.try_emplace(name, literal ? std::optional(value) : std::nullopt);
    if (!first && it->second != (literal ? std::optional(value) : std::nullopt)) it->second = std::nullopt;
  }
  return values;
}

// "$NAME" or "${NAME}" as the script assigns it, else the value as written.
std::string expand(const std::string& value, const std::map<std::string, std::optional<std::string>>& variables) {
  if (value.size() < 2 || value[0] != '$') return value;
  const bool braced = value[1] == '{' && value.back() == '}';
  const std::string name = braced ? value.substr(2, value.size() - 3) : value.substr(1);
  if (name.empty() || !std::all_of(name.begin(), name.end(), is_shell_name_char)) return value;
  const auto it = variables.find(name);
  return it != variables.end() && it->second ? *it->second : value;
}

}  // namespace

MegatronFlags read_megatron_flags(const std::string& text) {
  const std::vector<Word> words = shell_words(text);
  const auto variables = shell_assignments(text);
  MegatronFlags flags;
  for (std::size_t i = 0; i < words.size(); ++i) {
    if (!is_flag(words[i].text)) continue;
    const int line = words[i].line;
    std::string name = words[i].text.substr(2);
    std::optional<std::string> value;
    if (const auto equals = name.find('='); equals != std::string::npos) {
      value = name.substr(equals + 1);
      name.erase(equals);
    }
    std::replace(name.begin(), name.end(), '-', '_');
    if (!value && kListFlags.count(name) != 0) {
      value.emplace();
      while (i + 1 < words.size() && !is_flag(words[i + 1].text)) {
        if (!value->empty()) *value += ' ';
        *value += words[++i].text;
      }
    } else if (!value && kSwitches.count(name) == 0 && i + 1 < words.size() && !is_flag(words[i + 1].text)) {
      value = words[++i].text;
    }
    if (value) value = expand(*value, variables);
    flags[name] = MegatronFlag{value, line};
  }
  return flags;
}

void FlagReader::fail(const std::string& field, const std::string& what) const {
  std::string where = "--" + field;
  std::replace(where.begin(), where.end(), '_', '-');
  const auto it = flags_.find(field);
  if (it != flags_.end()) where += " (line " + std::to_string(it->second.line) + ")";
  throw_input_error(file_, where, what);
}

bool FlagReader::on(const std::string& field) const {
  const auto it = flags_.find(field);
  if (it == flags_.end()) return false;
  if (it->second.value) fail(field, "is a switch and takes no value, got \"" + *it->second.value + "\"");
  return true;
}

std::optional<std::string> FlagReader::text(const std::string& field) const {
  const auto it = flags_.find(field);
  if (it == flags_.end()) return std::nullopt;
  if (!it->second.value) fail(field, "needs a value");
  const std::string& value = *it->second.value;
  if (value.find('$') != std::string::npos || value.find('`') != std::string::npos) {
    fail(field, "is the shell expression \"" + value +
                    "\": shardsim expands the variables the script assigns a plain value (NAME=32 or "
                    "NAME=${NAME:-32}), not this one; expand it first (e.g. replace torchrun with echo and save what "
                    "it prints)");
  }
  return value;
}

std::optional<std::int64_t> FlagReader::integer(const std::string& field, std::int64_t minimum) const {
  const auto value = text(field);
  if (!value) return std::nullopt;
  const auto number = parse_whole(*value, [](const std::string& s, std::size_t* used) { return std::stoll(s, used); });
  if (!number) fail(field, "must be an integer, got \"" + *value + "\"");
  if (*number < minimum) fail(field, "must be at least " + std::to_string(minimum) + ", got " + *value);
  // Every count Megatron takes (sizes, layers, batches) is held in an int here.
  constexpr std::int64_t maximum = std::numeric_limits<int>::max();
  if (*number > maximum) fail(field, "must be at most " + std::to_string(maximum) + ", got " + *value);
  return number;
}

std::optional<double> FlagReader::positive_number(const std::string& field) const {
  const auto value = text(field);
  if (!value) return std::nullopt;
  const auto number = parse_whole(*value, [](const std::string& s, std::size_t* used) { return std::stod(s, used); });
  if (!number || !std::isfinite(*number) || *number <= 0) fail(field, "must be a positive number, got \"" + *value + "\"");
  return number;
}

std::optional<double> FlagReader::probability(const std::string& field) const {
  const auto value = text(field);
  if (!value) return std::nullopt;
  const auto number = parse_whole(*value, [](const std::string& s, std::size_t* used) { return std::stod(s, used); });
  if (!number || !(*number >= 0 && *number < 1)) fail(field, "must be a probability in [0, 1), got \"" + *value + "\"");
  return number;
}

std::optional<std::string> FlagReader::choice(const std::string& field, const std::vector<std::string>& allowed) const {
  const auto value = text(field);
  if (value && std::find(allowed.begin(), allowed.end(), *value) == allowed.end()) {
    std::string list;
    for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
    fail(field, "must be one of " + list + ", got \"" + *value + "\"");
  }
  return value;
}

void FlagReader::refuse_above_one(const std::string& field, const std::string& what) const {
  if (integer(field).value_or(1) > 1) fail(field, what);
}

}  // namespace shardsim::workloads
