// Graphs from recordings: what a real rank did (recorded by the profiler plugin, a PyTorch
// profiler trace or a Chakra execution trace) becomes the execution graph of the target.
//
// A recording holds the op stream of one real rank. Slicing takes one recording per
// equivalence class of ranks (the pipeline stage, as for generated graphs), turns each into
// a class template (communicators become layout families, peers become member offsets)
// and builds the graph of every rank of the target from them and the layout. Nothing is
// guessed: a missing class, a communicator that fits no layout family, or two recordings of
// one class that disagree is an InputError naming the file and the record.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "crystal/config/config.h"
#include "crystal/graph/graph.h"
#include "crystal/graph/op.h"

namespace crystal::graph {

// A communicator as the recorded rank saw it.
struct RecordedComm {
  std::string key;   // identity inside the recording (NCCL comm hash, process group name)
  std::string name;  // what the program called it (PG description, NCCL commName); a layout
                     // family name ("tp", "dp", ...) settles ties between families
  std::int32_t size = 0;
  std::int32_t rank = -1;           // the recorded rank's index in it, -1 if unknown
  std::vector<std::int32_t> ranks;  // global ranks, member i = ranks[i]; empty if unknown
  friend bool operator==(const RecordedComm&, const RecordedComm&) = default;
};

// The op stream of one real rank.
//
// ops[i].comm indexes `comms` for Collective/Send/Recv (-1 otherwise); a Send/Recv `peer` is
// the peer's index in that communicator (what NCCL and PyTorch report); Broadcast/Reduce
// `peer` is the root's index. Send/Recv tags are ignored (materialize() numbers them).
// ops[i].name indexes `strings`. `where[i]`, when given, says which record op i came from
// ("traceEvents[12]", "node 7") for error messages.
struct RecordedRank {
  std::string source;  // file it came from
  std::int32_t rank = -1;
  std::vector<RecordedComm> comms;
  std::vector<std::string> strings{""};
  std::vector<Op> ops;
  std::vector<std::string> where;
  std::vector<std::string> notes;  // assumptions the importer had to make, for the user
};

// Build the target graph of `config` from recordings. Classes are the pipeline stages (as
// for generated graphs); every stage needs at least one recording. Throws InputError naming
// the missing stages, or the file and op that does not fit.
std::unique_ptr<Graph> sliceRecordings(const Config& config, std::span<const RecordedRank> ranks);

// The stream of `rank` of `g` as a recording (comm members and family names filled in):
// what a perfect recorder on that rank would give. Used by exporters and tests.
RecordedRank recordingOf(const Graph& g, std::int32_t rank);

// PyTorch profiler (Kineto) Chrome-trace JSON of one rank. The rank is the trace's
// distributedInfo.rank. Throws InputError naming `source` and the event index.
RecordedRank parseKinetoTrace(std::string_view json, const std::string& source);
RecordedRank readKinetoTrace(const std::string& path);

// A record-mode file (CRYSTAL_RECORD, written by the ncclProfiler_v5 table of
// libnccl-net-crystal.so): every NCCL call of one process. Communicators are known by size
// and the rank's place in them (NCCL does not tell the members). It holds no compute time:
// the graph gets the communication and its streams, and a note says so. Throws InputError
// naming `source` and the line.
RecordedRank parseNcclRecording(std::string_view text, const std::string& source);
RecordedRank readNcclRecording(const std::string& path);

// MLCommons Chakra execution trace (.et: varint-length-delimited protobuf messages,
// GlobalMetadata first, then Nodes) of one rank. The rank is the metadata's "rank" attribute
// or the number before ".et" in the file name. Throws InputError naming `source` and the
// node index (or byte offset).
RecordedRank parseChakraTrace(std::string_view bytes, const std::string& source);
RecordedRank readChakraTrace(const std::string& path);

// The Chakra ET of `rank` of `g`. Ops map to Chakra node types and attributes other tools
// read (comm_type, comm_size, comm_src/dst, pg_name, duration_micros, data_deps along each
// stream and across waits); "crystal.*" attributes keep what Chakra has no field for, so
// parseChakraTrace gives back the same recording.
std::string writeChakraTrace(const Graph& g, std::int32_t rank);

}  // namespace crystal::graph
