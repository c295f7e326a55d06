#include "virtual_comm.h"

namespace crystal::plugin {

void VirtualSendComm::isend(Request& r, void* data, std::size_t size, int tag, live::TimeNs now) {
  r.n = 1;
  r.data[0] = data;
  r.sizes[0] = size;
  r.tags[0] = tag;
  r.posted = now;
  r.bytes = size;
  r.due = link_->postSend(now, size);
}

bool VirtualSendComm::test(Request& r, live::TimeNs now, int* sizes) {
  if (now < r.due) return false;
  if (sizes) sizes[0] = static_cast<int>(r.sizes[0]);
  return true;
}

void VirtualRecvComm::irecv(Request& r, int n, void** data, const std::size_t* sizes,
                            const int* tags, live::TimeNs now) {
  r.n = n;
  for (int i = 0; i < n; ++i) {
    r.data[i] = data[i];
    r.sizes[i] = sizes[i];
    r.tags[i] = tags ? tags[i] : 0;
    r.bytes += sizes[i];
  }
  r.posted = now;
  r.step = next_step_++;
  // Known now if the paired sender already reached this step; else resolved in test().
  r.due = link_->recvArrival(r.step, now, r.bytes, now).value_or(Request::kUnknown);
}

bool VirtualRecvComm::test(Request& r, live::TimeNs now, int* sizes) {
  if (r.due == Request::kUnknown) {
    auto due = link_->recvArrival(r.step, r.posted, r.bytes, now);
    if (!due) return false;
    r.due = *due;
  }
  if (now < r.due) return false;
  // The virtual sender filled every posted buffer completely (data policy: contents are left
  // as they are, which NCCL's zeroed host buffers make zero).
  if (sizes)
    for (int i = 0; i < r.n; ++i) sizes[i] = static_cast<int>(r.sizes[i]);
  return true;
}

}  // namespace crystal::plugin
