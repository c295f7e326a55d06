// The virtual GPUs of a real rank's node, paced (emulation.p2p_peers; p2p_pacer.h says what,
// p2p_agent_abi.h how the GPU side works).
//
// One agent per communicator of the real rank (R) that holds P2P pool connections: a table in
// mapped host memory, an agent kernel on its own stream in R's CUDA context, and a CPU thread
// that runs the P2pPacer. The interposer tells it about each collective on the comm:
// `before` (before NCCL's call: an event on the caller's stream) and `after` (once NCCL
// enqueued it: a second event, the tuner's log entry, and the kernel running). The thread sees the
// first event complete (the stream reached the operation) and the second (it is done); while
// any operation is outstanding it spins, copying what R's kernel moved into the pacer and
// what the pacer released into the table; with none it tells the kernel to leave, so a
// cudaDeviceSynchronize of the program returns.
//
// Collective connections to R's ring neighbours are paced: the ring's (send to rank + 1,
// receive from rank - 1, which trees share) and the tree's own (send to rank - 1, receive
// from rank + 1). Others (p2p graphs) are not: the caller makes the host's free-running
// stores for them.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>

#include "crystal/live/collective_log.h"
#include "crystal/live/target_model.h"
#include "crystal/live/tree_comm.h"
#include "cuda_driver.h"
#include "p2p_agent_abi.h"
#include "p2p_pacer.h"
#include "p2p_trace.h"

namespace crystal::plugin {

inline constexpr const char* kEnvP2pPace = "CRYSTAL_P2P_PACE";
inline constexpr const char* kEnvP2pPrelude = "CRYSTAL_P2P_PRELUDE";
inline constexpr const char* kEnvP2pQueryGap = "CRYSTAL_P2P_QUERY_GAP_NS";
inline constexpr const char* kEnvP2pMarks = "CRYSTAL_P2P_MARKS";

// One connection as the host named it (control WRITES, host/bootstrap_host.h DeviceWrite).
struct P2pConnection {
  std::uint64_t target = 0;  // R's own head (send) / tail (recv)
  std::uint64_t watch = 0;   // the pool block's counter R's kernel moves
  int peer = -1;
  int nranks = 0;
  int ordinal = 0;
  bool send = false;
  int graph = 0;  // setup tag graph byte: 1 ring
  bool tree_only = false;  // set by P2pAgent::add: the tree's own connector (p2p_pacer.h)
  // Set by P2pAgent::add: a ring receive from rank - 1 on R's node, which carries the tree's
  // receives from its parent too (one connector per channel, peer and direction).
  bool tree_parent = false;
};

// R's neighbours on its node's ring chain as the host placed them (control::PoolPlace): global
// ranks, -1 where the ring crosses the NET or the host did not say. NCCL may run the node's
// ring rotated (host/node_graph.h: R = local 0 between local 7 and 1) while its tree chain
// stays in rank order, so the ring's connectors are these and the tree's rank -/+ 1.
struct RingNeighbours {
  int prev = -1;
  int next = -1;
};

// Whether a real rank, under emulation.p2p_peers, has both ring neighbours on its own node on
// every channel, from where the host placed it (control::PoolPlace): `members` of its node
// are GPUs of its host (0: none) and neither ring neighbour is over the NET. Then its rings
// run paced on every channel and are not folded (PluginState::setCommRingsOnNode).
[[nodiscard]] bool p2pRingsStayOnNode(int members, RingNeighbours ring);


// The GPU's global timer mapped onto the CPU clock (live::nowNs): the smallest (CPU time right
// after a read - the GPU time read) over the last one or two windows. A sample overestimates
// the offset by the read's latency only, so a mapped time is never early but by the drift of
// the two clocks over a window or two.
class GpuClock {
 public:
  static constexpr live::TimeNs kWindowNs = 50'000'000;
  void sample(live::TimeNs cpu, std::uint64_t gpu) noexcept;
  [[nodiscard]] std::optional<live::TimeNs> toCpu(std::uint64_t gpu) const noexcept;
  [[nodiscard]] std::optional<std::uint64_t> toGpu(live::TimeNs cpu) const noexcept;

 private:
  static constexpr live::TimeNs kNone = std::numeric_limits<live::TimeNs>::max();
  live::TimeNs cur_ = kNone, prev_ = kNone, window_start_ = 0;
};

class P2pAgent {
 public:
  // An operation outstanding this long while no counter of R's moved and none completed ends
  // the pacing (one WARN; the connections run free from then on).
  static constexpr live::TimeNs kStallNs = 10'000'000'000;
  // Tests: the kernel image to load (nullptr: the one built into the plugin, if any), and the
  // stall bound and idle spin of agents made from now on (0: kStallNs, kIdleSpinNs).
  static void setImageForTesting(const void* image);
  [[nodiscard]] static bool builtWithKernel();  // nvcc built the kernel into the plugin
  static void setStallNsForTesting(live::TimeNs ns);
  static void setIdleSpinNsForTesting(live::TimeNs ns);
  // R's moves reach the model at the GPU time the kernel saw them (seen_at), mapped; never
  // more than this before the pass that found them, nor before the connection's last. So an
  // operation's start (as the CPU saw its stream reach it) moves back at most this far.
  static constexpr live::TimeNs kMaxBackdateNs = 20'000;
  // The pacing thread spins this long after the last operation ended before it sleeps.
  static constexpr live::TimeNs kIdleSpinNs = 2'000'000;
  // Makes the agent of (comm_hash, rank) in `ctx` (CRYSTAL_P2P_PACE is not 0; call after the
  // comm was created, before its first collective). `ring` and `tree_channels` as the host
  // placed the rank (control::PoolPlace; P2pPacer::setTreeBase). nullptr with `why` when pacing is off or
  // unavailable (no kernel image, no driver, a CUDA error); the connections then run free.
  [[nodiscard]] static std::shared_ptr<P2pAgent> create(std::uint64_t comm_hash, int rank,
                                                        int nranks, cuda::Context ctx,
                                                        RingNeighbours ring, int tree_channels,
                                                        std::string* why);
  // Whether an agent was ever made in this process (one atomic load: every NCCL call asks).
  [[nodiscard]] static bool anyMade() noexcept;
  // The agent of a comm, or nullptr. Cheap when no agent was ever made.
  [[nodiscard]] static std::shared_ptr<P2pAgent> find(std::uint64_t comm_hash);
  // Stops and forgets the comm's agent (ncclCommDestroy/Abort); its table stays allocated if
  // a kernel might still run.
  static void forget(std::uint64_t comm_hash);

  ~P2pAgent();
  P2pAgent(const P2pAgent&) = delete;
  P2pAgent& operator=(const P2pAgent&) = delete;

  // Takes a connection to pace: true for a collective connection (ring or tree setup: NCCL
  // shares the connector) to R's ring neighbour; false for one
  // it does not pace (the caller stores the free-running value). In a comm over several nodes
  // a node's first position receives over the NET and its last sends over the NET: the NET
  // path times that hop, and R's sends over P2P on a channel whose receive is NET's are fed
  // to the NET path's ring model of that channel (p2p_pacer.h).
  [[nodiscard]] bool add(P2pConnection c);

  // Around NCCL's call of a collective on `stream`: throws PluginError on a CUDA error or a
  // stream under graph capture (the pacing needs the stream's events).
  struct Op {
    cuda::Event before = nullptr;
    // Taken with `before`; recorded by after() (CRYSTAL_P2P_MARKS=2), else by the pacing
    // thread where no later operation on the stream marks this one's end (markEnd).
    cuda::Event after = nullptr;
    cuda::Stream stream = nullptr;
    live::TimeNs issued = 0;  // when before() was called (the program's call)
    int root = -1;            // ncclBroadcast/ncclReduce: the root (the interposer sets it)
  };
  [[nodiscard]] Op before(cuda::Stream stream);
  void after(const Op& op);

  [[nodiscard]] std::string stateLine() const;

 private:
  P2pAgent(std::uint64_t comm_hash, int rank, int nranks, cuda::Context ctx, RingNeighbours ring,
           int gpus_per_node, const live::CommLinks& links,
           const std::shared_ptr<live::TreeComm>& trees);
  void start(const void* image);  // the table, stream, kernel and thread; throws PluginError
  void run();     // the pacing thread
  // The kernel's launch: by the pacing thread (launch_wanted_), or by after() while that
  // thread sleeps. Never both for one launch: the one that sets the state to running decides.
  void launch();
  [[nodiscard]] cuda::Event event();  // under in_mu_
  void giveBack(const Op& op);        // an operation's events back to the pool (a failed record)
  // Whether the stream passed event `e` (pacing thread): asked at most every query_gap_ns_
  // (each cuEventQuery contends with the program's driver calls); `at`: when it passed, the
  // middle of the last gap where the gap bounds it, else left as it is (nullptr: not wanted).
  [[nodiscard]] bool passed(cuda::Event e, live::TimeNs now, live::TimeNs* at = nullptr);
  void takeConnection(const P2pConnection& c);  // the pacing thread
  // The NET path's ring models of the channels whose receive is NET's (multi-node comms).
  void findNetRings();
  // The operation's send units (occupancy, steps) into the table, for the kernel's credits.
  void publishSendPace();
  void publishSendPace(live::TimeNs occupancy, int steps);
  // Preludes (p2p_agent_abi.h): the first operation R's stream has not reached is armed while
  // the one before runs, once that one's anchors came in (P2pPacer::arm), or kSettleNs after
  // the last one ended; an armed operation's words leave the table once it ended (a channel
  // it left idle would take the next operation's first send for its own).
  void armFront(live::TimeNs now);
  // nullptr: none. `send_pace`: its send units into the table now (nothing runs).
  void writePrelude(const P2pPrelude* pre, bool send_pace);
  // The kernel's anchors of the armed operation, to the pacer.
  void readAnchors(live::TimeNs now);
  // The kernel's reader pass time (lead_ns_), from its pass count.
  void updateLead(live::TimeNs now);
  // Trace: the GPU clock sample and what the kernel stored since the last look.
  void traceKernel(live::TimeNs now, std::vector<std::uint64_t>& stored);

  struct Pending {
    cuda::Event before = nullptr, after = nullptr;
    cuda::Stream stream = nullptr;
    std::optional<live::CollectiveEntry> entry;
    live::TimeNs issued = -1;
    live::TimeNs queued = 0;  // when after() queued it
    std::uint64_t seq = 0;  // from 1, in the order after() queued them
    bool started = false;
    bool end_marked = false;  // `after` is recorded on `stream`
  };
  // CRYSTAL_P2P_MARKS=1: whether the front operation `p` has ended, by the next operation's
  // start on its stream or by its end mark, which this records once no later operation on
  // its stream can be expected soon (pacing thread).
  [[nodiscard]] bool ended(Pending& p, live::TimeNs now);
  // The front operation as the pacing thread sees it, for a stall's message (pacing thread).
  [[nodiscard]] std::string frontLine() const;
  // 0 and the legacy and per-thread handles: their operations' ends are marked in the call.
  [[nodiscard]] static bool isDefaultStream(cuda::Stream s);

  const cuda::DriverApi& d_;
  const std::uint64_t hash_;
  const int rank_, nranks_;
  const RingNeighbours ring_;
  const int gpus_per_node_;
  const cuda::Context ctx_;
  cuda::Module module_ = nullptr;
  cuda::Function fn_ = nullptr;
  cuda::Stream stream_ = nullptr;
  p2p_agent::Table* table_ = nullptr;
  cuda::DevicePtr table_dev_ = 0;
  std::shared_ptr<live::CollectiveLog> log_;
  std::uint64_t log_cursor_ = 0;

  // The interposer's threads hand over under in_mu_; only the pacing thread touches the
  // pacer, the queue of operations and the table's connections.
  mutable std::mutex in_mu_;
  std::condition_variable wake_;
  std::vector<Pending> in_ops_;
  std::vector<P2pConnection> in_conns_;
  std::vector<cuda::Event> free_events_;
  std::atomic<std::uint64_t> launches_{0};
  // A cuLaunchKernel costs the program's thread a few microseconds, more than the rest of
  // after(); a host-bound loop of small collectives lets the kernel leave between every two
  // (nothing outstanding) and paid it on every call. So after() leaves the launch to the
  // pacing thread while it spins (it sees the operation within a pass), and launches itself
  // only while that thread sleeps (a wake-up would come later than the launch).
  bool launch_wanted_ = false;  // in_mu_: the pacing thread launches at its next pass
  bool pacer_asleep_ = false;   // in_mu_: the pacing thread waits on wake_
  bool stopping_ = false;
  std::uint32_t conns_ = 0;  // connections taken (in_mu_)
  std::uint32_t unpaced_ = 0;  // connections offered and left to run free (in_mu_)
  bool free_running_ = false;  // pacing failed: every counter released for good
  live::TimeNs stall_ns_ = kStallNs;
  live::TimeNs query_gap_ns_ = 0;  // CRYSTAL_P2P_QUERY_GAP_NS
  int marks_ = 2;                  // CRYSTAL_P2P_MARKS
  // Calls between before() and after(): the next operation's start is on its way (marks 1).
  std::atomic<int> calls_open_{0};
  // Marks 1: the start event of the call now between before() and after(), once recorded
  // (NCCL may hold the program inside its call, the operation not queued yet, while its
  // kernel runs: its start is the last one's end, as the after event said with two marks).
  std::mutex open_mu_;
  cuda::Event open_before_ = nullptr;  // open_mu_
  cuda::Stream open_stream_ = nullptr;  // open_mu_
  // Marks 1: the last operation's end is marked by the pacing thread this long after the
  // program's call that queued it, unless a call is open, and after kEndMarkMaxWaitNs anyway
  // (a call that never reaches after(): a group the program abandoned).
  static constexpr live::TimeNs kEndMarkWaitNs = 20'000;
  static constexpr live::TimeNs kEndMarkMaxWaitNs = 1'000'000;
  live::TimeNs next_query_at_ = 0, not_ready_at_ = 0;  // pacing thread
  live::TimeNs idle_spin_ns_ = kIdleSpinNs;

  P2pPacer pacer_;
  std::unique_ptr<P2pTrace> trace_;  // CRYSTAL_P2P_TRACE (pacing thread only, then ~P2pAgent)
  std::uint64_t ops_started_ = 0;
  std::atomic<int> net_rings_{0};  // channels whose NET ring model gets R's P2P sends
  bool net_rings_missed_ = false;   // said once that some were not found
  GpuClock clock_;
  std::vector<live::TimeNs> seen_t_;  // per connection: the time its last move was given
  // Receives are released this much before they are due (the kernel's reader pass).
  static constexpr live::TimeNs kMaxLeadNs = 20'000;
  live::TimeNs lead_ns_ = 0;
  live::TimeNs lead_at_ = 0;
  std::uint64_t lead_passes_ = 0;
  std::deque<Pending> ops_;
  std::uint64_t ops_queued_ = 0;  // in_mu_: Pending::seq of the last one queued
  std::uint64_t next_told_ = 0;   // the operation the pacer was told comes next (0: none)
  std::atomic<std::uint64_t> ops_done_{0};
  std::atomic<std::uint64_t> chain_ops_{0};  // started as a chain R receives in (stateLine)
  // Preludes: R's counters are where an operation ended this long after the CPU saw it end
  // (the kernel publishes a move within its ~1-2 us turn).
  static constexpr live::TimeNs kSettleNs = 10'000;
  bool preludes_on_ = true;      // CRYSTAL_P2P_PRELUDE
  live::TimeNs done_at_ = 0;     // when the last operation was seen to end
  std::uint64_t armed_seq_ = 0;  // the Pending::seq last armed
  // The one last found not armable, and ops_done_ then (tried again once another ended).
  std::uint64_t tried_seq_ = 0, tried_done_ = 0;
  std::uint32_t pre_seq_ = 0;        // the table's pre_seq
  bool prelude_live_ = false;        // the table holds an operation's prelude
  std::vector<int> anchors_wanted_;  // its receive connections not anchored yet
  int anchors_this_arm_ = 0;         // anchored (not missed) of them
  std::atomic<std::uint64_t> preludes_{0}, anchors_{0}, anchors_missed_{0};  // (stateLine)
  std::thread thread_;
};

}  // namespace crystal::plugin
