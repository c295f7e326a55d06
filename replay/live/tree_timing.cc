#include "crystal/live/tree_timing.h"

#include <algorithm>

namespace crystal::live {

namespace {

// NCCL's binary tree over n members rooted at 0 (graph/trees.cc ncclGetBtree, as facts):
// a member's parent clears its lowest set bit and sets the next one (or only clears it when
// that leaves the range); its children lie half that bit below and above (the upper one
// moved down by halves until it is in range). The root's one child is the highest power of
// two below n.
TreeNeighbours binaryTree(int n, int r) {
  TreeNeighbours t;
  int bit = 1;
  while (bit < n && (bit & r) == 0) bit <<= 1;
  if (r == 0) {
    if (n > 1) t.down[1] = bit >> 1;
    return t;
  }
  t.up = (r ^ bit) | (bit << 1);
  if (t.up >= n) t.up = r ^ bit;
  int low = bit >> 1;
  if (low == 0) return t;
  t.down[0] = r - low;
  while (low > 0 && r + low >= n) low >>= 1;
  t.down[1] = low > 0 ? r + low : -1;
  return t;
}

// Node levels below `node` in its tree (0: a leaf node).
int heightBelow(int n, int node, int tree) {
  int h = 0;
  for (int c : doubleBinaryTree(n, node, tree).down)
    if (c >= 0) h = std::max(h, 1 + heightBelow(n, c, tree));
  return h;
}

}  // namespace

TreeNeighbours doubleBinaryTree(int n, int member, int tree) {
  if (n < 1 || member < 0 || member >= n) return {};
  if (tree == 0) return binaryTree(n, member);
  // Tree 1: the binary tree of the mirrored (n even) or shifted (n odd) numbering.
  const bool mirror = n % 2 == 0;
  const int m = mirror ? n - 1 - member : (member - 1 + n) % n;
  auto back = [&](int x) { return x < 0 ? -1 : mirror ? n - 1 - x : (x + 1) % n; };
  const TreeNeighbours b = binaryTree(n, m);
  TreeNeighbours t;
  t.up = back(b.up);
  t.down = {back(b.down[0]), back(b.down[1])};
  return t;
}

TreePosition targetTreePosition(int rank, int nranks, int ranks_per_node, int tree) {
  const int ppn = std::max(1, ranks_per_node);
  const int nnodes = (std::max(1, nranks) + ppn - 1) / ppn;
  const int node = rank / ppn, local = rank % ppn;
  const int members = std::min(ppn, nranks - node * ppn);  // the last node may be short
  int node_depth = 0;
  for (int x = node; (x = doubleBinaryTree(nnodes, x, tree).up) >= 0;) ++node_depth;
  const int levels_below = local == 0 ? heightBelow(nnodes, node, tree) : 0;
  TreePosition p;
  if (levels_below > 0) {
    // The longest way up to a head: a full node's chain, then the node levels.
    p.below.assign(static_cast<std::size_t>(ppn - 1), false);
    p.below.insert(p.below.end(), static_cast<std::size_t>(levels_below), true);
  } else {
    p.below.assign(static_cast<std::size_t>(members - 1 - local), false);
  }
  // Up the chain to the head, up the node levels to the root, and back the same way.
  p.loop.assign(static_cast<std::size_t>(local), false);
  p.loop.insert(p.loop.end(), static_cast<std::size_t>(2 * node_depth), true);
  p.loop.insert(p.loop.end(), static_cast<std::size_t>(local), false);
  // The whole line: the deepest node's last member up to the root and back (the deepest
  // node with the most members; only the last node can be short).
  int deep_depth = -1, deep_members = 0;
  for (int x = 0; x < nnodes; ++x) {
    int d = 0;
    for (int y = x; (y = doubleBinaryTree(nnodes, y, tree).up) >= 0;) ++d;
    const int m = std::min(ppn, nranks - x * ppn);
    if (d > deep_depth || (d == deep_depth && m > deep_members)) {
      deep_depth = d;
      deep_members = m;
    }
  }
  p.line.assign(static_cast<std::size_t>(deep_members - 1), false);
  p.line.insert(p.line.end(), static_cast<std::size_t>(2 * deep_depth), true);
  p.line.insert(p.line.end(), static_cast<std::size_t>(deep_members - 1), false);
  p.child_net = local == members - 1 && levels_below > 0;
  p.depth = local + node_depth;
  return p;
}

void QuietClock::call(TimeNs now) {
  std::lock_guard lock(mu_);
  if (last_ > 0 && now - last_ > kQuietNs) {
    gap_ = now - last_;
    gap_end_ = now;
  }
  last_ = std::max(last_, now);
}

void QuietClock::until(TimeNs t) {
  std::lock_guard lock(mu_);
  last_ = std::max(last_, t);
}

TimeNs QuietClock::quietAfter(TimeNs since) const {
  std::lock_guard lock(mu_);
  return gap_end_ > since ? gap_ : 0;
}

TreeChannel::TreeChannel(TreePosition pos, bool has_parent,
                         std::function<TreeOpPlan(std::uint64_t)> next_op,
                         std::shared_ptr<QuietClock> quiet)
    : pos_(std::move(pos)),
      has_parent_(has_parent),
      next_op_(std::move(next_op)),
      quiet_(quiet ? std::move(quiet) : std::make_shared<QuietClock>()),
      below_free_(pos_.below.size(), 0),
      loop_free_(pos_.loop.size(), 0),
      a_(kWindow, 0),
      d_(kWindow, 0) {}

TreeChannel::Op& TreeChannel::opOf(std::uint64_t u, TimeNs now, std::uint64_t bytes,
                                   bool alone) {
  if (u >= planned_ && !alone && !ops_.empty()) {
    // Posted with others outstanding: not a new operation (see postRecv); the plan was short.
    ops_.back().plan.units += u + 1 - planned_;
    planned_ = u + 1;
  }
  while (u >= planned_) {
    Op op;
    op.first = planned_;
    op.plan = next_op_(bytes);
    op.plan.units = std::max<std::uint64_t>(1, op.plan.units);
    planned_ += op.plan.units;
    ops_.push_back(op);
    // Keep the operations the unit window can still ask about (each has one unit or more).
    if (ops_.size() > kWindow) ops_.pop_front();
  }
  quiet_->call(now);
  auto it = std::find_if(ops_.rbegin(), ops_.rend(), [&](const Op& o) { return o.first <= u; });
  Op& op = it != ops_.rend() ? *it : ops_.front();
  if (!op.started || now < op.start) {
    const auto b = it != ops_.rend() ? std::next(it) : ops_.rend();
    const Op* before = b != ops_.rend() && b->started ? &*b : nullptr;
    // The program's time elsewhere since this channel's operation before (compute).
    if (!op.started && before != nullptr) op.idle = quiet_->quietAfter(before->start);
    op.start = now;
    op.started = true;
    op.leaves = leavesStart(op, before);
  }
  return op;
}

TreeChannel::Op& TreeChannel::opAt(std::uint64_t u) {
  const auto it =
      std::find_if(ops_.rbegin(), ops_.rend(), [&](const Op& o) { return o.first <= u; });
  return it != ops_.rend() ? *it : ops_.front();
}

TimeNs TreeChannel::seen(TimeNs t) {
  quiet_->until(t);
  return t;
}

TimeNs TreeChannel::pathNs(const Op& op, const std::vector<bool>& path) const {
  TimeNs sum = 0;
  for (bool net : path) sum += hop(op, net).tx(op.plan.unit_bytes) + hop(op, net).latency_ns;
  return sum;
}

TimeNs TreeChannel::leavesStart(const Op& op, const Op* before) const {
  if (before == nullptr) return op.start;  // a first operation: every rank starts it together
  // The leaves finished `before` one whole line after they started it (its hops, then one
  // unit per share x the slowest hop's tx) and paid the operation's fixed cost (the model's
  // time is both: a rank running operations back to back pays it each time; a real rank
  // above them pays its own, which their early data hid), then were as long quiet as the
  // real rank was before `op` (compute).
  TimeNs slowest = 0;
  for (bool net : pos_.line)
    slowest = std::max(slowest, hop(*before, net).tx(before->plan.unit_bytes));
  const auto units = static_cast<double>(before->plan.units - 1);
  const TimeNs line = pathNs(*before, pos_.line) +
                      static_cast<TimeNs>(units * kShare * static_cast<double>(slowest));
  return std::max(op.start, before->leaves + line + before->plan.overhead_ns + op.idle);
}

TimeNs TreeChannel::fromBelow(std::uint64_t u) {
  if (u + kWindow < a_next_) return 0;  // older than the window: no constraint kept
  for (; a_next_ <= u; ++a_next_) {
    const Op& op = opAt(a_next_);
    // Every leaf holds its data when it starts the operation; each hop serves one chunk at
    // a time and is busy share x tx for it.
    TimeNs ready = op.leaves;
    for (std::size_t h = 0; h < pos_.below.size(); ++h) {
      const TreeHop& hp = hop(op, pos_.below[h]);
      const TimeNs tx = hp.tx(op.plan.unit_bytes);
      const TimeNs start = std::max(ready, below_free_[h]);
      below_free_[h] = start + static_cast<TimeNs>(kShare * static_cast<double>(tx));
      ready = start + tx + hp.latency_ns;
    }
    a_[slot(a_next_)] = ready;
  }
  return a_[slot(u)];
}

TimeNs TreeChannel::runLoop(std::uint64_t u, TimeNs ready, TimeNs crossed) {
  const Op& op = opAt(u);
  TimeNs left = ready;
  if (pos_.loop.empty()) {
    // The target's root: it holds the result once reduced; a send up (NCCL's own tree
    // gave the real rank a parent) only occupies its link.
    const TreeHop& hp = hop(op, true);
    const TimeNs tx = hp.tx(op.plan.unit_bytes);
    const TimeNs start = std::max(ready, default_up_free_);
    default_up_free_ = start + static_cast<TimeNs>(kShare * static_cast<double>(tx));
    left = std::max(crossed, start + tx);
  }
  for (std::size_t h = 0; h < pos_.loop.size(); ++h) {
    const TreeHop& hp = hop(op, pos_.loop[h]);
    const TimeNs tx = hp.tx(op.plan.unit_bytes);
    const TimeNs start = std::max(ready, loop_free_[h]);
    loop_free_[h] = start + static_cast<TimeNs>(kShare * static_cast<double>(tx));
    TimeNs end = start + tx;
    if (h == 0) left = end = std::max(crossed, end);
    ready = end + hp.latency_ns;
  }
  d_[slot(u)] = ready;
  return left;
}

TimeNs TreeChannel::postUpSend(std::uint64_t unit, TimeNs now, std::uint64_t bytes, bool alone) {
  std::lock_guard lock(mu_);
  const Op& op = opOf(unit, now, bytes, alone);
  last_send_ = now;
  sends_up_ = has_parent_;
  // The chunk leaves once it arrived from below and the real rank's proxy posted it; a
  // write crossed its link by its post, which it began once the chunk was there.
  const TimeNs below = fromBelow(unit);
  const TimeNs ready = up_writes_ ? below : std::max(now, below);
  if (unit >= d_next_) {
    d_next_ = unit + 1;
    return seen(runLoop(unit, ready, up_writes_ ? now : 0));
  }
  // The loop already ran for this unit from below (the send connection was only recognised
  // at its first transfer): only the real rank's link is taken.
  const TreeHop& hp = hop(op, pos_.loop.empty() || pos_.loop.front());
  const TimeNs tx = hp.tx(op.plan.unit_bytes);
  const TimeNs start = std::max(ready, default_up_free_);
  default_up_free_ = start + static_cast<TimeNs>(kShare * static_cast<double>(tx));
  return seen(start + tx);
}

TimeNs TreeChannel::postDownSend(std::uint64_t unit, TimeNs now, std::uint64_t bytes,
                                 TimeNs& free_at, bool alone) {
  std::lock_guard lock(mu_);
  const Op& op = opOf(unit, now, bytes, alone);
  const TreeHop& hp = hop(op, pos_.child_net);
  const TimeNs tx = hp.tx(op.plan.unit_bytes);
  const TimeNs start = std::max(now, free_at);
  free_at = start + static_cast<TimeNs>(kShare * static_cast<double>(tx));
  return seen(start + tx);
}

std::uint64_t TreeChannel::nextUnit() {
  std::lock_guard lock(mu_);
  return planned_;
}

void TreeChannel::setSendsUp() {
  std::lock_guard lock(mu_);
  sends_up_ = has_parent_;
}

void TreeChannel::setUpSendsAreWrites() {
  std::lock_guard lock(mu_);
  up_writes_ = true;
}

void TreeChannel::postRecv(std::uint64_t unit, TimeNs now, std::uint64_t bytes, bool alone) {
  std::lock_guard lock(mu_);
  opOf(unit, now, bytes, alone);
}

std::optional<TimeNs> TreeChannel::recvArrival(TreeRole role, std::uint64_t unit, TimeNs posted,
                                               TimeNs now) {
  std::lock_guard lock(mu_);
  quiet_->call(now);
  const std::optional<TimeNs> t = arrival(role, unit, posted, now);
  if (t) seen(*t);
  return t;
}

std::optional<TimeNs> TreeChannel::arrival(TreeRole role, std::uint64_t unit, TimeNs posted,
                                           TimeNs now) {
  if (role == TreeRole::FromChild && has_parent_) return std::max(posted, fromBelow(unit));
  if (!sends_up_) {
    // No send up of the real rank drives the loop (NCCL's own tree made it a root, or its
    // sends up travel on the ring's connection), so the loop runs from the arrival from
    // below, and its last receive (from its parent, or from its children at a root) comes
    // when the target's rank would hold the result.
    for (; d_next_ <= unit; ++d_next_) runLoop(d_next_, fromBelow(d_next_));
    return std::max(posted, d_[slot(unit)]);
  }
  if (unit < d_next_) return unit + kWindow < d_next_ ? posted : std::max(posted, d_[slot(unit)]);
  // Waiting for the real rank's send of this unit. No hang: a parent that is never sent to
  // (not a tree all-reduce's order) is taken as ready once the real rank went quiet.
  if (now - std::max(posted, last_send_) < kStallSlackNs) return std::nullopt;
  return std::max(posted, fromBelow(unit));
}

}  // namespace crystal::live
