#include "runtime/engine/prompt_cache.hpp"

#include <algorithm>
#include <optional>
#include <string>

namespace ferry {

bool CheckpointStore::add(StateCheckpoint c) {
  if (o_.max_checkpoints <= 0 || c.bytes() > o_.ram_bytes) return false;
  // Those at or past c's position saw tokens the session has since replaced (or are c's older copy).
  drop_after(c.n_past - 1);
  size_t total = bytes() + c.bytes();
  while (!items_.empty() &&
         (static_cast<int32_t>(items_.size()) >= o_.max_checkpoints || total > o_.ram_bytes)) {
    total -= items_.front().bytes();
    items_.erase(items_.begin());
  }
  items_.push_back(std::move(c));
  return true;
}

const StateCheckpoint* CheckpointStore::at_or_before(int64_t n) const {
  const StateCheckpoint* best = nullptr;
  for (const StateCheckpoint& c : items_)
    if (c.n_past <= n && (!best || c.n_past > best->n_past)) best = &c;
  return best;
}

bool CheckpointStore::has(int64_t n_past) const {
  return std::any_of(items_.begin(), items_.end(),
                     [&](const StateCheckpoint& c) { return c.n_past == n_past; });
}

void CheckpointStore::drop_after(int64_t n) {
  std::erase_if(items_, [&](const StateCheckpoint& c) { return c.n_past > n; });
}

size_t CheckpointStore::bytes() const {
  size_t n = 0;
  for (const StateCheckpoint& c : items_) n += c.bytes();
  return n;
}

std::vector<int64_t> CheckpointStore::positions() const {
  std::vector<int64_t> p;
  for (const StateCheckpoint& c : items_) p.push_back(c.n_past);
  std::sort(p.begin(), p.end());
  return p;
}

std::vector<MessageStart> chatml_message_starts(const Tokenizer& tok, std::span<const int32_t> tokens) {
  std::vector<MessageStart> out;
  const std::optional<int32_t> im_start = tok.token_id("<|im_start|>");
  if (!im_start) return out;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] != *im_start) continue;
    // The role's text may span tokens ("user" is one token in Qwen's vocabulary, not in every one).
    std::string role;
    for (size_t j = i + 1; j < tokens.size() && role.size() < 4; ++j) role += tok.token_bytes(tokens[j]);
    out.push_back({static_cast<int64_t>(i), role.starts_with("user")});
  }
  return out;
}

std::vector<int64_t> checkpoint_positions(int64_t n, std::span<const MessageStart> starts,
                                          const PromptCacheOptions& o) {
  if (n < 2 || o.max_checkpoints <= 0) return {};
  const int64_t near_end = starts.empty() ? n - 1 : starts.back().pos;
  const int64_t step = std::max<int64_t>(o.checkpoint_min_step, 1);
  std::vector<int64_t> out;
  for (const MessageStart& s : starts) {
    if (!s.user || s.pos <= 0 || s.pos >= near_end) continue;
    if (near_end - s.pos < step) break;
    if (!out.empty() && s.pos - out.back() < step) continue;
    out.push_back(s.pos);
  }
  if (near_end > 0) out.push_back(near_end);
  if (static_cast<int64_t>(out.size()) > o.max_checkpoints)
    out.erase(out.begin(), out.end() - o.max_checkpoints);
  return out;
}

int64_t next_step_end(int64_t done, int64_t n_prompt, int32_t n_batch, std::span<const int64_t> checkpoints) {
  int64_t end = std::min<int64_t>((done / n_batch + 1) * n_batch, n_prompt);
  for (int64_t p : checkpoints)
    if (p > done && p < end) end = p;
  return end;
}

int64_t common_prefix(std::span<const int32_t> a, std::span<const int32_t> b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return static_cast<int64_t>(i);
}

}  // namespace ferry
