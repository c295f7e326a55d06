#include "graph/workload_schedule.h"

#include <algorithm>
#include <initializer_list>
#include <string_view>

#include "graph/template_builder.h"
#include "graph/workload_layers.h"

namespace crystal::graph {
namespace {

struct P2P {
  std::int32_t offset;  // +1 next stage, -1 previous stage
  std::string_view name;
};

// Gradient buckets of one sync family, filled in the order backward produces gradients.
struct Buckets {
  std::string_view family;  // empty: nothing to sync
  std::uint64_t limit = 0;
  std::uint64_t pending = 0;
  std::vector<std::uint64_t> issued;  // sizes, reused for the parameter all-gather
};

class StageBuilder {
 public:
  StageBuilder(const Config& c, const WorkloadCosts& k, int stage, Templates& t,
               std::vector<Op>& ops)
      : c_(c), k_(k), stage_(stage), b_(t, ops, c.workload) {
    first_ = stage == 0;
    last_ = stage == k.pp - 1;
    dense_params_ = k.layers_per_stage * k.layer_params + (first_ ? k.embed_params : 0) +
                    (last_ ? k.head_params : 0);
    expert_params_ = k.layers_per_stage * k.layer_expert_params;
    act_bytes_ = k.layers_per_stage * k.layer_activation_bytes +
                 (first_ ? k.embed_activation_bytes : 0) + (last_ ? k.head_activation_bytes : 0);
    // Gradients sum over every replica of a parameter: dp (and cp) for dense parameters,
    // the expert-data-parallel group for experts (dp/ep replicas).
    const int edp = k.dp / k.ep;
    dense_.family = k.cp > 1 ? (k.dp > 1 ? "dp-cp" : "cp") : (k.dp > 1 ? "dp" : "");
    expert_.family = k.moe && k.ep == 1 ? dense_.family : (edp > 1 ? "edp" : "");
    dense_.limit = expert_.limit = c.workload.dp_bucket_bytes;
    dense_shard_ = c.workload.distributed_optimizer ? k.dp * k.cp : 1;
    expert_shard_ = c.workload.distributed_optimizer ? (k.ep == 1 ? k.dp * k.cp : edp) : 1;
  }

  void build() {
    const std::uint64_t params = dense_params_ + expert_params_;
    // Static memory: bf16 weights, fp32 main gradients, fp32 master weights + Adam m, v.
    b_.alloc(params * static_cast<std::uint64_t>(k_.dtype_bytes), "mem.weights");
    b_.alloc(params * 4, "mem.grads");
    b_.alloc(optimizerStateBytes(), "mem.optimizer");
    for (int it = 0; it < c_.job.iterations; ++it) {
      b_.iteration(static_cast<std::uint32_t>(it));
      backward_count_ = 0;
      if (c_.workload.schedule == PipelineSchedule::GPipe) gpipe();
      else oneFOneB();
      optimizerStep();
    }
    b_.free(optimizerStateBytes(), "mem.optimizer");
    b_.free(params * 4, "mem.grads");
    b_.free(params * static_cast<std::uint64_t>(k_.dtype_bytes), "mem.weights");
  }

 private:
  std::uint64_t optimizerStateBytes() const {
    return 12 * (dense_params_ / static_cast<std::uint64_t>(dense_shard_) +
                 expert_params_ / static_cast<std::uint64_t>(expert_shard_));
  }

  // Megatron's forward_backward_pipelining_without_interleaving.
  void oneFOneB() {
    const int m = c_.workload.micro_batches;
    const int warmup = std::min(k_.pp - stage_ - 1, m);
    const int steady = m - warmup;
    for (int i = 0; i < warmup; ++i) {
      recvForward();
      forward();
      sendForward();
    }
    if (steady > 0) recvForward();
    for (int i = 0; i < steady; ++i) {
      forward();
      if (!last_) exchange({{+1, "pp.send_act"}}, {{+1, "pp.recv_grad"}});
      backward();
      if (i == steady - 1) sendBackward();
      else if (!first_) exchange({{-1, "pp.send_grad"}}, {{-1, "pp.recv_act"}});
    }
    for (int i = 0; i < warmup; ++i) {
      recvBackward();
      backward();
      sendBackward();
    }
  }

  void gpipe() {
    for (int i = 0; i < c_.workload.micro_batches; ++i) {
      recvForward();
      forward();
      sendForward();
    }
    for (int i = 0; i < c_.workload.micro_batches; ++i) {
      recvBackward();
      backward();
      sendBackward();
    }
  }

  void recvForward() { if (!first_) exchange({}, {{-1, "pp.recv_act"}}); }
  void sendForward() { if (!last_) exchange({{+1, "pp.send_act"}}, {}); }
  void recvBackward() { if (!last_) exchange({}, {{+1, "pp.recv_grad"}}); }
  void sendBackward() { if (!first_) exchange({{-1, "pp.send_grad"}}, {}); }

  // Pipeline ops run on their own stream: it waits for the compute that produced what it
  // sends, and compute waits for what it receives. Several ops form one NCCL group.
  void exchange(std::initializer_list<P2P> sends, std::initializer_list<P2P> recvs) {
    if (sends.size() != 0) b_.dependency(kComputeStream, kPipeStream);
    const bool group = sends.size() + recvs.size() > 1;
    if (group) b_.groupBegin(kPipeStream);
    for (const P2P& s : sends) b_.send("pp", s.offset, k_.pp_bytes, s.name);
    for (const P2P& r : recvs) b_.recv("pp", r.offset, k_.pp_bytes, r.name);
    if (group) b_.groupEnd(kPipeStream);
    b_.dependency(kPipeStream, kComputeStream);
  }

  void forward() {
    b_.alloc(act_bytes_, "mem.activations");
    if (first_) {
      b_.compute("fwd.embed", k_.embed_us);
      if (k_.tp > 1) b_.collective("tp", CollKind::AllReduce, k_.tp_allreduce_bytes, "fwd.embed.tp");
    }
    for (int l = 0; l < k_.layers_per_stage; ++l) layerForward(b_, k_);
    if (last_) {
      b_.compute("fwd.head", k_.head_us);
      // Vocab-parallel cross-entropy: max and sum of exponentials over TP.
      if (k_.tp > 1) {
        b_.collective("tp", CollKind::AllReduce, k_.loss_allreduce_bytes, "fwd.loss.tp");
        b_.collective("tp", CollKind::AllReduce, k_.loss_allreduce_bytes, "fwd.loss.tp");
      }
    }
  }

  void backward() {
    const bool sync = ++backward_count_ == c_.workload.micro_batches &&
                      c_.workload.overlap_grad_reduce;
    const auto e = static_cast<std::uint64_t>(k_.dtype_bytes);
    if (last_) {
      b_.compute("bwd.head", 2 * k_.head_us);
      if (k_.tp > 1) b_.collective("tp", CollKind::AllReduce, k_.tp_allreduce_bytes, "bwd.head.tp");
      if (sync) grads(dense_, k_.head_params * e);
    }
    for (int l = 0; l < k_.layers_per_stage; ++l) {
      layerBackward(b_, k_);
      if (sync) {
        grads(expert_, k_.layer_expert_params * e);
        grads(dense_, k_.layer_params * e);
      }
    }
    if (first_) {
      b_.compute("bwd.embed", k_.embed_us);
      if (sync) grads(dense_, k_.embed_params * e);
    }
    b_.free(act_bytes_, "mem.activations");
    if (backward_count_ == c_.workload.micro_batches && !c_.workload.overlap_grad_reduce) {
      grads(expert_, expert_params_ * e);
      grads(dense_, dense_params_ * e);
    }
  }

  // Gradients of `bytes` are ready: start every bucket that is now full.
  void grads(Buckets& bk, std::uint64_t bytes) {
    if (bk.family.empty() || bytes == 0) return;
    bk.pending += bytes;
    while (bk.pending >= bk.limit) {
      issue(bk, bk.limit);
      bk.pending -= bk.limit;
    }
  }

  void issue(Buckets& bk, std::uint64_t bytes) {
    b_.dependency(kComputeStream, kDpStream);
    const bool rs = c_.workload.distributed_optimizer;
    b_.collective(bk.family, rs ? CollKind::ReduceScatter : CollKind::AllReduce, bytes,
                  rs ? "dp.grad_reduce_scatter" : "dp.grad_all_reduce", kDpStream);
    bk.issued.push_back(bytes);
  }

  void optimizerStep() {
    for (Buckets* bk : {&expert_, &dense_}) {
      if (bk->pending > 0) issue(*bk, bk->pending);
      bk->pending = 0;
    }
    if (!expert_.issued.empty() || !dense_.issued.empty()) b_.dependency(kDpStream, kComputeStream);
    // Adam on this rank's shard: read and write fp32 master, m, v and gradient, write bf16.
    const double shard = static_cast<double>(dense_params_) / dense_shard_ +
                         static_cast<double>(expert_params_) / expert_shard_;
    b_.compute("optimizer", shard * 34 / k_.hbm_bytes_per_us);
    if (c_.workload.distributed_optimizer && (!expert_.issued.empty() || !dense_.issued.empty())) {
      b_.dependency(kComputeStream, kDpStream);
      for (Buckets* bk : {&expert_, &dense_})
        for (std::uint64_t bytes : bk->issued)
          b_.collective(bk->family, CollKind::AllGather, bytes, "dp.param_all_gather", kDpStream);
      b_.dependency(kDpStream, kComputeStream);
    }
    expert_.issued.clear();
    dense_.issued.clear();
  }

  const Config& c_;
  const WorkloadCosts& k_;
  int stage_;
  TemplateBuilder b_;
  bool first_ = false, last_ = false;
  std::uint64_t dense_params_ = 0, expert_params_ = 0, act_bytes_ = 0;
  int dense_shard_ = 1, expert_shard_ = 1;
  int backward_count_ = 0;
  Buckets dense_, expert_;
};

}  // namespace

void buildStageTemplate(const Config& c, const WorkloadCosts& k, int stage, Templates& t) {
  std::vector<Op> ops;
  StageBuilder(c, k, stage, t, ops).build();
  t.classes.push_back(std::move(ops));
}

}  // namespace crystal::graph
