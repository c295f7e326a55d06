#include "graph/template_builder.h"

#include <algorithm>

namespace crystal::graph {

TemplateBuilder::TemplateBuilder(Templates& t, std::vector<Op>& ops, const WorkloadConfig& w)
    : t_(t), ops_(ops), w_(w) {
  dtype_ = w.dtype == "fp32" ? DType::Float32 : w.dtype == "fp16" ? DType::Float16 : DType::BFloat16;
}

std::uint32_t TemplateBuilder::intern(std::string_view s) {
  auto it = std::find(t_.strings.begin(), t_.strings.end(), s);
  if (it != t_.strings.end()) return static_cast<std::uint32_t>(it - t_.strings.begin());
  t_.strings.emplace_back(s);
  return static_cast<std::uint32_t>(t_.strings.size() - 1);
}

std::int32_t TemplateBuilder::family(std::string_view f) {
  auto it = std::find(t_.families.begin(), t_.families.end(), f);
  if (it != t_.families.end()) return static_cast<std::int32_t>(it - t_.families.begin());
  t_.families.emplace_back(f);
  return static_cast<std::int32_t>(t_.families.size() - 1);
}

Op& TemplateBuilder::push(OpKind kind, std::uint8_t stream) {
  Op& op = ops_.emplace_back();
  op.kind = kind;
  op.stream = stream;
  op.dtype = dtype_;
  return op;
}

void TemplateBuilder::compute(std::string_view name, double modelled_us) {
  double us = modelled_us;
  for (const auto& [k, v] : w_.op_costs_us)
    if (k == name) us = v;
  Op& op = push(OpKind::Compute, kComputeStream);
  op.duration_us = us;
  op.name = intern(name);
}

void TemplateBuilder::collective(std::string_view fam, CollKind kind, std::uint64_t bytes,
                                 std::string_view name, std::uint8_t stream) {
  const std::int32_t f = family(fam);
  const std::uint32_t n = intern(name);
  Op& op = push(OpKind::Collective, stream);
  op.coll = kind;
  op.comm = f;
  op.bytes = bytes;
  op.name = n;
}

void TemplateBuilder::send(std::string_view fam, std::int32_t offset, std::uint64_t bytes,
                           std::string_view name) {
  const std::int32_t f = family(fam);
  const std::uint32_t n = intern(name);
  Op& op = push(OpKind::Send, kPipeStream);
  op.comm = f;
  op.peer = offset;
  op.bytes = bytes;
  op.name = n;
}

void TemplateBuilder::recv(std::string_view fam, std::int32_t offset, std::uint64_t bytes,
                           std::string_view name) {
  const std::int32_t f = family(fam);
  const std::uint32_t n = intern(name);
  Op& op = push(OpKind::Recv, kPipeStream);
  op.comm = f;
  op.peer = offset;
  op.bytes = bytes;
  op.name = n;
}

void TemplateBuilder::groupBegin(std::uint8_t stream) { push(OpKind::GroupBegin, stream); }
void TemplateBuilder::groupEnd(std::uint8_t stream) { push(OpKind::GroupEnd, stream); }

void TemplateBuilder::alloc(std::uint64_t bytes, std::string_view name) {
  const std::uint32_t n = intern(name);
  Op& op = push(OpKind::Alloc, kComputeStream);
  op.bytes = bytes;
  op.name = n;
}

void TemplateBuilder::free(std::uint64_t bytes, std::string_view name) {
  const std::uint32_t n = intern(name);
  Op& op = push(OpKind::Free, kComputeStream);
  op.bytes = bytes;
  op.name = n;
}

void TemplateBuilder::dependency(std::uint8_t from, std::uint8_t to) {
  const std::uint32_t e = next_event_++;
  push(OpKind::Record, from).tag = e;
  push(OpKind::Wait, to).tag = e;
}

void TemplateBuilder::iteration(std::uint32_t i) { push(OpKind::IterationMark, kComputeStream).tag = i; }

}  // namespace crystal::graph
