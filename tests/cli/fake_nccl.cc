#include "fake_nccl.h"

#include <cstddef>
#include <cstdio>
#include <cstring>
#include <deque>
#include <string>

namespace {
FakeNcclHook g_hook = nullptr;
int g_version = 22809;
struct FakeComm {
  int rank;
  int nranks;
};
// Comms live until exit: tests may leave them undestroyed, as a crashed program would.
FakeComm* newComm(int rank, int nranks) {
  static std::deque<FakeComm> comms;
  comms.push_back(FakeComm{rank, nranks});
  return &comms.back();
}
void record(const std::string& s) {
  if (g_hook != nullptr) g_hook(s.c_str());
}
struct Id {
  char internal[128];
};
}  // namespace

extern "C" {
void fakeNcclSetHook(FakeNcclHook hook) { g_hook = hook; }
void fakeNcclSetVersion(int code) { g_version = code; }

int ncclGetVersion(int* v) {
  *v = g_version;
  return 0;
}
int ncclGetUniqueId(Id* id) {
  std::memset(id->internal, 0xAB, sizeof id->internal);
  record("nccl:ncclGetUniqueId");
  return 0;
}
int ncclCommInitRank(void** comm, int nranks, Id id, int rank) {
  *comm = newComm(rank, nranks);
  record("nccl:ncclCommInitRank n=" + std::to_string(nranks) + " r=" + std::to_string(rank) +
         " id0=" + std::to_string(static_cast<unsigned char>(id.internal[0])));
  return 0;
}
int ncclCommInitRankConfig(void** comm, int nranks, Id id, int rank, void*) {
  *comm = newComm(rank, nranks);
  record("nccl:ncclCommInitRankConfig n=" + std::to_string(nranks) + " r=" + std::to_string(rank) +
         " id0=" + std::to_string(static_cast<unsigned char>(id.internal[0])));
  return 0;
}
int ncclCommInitRankScalable(void** comm, int nranks, int rank, int nId, Id*, void*) {
  *comm = newComm(rank, nranks);
  record("nccl:ncclCommInitRankScalable n=" + std::to_string(nranks) +
         " r=" + std::to_string(rank) + " nId=" + std::to_string(nId));
  return 0;
}
int ncclCommInitAll(void** comms, int ndev, const int*) {
  for (int i = 0; i < ndev; ++i) comms[i] = newComm(i, ndev);
  record("nccl:ncclCommInitAll n=" + std::to_string(ndev));
  return 0;
}
int ncclCommSplit(void* comm, int color, int key, void** newcomm, void*) {
  auto* parent = static_cast<FakeComm*>(comm);
  // The fake's child: same rank, size 8 (what the tests' splits make).
  *newcomm = color < 0 ? nullptr : newComm(parent->rank % 8, 8);
  record("nccl:ncclCommSplit color=" + std::to_string(color) + " key=" + std::to_string(key));
  return 0;
}
int ncclCommUserRank(void* comm, int* rank) {
  *rank = static_cast<FakeComm*>(comm)->rank;
  return 0;
}
int ncclCommCount(void* comm, int* count) {
  *count = static_cast<FakeComm*>(comm)->nranks;
  return 0;
}
int ncclCommDestroy(void* comm) {
  (void)comm;
  record("nccl:ncclCommDestroy");
  return 0;
}
int ncclCommAbort(void* comm) {
  (void)comm;
  record("nccl:ncclCommAbort");
  return 0;
}
// Data-path calls the rank mapping rewrites (plugin/interpose/nccl_mapped_calls.cc): each
// records the count and the peer/root NCCL received.
int ncclAllGather(const void*, void*, std::size_t n, int, void*, void*) {
  record("nccl:ncclAllGather count=" + std::to_string(n));
  return 0;
}
int ncclReduceScatter(const void*, void*, std::size_t n, int, int, void*, void*) {
  record("nccl:ncclReduceScatter count=" + std::to_string(n));
  return 0;
}
int ncclAlltoAll(const void*, void*, std::size_t n, int, void*, void*) {
  record("nccl:ncclAlltoAll count=" + std::to_string(n));
  return 0;
}
int ncclSend(const void*, std::size_t n, int, int peer, void*, void*) {
  record("nccl:ncclSend count=" + std::to_string(n) + " peer=" + std::to_string(peer));
  return 0;
}
int ncclRecv(void*, std::size_t n, int, int peer, void*, void*) {
  record("nccl:ncclRecv count=" + std::to_string(n) + " peer=" + std::to_string(peer));
  return 0;
}
int ncclBroadcast(const void*, void*, std::size_t n, int, int root, void*, void*) {
  record("nccl:ncclBroadcast count=" + std::to_string(n) + " root=" + std::to_string(root));
  return 0;
}
int ncclReduce(const void*, void*, std::size_t n, int, int, int root, void*, void*) {
  record("nccl:ncclReduce count=" + std::to_string(n) + " root=" + std::to_string(root));
  return 0;
}
int ncclAllReduce(const void*, void*, std::size_t n, int, int op, void*, void*) {
  record("nccl:ncclAllReduce count=" + std::to_string(n) + " op=" + std::to_string(op));
  return 0;
}
// Group calls the interposer counts (plugin/interpose/nccl_mirror_calls.cc).
int ncclGroupStart() {
  record("nccl:ncclGroupStart");
  return 0;
}
int ncclGroupEnd() {
  record("nccl:ncclGroupEnd");
  return 0;
}
int ncclGroupSimulateEnd(void*) {
  record("nccl:ncclGroupSimulateEnd");
  return 0;
}
int ncclRedOpCreatePreMulSum(int* op, void*, int, int, void*) {
  *op = 5;  // the first custom op (ncclNumOps)
  record("nccl:ncclRedOpCreatePreMulSum");
  return 0;
}
}
