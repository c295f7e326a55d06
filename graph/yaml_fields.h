// Strict reading of one YAML mapping: typed fields with defaults, and an error for every key
// nobody asked for. Each error names "FILE:LINE: ... 'section.field'" so a typo in a
// 200-line config is found at once.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <yaml-cpp/yaml.h>

namespace crystal::graph {

class YamlFields {
 public:
  // `node` must be a mapping (or null/absent, read as empty); `path` is "cluster.fabric".
  YamlFields(const YAML::Node& node, std::string path, const std::string& file);

  [[nodiscard]] bool has(std::string_view key) const;
  // Each reader marks the key as known; absent keys leave `out` unchanged.
  void read(std::string_view key, int& out);
  void read(std::string_view key, double& out);
  void read(std::string_view key, bool& out);
  void read(std::string_view key, std::uint64_t& out);
  void read(std::string_view key, std::string& out);
  void read(std::string_view key, std::vector<int>& out);
  // Mark a key as known and return its value (a null node when absent).
  [[nodiscard]] YAML::Node child(std::string_view key);
  // Every key of a free-form mapping of numbers (op_costs_us, model.overrides).
  void readNumberMap(std::string_view key, std::vector<std::pair<std::string, double>>& out);

  // Throws InputError for the first key that no reader asked for.
  void rejectUnknown() const;

  [[nodiscard]] std::string where(const YAML::Node& n) const;  // "FILE:LINE"
  [[nodiscard]] std::string field(std::string_view key) const;  // "path.key"
  [[nodiscard]] const std::string& file() const { return file_; }

 private:
  template <class T>
  T scalar(const YAML::Node& n, std::string_view key, const char* type_name) const;

  YAML::Node node_;
  std::string path_;
  const std::string& file_;
  std::set<std::string, std::less<>> known_;
};

}  // namespace crystal::graph
