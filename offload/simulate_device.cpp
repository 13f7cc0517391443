#include "offload/simulate_device.hpp"

#include <algorithm>

#include "runtime/core/error.hpp"

namespace ferry {

void VirtualStream::queue_until(double t_us) { tail_us_ = std::max(tail_us_, t_us); }

// The engine pieces the simulator drives enqueue their copies through its callback; a direct copy
// on a virtual stream would be a simulator bug, not something to model silently.
void VirtualStream::copy_h2d(void*, const void*, size_t) {
  fail(ErrorKind::internal, "virtual stream: copies are booked by the simulator, not enqueued");
}
void VirtualStream::copy_d2h(void*, const void*, size_t) {
  fail(ErrorKind::internal, "virtual stream: copies are booked by the simulator, not enqueued");
}
void VirtualStream::copy_d2d(void*, const void*, size_t) {
  fail(ErrorKind::internal, "virtual stream: copies are booked by the simulator, not enqueued");
}
void VirtualStream::memset(void*, int, size_t) {
  fail(ErrorKind::internal, "virtual stream: no device memory to set");
}
void VirtualStream::host_fn(std::function<void()> fn) {
  // Runs when the stream reaches it; in virtual time the host observes it as done at once.
  if (fn) fn();
}
void VirtualStream::record(Event& e) {
  auto* v = dynamic_cast<VirtualEvent*>(&e);
  if (!v) fail(ErrorKind::internal, "virtual stream: event of another device");
  v->stamp(std::max(tail_us_, clock_.now_us));
}
void VirtualStream::wait(const Event& e) {
  const auto* v = dynamic_cast<const VirtualEvent*>(&e);
  if (!v) fail(ErrorKind::internal, "virtual stream: event of another device");
  queue_until(v->at_us());
}
void VirtualStream::synchronize() { clock_.now_us = std::max(clock_.now_us, tail_us_); }

void VirtualEvent::synchronize() { clock_.now_us = std::max(clock_.now_us, at_us_); }
double VirtualEvent::elapsed_ms_since(const Event& start) const {
  const auto* v = dynamic_cast<const VirtualEvent*>(&start);
  if (!v) fail(ErrorKind::internal, "virtual event: start event of another device");
  return (at_us_ - v->at_us()) / 1e3;
}

std::unique_ptr<Stream> VirtualDevice::create_stream() {
  return std::make_unique<VirtualStream>(clock_);
}
std::unique_ptr<Event> VirtualDevice::create_event() {
  return std::make_unique<VirtualEvent>(clock_);
}
HostBuffer VirtualDevice::alloc_host(size_t bytes, bool) {
  fail(ErrorKind::internal, "virtual device: no host buffers ({} bytes asked)", bytes);
}
HostRegistration VirtualDevice::register_host(void*, size_t bytes) {
  fail(ErrorKind::internal, "virtual device: no host registration ({} bytes asked)", bytes);
}
void VirtualDevice::synchronize() {
  fail(ErrorKind::internal, "virtual device: synchronize the simulator's streams one by one");
}
void* VirtualDevice::raw_alloc(size_t bytes) {
  fail(ErrorKind::internal, "virtual device: no device memory ({} bytes asked)", bytes);
}

}  // namespace ferry
