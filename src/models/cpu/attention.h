// Causal self-attention of every CPU model, forward and backward, fp32:
// multi-head or grouped-query, over one packed qkv row per position.
//
// A row of qkv [B*T, (NH + 2*KV)*hd] holds the NH query heads, then the KV key
// heads, then the KV value heads, hd floats each: query head h at h*hd, key
// head g at NH*hd + g*hd, value head g at (NH + KV)*hd + g*hd. Query head h
// attends with key/value head h / (NH/KV). GPT-2's q | k | v rows (stride 3C)
// are the case KV = NH, hd = C/NH; Llama's GQA is KV < NH (q and k after RoPE).
// The softmax scale is 1/sqrt(hd); att [B, NH, T, T] keeps the softmax, 0
// above the diagonal. Summation orders are fixed per output (parallel.h).
#pragma once

namespace mxdp::cpu {

// qkv -> out [B*T, NH*hd] (overwritten); att overwritten. One (b, h) per task.
void causal_attention_forward(float* out, float* att, const float* qkv, int B, int T, int NH, int KV, int hd);
// dqkv [B*T, (NH + 2*KV)*hd] OVERWRITTEN from dout [B*T, NH*hd]. One (b, kv
// head) per task: within it the query heads of the group, then t, run in
// order, so their contributions to dk and dv are added in a fixed order.
void causal_attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att, int B, int T,
                               int NH, int KV, int hd);

}  // namespace mxdp::cpu
