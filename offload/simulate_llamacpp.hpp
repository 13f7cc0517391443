#pragma once
// llama.cpp's strategies for a MoE model on one GPU, simulated in the same model as Ferry's
// engine (simulate.hpp, docs/simulator.md) so the two can be compared on cards we do not have.
// Placement facts (read in llama.cpp's source: its --n-cpu-moe option and llama_params_fit; the
// code here is Ferry's own):
//   -ncmoe N (--n-cpu-moe): the expert tensors (ffn_{gate,up,down}_exps) of layers 0..N-1 stay in
//     host memory; everything else goes to the GPU.
//   fit (the default, -fit on, target -fitt 1024 MiB free): when the model does not fit, first the
//     context shrinks (not below -fitc, 4096) if the user did not set it, then layers are filled
//     front to back as full layers on the GPU, the layers after them keep their expert tensors in
//     host memory, and the first of those may be split by tensor (up, then gate, on the GPU).
// Decode runs the GPU part of each layer, then (a layer with host experts) the CPU's split — its
// mul_mat_ids and the GLU between them — one after the other, with the split boundaries' copies,
// waits and graph launch between them (ggml_backend_sched_compute_splits). Prefill batches of at
// least 32 tokens copy the host-resident experts the micro-batch routes to to the GPU, per
// micro-batch (ggml's offload of large-batch ops, used experts only), and compute there.
// The static expert cache of thecodacus/llama.cpp#5 (model revision 11) adds, per cached layer,
// the cached experts' kernels on the GPU beside the CPU split and a merge of the two sums.
#include <cstdint>
#include <string>
#include <vector>

#include "offload/simulate.hpp"

namespace ferry {

struct LlamaPlacement {
  int64_t n_ctx = 0;
  std::vector<double> cpu_fraction;  // (n_layer) share of the layer's expert bytes in host memory
  uint64_t device_bytes = 0;         // device memory it uses
  bool fits = false;
  int32_t n_cpu_moe = -1;            // -ncmoe N (-1: fit)
  // A static VRAM cache of this many whole experts PER LAYER in front of the host-resident ones
  // (thecodacus/llama.cpp#5; 0: llama.cpp as it is): each layer's most-routed experts in a routing
  // profile (simulate_cache.hpp), fixed for the run; a cached expert runs on the GPU, the others
  // on the CPU, nothing is copied while decoding.
  int32_t cache_slots = 0;
  std::string note;
};

// Device memory of a placement: dense + KV (at n_ctx) + state + workspace + GPU experts.
uint64_t llamacpp_device_bytes(const SimModel& m, const std::vector<double>& cpu_fraction,
                               int64_t n_ctx);
// free_bytes: the card's free memory; the target is free − the fit margin.
LlamaPlacement llamacpp_ncmoe(const SimModel& m, const SimRates& r, int32_t n_cpu_moe,
                              uint64_t free_bytes);
// n_ctx: the context fit starts from (0: the model's placement's).
LlamaPlacement llamacpp_fit(const SimModel& m, const SimRates& r, uint64_t free_bytes,
                            bool ctx_set_by_user, int64_t n_ctx = 0);
// The smallest N whose placement fits (more host layers only cost time).
LlamaPlacement llamacpp_best_ncmoe(const SimModel& m, const SimRates& r, uint64_t free_bytes);

SimResult simulate_llamacpp(const SimModel& m, const SimRates& r, const LlamaPlacement& p,
                            const SimOptions& o, SimStrategy strategy);

}  // namespace ferry
