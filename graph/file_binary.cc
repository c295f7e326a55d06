// Compact binary graph file (docs/graph.md, "Binary format"): a 48-byte header (magic,
// version, payload size, FNV-1a checksum, counts) then the embedded config as YAML, the
// family and name tables and one op array per class (40 bytes per op, little-endian).
#include <bit>
#include <cstring>
#include <fstream>

#include <fmt/core.h>

#include "crystal/base/error.h"
#include "graph/file_format.h"
#include "graph/template_graph.h"

namespace crystal::graph {
namespace {

static_assert(std::endian::native == std::endian::little, "graph files are little-endian");

constexpr char kMagic[8] = {'C', 'R', 'Y', 'G', 'R', 'A', 'P', 'H'};
constexpr std::uint32_t kVersion = 1;
constexpr std::size_t kHeaderSize = 48;
constexpr std::size_t kOpSize = 40;

class Writer {
 public:
  template <class T>
  void put(T v) {
    const auto* p = reinterpret_cast<const char*>(&v);
    buf_.insert(buf_.end(), p, p + sizeof(T));
  }
  void str(std::string_view s) {
    put(static_cast<std::uint32_t>(s.size()));
    buf_.insert(buf_.end(), s.begin(), s.end());
  }
  std::string& buf() { return buf_; }

 private:
  std::string buf_;
};

class Reader {
 public:
  Reader(std::string_view data, std::size_t pos, const std::string& file)
      : data_(data), pos_(pos), file_(&file) {}
  template <class T>
  T get(std::string_view what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, data_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string str(std::string_view what) {
    const auto n = get<std::uint32_t>(what);
    need(n, what);
    std::string s(data_.substr(pos_, n));
    pos_ += n;
    return s;
  }
  void need(std::size_t n, std::string_view what) const {
    if (data_.size() - pos_ < n)
      throw InputError(fmt::format("{}: truncated at byte offset {}: {} needs {} bytes, {} left",
                                   *file_, pos_, what, n, data_.size() - pos_));
  }
  [[nodiscard]] std::size_t pos() const { return pos_; }
  [[nodiscard]] std::size_t left() const { return data_.size() - pos_; }
  [[noreturn]] void bad(std::size_t at, std::string_view what) const {
    throw InputError(fmt::format("{}: corrupted at byte offset {}: {}", *file_, at, what));
  }

 private:
  std::string_view data_;
  std::size_t pos_;
  const std::string* file_;
};

void putOp(Writer& w, const Op& op) {
  w.put(static_cast<std::uint8_t>(op.kind));
  w.put(op.stream);
  w.put(static_cast<std::uint8_t>(op.coll));
  w.put(static_cast<std::uint8_t>(op.dtype));
  w.put(static_cast<std::uint8_t>(op.red));
  w.put(std::uint8_t{0});
  w.put(std::uint16_t{0});
  w.put(op.comm);
  w.put(op.peer);
  w.put(op.tag);
  w.put(op.name);
  w.put(op.bytes);
  w.put(op.duration_us);
}

Op getOp(Reader& r) {
  Op op;
  op.kind = static_cast<OpKind>(r.get<std::uint8_t>("op kind"));
  op.stream = r.get<std::uint8_t>("op stream");
  op.coll = static_cast<CollKind>(r.get<std::uint8_t>("op coll"));
  op.dtype = static_cast<DType>(r.get<std::uint8_t>("op dtype"));
  op.red = static_cast<RedOp>(r.get<std::uint8_t>("op red"));
  (void)r.get<std::uint8_t>("op padding");
  (void)r.get<std::uint16_t>("op padding");
  op.comm = r.get<std::int32_t>("op comm");
  op.peer = r.get<std::int32_t>("op peer");
  op.tag = r.get<std::uint32_t>("op tag");
  op.name = r.get<std::uint32_t>("op name");
  op.bytes = r.get<std::uint64_t>("op bytes");
  op.duration_us = r.get<double>("op duration");
  return op;
}

}  // namespace

std::uint64_t fnv1a(std::string_view data) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : data) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

std::string encodeBinary(const Config& config, const Templates& t) {
  Writer p;
  p.str(toYaml(config));
  for (const auto& f : t.families) p.str(f);
  for (const auto& s : t.strings) p.str(s);
  for (const auto& ops : t.classes) {
    p.put(static_cast<std::uint64_t>(ops.size()));
    for (const Op& op : ops) putOp(p, op);
  }
  Writer h;
  for (char c : kMagic) h.put(c);
  h.put(kVersion);
  h.put(static_cast<std::uint32_t>(kHeaderSize));
  h.put(static_cast<std::uint64_t>(p.buf().size()));
  h.put(fnv1a(p.buf()));
  h.put(static_cast<std::uint32_t>(t.classes.size()));
  h.put(static_cast<std::uint32_t>(t.families.size()));
  h.put(static_cast<std::uint32_t>(t.strings.size()));
  h.put(static_cast<std::uint32_t>(t.class_dims));
  return h.buf() + p.buf();
}

bool looksBinary(std::string_view data) {
  return data.size() >= sizeof(kMagic) && std::memcmp(data.data(), kMagic, sizeof(kMagic)) == 0;
}

DecodedGraph decodeBinary(std::string_view data, const std::string& file, bool verify_checksum) {
  Reader r(data, 0, file);
  r.need(kHeaderSize, "header");
  if (!looksBinary(data)) r.bad(0, "not a crystal graph file (magic)");
  r = Reader(data, sizeof(kMagic), file);
  if (const auto v = r.get<std::uint32_t>("version"); v != kVersion)
    r.bad(8, fmt::format("version {} (this build reads {})", v, kVersion));
  if (r.get<std::uint32_t>("header size") != kHeaderSize) r.bad(12, "header size");
  const auto payload = r.get<std::uint64_t>("payload size");
  const auto checksum = r.get<std::uint64_t>("checksum");
  const auto nclasses = r.get<std::uint32_t>("class count");
  const auto nfamilies = r.get<std::uint32_t>("family count");
  const auto nstrings = r.get<std::uint32_t>("string count");
  const auto class_dims = r.get<std::uint32_t>("class dims");
  if (payload != data.size() - kHeaderSize)
    throw InputError(fmt::format("{}: truncated or extended: header (byte offset 16) says {} "
                                 "payload bytes, file has {}",
                                 file, payload, data.size() - kHeaderSize));
  if (verify_checksum && fnv1a(data.substr(kHeaderSize)) != checksum)
    r.bad(24, "checksum does not match the payload");
  if (class_dims > kAllDims) r.bad(44, fmt::format("class dims {}", class_dims));

  DecodedGraph d;
  d.templates.class_dims = class_dims;
  const std::size_t config_at = r.pos();
  const std::string yaml = r.str("embedded config");
  d.config = parseConfig(yaml, fmt::format("{} (config at byte offset {})", file, config_at));
  for (std::uint32_t i = 0; i < nfamilies; ++i) d.templates.families.push_back(r.str("family name"));
  d.templates.strings.clear();
  for (std::uint32_t i = 0; i < nstrings; ++i) d.templates.strings.push_back(r.str("name"));
  if (d.templates.strings.empty()) d.templates.strings.emplace_back();
  for (std::uint32_t c = 0; c < nclasses; ++c) {
    const std::size_t at = r.pos();
    const auto n = r.get<std::uint64_t>("op count");
    if (n > r.left() / kOpSize)
      r.bad(at, fmt::format("class {} claims {} ops, only {} bytes left", c, n, r.left()));
    auto& ops = d.templates.classes.emplace_back();
    ops.reserve(n);
    for (std::uint64_t i = 0; i < n; ++i) {
      const std::size_t op_at = r.pos();
      ops.push_back(getOp(r));
      if (!opEnumsValid(ops.back()))
        r.bad(op_at, fmt::format("class {} op {}: kind/coll/dtype/red value out of range", c, i));
    }
  }
  if (r.left() != 0) r.bad(r.pos(), fmt::format("{} unexpected bytes after the last class", r.left()));
  return d;
}

}  // namespace crystal::graph
