// writeChakraTrace: one rank of a graph -> Chakra ET bytes.
#include <fmt/core.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include <map>

#include "chakra_et.pb.h"
#include "crystal/graph/import.h"
#include "graph/import/chakra_names.h"

namespace crystal::graph {
namespace {

namespace pb = ChakraProtoMsg;

void put(google::protobuf::io::CodedOutputStream& out, const google::protobuf::MessageLite& m) {
  out.WriteVarint32(static_cast<std::uint32_t>(m.ByteSizeLong()));
  m.SerializeWithCachedSizes(&out);
}

pb::AttributeProto* attr(pb::Node& n, const char* name) {
  pb::AttributeProto* a = n.add_attr();
  a->set_name(name);
  return a;
}

pb::CollectiveCommType commType(CollKind k) {
  switch (k) {
    case CollKind::AllReduce:
      return pb::ALL_REDUCE;
    case CollKind::Reduce:
      return pb::REDUCE;
    case CollKind::AllGather:
      return pb::ALL_GATHER;
    case CollKind::Broadcast:
      return pb::BROADCAST;
    case CollKind::ReduceScatter:
      return pb::REDUCE_SCATTER;
    case CollKind::AllToAll:
    case CollKind::AllToAllv:
      return pb::ALL_TO_ALL;
  }
  return pb::ALL_REDUCE;
}

}  // namespace

std::string writeChakraTrace(const Graph& g, std::int32_t rank) {
  const RecordedRank r = recordingOf(g, rank);
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream sos(&bytes);
    google::protobuf::io::CodedOutputStream out(&sos);
    pb::GlobalMetadata meta;
    meta.set_version(chakra::kVersion);
    auto* ra = meta.add_attr();
    ra->set_name(chakra::kRank);
    ra->set_int64_val(rank);
    for (const RecordedComm& c : r.comms) {
      auto* a = meta.add_attr();
      a->set_name(std::string(chakra::kPgPrefix) + c.key);
      a->set_doc_string(c.name);
      for (std::int32_t m : c.ranks) a->mutable_int64_list()->add_values(m);
    }
    put(out, meta);

    std::map<std::uint8_t, std::uint64_t> last_on_stream;  // stream -> node id
    std::map<std::uint32_t, std::uint64_t> record_node;    // event -> Record node id
    pb::Node n;
    for (std::size_t i = 0; i < r.ops.size(); ++i) {
      const Op& op = r.ops[i];
      n.Clear();
      const std::uint64_t id = i;
      n.set_id(id);
      n.set_name(r.strings[op.name]);
      if (auto it = last_on_stream.find(op.stream); it != last_on_stream.end())
        n.add_data_deps(it->second);
      last_on_stream[op.stream] = id;
      attr(n, chakra::kStream)->set_int32_val(op.stream);
      const bool comm =
          op.kind == OpKind::Collective || op.kind == OpKind::Send || op.kind == OpKind::Recv;
      if (comm) {
        const RecordedComm& c = r.comms[static_cast<std::size_t>(op.comm)];
        attr(n, chakra::kIsCpuOp)->set_bool_val(false);
        attr(n, chakra::kCommSize)->set_int64_val(static_cast<std::int64_t>(op.bytes));
        attr(n, chakra::kPgName)->set_string_val(c.key);
        attr(n, chakra::kDtype)->set_int32_val(static_cast<int>(op.dtype));
        attr(n, chakra::kRedOp)->set_int32_val(static_cast<int>(op.red));
        if (op.kind == OpKind::Collective) {
          n.set_type(pb::COMM_COLL_NODE);
          attr(n, chakra::kCommType)->set_int64_val(commType(op.coll));
          attr(n, chakra::kColl)->set_int32_val(static_cast<int>(op.coll));
          if (op.coll == CollKind::Broadcast || op.coll == CollKind::Reduce)
            attr(n, chakra::kRoot)->set_int32_val(op.peer);
        } else {
          const bool send = op.kind == OpKind::Send;
          n.set_type(send ? pb::COMM_SEND_NODE : pb::COMM_RECV_NODE);
          const std::int32_t peer = c.ranks[static_cast<std::size_t>(op.peer)];
          attr(n, chakra::kCommSrc)->set_int32_val(send ? rank : peer);
          attr(n, chakra::kCommDst)->set_int32_val(send ? peer : rank);
          attr(n, chakra::kCommTag)->set_int64_val(op.tag);
        }
      } else if (op.kind == OpKind::Compute) {
        n.set_type(pb::COMP_NODE);
        n.set_duration_micros(static_cast<std::uint64_t>(op.duration_us + 0.5));
        attr(n, chakra::kIsCpuOp)->set_bool_val(false);
        attr(n, chakra::kDurationUs)->set_double_val(op.duration_us);
      } else {
        n.set_type(pb::METADATA_NODE);
        attr(n, chakra::kKind)->set_string_val(std::string(toString(op.kind)));
        if (op.kind == OpKind::Alloc || op.kind == OpKind::Free)
          attr(n, chakra::kBytes)->set_int64_val(static_cast<std::int64_t>(op.bytes));
        if (op.kind == OpKind::Record || op.kind == OpKind::Wait ||
            op.kind == OpKind::IterationMark)
          attr(n, chakra::kTag)->set_int64_val(op.tag);
        if (op.kind == OpKind::Record) record_node[op.tag] = id;
        if (op.kind == OpKind::Wait)
          if (auto it = record_node.find(op.tag); it != record_node.end())
            n.add_data_deps(it->second);
      }
      if (!comm) attr(n, chakra::kDtype)->set_int32_val(static_cast<int>(op.dtype));
      put(out, n);
    }
  }
  return bytes;
}

}  // namespace crystal::graph
