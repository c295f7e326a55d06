// A broadcast's or reduce's member kernel with peers that never make it wait: the floor no
// member of a chain runs an operation under, and a member's operation with it (docs/model.md
// "Broadcast and reduce back to back"). Shared by the model (NcclModel::chainKernel) and the live
// timing of virtual chains (live::ChainOpCost), so both price it by one formula.
#pragma once

namespace crystal::model {

// `op_us` an operation plus its chunks copied at `copy_GBps` a channel
// (StepOptions::chain_op_us, chain_copy_GBps). {0, 0}: no such floor (a protocol it was not
// measured for, or turned off).
struct ChainKernel {
  double op_us = 0;
  double copy_GBps = 0;
  // One operation of `units` chunks of `unit_bytes` on a channel, us (0 without a floor).
  [[nodiscard]] double us(double units, double unit_bytes) const {
    return op_us > 0 && copy_GBps > 0 ? op_us + units * unit_bytes / (copy_GBps * 1e3) : 0.0;
  }
  // A member's whole operation, us: the operation's fixed cost `base_us` and its units over
  // its slower link (`crossing_us` a unit), or this kernel, whichever is longer.
  [[nodiscard]] double memberOpUs(double base_us, double units, double unit_bytes,
                                  double crossing_us) const {
    const double links = base_us + units * crossing_us;
    const double kernel = us(units, unit_bytes);
    return links > kernel ? links : kernel;
  }
};

}  // namespace crystal::model
