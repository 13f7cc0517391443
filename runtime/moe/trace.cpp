#include "runtime/moe/trace.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "runtime/core/error.hpp"

namespace ferry {

namespace {

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Tracer serial numbers: the thread_local buffer cache below must not mistake a new tracer at a
// reused address for an old one. A process-wide id counter, not state that changes behaviour.
std::atomic<uint64_t> g_next_serial{1};

struct LocalCache {
  uint64_t serial = 0;
  void* buffer = nullptr;
};
thread_local LocalCache t_cache;

void json_escape(std::string& out, std::string_view s) {
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
        else out += c;
    }
  }
}

}  // namespace

Tracer::Tracer(std::string path)
    : enabled_(true), path_(std::move(path)), serial_(g_next_serial.fetch_add(1)), t0_ns_(steady_ns()) {}

Tracer::~Tracer() {
  if (t_cache.serial == serial_) t_cache = {};
}

int64_t Tracer::now_ns() const { return steady_ns() - t0_ns_; }

Tracer::Buffer& Tracer::local() {
  if (t_cache.serial == serial_) return *static_cast<Buffer*>(t_cache.buffer);
  std::lock_guard lock(mu_);
  auto b = std::make_unique<Buffer>();
  b->tid = static_cast<int32_t>(buffers_.size()) + 1;
  buffers_.push_back(std::move(b));
  t_cache = {serial_, buffers_.back().get()};
  return *buffers_.back();
}

void Tracer::complete(std::string_view name, const char* cat, int64_t ts_ns, int64_t dur_ns,
                      std::initializer_list<TraceArg> args, int32_t tid) {
  if (!enabled_) return;
  Buffer& b = local();
  Event e{std::string(name), cat, ts_ns, std::max<int64_t>(dur_ns, 0), tid >= 0 ? tid : b.tid, 0, {}};
  for (const TraceArg& a : args) {
    if (e.n_args == kMaxArgs) break;
    e.args[e.n_args++] = a;
  }
  std::lock_guard lock(b.mu);
  b.events.push_back(std::move(e));
}

void Tracer::set_track_name(int32_t tid, std::string name) {
  if (!enabled_) return;
  std::lock_guard lock(mu_);
  tracks_.emplace_back(tid, std::move(name));
}

void Tracer::set_thread_name(std::string name) {
  if (!enabled_) return;
  Buffer& b = local();
  std::lock_guard lock(b.mu);
  b.thread_name = std::move(name);
}

size_t Tracer::events() const {
  std::lock_guard lock(mu_);
  size_t n = 0;
  for (const auto& b : buffers_) {
    std::lock_guard bl(b->mu);
    n += b->events.size();
  }
  return n;
}

void Tracer::write() {
  if (!enabled_) return;
  std::lock_guard lock(mu_);
  std::string out = "{\"traceEvents\":[\n";
  bool first = true;
  const auto sep = [&] {
    if (!first) out += ",\n";
    first = false;
  };
  const auto meta = [&](int32_t tid, const std::string& name) {
    sep();
    out += fmt::format(R"({{"name":"thread_name","ph":"M","pid":1,"tid":{},"args":{{"name":")", tid);
    json_escape(out, name);
    out += "\"}}";
  };
  for (const auto& [tid, name] : tracks_) meta(tid, name);
  for (const auto& b : buffers_) {
    std::lock_guard bl(b->mu);
    if (!b->thread_name.empty()) meta(b->tid, b->thread_name);
    for (const Event& e : b->events) {
      sep();
      out += "{\"name\":\"";
      json_escape(out, e.name);
      out += "\",\"cat\":\"";
      json_escape(out, e.cat ? e.cat : "");
      // Microseconds with ns resolution: the format takes fractional µs.
      out += fmt::format(R"(","ph":"X","ts":{:.3f},"dur":{:.3f},"pid":1,"tid":{},"args":{{)", double(e.ts_ns) / 1e3,
                         double(e.dur_ns) / 1e3, e.tid);
      for (uint8_t i = 0; i < e.n_args; ++i) {
        if (i) out += ',';
        out += '"';
        json_escape(out, e.args[i].key);
        out += fmt::format("\":{}", e.args[i].value);
      }
      out += "}}";
    }
  }
  out += "\n],\"displayTimeUnit\":\"ms\"}\n";

  const std::string tmp = path_ + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) fail(ErrorKind::io, "cannot create trace file {}: {}", tmp, std::strerror(errno));
  const bool ok = std::fwrite(out.data(), 1, out.size(), f) == out.size();
  const bool closed = std::fclose(f) == 0;
  std::error_code ec;
  if (!ok || !closed) {
    std::filesystem::remove(tmp, ec);
    fail(ErrorKind::io, "writing trace file {} failed", tmp);
  }
  std::filesystem::rename(tmp, path_, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    fail(ErrorKind::io, "cannot rename {} to {}: {}", tmp, path_, ec.message());
  }
}

Tracer::Span::Span(Tracer* t, std::string_view name, const char* cat, std::initializer_list<TraceArg> args) {
  if (!t || !t->enabled()) return;
  t_ = t;
  name_ = name;
  cat_ = cat;
  for (const TraceArg& a : args) {
    if (n_args_ == kMaxArgs) break;
    args_[n_args_++] = a;
  }
  t0_ = t->now_ns();
}

Tracer::Span::~Span() {
  if (!t_) return;
  const int64_t t1 = t_->now_ns();
  switch (n_args_) {
    case 0: t_->complete(name_, cat_, t0_, t1 - t0_); break;
    case 1: t_->complete(name_, cat_, t0_, t1 - t0_, {args_[0]}); break;
    case 2: t_->complete(name_, cat_, t0_, t1 - t0_, {args_[0], args_[1]}); break;
    case 3: t_->complete(name_, cat_, t0_, t1 - t0_, {args_[0], args_[1], args_[2]}); break;
    default: t_->complete(name_, cat_, t0_, t1 - t0_, {args_[0], args_[1], args_[2], args_[3]}); break;
  }
}


TraceOpHook trace_debug_hook(Tracer& t, TraceOpHook next) {
  struct State {
    int64_t last_ns = -1;     // time of the previous intermediate, -1: none in this forward
    int64_t forward_t0 = -1;  // inp_embd of the current forward
    int64_t n_forward = 0;
  };
  auto st = std::make_shared<State>();
  return [&t, st, next = std::move(next)](std::string_view name, int32_t layer, const float* data, int64_t rows,
                                          int64_t cols) {
    const int64_t now = t.now_ns();
    if (name == "inp_embd") {
      // A new forward: close the previous one at its last intermediate.
      if (st->forward_t0 >= 0)
        t.complete("forward", "forward", st->forward_t0, st->last_ns - st->forward_t0, {{"index", st->n_forward}});
      st->forward_t0 = st->last_ns = now;
      ++st->n_forward;
      // inp_embd itself: the embedding lookup is not timed (no earlier mark in this forward).
    } else if (st->last_ns >= 0) {
      t.complete(name, "op", st->last_ns, now - st->last_ns, {{"layer", layer}, {"rows", rows}});
      st->last_ns = now;
      if (name == "result_output") {
        t.complete("forward", "forward", st->forward_t0, now - st->forward_t0, {{"index", st->n_forward}, {"rows", rows}});
        st->forward_t0 = st->last_ns = -1;
      }
    }
    if (next) next(name, layer, data, rows, cols);
  };
}

}  // namespace ferry
