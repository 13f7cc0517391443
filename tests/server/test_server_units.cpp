// The server's pieces without a running model: reply text (UTF-8, stop strings), request parsing,
// the key comparison, the metrics names, and the HTTP layer while the model is "loading".
#include <gtest/gtest.h>
#include <httplib.h>

#include <condition_variable>
#include <mutex>
#include <thread>

#include "runtime/gguf/gguf.hpp"
#include "runtime/model/config.hpp"
#include "runtime/server/api_error.hpp"
#include "runtime/server/metrics.hpp"
#include "runtime/server/reply_text.hpp"
#include "runtime/server/request.hpp"
#include "runtime/server/serve.hpp"
#include "runtime/server/server.hpp"
#include "runtime/server/task_pool.hpp"

namespace ferry::server {
namespace {

using nlohmann::json;

const Tokenizer& kjv_tokenizer() {
  static const gguf::File f = gguf::File::open(std::string(FERRY_SOURCE_DIR) +
                                               "/tests/data/trained/kjv-qwen35moe-q8_0.gguf");
  static const Tokenizer t = Tokenizer::from_gguf(f);
  return t;
}

std::string run_reply(const std::string& text, std::vector<std::string> stop,
                      std::vector<std::string>* pieces = nullptr, bool* stopped = nullptr) {
  const Tokenizer& tok = kjv_tokenizer();
  ReplyText r(tok, std::move(stop));
  std::string out;
  for (int32_t id : tok.encode(text)) {
    const std::string p = r.push(id);
    if (pieces && !p.empty()) pieces->push_back(p);
    out += p;
    if (r.stopped()) break;
  }
  out += r.finish();
  if (stopped) *stopped = r.stopped();
  return out;
}

bool valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (!n || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    i += n;
  }
  return true;
}

TEST(ReplyText, PiecesAreCompleteUtf8AndJoinToTheText) {
  // The KJV vocabulary has no token for these characters: byte-level BPE splits them into bytes.
  const std::string text = "Und Gott sprach: Es werde Licht — 光 ✝ 𝄞 ende";
  std::vector<std::string> pieces;
  EXPECT_EQ(run_reply(text, {}, &pieces), text);
  ASSERT_GT(pieces.size(), 3u);
  for (const auto& p : pieces) EXPECT_TRUE(valid_utf8(p)) << "piece splits a character";
}

TEST(ReplyText, StopStringCutsAndIsHeldUntilDecided) {
  bool stopped = false;
  std::vector<std::string> pieces;
  EXPECT_EQ(run_reply("And God said, Let there be light", {"there be"}, &pieces, &stopped),
            "And God said, Let ");
  EXPECT_TRUE(stopped);
  for (const auto& p : pieces)
    EXPECT_EQ(p.find("there"), std::string::npos) << "a stop prefix was sent: " << p;
  // A partial match that does not complete is released in full.
  EXPECT_EQ(run_reply("the earth was without form", {"the earth is"}, nullptr, &stopped),
            "the earth was without form");
  EXPECT_FALSE(stopped);
  // The earliest match wins.
  EXPECT_EQ(run_reply("in the beginning God created", {"God", "beginning"}, nullptr, &stopped),
            "in the ");
  // A stop string at the very end (held, then matched by finish's flush).
  EXPECT_EQ(run_reply("light and darkness", {"darkness"}, nullptr, &stopped), "light and ");
  EXPECT_TRUE(stopped);
}

// A chat body as the route reads it: parsed twice, with and without the key order.
GenRequest chat_request(const std::string& text, const RequestDefaults& d = {},
                        const chat::ChatServerDefaults& cd = {}) {
  const json body = parse_body(text);  // its 400s first, as the route
  return parse_chat_request(body, nlohmann::ordered_json::parse(text), d, cd);
}

TEST(Request, ParsesChatWithDefaultsAndCaps) {
  RequestDefaults d;
  d.n_predict = 50;
  d.sampling.temp = 0.5f;
  const GenRequest r = chat_request(
      R"({"messages":[{"role":"developer","content":"s"},{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],
    "max_tokens":100,"stop":"x","presence_penalty":1.5,"seed":-1,"unknown_field":{"x":1},"stream":true,
    "stream_options":{"include_usage":true},"logprobs":true,"top_logprobs":2})",
      d);
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[1].content, "ab");
  EXPECT_EQ(r.max_tokens, 50);  // capped by -n
  EXPECT_EQ(r.sampling.temp, 0.5f);
  EXPECT_EQ(r.sampling.presence_penalty, 1.5f);
  EXPECT_EQ(r.sampling.seed, 0xFFFFFFFFu);
  EXPECT_EQ(r.stop, std::vector<std::string>{"x"});
  EXPECT_TRUE(r.stream && r.include_usage && r.logprobs);
  EXPECT_EQ(r.top_logprobs, 2);
}

TEST(Request, ErrorsNameTheField) {
  const auto msg = [](const char* body) -> std::string {
    try {
      (void)chat_request(body);
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400);
      EXPECT_EQ(e.type(), "invalid_request_error");
      return e.what();
    }
    return "no error";
  };
  EXPECT_NE(msg("{").find("malformed JSON"), std::string::npos);
  EXPECT_NE(msg(R"({"messages":[{"role":"wizard","content":"x"}]})").find("messages[0].role"),
            std::string::npos);
  EXPECT_NE(msg(R"({"messages":[{"role":"user","content":"x"}],"top_p":7})").find("top_p"),
            std::string::npos);
  EXPECT_NE(
      msg(R"({"messages":[{"role":"user","content":"x"}],"max_tokens":1e300})").find("max_tokens"),
      std::string::npos);
  EXPECT_NE(msg(R"({"messages":[{"role":"user","content":"x"}],"seed":18446744073709551615})")
                .find("seed"),
            std::string::npos);
  EXPECT_NE(msg(R"({"messages":[{"role":"user","content":"x"}],"stop":["a",2]})").find("stop[1]"),
            std::string::npos);
}

TEST(Auth, KeyComparison) {
  const std::vector<std::string> keys = {"alpha", "beta-key"};
  EXPECT_TRUE(key_matches("alpha", keys));
  EXPECT_TRUE(key_matches("beta-key", keys));
  EXPECT_FALSE(key_matches("alph", keys));
  EXPECT_FALSE(key_matches("alphaa", keys));
  EXPECT_FALSE(key_matches("", keys));
  EXPECT_FALSE(key_matches("Alpha", keys));
}

TEST(Metrics, LlamaServerNamesAndOffloadCounters) {
  SchedulerMetrics s;
  s.prompt_tokens_total = 10;
  s.prompt_seconds_total = 0.5;
  OffloadMetrics o;
  o.counted = true;
  o.layer_hits = {3, 4};
  o.layer_misses = {1, 0};
  o.wait_cause_names = {"copy", "cpu_expert", "sync"};
  const std::string t = prometheus_text(s, o, 2);
  for (const char* name :
       {"llamacpp:prompt_tokens_total 10", "llamacpp:prompt_seconds_total",
        "llamacpp:tokens_predicted_total", "llamacpp:tokens_predicted_seconds_total",
        "llamacpp:n_decode_total", "llamacpp:prompt_tokens_seconds 20",
        "llamacpp:predicted_tokens_seconds", "llamacpp:requests_processing",
        "llamacpp:requests_deferred", "ferry_expert_hits_total{layer=\"1\"} 4",
        "ferry_expert_misses_total{layer=\"0\"} 1", "ferry_gpu_wait_seconds_total{cause=\"copy\"}",
        "ferry_h2d_bytes_total", "ferry_cpu_experts_total"})
    EXPECT_NE(t.find(name), std::string::npos) << name;
  const json j = metrics_json(s, o, 2, 1.0);
  EXPECT_EQ(j["offload"]["layers"][1]["hits"], 4);
}

TEST(Serve, DefaultContextIsTheTrainedOneShrunkToFit) {
  const gguf::File f = gguf::File::open(std::string(FERRY_SOURCE_DIR) +
                                        "/tests/data/trained/kjv-qwen35moe-q8_0.gguf");
  ModelConfig c = read_config(f);
  // The tiny model's 4096 positions fit any machine that runs the tests.
  EXPECT_EQ(default_serve_context(c, 1, {}), c.n_ctx_train);
  EXPECT_EQ(default_serve_context(c, 4, {}), c.n_ctx_train);
  // A trained context far beyond any RAM is shrunk, in steps of 256, to something that fits.
  c.n_ctx_train = int64_t{1} << 32;  // 2 TiB of KV cache at 512 bytes a token
  const int64_t n = default_serve_context(c, 2, {});
  EXPECT_LT(n, c.n_ctx_train);
  EXPECT_EQ(n % 256, 0);
  EXPECT_GE(n, 512);
}

TEST(TaskPool, GrowsPastItsBaseInsteadOfQueueing) {
  // Six connections held open (streams) on a base of two threads: all six run at once, and a
  // seventh (a /health probe) still gets a thread.
  GrowingTaskPool pool(2, 16);
  std::mutex mu;
  std::condition_variable cv;
  int started = 0;
  bool release = false;
  for (int i = 0; i < 7; ++i)
    pool.enqueue([&] {
      std::unique_lock lk(mu);
      ++started;
      cv.notify_all();
      cv.wait(lk, [&] { return release; });
    });
  {
    std::unique_lock lk(mu);
    EXPECT_TRUE(cv.wait_for(lk, std::chrono::seconds(10), [&] { return started == 7; }))
        << started << " of 7 started";
    release = true;
  }
  cv.notify_all();
  pool.shutdown();
  EXPECT_EQ(started, 7);
}

TEST(Http, LoadingAnswers503AndEnvelopes) {
  ServerContext ctx;
  ctx.opt.port = 0;
  ctx.opt.max_body_bytes = 2048;
  HttpServer http(ctx);
  const int port = http.bind();
  std::thread t([&] { http.listen(); });
  httplib::Client c("127.0.0.1", port);
  auto r = c.Get("/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_EQ(json::parse(r->body),
            json::parse(
                R"({"error":{"code":503,"message":"Loading model","type":"unavailable_error"}})"));
  r = c.Post("/v1/chat/completions", R"({"messages":[{"role":"user","content":"x"}]})",
             "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  r = c.Get("/nowhere");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_EQ(json::parse(r->body)["error"]["type"], "not_found_error");
  r = c.Post("/v1/chat/completions", std::string(4096, ' '), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
  EXPECT_EQ(json::parse(r->body)["error"]["code"], 413);
  r = c.Get("/");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body.find("http://"), std::string::npos)
      << "the page must not load anything external";
  EXPECT_EQ(r->body.find("https://"), std::string::npos);
  http.stop();
  t.join();
}

}  // namespace
}  // namespace ferry::server
