// Human-readable graph file: JSON with the embedded config (YAML text), the family and
// name tables and one array of op objects per class. Enum fields are written as names.
#include <nlohmann/json.hpp>

#include <fmt/core.h>

#include "crystal/base/error.h"
#include "graph/file_format.h"

namespace crystal::graph {
namespace {

using nlohmann::json;

constexpr int kJsonVersion = 1;

template <class E>
E enumFromName(const json& v, int count, std::string_view (*name)(E), const std::string& where) {
  const auto s = v.get<std::string>();
  for (int i = 0; i < count; ++i)
    if (name(static_cast<E>(i)) == s) return static_cast<E>(i);
  throw InputError(fmt::format("{}: unknown value '{}'", where, s));
}

json opToJson(const Op& op, const Templates& t) {
  json j;
  j["kind"] = toString(op.kind);
  j["stream"] = op.stream;
  if (!t.strings.empty() && op.name < t.strings.size() && op.name != 0) j["name"] = t.strings[op.name];
  switch (op.kind) {
    case OpKind::Compute: j["us"] = op.duration_us; break;
    case OpKind::Collective:
      j["coll"] = toString(op.coll);
      j["family"] = t.families.at(static_cast<std::size_t>(op.comm));
      j["bytes"] = op.bytes;
      j["dtype"] = toString(op.dtype);
      j["red"] = static_cast<int>(op.red);
      j["root"] = op.peer;
      break;
    case OpKind::Send:
    case OpKind::Recv:
      j["family"] = t.families.at(static_cast<std::size_t>(op.comm));
      j["offset"] = op.peer;
      j["bytes"] = op.bytes;
      j["dtype"] = toString(op.dtype);
      break;
    case OpKind::Alloc:
    case OpKind::Free: j["bytes"] = op.bytes; break;
    case OpKind::Record:
    case OpKind::Wait:
    case OpKind::IterationMark: j["tag"] = op.tag; break;
    default: break;
  }
  return j;
}

std::uint32_t internName(Templates& t, const std::string& s) {
  for (std::size_t i = 0; i < t.strings.size(); ++i)
    if (t.strings[i] == s) return static_cast<std::uint32_t>(i);
  t.strings.push_back(s);
  return static_cast<std::uint32_t>(t.strings.size() - 1);
}

std::int32_t familyIndex(const Templates& t, const std::string& s, const std::string& where) {
  for (std::size_t i = 0; i < t.families.size(); ++i)
    if (t.families[i] == s) return static_cast<std::int32_t>(i);
  throw InputError(fmt::format("{}: family '{}' is not in 'families'", where, s));
}

Op opFromJson(const json& j, Templates& t, const std::string& where) {
  Op op;
  op.kind = enumFromName<OpKind>(j.at("kind"), 11, toString, where + ".kind");
  op.stream = j.at("stream").get<std::uint8_t>();
  if (j.contains("name")) op.name = internName(t, j["name"].get<std::string>());
  auto dtype = [&] {
    if (j.contains("dtype")) op.dtype = enumFromName<DType>(j["dtype"], 12, toString, where + ".dtype");
  };
  switch (op.kind) {
    case OpKind::Compute: op.duration_us = j.at("us").get<double>(); break;
    case OpKind::Collective: {
      const auto c = j.at("coll").get<std::string>();
      bool found = false;
      for (int k : {0, 1, 2, 3, 4, 8, 9})
        if (toString(static_cast<CollKind>(k)) == c) op.coll = static_cast<CollKind>(k), found = true;
      if (!found) throw InputError(fmt::format("{}.coll: unknown value '{}'", where, c));
      op.comm = familyIndex(t, j.at("family").get<std::string>(), where + ".family");
      op.bytes = j.at("bytes").get<std::uint64_t>();
      dtype();
      op.red = static_cast<RedOp>(j.value("red", 0));
      op.peer = j.value("root", -1);
      break;
    }
    case OpKind::Send:
    case OpKind::Recv:
      op.comm = familyIndex(t, j.at("family").get<std::string>(), where + ".family");
      op.peer = j.at("offset").get<std::int32_t>();
      op.bytes = j.at("bytes").get<std::uint64_t>();
      dtype();
      break;
    case OpKind::Alloc:
    case OpKind::Free: op.bytes = j.at("bytes").get<std::uint64_t>(); break;
    case OpKind::Record:
    case OpKind::Wait:
    case OpKind::IterationMark: op.tag = j.at("tag").get<std::uint32_t>(); break;
    default: break;
  }
  if (!opEnumsValid(op)) throw InputError(fmt::format("{}: enum value out of range", where));
  return op;
}

}  // namespace

std::string encodeJson(const Config& config, const Templates& t) {
  json j;
  j["format"] = "crystal-graph";
  j["version"] = kJsonVersion;
  j["config"] = toYaml(config);
  j["class_dims"] = t.class_dims;
  j["families"] = t.families;
  json classes = json::array();
  for (const auto& ops : t.classes) {
    json arr = json::array();
    for (const Op& op : ops) arr.push_back(opToJson(op, t));
    classes.push_back(std::move(arr));
  }
  j["classes"] = std::move(classes);
  return j.dump(1) + "\n";
}

DecodedGraph decodeJson(std::string_view data, const std::string& file) {
  json j;
  try {
    j = json::parse(data.begin(), data.end());
  } catch (const json::parse_error& e) {
    throw InputError(fmt::format("{}: malformed JSON at byte offset {}: {}", file, e.byte, e.what()));
  } catch (const json::exception& e) {  // a number out of range (1e999), ...
    throw InputError(fmt::format("{}: malformed JSON: {}", file, e.what()));
  }
  DecodedGraph d;
  std::string where = file;
  try {
    if (!j.is_object() || j.value("format", "") != "crystal-graph")
      throw InputError(fmt::format("{}: not a crystal graph file ('format' is not crystal-graph)", file));
    if (j.at("version").get<int>() != kJsonVersion)
      throw InputError(fmt::format("{}: 'version' {} (this build reads {})", file,
                                   j.at("version").get<int>(), kJsonVersion));
    d.config = parseConfig(j.at("config").get<std::string>(), file + " (embedded config)");
    d.templates.class_dims = j.at("class_dims").get<DimMask>();
    d.templates.families = j.at("families").get<std::vector<std::string>>();
    const json& classes = j.at("classes");
    for (std::size_t c = 0; c < classes.size(); ++c) {
      auto& ops = d.templates.classes.emplace_back();
      const json& arr = classes.at(c);
      for (std::size_t i = 0; i < arr.size(); ++i) {
        where = fmt::format("{}: classes[{}][{}]", file, c, i);
        ops.push_back(opFromJson(arr.at(i), d.templates, where));
      }
    }
  } catch (const json::exception& e) {
    throw InputError(fmt::format("{}: bad graph JSON: {}", where, e.what()));
  }
  if (d.templates.class_dims > kAllDims)
    throw InputError(fmt::format("{}: 'class_dims' {} out of range", file, d.templates.class_dims));
  return d;
}

}  // namespace crystal::graph
