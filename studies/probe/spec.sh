#!/usr/bin/env bash
# vLLM's speculation counters of the server on PORT, one line: drafts (= verification steps),
# draft tokens, accepted tokens. Run before and after a probe and subtract.
curl -s "localhost:$1/metrics" | grep -E "^vllm:spec_decode_num_(drafts|draft_tokens|accepted_tokens)_total" |
    awk '{printf "%s=%s ", $1, $2}' | sed 's/vllm:spec_decode_num_//g; s/_total{[^}]*}//g'
echo
