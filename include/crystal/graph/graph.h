// The execution graph of a whole target, stored as templates per equivalence class of ranks.
//
// Memory is O(templates + layout): no per-rank op list exists. Any rank's stream is
// materialised on demand. replay/ uses classes to simulate one representative per class
// and materialise() where it needs a particular rank.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "crystal/config/config.h"
#include "crystal/graph/op.h"

namespace crystal::graph {

// A communicator of the target. Layout communicators are not stored rank by rank: members
// are computed from the layout (first rank + strides), so 16384-rank worlds cost little.
struct CommInfo {
  std::int32_t id = -1;
  std::string_view family;  // "world", "tp", "dp", "pp", "ep", "cp", "dp-cp", "mp", or an
                            // explicit comm's name
  std::int32_t size = 0;
};

class CommTable {
 public:
  virtual ~CommTable() = default;
  virtual std::int32_t count() const = 0;
  virtual CommInfo info(std::int32_t comm) const = 0;
  // Global rank of member `index` (0..size-1) of `comm`.
  virtual std::int32_t member(std::int32_t comm, std::int32_t index) const = 0;
  // Index of `rank` in `comm`, or -1 if not a member.
  virtual std::int32_t indexOf(std::int32_t comm, std::int32_t rank) const = 0;
  // The communicator of family `family` that contains `rank` (-1 if none).
  virtual std::int32_t commOf(std::string_view family, std::int32_t rank) const = 0;
};

class Graph {
 public:
  virtual ~Graph() = default;
  virtual const Config& config() const = 0;
  virtual std::int32_t worldSize() const = 0;
  virtual const CommTable& comms() const = 0;

  // Equivalence classes: ranks of one class run the same ops (same kinds, sizes, compute
  // times) up to renaming of communicators and peers.
  virtual std::int32_t numClasses() const = 0;
  virtual std::int32_t classOf(std::int32_t rank) const = 0;
  virtual std::int32_t representative(std::int32_t cls) const = 0;  // lowest rank of class
  virtual std::int64_t classSize(std::int32_t cls) const = 0;

  // The stream of `rank` with comm ids and peers resolved. `out` is cleared first.
  virtual void materialize(std::int32_t rank, std::vector<Op>& out) const = 0;
  virtual std::size_t opCount(std::int32_t rank) const = 0;
  virtual std::uint64_t totalOps() const = 0;  // over the whole world
  virtual std::string_view name(std::uint32_t name_index) const = 0;

  // Symbolic form (added for replay/ and tools; graphs without templates return empty).
  // The template of class `cls`: ops as materialize() gives them except that `comm` is an
  // index into families() and, for Send/Recv, `peer` is the offset of the peer's member
  // index from this rank's member index in that family's comm (modulo the comm size).
  // Ranks of one class share the template; materialize(rank) resolves it.
  virtual std::span<const Op> classTemplate(std::int32_t /*cls*/) const { return {}; }
  virtual std::span<const std::string> families() const { return {}; }
};

// Build the graph of a config's workload (dense/moe generator or graph file).
// Throws InputError on inconsistent input.
std::unique_ptr<Graph> buildGraph(const Config& config);

// Read a graph file written by `crystal graph expand` (binary or JSON, told apart by the
// first bytes). The config embedded in the file comes back through Graph::config().
// Throws InputError naming the file and the byte offset of any damage.
std::unique_ptr<Graph> loadGraphFile(const std::string& path);

// Write `g` (which must come from buildGraph/loadGraphFile) as compact binary or JSON.
void saveGraphBinary(const Graph& g, const std::string& path);
void saveGraphJson(const Graph& g, const std::string& path);

}  // namespace crystal::graph
