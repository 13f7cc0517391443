// Checkpoints of a hybrid model's per-session state: the conv and ssm buffers of every DeltaNet
// block copied to host memory and back. The attention blocks need no copy: their KV rows before
// the checkpoint's position are still those of the same tokens (the caller's guarantee), and rows
// past n_past are never read.
#include "runtime/core/error.hpp"
#include "runtime/model/qwen35moe_internal.hpp"

namespace ferry::hybrid {

namespace {

// The recurrent buffers in one fixed order: per layer, conv then ssm (attention layers have none).
template <typename Fn>
void for_each_recurrent(const State& st, Fn&& fn) {
  for (size_t il = 0; il < st.conv_state.size(); ++il)
    for (const DeviceBuffer* b : {&st.conv_state[il], &st.ssm_state[il]})
      if (*b) fn(*b);
}

}  // namespace

StateCheckpoint State::save_checkpoint() const {
  StateCheckpoint c;
  c.n_past = n_past_;
  for_each_recurrent(*this, [&](const DeviceBuffer& b) {
    c.buffers.emplace_back(b.bytes());
    ops.to_host(c.buffers.back().data(), b.data(), b.bytes());
  });
  return c;
}

void State::restore_checkpoint(const StateCheckpoint& c) {
  if (c.n_past < 0 || c.n_past > n_past_)
    fail(ErrorKind::invalid_arg, "restore to {} positions: the state holds {}", c.n_past, n_past_);
  size_t i = 0;
  bool match = true;
  for_each_recurrent(*this, [&](const DeviceBuffer& b) {
    match = match && i < c.buffers.size() && c.buffers[i].size() == b.bytes();
    ++i;
  });
  if (!match || i != c.buffers.size())
    fail(ErrorKind::invalid_arg,
         "restore: the checkpoint's {} buffers ({} bytes) are not this state's {} recurrent buffers",
         c.buffers.size(), c.bytes(), i);
  i = 0;
  for_each_recurrent(*this, [&](const DeviceBuffer& b) {
    ops.to_device(b.data(), c.buffers[i].data(), b.bytes());
    ++i;
  });
  ops.sync();
  n_past_ = c.n_past;
}

}  // namespace ferry::hybrid
