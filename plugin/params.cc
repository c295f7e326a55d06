#include "params.h"

#include <charconv>
#include <cstdlib>

#include <fmt/core.h>

#include "crystal/base/error.h"

namespace crystal::plugin {
namespace {

constexpr Param kParams[] = {
    {"CRYSTAL_CONFIG", "",
     "Path of the emulation config (YAML). Unset: built-in target of 8 NICs of 400 Gb/s."},
    {"CRYSTAL_TUNER", "1",
     "0 turns the tuner off (NCCL keeps its own choices); so does emulation.tuner: false."},
    {"CRYSTAL_MAX_RECVS", "8", "maxRecvs reported to NCCL (grouped receives per irecv), 1..8."},
    {"CRYSTAL_SOCKET_ADDR", "127.0.0.1",
     "IPv4 address the data listeners bind to and advertise in handles."},
    {"CRYSTAL_SHARED_CLOCK", "1",
     "1: real ranks share CLOCK_MONOTONIC (one machine), so a receiver honours the sender's "
     "modelled delivery time; 0: each side times its own post."},
    {"CRYSTAL_EMULATION_ID", "0", "Emulation id written into handles (set by crystal emulate)."},
    {"CRYSTAL_DATA", "",
     "Data virtual senders deliver: mirror, zero or none; overrides emulation.data (default "
     "mirror)."},
    {"CRYSTAL_FOLD_RINGS", "",
     "1/0: run ring collectives on fewer real channels, each standing for several of the "
     "target's (plugin/ring_fold.h). Overrides emulation.fold_rings (default 1)."},
    {"CRYSTAL_GDR", "",
     "1: report GPU memory support (NCCL_PTR_CUDA) so NCCL keeps NET buffers in GPU memory "
     "(GDR); 0: host memory only. Overrides emulation.gdr (default: 1 only under data none)."},
    {"CRYSTAL_SHM", "1",
     "1: a real rank's sends to another real rank offer each registered buffer's twin as POSIX "
     "shared memory; a receiver on the same machine maps it, and the bytes move by the GPUs' "
     "copy engines (no TCP body, no CPU copy of GPU buffers); a peer that cannot map it "
     "refuses and the bytes go over TCP. 0: TCP only."},
    {"CRYSTAL_SHM_STREAM", "1",
     "1 (with CRYSTAL_SHM): a real rank's send to another real rank of the same machine moves "
     "its stream of frames and acknowledgements from TCP into a shared page of two byte "
     "rings once the receiver maps it: no system call a step (plugin/shm_stream.h). 0 (on the "
     "sender): TCP for them (for comparison)."},
    {"CRYSTAL_COPY_FLAGS", "1",
     "1: the plugin's GPU copies (staging, real peers' bytes, writes into GPU buffers) report "
     "completion through a pinned host word the stream writes (cuStreamWriteValue32), so "
     "test() makes no driver call for them; 0, or a driver without it: a CUDA event per "
     "request and cuEventQuery (plugin/device_queue.h)."},
    {"CRYSTAL_IPC", "1",
     "1: a real rank's sends to another real rank of the same machine also offer each "
     "registered GPU buffer's allocation itself (a CUDA POSIX-fd export); a receiver that maps "
     "it copies the bytes GPU to GPU, one copy a step, and the shared-memory twin is left "
     "idle. 0: off (shared memory or TCP as CRYSTAL_SHM says). Either side's 0 turns it off."},
    {"CRYSTAL_MIRROR_RESULTS", "1",
     "1: under data mirror with one real rank, the interposer writes the exact result of N "
     "copies of the real rank's input after each all-reduce, reduce-scatter and reduce to it "
     "(n * x, x^n, x for max/min/avg; one GPU pass); 0: reductions keep what the data path "
     "delivered (a tree's virtual peers give zeros, a ring's sums are approximate)."},
    {"CRYSTAL_LINES_WAIT", "0",
     "1: a receive from a virtual rank whose LL/LL128 lines the plugin writes into GPU memory "
     "(GDR, data zero or none) completes only once the plugin's stream ran those writes (an "
     "event per receive); 0: at its modelled time (the GPU polls the flags itself and the "
     "writes stay in stream order), which keeps two CUDA calls per receive off NCCL's proxy "
     "thread."},
    {"CRYSTAL_GPU_ACK", "0",
     "1: a real receive's step copied by the GPU writer's kernel also has the kernel store its "
     "frame number in the connection's shared stream page, and the sender's send completes "
     "once it reads it (no turn of the receiving proxy); 0: only the receiving proxy's "
     "acknowledgements. Off by default: on an H100 it gained nothing measurable and cost "
     "large transfers 15-18 % (a fence and a store over PCIe a step in the writer's one "
     "block)."},
    {"CRYSTAL_GPU_COPY_MAX", "1048576",
     "A real peer's step GPU to GPU of at most this many bytes is copied by the plugin's "
     "GPU-writer kernel (posted into its ring: no CUDA driver call on NCCL's proxy thread); "
     "larger steps, or all with 0 or CRYSTAL_GPU_WRITER=0, by cuMemcpyDtoDAsync on the "
     "plugin's stream (the copy engines, ~2.5 us of driver call each under MPS). The default "
     "covers every step of NCCL's default 4 MiB buffers (steps of at most 512 KiB)."},
    {"CRYSTAL_GPU_WRITER", "1",
     "1: under data none, LL/LL128 flags of virtual senders in GPU memory are stored by the "
     "plugin's GPU-writer kernel from a command ring in mapped host memory (a few stores "
     "per receive on NCCL's proxy thread); 0: one cuMemsetD2D32Async per receive. Without "
     "nvcc at build time, or if the kernel does not load, the memsets are used."},
    {"CRYSTAL_P2P_PACE", "1",
     "1: the P2P connections to the virtual GPUs of the real rank's node (emulation.p2p_peers, "
     "CRYSTAL_P2P_POOL) follow the ring model, through the plugin's P2P agent kernel; 0, a "
     "plugin built without nvcc, or a non-ring connection: those GPUs never make the rank "
     "wait."},
    {"CRYSTAL_P2P_PRELUDE", "0",
     "1 (experimental): a paced ring operation the real rank's stream has not reached yet is "
     "armed: the P2P agent kernel releases its first receives itself, the model's base cost "
     "after the rank took the last operation's receives (docs/plugin.md \"Preludes\"); 0: "
     "every receive waits for the pacing thread."},
    {"CRYSTAL_P2P_QUERY_GAP_NS", "0",
     "The P2P pacing thread asks the driver whether the program's stream reached or passed an "
     "operation (cuEventQuery) at most every this many ns (0: every pass of the thread), "
     "0..100000: each query contends with the program thread's own driver calls."},
    {"CRYSTAL_P2P_MARKS", "2",
     "CUDA events the P2P pacing puts on the program's stream per operation: 1 (experimental), the one "
     "before NCCL's kernel: an operation ends where the next one on its stream starts, and "
     "the pacing thread marks the end of the last one itself once the program made no call "
     "for a while (the default streams keep an end mark in the call); 2, one before and one "
     "after, both recorded in the program's call (each record also costs the program's "
     "thread time)."},
    {"CRYSTAL_P2P_PACE_STATS", "0",
     "1: each P2P pacing agent prints its counters on stderr when its communicator is "
     "destroyed (connections, operations and how many of them it received as a chain from "
     "its head or armed with a prelude, kernel launches and starts)."},
    {"CRYSTAL_HOST_STATS", "0",
     "1: each ncclCommDestroy/Abort prints, on stderr and as an INFO line, the calling "
     "thread's host time per operation since the previous line: NCCL's own, the tuner's, the "
     "profiler's, P2P pacing's and the interposer's; operations over 1 ms (NCCL connecting "
     "peers) are counted apart. Its clock reads cost ~0.4 us per NCCL call: leave it off "
     "when timing small operations (plugin/app_call_stats.h)."},
    {"CRYSTAL_P2P_TRACE", "",
     "P2P pacing trace: PREFIX; each pacing agent writes PREFIX.<pid>.<comm hash>.csv when its "
     "communicator is destroyed, one row per event (operation start/end, counter seen, "
     "released, stored by the agent kernel) with CPU and GPU times."},
    {"CRYSTAL_P2P_TRACE_MAX", "1000000",
     "Rows each P2P pacing trace keeps (the rest are counted)."},
    {"CRYSTAL_GPU_WRITER_IDLE_US", "100",
     "The GPU writer's kernel exits after this many microseconds without a command (the next "
     "one launches it again, a few us of NCCL's proxy thread and the launch's latency); the "
     "program's cudaDeviceSynchronize waits for it that long after the last command."},
    {"CRYSTAL_GPU_WRITER_BLOCKS", "16",
     "Blocks of the GPU writer's kernel (1 to 64): the first runs the command ring, and every "
     "block copies: a batch of real peers' steps of more than CRYSTAL_GPU_COPY_CHUNK bytes is "
     "split into chunks that the blocks claim one at a time (one block copied ~37 GB/s on an "
     "H100). A block the GPU has no room for claims nothing; none waits for another."},
    {"CRYSTAL_GPU_COPY_CHUNK", "65536",
     "Bytes a block of the GPU writer's kernel copies at a time when several share a batch "
     "of copies (at least 4096, rounded down to a multiple of 16; larger for a batch of more "
     "than ~65000 chunks)."},
    {"CRYSTAL_GPU_WRITER_PRIORITY", "1",
     "1: the GPU writer's stream gets the device's greatest stream priority; 0: a normal "
     "stream."},
    {"CRYSTAL_RECORD", "",
     "Record mode (NCCL_PROFILER_PLUGIN=this library): directory, or file with %p for the pid, "
     "that the profiler writes every NCCL call to. Unset: no recording."},
    {"CRYSTAL_RECORD_EVENTS", "",
     "api: record the program's calls only (collective and p2p API events; crystal emulate "
     "sets it for its report); unset or anything else: every event type."},
    {"CRYSTAL_RANK", "", "Global rank written into a recording; unset: RANK (torchrun's)."},
    {"CRYSTAL_TRACE_CONN", "",
     "Per-request trace: PREFIX; each process writes PREFIX.<pid>.csv at exit, one row per "
     "completed request (connection, bytes, posted, modelled due and observed done times)."},
    {"CRYSTAL_TRACE_CONN_MAX", "2000000",
     "Rows the per-request trace keeps (the rest are counted)."},
    {"CRYSTAL_TRACE_CONN_EVERY_S", "0",
     "Also rewrite the per-request trace every N seconds (0: only at exit), so a job that hangs "
     "and is killed still leaves it; rows recorded during a rewrite may be missing from it."},
};

const Param& find(std::string_view name) {
  for (const auto& p : kParams)
    if (name == p.name) return p;
  throw InputError(fmt::format("crystal plugin: unknown parameter {}", name));
}

}  // namespace

std::span<const Param> allParams() noexcept { return kParams; }

std::string paramString(std::string_view name) {
  const Param& p = find(name);
  const char* v = std::getenv(p.name);
  return v ? std::string(v) : std::string(p.default_value);
}

std::int64_t paramInt(std::string_view name) {
  const std::string v = paramString(name);
  std::int64_t out = 0;
  auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc{} || ptr != v.data() + v.size())
    throw InputError(fmt::format("environment {}='{}': not an integer", name, v));
  return out;
}

std::int64_t paramIntIn(std::string_view name, std::int64_t lo, std::int64_t hi) {
  const std::int64_t v = paramInt(name);
  if (v < lo || v > hi)
    throw InputError(fmt::format("environment {}={}: must be {} to {}", name, v, lo, hi));
  return v;
}

bool paramBool(std::string_view name) {
  const std::int64_t v = paramInt(name);
  if (v != 0 && v != 1)
    throw InputError(fmt::format("environment {}={}: must be 0 or 1", name, v));
  return v == 1;
}

}  // namespace crystal::plugin
