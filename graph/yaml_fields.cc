#include "graph/yaml_fields.h"

#include <fmt/core.h>

#include "crystal/base/error.h"

namespace crystal::graph {

YamlFields::YamlFields(const YAML::Node& node, std::string path, const std::string& file)
    : node_(node), path_(std::move(path)), file_(file) {
  if (node_ && !node_.IsNull() && !node_.IsMap())
    throw InputError(fmt::format("{}: '{}' must be a mapping", where(node_), path_));
}

std::string YamlFields::where(const YAML::Node& n) const {
  // yaml-cpp lines are 0-based; editors count from 1.
  const YAML::Mark m = n.Mark();
  if (m.line < 0) return file_;
  return fmt::format("{}:{}", file_, m.line + 1);
}

std::string YamlFields::field(std::string_view key) const {
  return path_.empty() ? std::string(key) : fmt::format("{}.{}", path_, key);
}

bool YamlFields::has(std::string_view key) const {
  return node_ && node_.IsMap() && node_[std::string(key)];
}

YAML::Node YamlFields::child(std::string_view key) {
  known_.emplace(key);
  if (!has(key)) return YAML::Node();
  return node_[std::string(key)];
}

template <class T>
T YamlFields::scalar(const YAML::Node& n, std::string_view key, const char* type_name) const {
  if (!n.IsScalar())
    throw InputError(fmt::format("{}: '{}' must be {}", where(n), field(key), type_name));
  try {
    return n.as<T>();
  } catch (const YAML::Exception&) {
    throw InputError(fmt::format("{}: '{}' must be {}, got '{}'", where(n), field(key),
                                 type_name, n.Scalar()));
  }
}

void YamlFields::read(std::string_view key, int& out) {
  if (!has(key)) {
    known_.emplace(key);
    return;
  }
  YAML::Node n = child(key);
  out = scalar<int>(n, key, "an integer");
}

void YamlFields::read(std::string_view key, double& out) {
  if (!has(key)) {
    known_.emplace(key);
    return;
  }
  YAML::Node n = child(key);
  out = scalar<double>(n, key, "a number");
}

void YamlFields::read(std::string_view key, bool& out) {
  if (!has(key)) {
    known_.emplace(key);
    return;
  }
  YAML::Node n = child(key);
  out = scalar<bool>(n, key, "true or false");
}

void YamlFields::read(std::string_view key, std::uint64_t& out) {
  if (!has(key)) {
    known_.emplace(key);
    return;
  }
  YAML::Node n = child(key);
  // yaml-cpp parses "-1" as a huge unsigned; read signed first to catch negatives.
  const auto v = scalar<long long>(n, key, "a non-negative integer");
  if (v < 0)
    throw InputError(fmt::format("{}: '{}' must be a non-negative integer, got {}", where(n),
                                 field(key), v));
  out = static_cast<std::uint64_t>(v);
}

void YamlFields::read(std::string_view key, std::string& out) {
  if (!has(key)) {
    known_.emplace(key);
    return;
  }
  YAML::Node n = child(key);
  out = scalar<std::string>(n, key, "a string");
}

void YamlFields::read(std::string_view key, std::vector<int>& out) {
  if (!has(key)) {
    known_.emplace(key);
    return;
  }
  YAML::Node n = child(key);
  if (!n.IsSequence())
    throw InputError(fmt::format("{}: '{}' must be a list of integers", where(n), field(key)));
  out.clear();
  for (const auto& e : n) out.push_back(scalar<int>(e, key, "a list of integers"));
}

void YamlFields::readNumberMap(std::string_view key,
                               std::vector<std::pair<std::string, double>>& out) {
  YAML::Node n = child(key);
  if (n.IsNull()) return;
  if (!n.IsMap())
    throw InputError(fmt::format("{}: '{}' must be a mapping name: number", where(n), field(key)));
  out.clear();
  for (const auto& kv : n) {
    const auto name = kv.first.as<std::string>();
    out.emplace_back(name, scalar<double>(kv.second, fmt::format("{}.{}", key, name), "a number"));
  }
}

void YamlFields::rejectUnknown() const {
  if (!node_ || !node_.IsMap()) return;
  for (const auto& kv : node_) {
    const auto key = kv.first.as<std::string>();
    if (!known_.contains(key))
      throw InputError(fmt::format("{}: unknown field '{}' in '{}'", where(kv.first), key,
                                   path_.empty() ? "<top level>" : path_));
  }
}

}  // namespace crystal::graph
