// Appends ops to one class template, interning names and families, numbering events.
#pragma once

#include <string_view>

#include "crystal/config/config.h"
#include "graph/templates.h"

namespace crystal::graph {

inline constexpr std::uint8_t kComputeStream = 0;  // compute, TP/CP/EP collectives
inline constexpr std::uint8_t kPipeStream = 1;     // pipeline send/recv
inline constexpr std::uint8_t kDpStream = 2;       // data-parallel gradient/parameter sync

class TemplateBuilder {
 public:
  TemplateBuilder(Templates& t, std::vector<Op>& ops, const WorkloadConfig& w);

  // Compute op; its duration is workload.op_costs_us[name] when given, else `modelled_us`.
  void compute(std::string_view name, double modelled_us);
  void collective(std::string_view family, CollKind kind, std::uint64_t bytes,
                  std::string_view name, std::uint8_t stream = kComputeStream);
  void send(std::string_view family, std::int32_t offset, std::uint64_t bytes,
            std::string_view name);
  void recv(std::string_view family, std::int32_t offset, std::uint64_t bytes,
            std::string_view name);
  void groupBegin(std::uint8_t stream);
  void groupEnd(std::uint8_t stream);
  void alloc(std::uint64_t bytes, std::string_view name);
  void free(std::uint64_t bytes, std::string_view name);
  // `to` waits for everything issued so far on `from` (Record on from, Wait on to).
  void dependency(std::uint8_t from, std::uint8_t to);
  void iteration(std::uint32_t i);

 private:
  std::uint32_t intern(std::string_view s);
  std::int32_t family(std::string_view f);
  Op& push(OpKind kind, std::uint8_t stream);

  Templates& t_;
  std::vector<Op>& ops_;
  const WorkloadConfig& w_;
  DType dtype_;
  std::uint32_t next_event_ = 0;
};

}  // namespace crystal::graph
