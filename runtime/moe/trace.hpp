#pragma once
// --trace FILE: a Chrome / Perfetto trace (JSON object format, complete "X" events):
//   {"traceEvents":[{"name":..,"cat":..,"ph":"X","ts":µs,"dur":µs,"pid":1,"tid":..,"args":{..}},
//                   {"name":"thread_name","ph":"M","pid":1,"tid":..,"args":{"name":..}}, ...],
//    "displayTimeUnit":"ms"}
// Open it in ui.perfetto.dev or chrome://tracing.
//
// Cost: a disabled Tracer is one branch per would-be event (and nothing at all where the caller
// does not install the trace hooks). Enabled, each thread appends to its own buffer (found through
// a thread_local cache, one uncontended lock per event), so CPU-expert workers and copy threads do
// not serialize on one lock. write() is called once at the end (no events may be recorded
// concurrently) and replaces FILE atomically (FILE.tmp, then rename).
//
// tid: by default the recording thread's number in this tracer (1, 2, ... in order of first
// event); components that model a device queue (a copy stream, the GPU compute stream) record on
// a named track instead: tid ≥ kTrackBase, named with set_track_name().
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>


namespace ferry {

struct TraceArg {
  const char* key;  // a string literal (stored by pointer)
  int64_t value;
};

class Tracer {
 public:
  static constexpr int32_t kTrackBase = 1000;
  static constexpr size_t kMaxArgs = 4;

  Tracer() = default;                 // disabled
  explicit Tracer(std::string path);  // enabled; the file is written by write()
  ~Tracer();
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  bool enabled() const { return enabled_; }
  const std::string& path() const { return path_; }
  int64_t now_ns() const;  // since the tracer was made

  // A finished span [ts_ns, ts_ns + dur_ns). cat: a string literal. At most kMaxArgs args are kept.
  void complete(std::string_view name, const char* cat, int64_t ts_ns, int64_t dur_ns,
                std::initializer_list<TraceArg> args = {}, int32_t tid = -1);
  void set_track_name(int32_t tid, std::string name);
  // Names the calling thread's row (e.g. "main", "cpu expert 3").
  void set_thread_name(std::string name);

  size_t events() const;
  // ErrorKind::io when FILE cannot be written; the previous FILE (if any) is then untouched.
  void write();

  // RAII span on the calling thread; a no-op when the tracer is null or disabled.
  class Span {
   public:
    Span(Tracer* t, std::string_view name, const char* cat, std::initializer_list<TraceArg> args = {});
    ~Span();
    Span(const Span&) = delete;
    Span& operator=(const Span&) = delete;

   private:
    Tracer* t_ = nullptr;
    std::string name_;
    const char* cat_ = nullptr;
    TraceArg args_[kMaxArgs] = {};
    size_t n_args_ = 0;
    int64_t t0_ = 0;
  };

 private:
  struct Event {
    std::string name;
    const char* cat;
    int64_t ts_ns, dur_ns;
    int32_t tid;
    uint8_t n_args;
    TraceArg args[kMaxArgs];
  };
  struct Buffer {
    std::mutex mu;
    int32_t tid = 0;
    std::string thread_name;
    std::vector<Event> events;
  };
  Buffer& local();

  bool enabled_ = false;
  std::string path_;
  uint64_t serial_ = 0;  // distinguishes tracers in the thread_local cache
  int64_t t0_ns_ = 0;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
  std::vector<std::pair<int32_t, std::string>> tracks_;
};


// A model DebugHook that turns the forward's named intermediates into "op" spans: each span runs
// from the previous intermediate to this one and carries its name and layer (on the CPU backend
// ops are synchronous, so the span is the time of the ops producing that tensor). A "forward" span
// covers inp_embd .. the last intermediate of each forward call. `next` (optional) is called too,
// so a tensor dump hook keeps working.
// The type is runtime/model's DebugHook, spelled out because offload/ may not include the model.
using TraceOpHook = std::function<void(std::string_view name, int32_t layer, const float* data, int64_t rows,
                                       int64_t cols)>;
TraceOpHook trace_debug_hook(Tracer& t, TraceOpHook next = {});

}  // namespace ferry
