#pragma once
// The sim device: the Device interface on the host. "Device memory" is budgeted host memory,
// each Stream is a worker thread running its queue in order, events are completion counters, and
// copies optionally follow a bandwidth/latency model (SimLinkModel) so that offload schedules can
// be tested for timing as well as results on machines without a GPU.
#include <memory>

#include "runtime/backend/device.hpp"

namespace ferry {

std::unique_ptr<Device> make_sim_device(const DeviceOptions& options);

}  // namespace ferry
