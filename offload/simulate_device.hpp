#pragma once
// The simulator's device in virtual time: streams and events that move no bytes and complete at
// virtual instants, so that the engine's own Prefetcher (prefetcher.hpp) runs unchanged on top of
// it. The host's clock is the simulator's (VirtualClock::now_us); an event is complete when the
// host's clock has reached the time its stream had queued up to when it was recorded, and a host
// wait (Event/Stream::synchronize) moves the host's clock forward to that time.
//
// Copies are timed by the simulator, not here: the prefetcher's copy callback (the simulator's)
// books the link and calls VirtualStream::queue_until() with the copy's end; a stream's record()
// then stamps the event with that end. Memory is never allocated (alloc fails): the simulator
// plans the budget with placement.hpp and keeps no weights.
#include <memory>
#include <string>

#include "runtime/backend/device.hpp"

namespace ferry {

struct VirtualClock {
  double now_us = 0.0;  // the host thread's time
};

class VirtualStream final : public Stream {
 public:
  explicit VirtualStream(VirtualClock& c) : clock_(c) {}
  // Work queued on this stream ends at t_us (not before what is already queued).
  void queue_until(double t_us);
  double tail_us() const { return tail_us_; }

  void copy_h2d(void*, const void*, size_t) override;
  void copy_d2h(void*, const void*, size_t) override;
  void copy_d2d(void*, const void*, size_t) override;
  void memset(void*, int, size_t) override;
  void host_fn(std::function<void()> fn) override;
  void record(Event& e) override;
  void wait(const Event& e) override;
  void synchronize() override;
  void* native_handle() override { return nullptr; }

 private:
  VirtualClock& clock_;
  double tail_us_ = 0.0;
};

class VirtualEvent final : public Event {
 public:
  explicit VirtualEvent(VirtualClock& c) : clock_(c) {}
  void stamp(double t_us) { at_us_ = t_us; }
  double at_us() const { return at_us_; }
  bool query() override { return clock_.now_us >= at_us_; }
  void synchronize() override;
  double elapsed_ms_since(const Event& start) const override;

 private:
  VirtualClock& clock_;
  double at_us_ = 0.0;
};

class VirtualDevice final : public Device {
 public:
  explicit VirtualDevice(VirtualClock& c) : Device("virtual device", 0), clock_(c) {}
  DeviceKind kind() const override { return DeviceKind::sim; }
  std::string name() const override { return "virtual (simulator)"; }
  std::unique_ptr<Stream> create_stream() override;
  std::unique_ptr<Event> create_event() override;
  HostBuffer alloc_host(size_t bytes, bool pinned) override;
  HostRegistration register_host(void* p, size_t bytes) override;
  const void* mapped_view(const void*) override { return nullptr; }
  void synchronize() override;

 protected:
  void* raw_alloc(size_t bytes) override;
  void raw_free(void*) noexcept override {}

 private:
  VirtualClock& clock_;
};

}  // namespace ferry
