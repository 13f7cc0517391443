#pragma once
// Routing traces: the expert ids and weights a run's MoE steps used, per layer and token, written
// by --record-routing FILE and replayed by --routing trace:FILE.
//
// File format "FRRT" version 1, little-endian, no padding:
//   header (24 bytes):  char magic[4] = "FRRT" | u32 version = 1 | u32 n_layer | u32 n_expert |
//                       u32 top_k | u32 reserved = 0
//   records, one per MoE step in call order, until end of file:
//                       i32 layer | u32 n_tokens |
//                       i32 ids[n_tokens][top_k] | f32 weights[n_tokens][top_k]
// A layer's token sequence is the concatenation of its records, so a trace recorded with prefill
// batches replays identically one token at a time (and the other way round). Every id is checked
// to lie in [0, n_expert) and to be distinct within its token when reading.
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace ferry {

struct RoutingTraceHeader {
  int32_t n_layer = 0;
  int32_t n_expert = 0;
  int32_t top_k = 0;
};

// Streams records to PATH.tmp and renames it to PATH in finish(), so an interrupted run never
// leaves a truncated trace under the requested name. ErrorKind::io on any write failure.
class RoutingTraceWriter {
 public:
  RoutingTraceWriter(std::string path, const RoutingTraceHeader& h);
  ~RoutingTraceWriter();  // without finish(): removes the temporary file
  RoutingTraceWriter(const RoutingTraceWriter&) = delete;
  RoutingTraceWriter& operator=(const RoutingTraceWriter&) = delete;

  // ids, weights: (n_tokens, top_k)
  void append(int32_t layer, int32_t n_tokens, const int32_t* ids, const float* weights);
  void finish();
  const std::string& path() const { return path_; }
  int64_t records() const { return records_; }

 private:
  std::string path_, tmp_path_;
  RoutingTraceHeader h_;
  std::FILE* f_ = nullptr;
  int64_t records_ = 0;
};

// A whole trace in memory, per layer: ids (n_tokens_l, top_k) and weights likewise.
struct RoutingTrace {
  RoutingTraceHeader header;
  std::vector<std::vector<int32_t>> ids;      // [layer] (n_tokens_l * top_k)
  std::vector<std::vector<float>> weights;    // [layer] (n_tokens_l * top_k)
  // The records in file order: (layer, n_tokens) of each MoE step as the run called them, so a
  // replay can repeat the run's steps (prefill batches, then one-token decode steps).
  std::vector<std::pair<int32_t, int32_t>> records;
  int64_t tokens(int32_t layer) const {
    return header.top_k > 0 ? static_cast<int64_t>(ids[static_cast<size_t>(layer)].size()) / header.top_k : 0;
  }
};

// ErrorKind::io when unreadable, ErrorKind::format (naming the file and byte offset) when the
// magic, version, header values, a record's layer or size, or an id is wrong.
RoutingTrace read_routing_trace(const std::string& path);

}  // namespace ferry
