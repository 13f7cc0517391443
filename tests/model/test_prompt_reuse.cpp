// Prompt reuse across turns (runtime/engine/prompt_cache.hpp) on the trained qwen3moe and
// qwen35moe models, with prompts rendered by the Qwen3.5 template, thinking on. That template
// drops the <think> block of every assistant turn before the last user message, so from turn 2 on
// a prompt diverges from the previous one inside the last assistant turn: the attention model
// keeps the common prefix by truncation, the hybrid one goes back to the checkpoint at the start
// of that turn's header. Checked at turns 3 and 4:
//   - exact: the turn's logits and greedy continuation are memcmp-equal to a session that never
//     went back and evaluated the same tokens in the same steps;
//   - against a full re-prefill of the turn's prompt: logits within NMSE 1e-6, same greedy tokens.
// Plus `ferry chat`'s checkpoints, the checkpoint placement, step boundaries and the store's
// limits on their own. About 2 s.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include "runtime/chat/chat_render.hpp"
#include "runtime/core/error.hpp"
#include "runtime/engine/chat.hpp"
#include "runtime/engine/engine.hpp"
#include "model_test_util.hpp"

namespace ferry {
namespace {

constexpr int32_t kBatch = 16;   // small steps: every turn's prefill takes several
constexpr int32_t kReply = 6;    // greedy tokens per turn
constexpr int kTurns = 4;

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(ErrorKind::io, "cannot read {}", path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

PromptCacheOptions cache_options() {
  PromptCacheOptions o;
  o.max_checkpoints = 8;
  o.checkpoint_min_step = 8;
  return o;
}

SessionOptions session_options() {
  SessionOptions o;
  o.n_ctx = 1024;
  o.n_batch = kBatch;
  o.type_k = o.type_v = GgmlType::F32;
  o.prompt_cache = cache_options();
  return o;
}

int32_t argmax(std::span<const float> l) {
  return static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
}

// What one turn produced: the logits after the prompt and after each greedy token.
struct TurnOutput {
  std::vector<float> logits;  // (1 + kReply, n_vocab)
  std::vector<int32_t> reply;
};

TurnOutput greedy_after_prompt(Session& s, std::span<const float> prompt_logits) {
  TurnOutput out;
  std::span<const float> l = prompt_logits;
  for (int i = 0;; ++i) {
    out.logits.insert(out.logits.end(), l.begin(), l.end());
    if (i == kReply) break;
    const int32_t t = argmax(l);
    out.reply.push_back(t);
    const int32_t one[1] = {t};
    l = s.eval(one);
  }
  return out;
}

class PromptReuse : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    model_ = LoadedModel::load(std::string(FERRY_SOURCE_DIR) + "/tests/data/trained/" + GetParam());
    tmpl_.emplace(read_text(std::string(FERRY_SOURCE_DIR) + "/tests/data/templates/Qwen3.5-4B.jinja"));
  }
  std::vector<int32_t> render(const nlohmann::ordered_json& messages) {
    chat::ChatTemplateInputs in;
    in.messages = messages;
    in.enable_thinking = true;
    in.now = 0;
    return model_->tokenizer().encode(chat::render_chat(*tmpl_, in), false, true);
  }
  std::vector<int64_t> plan(const std::vector<int32_t>& prompt) {
    return checkpoint_positions(static_cast<int64_t>(prompt.size()),
                                chatml_message_starts(model_->tokenizer(), prompt), cache_options());
  }
  std::unique_ptr<LoadedModel> model_;
  std::optional<chat::Template> tmpl_;
};

TEST_P(PromptReuse, TurnsReuseThePrefixExactly) {
  const Tokenizer& tok = model_->tokenizer();
  const bool hybrid = model_->config().arch != Arch::qwen3moe;
  const size_t V = static_cast<size_t>(model_->config().n_vocab);
  Session reuse(*model_, session_options());
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  messages.push_back({{"role", "system"}, {"content", "Answer from the book of Ruth."}});
  const char* questions[kTurns] = {"Who went with Naomi?", "And where did they go?",
                                   "Whom did Ruth marry?", "Who was their son?"};
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int64_t> cached;  // per turn: the tokens reused
  for (int turn = 1; turn <= kTurns; ++turn) {
    messages.push_back({{"role", "user"}, {"content", questions[turn - 1]}});
    const std::vector<int32_t> prompt = render(messages);
    const std::vector<int64_t> at = plan(prompt);
    cached.push_back(reuse.reuse_prefix(prompt));
    if (turn > 1) {
      const std::vector<int32_t>& prev = prompts.back();
      const int64_t lcp = common_prefix(prev, prompt);
      ASSERT_LT(lcp, static_cast<int64_t>(prev.size())) << "the template dropped no <think>";
      if (hybrid) {
        // The previous prompt's last checkpoint: the header of the assistant turn it generated.
        EXPECT_EQ(cached.back(), plan(prev).back()) << "turn " << turn;
        EXPECT_LE(cached.back(), lcp);
      } else {
        EXPECT_EQ(cached.back(), lcp) << "turn " << turn;
      }
      EXPECT_GT(cached.back(), 0);
    }
    prompts.push_back(prompt);
    const TurnOutput a = greedy_after_prompt(reuse, reuse.prefill(prompt, at));
    if (turn >= 3) {
      // A session that never goes back: each earlier turn's tokens up to where the next turn
      // reused them, in that turn's steps, then this turn's prompt in its steps.
      Session straight(*model_, session_options());
      for (size_t j = 0; j + 1 < prompts.size(); ++j)
        straight.prefill(std::span(prompts[j]).first(static_cast<size_t>(cached[j + 1])), plan(prompts[j]));
      ASSERT_EQ(straight.n_past(), cached.back());
      const TurnOutput b = greedy_after_prompt(straight, straight.prefill(prompt, at));
      ASSERT_EQ(a.reply, b.reply) << "turn " << turn;
      EXPECT_EQ(0, std::memcmp(a.logits.data(), b.logits.data(), a.logits.size() * sizeof(float)))
          << "turn " << turn << ": reuse is not bit-exact";
      // A full re-prefill with the default steps.
      SessionOptions o = session_options();
      o.n_batch = 512;
      Session full(*model_, o);
      const TurnOutput c = greedy_after_prompt(full, full.eval(prompt));
      EXPECT_EQ(a.reply, c.reply) << "turn " << turn;
      for (size_t r = 0; r < a.logits.size() / V; ++r)
        EXPECT_LT(test::nmse(a.logits.data() + r * V, c.logits.data() + r * V, V), 1e-6)
            << "turn " << turn << " row " << r;
      if (hybrid) EXPECT_GT(reuse.checkpoints().bytes(), 0u);
      else EXPECT_EQ(reuse.checkpoints().size(), 0u);  // truncation needs none
    }
    // The reply as the client sends it back: reasoning in <think> (dropped by the template once a
    // later user message follows), then the answer.
    messages.push_back({{"role", "assistant"},
                        {"content", "<think>\n" + tok.decode(a.reply) + "\n</think>\n\nThe answer " +
                                        std::to_string(turn) + "."}});
  }
}

// `ferry chat` goes through the same prefill: its hybrid session saves checkpoints at the start of
// each user message and of each generation header (min step 8 here), each at an <|im_start|>.
TEST_P(PromptReuse, ChatSavesCheckpointsAtMessageStarts) {
  Session s(*model_, session_options());
  SamplingParams greedy;
  greedy.temp = 0;
  Sampler sampler(greedy);
  const ChatFormat format = load_chat_format(model_->file(), ChatFormatArgs{});  // the model's ChatML
  Chat chat(s, sampler, format, "Answer from the book of Ruth.");
  GenerateOptions g;
  g.n_predict = 4;
  for (const char* q : {"Who went with Naomi?", "And where did they go?", "Whom did Ruth marry?"})
    chat.turn(q, g, {});
  const std::vector<int64_t> at = s.checkpoints().positions();
  if (model_->config().arch == Arch::qwen3moe) {
    EXPECT_TRUE(at.empty());  // attention caches truncate: nothing to save
    return;
  }
  ASSERT_GE(at.size(), 3u);
  const int32_t im_start = *model_->tokenizer().token_id("<|im_start|>");
  for (int64_t p : at) EXPECT_EQ(s.tokens()[static_cast<size_t>(p)], im_start) << "checkpoint at " << p;
}

INSTANTIATE_TEST_SUITE_P(Trained, PromptReuse,
                         ::testing::Values("kjv-qwen3moe-f32.gguf", "kjv-qwen35moe-f32.gguf"));

TEST(PromptCache, CheckpointPositionsFollowMessagesAndMinStep) {
  PromptCacheOptions o;
  o.checkpoint_min_step = 10;
  o.max_checkpoints = 8;
  const std::vector<MessageStart> starts = {{0, false}, {12, true}, {15, false}, {30, true},
                                            {35, true},  {60, false}};
  // 12 (user), 30 (18 later), not 35 (5 later), then the last header at 60.
  EXPECT_EQ(checkpoint_positions(70, starts, o), (std::vector<int64_t>{12, 30, 60}));
  o.checkpoint_min_step = 35;  // the last header wins over a user start too close to it
  EXPECT_EQ(checkpoint_positions(70, starts, o), (std::vector<int64_t>{12, 60}));
  o.max_checkpoints = 1;
  EXPECT_EQ(checkpoint_positions(70, starts, o), (std::vector<int64_t>{60}));
  EXPECT_EQ(checkpoint_positions(70, {}, o), (std::vector<int64_t>{69}));  // no messages: n − 1
  o.max_checkpoints = 0;
  EXPECT_TRUE(checkpoint_positions(70, starts, o).empty());
}

TEST(PromptCache, StepsEndAtBatchMultiplesAndCheckpoints) {
  const std::vector<int64_t> at = {5, 20};
  std::vector<int64_t> ends;
  for (int64_t done = 3; done < 40; done = next_step_end(done, 40, 16, at)) ends.push_back(next_step_end(done, 40, 16, at));
  EXPECT_EQ(ends, (std::vector<int64_t>{5, 16, 20, 32, 40}));
}

TEST(PromptCache, StoreEvictsOldestAndDropsStaleBranches) {
  PromptCacheOptions o;
  o.max_checkpoints = 2;
  o.ram_bytes = 100;
  CheckpointStore s(o);
  auto ck = [](int64_t pos, size_t bytes) { return StateCheckpoint{pos, {std::vector<uint8_t>(bytes)}}; };
  EXPECT_TRUE(s.add(ck(10, 40)));
  EXPECT_TRUE(s.add(ck(20, 40)));
  EXPECT_TRUE(s.add(ck(30, 40)));  // count limit: 10 goes
  EXPECT_EQ(s.positions(), (std::vector<int64_t>{20, 30}));
  EXPECT_TRUE(s.add(ck(40, 90)));  // byte limit: both go
  EXPECT_EQ(s.positions(), (std::vector<int64_t>{40}));
  EXPECT_FALSE(s.add(ck(50, 101)));  // larger than the bound alone
  EXPECT_EQ(s.at_or_before(39), nullptr);
  ASSERT_NE(s.at_or_before(45), nullptr);
  EXPECT_EQ(s.at_or_before(45)->n_past, 40);
  s.drop_after(39);
  EXPECT_EQ(s.size(), 0u);
}

}  // namespace
}  // namespace ferry
