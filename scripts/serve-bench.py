#!/usr/bin/env python3
"""serve-bench.py: single-stream decode speed of a running `lagc serve`,
through its HTTP API (what one client sees).

    scripts/serve-bench.py URL [REQUESTS [MAX_TOKENS [PROMPT_TOKENS]]]

Waits for URL/health (at most 180 s; with SERVE_PID set, only while that
process lives: a server that exits at start, e.g. on a checkpoint without
a tokenizer, which `lagc serve` needs, ends the wait at once), then sends REQUESTS (default 3) greedy streaming
/v1/completions requests one at a time, each a prompt of PROMPT_TOKENS
(default 512) token ids, asking MAX_TOKENS (default 256) tokens. Per
request: time to the first streamed text, and decode tok/s between the
first and the last text (tokens as the server's usage counts them); then
the medians.
Python's standard library only (the H200 machine has no network)."""
import http.client
import json
import os
import statistics
import sys
import time
import urllib.parse
import urllib.request


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except OSError:
        return False


def wait_ready(url, timeout=180):
    pid = int(os.environ.get("SERVE_PID", "0"))
    t0 = time.time()
    while time.time() - t0 < timeout:
        if pid and not alive(pid):
            sys.exit(f"serve-bench: the server (pid {pid}) exited before {url} was ready")
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    sys.exit(f"serve-bench: {url} not ready after {timeout} s")


def one(url, prompt, max_tokens):
    u = urllib.parse.urlparse(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
                       "stream_options": {"include_usage": True}})
    t0 = time.time()
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        sys.exit(f"serve-bench: HTTP {r.status}: {r.read()[:300]!r}")
    first, last, tokens = None, None, 0
    for line in r:
        line = line.strip()
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        ch = json.loads(line[6:])
        now = time.time()
        if any(x.get("text") for x in ch.get("choices", [])):
            first = first or now
            last = now
        if ch.get("usage"):
            tokens = ch["usage"].get("completion_tokens", 0)
    c.close()
    # Tokens are the server's count (a chunk may carry several, or a token
    # no text); the rate runs from the first text to the last.
    if first is None or last is None or last <= first or tokens < 2:
        sys.exit(f"serve-bench: {tokens} tokens, too few text chunks to time")
    return first - t0, (tokens - 1) / (last - first), tokens


def main():
    a = sys.argv[1:]
    if not a:
        sys.exit(__doc__)
    url = a[0].rstrip("/")
    n = int(a[1]) if len(a) > 1 else 3
    max_tokens = int(a[2]) if len(a) > 2 else 256
    plen = int(a[3]) if len(a) > 3 else 512
    wait_ready(url)
    prompt = [(i * 7919 + 13) % 900 + 100 for i in range(plen)]
    ttft, rate = [], []
    for i in range(n):
        f, r, k = one(url, prompt, max_tokens)
        print(f"request {i + 1}: {k} tokens, first after {1e3 * f:.1f} ms, then {r:.1f} tok/s")
        ttft.append(f)
        rate.append(r)
    print(f"serve-bench: median first token {1e3 * statistics.median(ttft):.1f} ms, decode {statistics.median(rate):.1f} tok/s ({n} requests)")


main()
