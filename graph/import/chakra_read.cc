// parseChakraTrace: Chakra ET bytes of one rank -> RecordedRank.
//
// Files written by writeChakraTrace come back exactly. Files from other Chakra producers
// are read for what they carry: COMP_NODE durations, COMM_* nodes with comm_type, comm_size,
// pg_name (members from a "pg:<name>" metadata attribute) and comm_src/comm_dst, in file
// order on stream 0 unless "crystal.stream" says otherwise; memory/storage nodes are skipped
// with a note.
#include <fmt/core.h>
#include <google/protobuf/io/coded_stream.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <map>
#include <sstream>

#include "chakra_et.pb.h"
#include "crystal/base/error.h"
#include "crystal/graph/import.h"
#include "graph/import/chakra_names.h"

namespace crystal::graph {
namespace {

namespace pb = ChakraProtoMsg;

// Integer value of an attribute whatever integer field the producer chose.
std::optional<std::int64_t> intOf(const pb::AttributeProto& a) {
  switch (a.value_case()) {
    case pb::AttributeProto::kInt32Val:
      return a.int32_val();
    case pb::AttributeProto::kInt64Val:
      return a.int64_val();
    case pb::AttributeProto::kUint32Val:
      return a.uint32_val();
    case pb::AttributeProto::kUint64Val:
      if (a.uint64_val() > static_cast<std::uint64_t>(INT64_MAX)) return std::nullopt;
      return static_cast<std::int64_t>(a.uint64_val());
    default:
      return std::nullopt;
  }
}

const pb::AttributeProto* find(const pb::Node& n, std::string_view name) {
  for (const auto& a : n.attr())
    if (a.name() == name) return &a;
  return nullptr;
}

class Reader {
 public:
  Reader(std::string_view bytes, const std::string& source)
      : in_(reinterpret_cast<const std::uint8_t*>(bytes.data()), static_cast<int>(bytes.size())),
        size_(bytes.size()),
        source_(source) {}

  RecordedRank read() {
    if (size_ > static_cast<std::size_t>(INT32_MAX))
      throw InputError(
          fmt::format("{}: {} bytes; Chakra files above 2 GiB are not read", source_, size_));
    rec_.source = source_;
    pb::GlobalMetadata meta;
    if (!next(meta, "GlobalMetadata"))
      throw InputError(
          fmt::format("{}: empty file; a Chakra ET starts with GlobalMetadata", source_));
    readMetadata(meta);
    pb::Node n;
    for (std::size_t i = 0; next(n, fmt::format("node {}", i).c_str()); ++i) readNode(n, i);
    return std::move(rec_);
  }

 private:
  // One length-delimited message; false at a clean end of file.
  bool next(google::protobuf::MessageLite& m, const char* what) {
    const int at = in_.CurrentPosition();
    if (static_cast<std::size_t>(at) == size_) return false;
    std::uint32_t len = 0;
    if (!in_.ReadVarint32(&len))
      throw InputError(
          fmt::format("{}: {} at byte {}: bad or truncated length", source_, what, at));
    if (len > size_ - static_cast<std::size_t>(in_.CurrentPosition()))
      throw InputError(fmt::format("{}: {} at byte {}: length {} runs past the end of the file",
                                   source_, what, at, len));
    const auto limit = in_.PushLimit(static_cast<int>(len));
    if (!m.ParseFromCodedStream(&in_) || !in_.ConsumedEntireMessage())
      throw InputError(fmt::format("{}: {} at byte {}: not a valid {} message", source_, what, at,
                                   m.GetTypeName()));
    in_.PopLimit(limit);
    return true;
  }

  void readMetadata(const pb::GlobalMetadata& meta) {
    for (const auto& a : meta.attr()) {
      if (a.name() == chakra::kRank) {
        const auto v = intOf(a);
        if (!v || *v < 0 || *v > INT32_MAX)
          throw InputError(fmt::format("{}: metadata 'rank' is not a rank number", source_));
        rec_.rank = static_cast<std::int32_t>(*v);
      } else if (a.name().starts_with(chakra::kPgPrefix)) {
        RecordedComm c;
        c.key = a.name().substr(std::string_view(chakra::kPgPrefix).size());
        c.name = a.doc_string();
        if (a.value_case() != pb::AttributeProto::kInt64List)
          throw InputError(
              fmt::format("{}: metadata '{}' is not a list of ranks", source_, a.name()));
        for (std::int64_t m : a.int64_list().values()) {
          if (m < 0 || m > INT32_MAX)
            throw InputError(fmt::format("{}: metadata '{}' holds rank {}", source_, a.name(), m));
          c.ranks.push_back(static_cast<std::int32_t>(m));
        }
        c.size = static_cast<std::int32_t>(c.ranks.size());
        pgs_[c.key] = std::move(c);
      }
    }
    if (rec_.rank < 0) rec_.rank = rankFromFileName();
    for (auto& [key, c] : pgs_) {
      const auto me = std::find(c.ranks.begin(), c.ranks.end(), rec_.rank);
      if (me == c.ranks.end())
        throw InputError(
            fmt::format("{}: process group '{}' does not hold rank {}", source_, key, rec_.rank));
      c.rank = static_cast<std::int32_t>(me - c.ranks.begin());
    }
  }

  // Chakra names per-rank files NAME.<rank>.et.
  std::int32_t rankFromFileName() const {
    std::string_view s = source_;
    if (s.ends_with(".et")) s.remove_suffix(3);
    const auto dot = s.rfind('.');
    if (dot != std::string_view::npos) {
      std::int32_t v = -1;
      const auto digits = s.substr(dot + 1);
      const auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
      if (ec == std::errc{} && p == digits.data() + digits.size() && v >= 0) return v;
    }
    throw InputError(
        fmt::format("{}: no 'rank' metadata and no NAME.<rank>.et file name: which "
                    "rank recorded it?",
                    source_));
  }

  [[noreturn]] void fail(std::size_t i, const pb::Node& n, const std::string& what) const {
    throw InputError(
        fmt::format("{}: node {} (id {}, '{}'): {}", source_, i, n.id(), n.name(), what));
  }

  std::int64_t intAttr(const pb::Node& n, std::size_t i, const char* name, std::int64_t lo,
                       std::int64_t hi, std::optional<std::int64_t> fallback = std::nullopt) const {
    const pb::AttributeProto* a = find(n, name);
    if (a == nullptr) {
      if (fallback) return *fallback;
      fail(i, n, fmt::format("attribute '{}' missing", name));
    }
    const auto v = intOf(*a);
    if (!v || *v < lo || *v > hi)
      fail(i, n, fmt::format("attribute '{}' not an integer in {}..{}", name, lo, hi));
    return *v;
  }

  std::int32_t commIndex(const pb::Node& n, std::size_t i) {
    const pb::AttributeProto* a = find(n, chakra::kPgName);
    if (a == nullptr || a->value_case() != pb::AttributeProto::kStringVal)
      fail(i, n, "communication node without a 'pg_name' string");
    const auto it = pgs_.find(a->string_val());
    if (it == pgs_.end())
      fail(i, n,
           fmt::format("process group '{}' has no 'pg:{}' member list in the metadata",
                       a->string_val(), a->string_val()));
    for (std::size_t k = 0; k < rec_.comms.size(); ++k)
      if (rec_.comms[k].key == it->first) return static_cast<std::int32_t>(k);
    rec_.comms.push_back(it->second);
    return static_cast<std::int32_t>(rec_.comms.size() - 1);
  }

  void readNode(const pb::Node& n, std::size_t i) {
    Op op;
    op.stream = static_cast<std::uint8_t>(intAttr(n, i, chakra::kStream, 0, 255, 0));
    op.dtype =
        static_cast<DType>(intAttr(n, i, chakra::kDtype, 0, 11, static_cast<int>(DType::BFloat16)));
    switch (n.type()) {
      case pb::COMP_NODE:
        op.kind = OpKind::Compute;
        if (const auto* d = find(n, chakra::kDurationUs)) {
          if (d->value_case() != pb::AttributeProto::kDoubleVal || !(d->double_val() >= 0))
            fail(i, n, "'crystal.duration_us' is not a duration");
          op.duration_us = d->double_val();
        } else {
          op.duration_us = static_cast<double>(n.duration_micros());
        }
        break;
      case pb::COMM_COLL_NODE:
      case pb::COMM_SEND_NODE:
      case pb::COMM_RECV_NODE:
        readComm(n, i, op);
        break;
      case pb::METADATA_NODE:
        if (!readMetadataNode(n, i, op)) return;
        break;
      default:
        if (skipped_++ == 0)
          rec_.notes.push_back(
              fmt::format("node {}: node type {} has no graph op; such nodes are "
                          "skipped",
                          i, pb::NodeType_Name(n.type())));
        return;
    }
    std::uint32_t name = 0;
    if (!n.name().empty()) {
      auto [it, fresh] = names_.emplace(n.name(), static_cast<std::uint32_t>(rec_.strings.size()));
      if (fresh) rec_.strings.push_back(n.name());
      name = it->second;
    }
    op.name = name;
    rec_.ops.push_back(op);
    rec_.where.push_back(fmt::format("node {}", i));
  }

  void readComm(const pb::Node& n, std::size_t i, Op& op) {
    op.comm = commIndex(n, i);
    const RecordedComm& c = rec_.comms[static_cast<std::size_t>(op.comm)];
    op.bytes = static_cast<std::uint64_t>(intAttr(n, i, chakra::kCommSize, 0, INT64_MAX));
    op.red = static_cast<RedOp>(intAttr(n, i, chakra::kRedOp, 0, 4, 0));
    if (n.type() == pb::COMM_COLL_NODE) {
      op.kind = OpKind::Collective;
      if (find(n, chakra::kColl) != nullptr) {
        const auto k = intAttr(n, i, chakra::kColl, 0, 9);
        if (!(k <= 4 || k == 8 || k == 9)) fail(i, n, "'crystal.coll' is not a collective");
        op.coll = static_cast<CollKind>(k);
      } else {
        switch (intAttr(n, i, chakra::kCommType, 0, 9)) {
          case pb::ALL_REDUCE:
            op.coll = CollKind::AllReduce;
            break;
          case pb::REDUCE:
            op.coll = CollKind::Reduce;
            break;
          case pb::ALL_GATHER:
            op.coll = CollKind::AllGather;
            break;
          case pb::BROADCAST:
            op.coll = CollKind::Broadcast;
            break;
          case pb::ALL_TO_ALL:
            op.coll = CollKind::AllToAll;
            break;
          case pb::REDUCE_SCATTER:
            op.coll = CollKind::ReduceScatter;
            break;
          default:
            fail(i, n,
                 "comm_type GATHER, SCATTER, REDUCE_SCATTER_BLOCK or BARRIER has no graph "
                 "collective");
        }
      }
      if (op.coll == CollKind::Broadcast || op.coll == CollKind::Reduce)
        op.peer = static_cast<std::int32_t>(intAttr(n, i, chakra::kRoot, 0, c.size - 1, 0));
      return;
    }
    const bool send = n.type() == pb::COMM_SEND_NODE;
    op.kind = send ? OpKind::Send : OpKind::Recv;
    const auto peer = intAttr(n, i, send ? chakra::kCommDst : chakra::kCommSrc, 0, INT32_MAX);
    const auto it = std::find(c.ranks.begin(), c.ranks.end(), static_cast<std::int32_t>(peer));
    if (it == c.ranks.end())
      fail(i, n, fmt::format("peer rank {} is not in process group '{}'", peer, c.key));
    op.peer = static_cast<std::int32_t>(it - c.ranks.begin());
    op.tag = static_cast<std::uint32_t>(intAttr(n, i, chakra::kCommTag, 0, UINT32_MAX, 0));
  }

  bool readMetadataNode(const pb::Node& n, std::size_t i, Op& op) {
    const pb::AttributeProto* k = find(n, chakra::kKind);
    if (k == nullptr) return false;  // another producer's metadata
    static const std::pair<std::string_view, OpKind> kKinds[] = {
        {"group_begin", OpKind::GroupBegin},
        {"group_end", OpKind::GroupEnd},
        {"alloc", OpKind::Alloc},
        {"free", OpKind::Free},
        {"record", OpKind::Record},
        {"wait", OpKind::Wait},
        {"iteration", OpKind::IterationMark}};
    const auto* hit = std::find_if(std::begin(kKinds), std::end(kKinds),
                                   [&](const auto& p) { return p.first == k->string_val(); });
    if (hit == std::end(kKinds))
      fail(i, n, fmt::format("'crystal.kind' '{}' unknown", k->string_val()));
    op.kind = hit->second;
    if (op.kind == OpKind::Alloc || op.kind == OpKind::Free)
      op.bytes = static_cast<std::uint64_t>(intAttr(n, i, chakra::kBytes, 0, INT64_MAX));
    if (op.kind == OpKind::Record || op.kind == OpKind::Wait || op.kind == OpKind::IterationMark)
      op.tag = static_cast<std::uint32_t>(intAttr(n, i, chakra::kTag, 0, UINT32_MAX));
    return true;
  }

  google::protobuf::io::CodedInputStream in_;
  std::size_t size_;
  const std::string& source_;
  RecordedRank rec_;
  std::map<std::string, RecordedComm> pgs_;
  std::map<std::string, std::uint32_t> names_;
  std::size_t skipped_ = 0;
};

}  // namespace

RecordedRank parseChakraTrace(std::string_view bytes, const std::string& source) {
  return Reader(bytes, source).read();
}

RecordedRank readChakraTrace(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(fmt::format("{}: cannot open", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  return parseChakraTrace(ss.str(), path);
}

}  // namespace crystal::graph
