// Cross-rank progress: replays the ranks with blocking semantics and reports a deadlock
// (a dependency cycle that runs through other ranks). A launch unit (one op, or a
// GroupBegin..GroupEnd run of ops on one stream) is posted when it reaches the head of its
// stream; a collective completes once every participant posted it, a send/recv once both
// sides did (rendezvous, the conservative assumption); a Wait once its event is recorded.
//
// By-class mode simulates one representative per class. A comm whose members share one
// class completes when the representative posts (all members run the same stream and, by
// the layout's symmetry, reach it together); a comm spanning classes holds the
// representatives of those classes (a comm containing representative(c) fixes the
// non-family coordinates at 0 and the class coordinates outside the family at c's), and
// p2p partners are matched by (family, sender class, receiver class, order).
#include <deque>
#include <map>
#include <tuple>
#include <vector>

#include <fmt/core.h>

#include "crystal/base/error.h"
#include "graph/validate.h"

namespace crystal::graph {
namespace {

struct Key {
  int needed = 0;
  int posted = 0;
  std::vector<std::pair<int, int>> waiters;  // (unit rank slot, stream slot)
};

struct Stream {
  std::vector<std::size_t> ops;  // op indices on this stream, in order
  std::size_t head = 0;          // next op position
  bool posted = false;
  std::size_t unit_end = 0;      // one past the unit's last op position
  std::vector<int> keys;         // keys of the posted unit
};

struct RankState {
  std::int32_t rank;
  std::vector<Op> ops;
  std::vector<Stream> streams;
  std::map<std::uint32_t, bool> recorded;
  std::map<std::uint32_t, std::vector<int>> event_waiters;  // event -> stream slots
};

class Progress {
 public:
  Progress(const Graph& g, std::span<const std::int32_t> ranks, bool by_class)
      : g_(g), table_(g.comms()), by_class_(by_class) {
    for (std::int32_t r : ranks) {
      RankState& s = states_.emplace_back();
      s.rank = r;
      g.materialize(r, s.ops);
      std::map<std::uint8_t, int> stream_slot;
      for (std::size_t i = 0; i < s.ops.size(); ++i) {
        auto [it, fresh] = stream_slot.emplace(s.ops[i].stream, static_cast<int>(s.streams.size()));
        if (fresh) s.streams.emplace_back();
        s.streams[static_cast<std::size_t>(it->second)].ops.push_back(i);
      }
    }
  }

  void run() {
    for (int r = 0; r < static_cast<int>(states_.size()); ++r)
      for (int st = 0; st < static_cast<int>(states_[static_cast<std::size_t>(r)].streams.size()); ++st)
        queue_.emplace_back(r, st);
    while (!queue_.empty()) {
      auto [r, st] = queue_.front();
      queue_.pop_front();
      advance(r, st);
    }
    for (const RankState& s : states_)
      for (const Stream& st : s.streams)
        if (st.head < st.ops.size()) {
          const std::size_t i = st.ops[st.head];
          const Op& op = s.ops[i];
          throw InputError(fmt::format(
              "validate: deadlock: rank {} op {} ({}{}) never completes: its stream waits for "
              "ranks that wait for it",
              s.rank, i, toString(op.kind),
              op.comm >= 0 ? fmt::format(" on communicator {} ('{}')", op.comm,
                                         table_.info(op.comm).family)
                           : std::string()));
        }
  }

 private:
  std::int32_t classRep(std::int32_t rank) const { return g_.representative(g_.classOf(rank)); }

  int keyFor(RankState& s, const Op& op) {
    std::tuple<int, std::int64_t, std::int64_t, std::int64_t> id;
    int needed = 2;
    if (op.kind == OpKind::Collective) {
      const std::uint32_t k = coll_count_[{s.rank, op.comm}]++;
      id = {0, op.comm, 0, k};
      needed = by_class_ ? classesIn(op.comm) : table_.info(op.comm).size;
    } else {
      const bool send = op.kind == OpKind::Send;
      std::int64_t src = send ? s.rank : op.peer, dst = send ? op.peer : s.rank;
      std::int64_t comm = op.comm;
      if (by_class_) {
        src = g_.classOf(static_cast<std::int32_t>(src));
        dst = g_.classOf(static_cast<std::int32_t>(dst));
        comm = familyId(op.comm);
      }
      const std::uint32_t k = p2p_count_[{send, comm, src, dst, s.rank}]++;
      id = {1, comm, src * (1LL << 20) + dst, k};  // both sides build the same id
    }
    auto [it, fresh] = key_ids_.emplace(id, static_cast<int>(keys_.size()));
    if (fresh) keys_.push_back(Key{needed, 0, {}});
    return it->second;
  }

  int familyId(std::int32_t comm) {
    auto [it, fresh] = family_ids_.emplace(std::string(table_.info(comm).family),
                                           static_cast<int>(family_ids_.size()));
    return it->second;
  }

  int classesIn(std::int32_t comm) {
    auto it = classes_in_.find(comm);
    if (it != classes_in_.end()) return it->second;
    std::vector<bool> seen(static_cast<std::size_t>(g_.numClasses()));
    int n = 0;
    for (std::int32_t i = 0; i < table_.info(comm).size; ++i) {
      const auto c = static_cast<std::size_t>(g_.classOf(table_.member(comm, i)));
      if (!seen[c]) seen[c] = true, ++n;
    }
    return classes_in_[comm] = n;
  }

  void wake(const Key& k) {
    for (const auto& w : k.waiters) queue_.push_back(w);
  }

  // Posts the head unit of (r, st) if needed; returns true when the unit completed.
  bool post(int r, int st) {
    RankState& s = states_[static_cast<std::size_t>(r)];
    Stream& stream = s.streams[static_cast<std::size_t>(st)];
    if (stream.posted) return true;
    const Op& head = s.ops[stream.ops[stream.head]];
    std::size_t end = stream.head + 1;
    if (head.kind == OpKind::GroupBegin)
      while (end < stream.ops.size() && s.ops[stream.ops[end - 1]].kind != OpKind::GroupEnd) ++end;
    if (head.kind == OpKind::Wait && !s.recorded[head.tag]) {
      s.event_waiters[head.tag].push_back(st);
      return false;
    }
    stream.posted = true;
    stream.unit_end = end;
    stream.keys.clear();
    for (std::size_t p = stream.head; p < end; ++p) {
      const Op& op = s.ops[stream.ops[p]];
      if (op.kind == OpKind::Record) {
        s.recorded[op.tag] = true;
        for (int w : s.event_waiters[op.tag]) queue_.emplace_back(r, w);
      }
      if (op.kind != OpKind::Collective && op.kind != OpKind::Send && op.kind != OpKind::Recv) continue;
      const int key = keyFor(s, op);
      Key& k = keys_[static_cast<std::size_t>(key)];
      k.waiters.emplace_back(r, st);
      if (++k.posted == k.needed) wake(k);
      stream.keys.push_back(key);
    }
    return true;
  }

  void advance(int r, int st) {
    RankState& s = states_[static_cast<std::size_t>(r)];
    for (;;) {
      Stream& stream = s.streams[static_cast<std::size_t>(st)];
      if (stream.head >= stream.ops.size()) return;
      if (!post(r, st)) return;
      for (int key : stream.keys)
        if (keys_[static_cast<std::size_t>(key)].posted < keys_[static_cast<std::size_t>(key)].needed)
          return;
      stream.head = stream.unit_end;
      stream.posted = false;
    }
  }

  const Graph& g_;
  const CommTable& table_;
  bool by_class_;
  std::vector<RankState> states_;
  std::deque<std::pair<int, int>> queue_;
  std::vector<Key> keys_;
  std::map<std::tuple<int, std::int64_t, std::int64_t, std::int64_t>, int> key_ids_;
  std::map<std::pair<std::int32_t, std::int32_t>, std::uint32_t> coll_count_;
  std::map<std::tuple<bool, std::int64_t, std::int64_t, std::int64_t, std::int32_t>, std::uint32_t> p2p_count_;
  std::map<std::string, int> family_ids_;
  std::map<std::int32_t, int> classes_in_;
};

}  // namespace

void checkProgress(const Graph& g, std::span<const std::int32_t> ranks, bool by_class) {
  Progress(g, ranks, by_class).run();
}

}  // namespace crystal::graph
