#pragma once
// Prompt reuse across requests and turns: a session keeps the tokens it evaluated, and a new
// prompt that starts with some of them continues from there instead of starting over. Attention
// caches go back by truncation; a recurrent (DeltaNet) state cannot, so the session keeps host
// copies of it (checkpoints) at positions where later prompts are likely to diverge — the start
// of each user message and the start of the last message header, as llama-server places its
// context checkpoints — and goes back to the nearest one at or before the divergence.
//
// Step boundaries: a prefill step ends at the next multiple of n_batch (counted from position 0),
// at the next checkpoint position, or at the prompt's end. Boundaries at absolute positions make
// the steps — and so the state, bit for bit — the same for the same tokens whatever part of the
// prompt was reused (a recurrent state depends on how its input was split into steps).
#include <cstdint>
#include <span>
#include <vector>

#include "runtime/model/model.hpp"
#include "runtime/tokenizer/tokenizer.hpp"

namespace ferry {

// llama-server's names and defaults, except that the RAM bound here covers checkpoints only.
struct PromptCacheOptions {
  int32_t max_checkpoints = 8;         // --ctx-checkpoints: per session (0: none)
  int64_t checkpoint_min_step = 256;   // --checkpoint-min-step: tokens between two checkpoints
  uint64_t ram_bytes = 8192ull << 20;  // --cache-ram: host memory of this session's checkpoints
};

// The checkpoints of one session, oldest first; bounded in count and bytes (oldest evicted).
class CheckpointStore {
 public:
  explicit CheckpointStore(const PromptCacheOptions& o = {}) : o_(o) {}
  // Adds c after evicting the oldest checkpoints until it fits; false (c dropped) when the count
  // limit is 0 or c alone is larger than the RAM bound.
  bool add(StateCheckpoint c);
  // The checkpoint with the largest position <= n, or nullptr.
  const StateCheckpoint* at_or_before(int64_t n) const;
  bool has(int64_t n_past) const;
  // Drops the checkpoints past n: they saw tokens the session no longer holds.
  void drop_after(int64_t n);
  void clear() { items_.clear(); }
  size_t size() const { return items_.size(); }
  size_t bytes() const;
  std::vector<int64_t> positions() const;
  const PromptCacheOptions& options() const { return o_; }

 private:
  PromptCacheOptions o_;
  std::vector<StateCheckpoint> items_;
};

// Where `<|im_start|>` begins a message (ChatML, the Qwen templates); user: the role after it is
// "user". Empty when the vocabulary has no <|im_start|> token.
struct MessageStart {
  int64_t pos = 0;
  bool user = false;
};
std::vector<MessageStart> chatml_message_starts(const Tokenizer& tok, std::span<const int32_t> tokens);

// The positions in (0, n) where the prefill of a prompt of n tokens saves a checkpoint: the start
// of each user message, and near the end the start of the last message (the generation prompt's
// header), or n − 1 when there are no messages. Two are at least min_step apart (the one near the
// end is kept over earlier ones); at most max_checkpoints, the latest ones. A function of the
// tokens only, so the same prompt prefix gives the same positions.
std::vector<int64_t> checkpoint_positions(int64_t n, std::span<const MessageStart> starts,
                                          const PromptCacheOptions& o);

// The end of the prefill step that starts at `done` (see the step boundaries above).
int64_t next_step_end(int64_t done, int64_t n_prompt, int32_t n_batch, std::span<const int64_t> checkpoints);

// Length of the common prefix of a and b.
int64_t common_prefix(std::span<const int32_t> a, std::span<const int32_t> b);

}  // namespace ferry
