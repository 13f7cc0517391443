// `ferry dump -m FILE -t TENSOR [-o OUT.npy]`: one tensor of a GGUF, dequantized with the
// reference dequantizer (bit-exact with ggml's), written as float32 .npy in PyTorch order (GGUF's
// ne reversed), or summarised (min/max/mean/std) when no -o is given. Rows are streamed, so
// tensors larger than RAM can be dumped.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/quants.hpp"
#include "runtime/cli/command.hpp"
#include "runtime/core/error.hpp"
#include "runtime/gguf/gguf.hpp"

namespace ferry::cli {
namespace {

// PyTorch-order shape: ne[n_dims-1], ..., ne[0].
std::vector<uint64_t> torch_shape(const gguf::TensorInfo& t) {
  std::vector<uint64_t> s;
  for (uint32_t i = t.n_dims; i-- > 0;) s.push_back(t.ne[i]);
  if (s.empty()) s.push_back(1);
  return s;
}

std::string shape_text(const std::vector<uint64_t>& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + (s.size() == 1 ? ",)" : ")");
}

// Streams a float32 C-order .npy: header first, then rows; commit() renames PATH.tmp → PATH.
// Destroyed without commit(), it removes the temporary file.
class NpyWriter {
 public:
  NpyWriter(std::string path, const std::vector<uint64_t>& shape) : path_(std::move(path)), tmp_(path_ + ".tmp") {
    std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape_text(shape) + ", }";
    const size_t unpadded = 10 + header.size() + 1;  // magic, version, length, header, '\n'
    header.append((64 - unpadded % 64) % 64, ' ');
    header += '\n';
    if (header.size() > 0xffff) fail(ErrorKind::invalid_arg, "npy header too long for {}", path_);
    f_ = std::fopen(tmp_.c_str(), "wb");
    if (!f_) fail(ErrorKind::io, "cannot write {}", tmp_);
    const unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0,
                                   static_cast<unsigned char>(header.size() & 0xff),
                                   static_cast<unsigned char>(header.size() >> 8)};
    write(pre, 10);
    write(header.data(), header.size());
  }
  ~NpyWriter() {
    if (f_) {
      std::fclose(f_);
      std::remove(tmp_.c_str());
    }
  }
  NpyWriter(const NpyWriter&) = delete;
  NpyWriter& operator=(const NpyWriter&) = delete;

  void write(const void* p, size_t bytes) {
    if (std::fwrite(p, 1, bytes, f_) != bytes) fail(ErrorKind::io, "cannot write {} (disk full?)", tmp_);
  }
  void commit() {
    const int rc = std::fclose(f_);
    f_ = nullptr;
    if (rc != 0 || std::rename(tmp_.c_str(), path_.c_str()) != 0) {
      std::remove(tmp_.c_str());
      fail(ErrorKind::io, "cannot write {} (disk full?)", path_);
    }
  }

 private:
  std::string path_, tmp_;
  std::FILE* f_ = nullptr;
};

// Welford's running mean and variance (no cancellation for tensors with a large mean).
struct Stats {
  double mean = 0, m2 = 0;
  float min = std::numeric_limits<float>::infinity(), max = -std::numeric_limits<float>::infinity();
  uint64_t finite = 0, nan = 0, inf = 0;
  void add(const float* v, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      const float x = v[i];
      if (std::isnan(x)) { ++nan; continue; }
      if (std::isinf(x)) { ++inf; continue; }
      ++finite;
      min = std::min(min, x);
      max = std::max(max, x);
      const double delta = x - mean;
      mean += delta / static_cast<double>(finite);
      m2 += delta * (x - mean);
    }
  }
};

int run_dump(int argc, char** argv) {
  CLI::App app{"Dequantize one tensor of a GGUF file: write it as float32 .npy (PyTorch order, i.e. "
               "GGUF's ne reversed) or print min/max/mean/std.",
               "ferry dump"};
  std::string model, tensor, out;
  app.add_option("-m,--model", model, "GGUF file")->required();
  app.add_option("-t,--tensor", tensor, "tensor name (see `ferry inspect`)")->required();
  app.add_option("-o,--output", out, "write float32 .npy here instead of printing statistics");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }

  const gguf::File f = gguf::File::open(model);
  const gguf::TensorInfo& t = f.tensor(tensor);
  const TypeInfo& ti = type_info(t.type);
  if (!ti.compute || t.type == GgmlType::Q8_K)
    fail(ErrorKind::unsupported, "tensor {} in {} has type {}, which ferry cannot dequantize", t.name,
         f.path(), ti.name);
  const auto cols = static_cast<int64_t>(t.ne[0]);
  const uint64_t rows = t.n_rows();
  if (t.nb[1] != row_bytes(t.type, t.ne[0]))  // the reader lays tensors out contiguously
    fail(ErrorKind::internal, "tensor {} in {}: unexpected row stride {}", t.name, f.path(), t.nb[1]);
  const std::vector<uint64_t> shape = torch_shape(t);

  std::vector<float> row(static_cast<size_t>(cols));  // (cols) one dequantized row
  Stats stats;
  std::unique_ptr<NpyWriter> npy;
  if (!out.empty()) npy = std::make_unique<NpyWriter>(out, shape);
  const uint8_t* data = f.data(t);
  for (uint64_t r = 0; r < rows; ++r) {
    cpu::dequantize_row_ref(t.type, data + r * t.nb[1], row.data(), cols);
    if (npy) npy->write(row.data(), row.size() * sizeof(float));
    else stats.add(row.data(), row.size());
  }
  if (npy) {
    npy->commit();
    std::fprintf(stderr, "%s: %s %s → %s float32 %s\n", f.path().c_str(), t.name.c_str(),
                 std::string(ti.name).c_str(), out.c_str(), shape_text(shape).c_str());
    return 0;
  }
  const double var = stats.finite > 0 ? stats.m2 / static_cast<double>(stats.finite) : 0.0;
  std::printf("tensor %s\ntype   %s\nshape  %s\ncount  %llu\n", t.name.c_str(), std::string(ti.name).c_str(),
              shape_text(shape).c_str(), static_cast<unsigned long long>(t.n_elements()));
  if (stats.finite > 0)
    std::printf("min    %.9g\nmax    %.9g\nmean   %.9g\nstd    %.9g\n", stats.min, stats.max, stats.mean, std::sqrt(var));
  if (stats.nan || stats.inf)
    std::printf("nan    %llu\ninf    %llu\n", static_cast<unsigned long long>(stats.nan),
                static_cast<unsigned long long>(stats.inf));
  return 0;
}

}  // namespace

FERRY_COMMAND("dump", "dequantize one tensor to .npy or print its statistics", run_dump);

}  // namespace ferry::cli
