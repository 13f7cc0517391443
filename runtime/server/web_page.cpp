// The page at `/`: a streaming chat box and a live panel of the offload counters (from
// /metrics.json). One self-contained document served from the binary: no external URL, so it
// works on an offline machine and leaks nothing.
#include "runtime/server/routes.hpp"

namespace ferry::server {
namespace {

constexpr const char* kPage = R"HTML(<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Ferry</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<style>
body{font:15px system-ui,sans-serif;margin:0;display:flex;height:100vh;background:#f6f7f9;color:#222}
#chat{flex:3;display:flex;flex-direction:column;padding:16px;min-width:0}
#log{flex:1;overflow:auto;background:#fff;border:1px solid #ddd;border-radius:8px;padding:12px}
.msg{margin:6px 0;white-space:pre-wrap}.user{color:#0b4f9c}.assistant{color:#1d6b2f}.error{color:#b00020}
form{display:flex;gap:8px;margin-top:8px}#input{flex:1;padding:8px;font:inherit}
button{padding:8px 14px;font:inherit;background:#0b4f9c;color:#fff;border:0;border-radius:6px}
#panel{flex:1;padding:16px;min-width:240px;background:#eef1f5;border-left:1px solid #ddd}
#panel table{border-collapse:collapse;width:100%}#panel td{padding:3px 4px;border-bottom:1px solid #d6dbe2}
#panel td:last-child{text-align:right;font-variant-numeric:tabular-nums}
#bar{height:10px;background:#d6dbe2;border-radius:5px;overflow:hidden;margin:6px 0}#bar div{height:100%;background:#1d6b2f;width:0}
small{color:#666}
</style></head><body>
<div id="chat"><h3 style="margin:0 0 8px">Ferry <small id="model"></small></h3>
<div id="log"></div>
<form id="form"><input id="input" autocomplete="off" placeholder="Message"><button id="send">Send</button></form>
<div style="margin-top:6px"><small>API key (if the server needs one): </small><input id="key" type="password" size="16"></div></div>
<div id="panel"><h3 style="margin:0 0 8px">Offload</h3><div id="bar"><div></div></div>
<table id="stats"><tbody></tbody></table><p><small id="status">waiting for /metrics.json</small></p></div>
<script>
"use strict";
const $ = id => document.getElementById(id);
const keyBox = $("key");
keyBox.value = localStorage.getItem("ferry-key") || "";
keyBox.onchange = () => localStorage.setItem("ferry-key", keyBox.value);
const headers = () => { const h = {"Content-Type": "application/json"}; if (keyBox.value) h.Authorization = "Bearer " + keyBox.value; return h; };
const history = [];
function line(cls, text) { const d = document.createElement("div"); d.className = "msg " + cls; d.textContent = text; $("log").appendChild(d); $("log").scrollTop = 1e9; return d; }
$("form").onsubmit = async ev => {
  ev.preventDefault();
  const text = $("input").value.trim(); if (!text) return;
  $("input").value = ""; line("user", text); history.push({role: "user", content: text});
  const out = line("assistant", ""); let reply = "", thinking = "";
  try {
    const r = await fetch("/v1/chat/completions", {method: "POST", headers: headers(), body: JSON.stringify({messages: history, stream: true})});
    if (!r.ok) { const e = await r.json(); throw new Error(e.error ? e.error.message : r.statusText); }
    const reader = r.body.getReader(), dec = new TextDecoder(); let buf = "";
    for (;;) {
      const {value, done} = await reader.read(); if (done) break;
      buf += dec.decode(value, {stream: true});
      let i; while ((i = buf.indexOf("\n\n")) >= 0) {
        const ev = buf.slice(0, i); buf = buf.slice(i + 2);
        if (!ev.startsWith("data: ")) continue;
        const data = ev.slice(6); if (data === "[DONE]") continue;
        const j = JSON.parse(data);
        if (j.error) throw new Error(j.error.message);
        const d = j.choices && j.choices[0] && j.choices[0].delta;
        if (d && (d.content || d.reasoning_content)) {  // the reasoning shown first, as llama-cli shows it
          reply += d.content || ""; thinking += d.reasoning_content || "";
          out.textContent = (thinking ? "<think>\n" + thinking + "\n</think>\n\n" : "") + reply;
        }
      }
    }
    history.push({role: "assistant", content: reply});
  } catch (e) { line("error", String(e.message || e)); }
};
const fmtBytes = b => b >= 1 << 30 ? (b / (1 << 30)).toFixed(2) + " GiB" : b >= 1 << 20 ? (b / (1 << 20)).toFixed(1) + " MiB" : (b / 1024).toFixed(1) + " KiB";
async function poll() {
  try {
    const r = await fetch("/metrics.json", {headers: headers()});
    const m = await r.json(); if (!r.ok) throw new Error(m.error ? m.error.message : r.statusText);
    const o = m.offload, rows = [];
    rows.push(["requests running / queued", m.requests_processing + " / " + m.requests_deferred]);
    rows.push(["generation tok/s", m.predicted_tokens_seconds.toFixed(1)]);
    rows.push(["prompt tok/s", m.prompt_tokens_seconds.toFixed(1)]);
    if (o.counted) {
      rows.push(["expert hits", o.hits], ["expert misses", o.misses], ["hit rate", (100 * o.hit_rate).toFixed(1) + " %"],
                ["CPU experts", o.cpu_experts], ["H2D per token", fmtBytes(o.h2d_bytes_per_token)], ["H2D total", fmtBytes(o.h2d_bytes)]);
      for (const c in o.wait_seconds) rows.push(["wait " + c, (1000 * o.wait_seconds[c]).toFixed(1) + " ms"]);
      if (o.offloading) rows.push(["VRAM used / budget", fmtBytes(o.vram_used_bytes) + " / " + fmtBytes(o.vram_budget_bytes)]);
      document.querySelector("#bar div").style.width = (100 * o.hit_rate).toFixed(1) + "%";
    } else rows.push(["offload", "not active (no --vram)"]);
    const tb = $("stats").tBodies[0]; tb.textContent = "";
    for (const [k, v] of rows) { const tr = tb.insertRow(); tr.insertCell().textContent = k; tr.insertCell().textContent = v; tr.cells[1].className = k.replace(/[^a-z]/g, "-"); }
    $("status").textContent = "updated " + new Date().toLocaleTimeString();
  } catch (e) { $("status").textContent = "metrics: " + (e.message || e); }
}
fetch("/v1/models").then(r => r.json()).then(j => { $("model").textContent = j.data[0].id; }).catch(() => {});
poll(); setInterval(poll, 1000);
</script></body></html>
)HTML";

}  // namespace

void add_web_page(httplib::Server& svr) {
  auto page = [](const httplib::Request&, httplib::Response& res) {
    res.set_content(kPage, "text/html; charset=utf-8");
  };
  svr.Get("/", page);
  svr.Get("/index.html", page);
}

}  // namespace ferry::server
