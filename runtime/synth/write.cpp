// write_model: a oneTBB pipeline over fixed-size row chunks of every tensor, in file order.
//   input (serial, in order)  → picks the next chunk and a free buffer slot
//   generate (parallel)       → F32 values (generate_rows), then the tensor's type (encode.hpp)
//   output (serial, in order) → appends the bytes to the GGUF writer
// At most `slots` chunks are in flight, so memory stays bounded (≈ slots × 4 MB) whatever the model
// size, and the bytes never depend on the thread count: a chunk's values depend only on its rows.
#include <chrono>
#include <cstring>
#include <filesystem>

#include <tbb/enumerable_thread_specific.h>
#include <tbb/global_control.h>
#include <tbb/info.h>
#include <tbb/parallel_pipeline.h>
#include <tbb/task_arena.h>

#include "runtime/core/error.hpp"
#include "runtime/synth/encode.hpp"
#include "runtime/synth/synth.hpp"

namespace ferry::synth {
namespace {

constexpr uint64_t kChunkValues = uint64_t{1} << 20;

struct Chunk {
  size_t tensor = 0;
  uint64_t row_begin = 0, row_end = 0;
  std::vector<uint8_t> bytes;  // (row_end - row_begin) rows of the tensor's type
};

}  // namespace

WriteStats write_model(const ModelPlan& plan, const std::string& path, const WriteOptions& w) {
  const auto t0 = std::chrono::steady_clock::now();
  auto seconds_since_start = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };

  gguf::Writer writer(path);
  for (const auto& [k, v] : plan.metadata) writer.set(k, v);
  for (const auto& t : plan.tensors) writer.add_tensor(t.name, t.type, t.ne);
  writer.write_header();

  const int threads = w.threads > 0 ? w.threads : tbb::info::default_concurrency();
  const size_t slots = 2 * static_cast<size_t>(threads) + 2;
  std::vector<Chunk> ring(slots);
  tbb::enumerable_thread_specific<std::vector<float>> scratch;

  const uint64_t total = plan.tensor_bytes();
  uint64_t done = 0;
  double last_report = 0.0;
  size_t next_tensor = 0;
  uint64_t next_row = 0;
  size_t seq = 0;

  // Allow more threads than cores when asked (TBB otherwise caps workers at the core count).
  tbb::global_control parallelism(tbb::global_control::max_allowed_parallelism,
                                  std::max<size_t>(threads, tbb::global_control::active_value(
                                                                tbb::global_control::max_allowed_parallelism)));
  tbb::task_arena arena(threads);
  arena.execute([&] {
    tbb::parallel_pipeline(
        slots,
        tbb::make_filter<void, Chunk*>(
            tbb::filter_mode::serial_in_order,
            [&](tbb::flow_control& fc) -> Chunk* {
              while (next_tensor < plan.tensors.size() && next_row >= plan.tensors[next_tensor].n_rows()) {
                ++next_tensor;
                next_row = 0;
              }
              if (next_tensor == plan.tensors.size()) {
                fc.stop();
                return nullptr;
              }
              const TensorPlan& t = plan.tensors[next_tensor];
              const uint64_t rows = std::max<uint64_t>(1, kChunkValues / t.row_len());
              Chunk* c = &ring[seq++ % slots];  // free: at most `slots` chunks are in flight
              c->tensor = next_tensor;
              c->row_begin = next_row;
              c->row_end = std::min(t.n_rows(), next_row + rows);
              next_row = c->row_end;
              return c;
            }) &
            tbb::make_filter<Chunk*, Chunk*>(
                tbb::filter_mode::parallel,
                [&](Chunk* c) -> Chunk* {
                  const TensorPlan& t = plan.tensors[c->tensor];
                  const uint64_t n_rows = c->row_end - c->row_begin;
                  std::vector<float>& f32 = scratch.local();
                  // Random blocks do not read the generated values: not generated.
                  if (encoding_of(t.type) != Encoding::random_blocks) {
                    f32.resize(n_rows * t.row_len());
                    generate_rows(plan, t, c->row_begin, c->row_end, f32.data());
                  }
                  c->bytes.resize(n_rows * row_bytes(t.type, t.row_len()));
                  encode_rows(plan, t, c->row_begin, n_rows, f32.data(), c->bytes.data());
                  return c;
                }) &
            tbb::make_filter<Chunk*, void>(tbb::filter_mode::serial_in_order, [&](Chunk* c) {
              writer.write_data(c->bytes.data(), c->bytes.size());
              done += c->bytes.size();
              const double s = seconds_since_start();
              if (w.progress && s - last_report >= 1.0) {
                last_report = s;
                w.progress(done, total, s);
              }
            }));
  });
  writer.finish();
  WriteStats st;
  st.seconds = seconds_since_start();
  st.tensor_bytes = done;
  st.file_bytes = std::filesystem::file_size(path);
  if (w.progress) w.progress(done, total, st.seconds);
  return st;
}

}  // namespace ferry::synth
