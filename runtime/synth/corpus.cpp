// The text the synthetic vocabulary's merges are learned from: plain English and a little code, so
// that common words, indentation and operators get tokens of their own. Written for Ferry; any
// edit changes every synthetic model's vocabulary (and so its bytes).
#include "runtime/synth/vocab.hpp"

namespace ferry::synth {

std::string_view training_corpus() {
  static constexpr std::string_view kText = R"CORPUS(The ferry leaves the harbour at seven in the morning and returns before the evening tide.
On a calm day the crossing takes forty minutes; when the wind turns to the west it can take an hour
or more, and the captain will wait in the shelter of the breakwater until the swell has eased.
Passengers buy their tickets at the small office by the pier. Cars are loaded first, then bicycles,
then people on foot. The crew checks every vehicle, counts the passengers and writes the numbers in
a book that is kept on the bridge. Nothing leaves the quay until the numbers agree.

People often ask why the old boat is still in service. The answer is simple: it is reliable, it is
cheap to run, and the harbour was built around it. A larger ship would not fit between the piers,
and a faster one would burn more fuel than the island can afford. So the same engines are serviced
every winter, the same hull is painted every spring, and the timetable has not changed in years.

A model that does not fit in memory is a little like a cargo that does not fit on the deck. You can
leave part of it on the shore and bring it over when it is needed, as long as you know in advance
what will be needed next. The hard part is not the carrying; it is the planning. If the plan is
good, the boat is never idle and the quay is never crowded. If the plan is bad, everybody waits.

Each layer of the network chooses a few experts out of many. The router looks at the hidden state,
computes a score for every expert, keeps the best ones and mixes their outputs with weights that sum
to one. Most experts are used rarely, a few are used often, and the ones used for one token are
likely to be used again for the next token. A cache that remembers recent choices will therefore hit
far more often than a cache that picks experts at random.

It is important to measure before changing anything. Write down the time, the machine, the command
and the result. Then change one thing, measure again, and compare. A number without its conditions
is not a result; it is a rumour. When two runs disagree, find out why before you trust either.

def route(hidden, router, top_k):
    scores = router @ hidden
    probs = softmax(scores)
    experts = argsort(probs)[-top_k:]
    weights = probs[experts] / probs[experts].sum()
    return experts, weights

def rms_norm(x, weight, eps=1e-6):
    return x / sqrt(mean(x * x) + eps) * weight

for layer in range(n_layers):
    x = x + attention(rms_norm(x, attn_norm[layer]), layer)
    experts, weights = route(rms_norm(x, ffn_norm[layer]), routers[layer], top_k)
    x = x + sum(w * expert(e, x) for e, w in zip(experts, weights))

struct ExpertSlot {
  int layer = -1;
  int expert = -1;
  uint64_t last_used = 0;
  bool in_flight = false;
};

int find_victim(const std::vector<ExpertSlot>& slots) {
  int best = -1;
  for (int i = 0; i < static_cast<int>(slots.size()); ++i) {
    if (slots[i].in_flight) continue;
    if (best < 0 || slots[i].last_used < slots[best].last_used) best = i;
  }
  return best;
}

void copy_rows(const float* src, float* dst, size_t n_rows, size_t n_cols) {
  for (size_t r = 0; r < n_rows; ++r) {
    for (size_t c = 0; c < n_cols; ++c) {
      dst[r * n_cols + c] = src[r * n_cols + c];
    }
  }
}

The weather report for the coast: winds from the north at ten to fifteen knots, turning west in the
afternoon. Sea state moderate, becoming rough later. Visibility good, occasionally poor in showers.
Temperatures between eight and twelve degrees. The ferry is expected to run on time in the morning;
the afternoon sailings may be delayed. Please check the notice board at the terminal before you
travel, and keep your ticket with you until you have left the boat on the other side.

She opened the book at the first page and began to read aloud. The children sat on the floor and
listened. Outside, the rain had stopped, and the light over the water was turning from grey to gold.
"Read it again," said the youngest when she had finished, and so she did, and then once more, until
the boat's horn sounded from the harbour and it was time for everybody to go home.

Numbers: 0 1 2 3 4 5 6 7 8 9 10 16 32 64 128 256 512 1024 2048 4096 8192 2025 3.14159 2.71828
Questions? Answers! Lists: one, two, three; pairs: (a, b), [c, d], {e: f}. Paths: /usr/local/bin
Email: crew@harbour.example, time: 07:45, price: 12.50, ratio: 3/4, percent: 75%, flag: --verbose
)CORPUS";
  return kText;
}

}  // namespace ferry::synth
