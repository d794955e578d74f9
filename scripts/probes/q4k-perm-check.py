#!/usr/bin/env python3
# Checks gemv-chain.cu's q4k_scales_perm (-DQ4K_PERM=1) against the branchy
# form it replaces and against ggml's get_scale_min_k4 (gguf-py's Q4_K
# dequantiser reads scales and mins the same way), over random q4_k block
# headers (hdr bytes 0-3: d, dmin; 4-15: the 12 scale bytes) and every
# sub-block pair j. perm() is CUDA's __byte_perm (selector nibbles' low 3
# bits). Not part of lagc; run: python3 scripts/probes/q4k-perm-check.py
import random
def word(h,k): return h[4*k]|h[4*k+1]<<8|h[4*k+2]<<16|h[4*k+3]<<24
def perm(a,b,sel):
    v=(b<<32)|a; r=0
    for i in range(4): r|=((v>>(8*((sel>>(4*i))&7)))&0xFF)<<(8*i)
    return r
def branchy(h,j):
    s0,s1=2*j,2*j+1
    if j<2:
        return (h[4+s0]&63,h[8+s0]&63,h[4+s1]&63,h[8+s1]&63)
    sc0=(h[8+s0]&15)|((h[s0]>>6)<<4); m0=(h[8+s0]>>4)|((h[4+s0]>>6)<<4)
    sc1=(h[8+s1]&15)|((h[s1]>>6)<<4); m1=(h[8+s1]>>4)|((h[4+s1]>>6)<<4)
    return (sc0,m0,sc1,m1)
def permf(h,j):
    t=2*(j&1); y,z,w=word(h,1),word(h,2),word(h,3)
    lo=perm(y,z,t|(t+1)<<4|(t+4)<<8|(t+5)<<12); hi=perm(w,0,t|(t+1)<<4)
    if j<2: return (lo&63,(lo>>16)&63,(lo>>8)&63,(lo>>24)&63)
    sc0=(hi&15)|((lo>>6)&3)<<4; sc1=((hi>>8)&15)|((lo>>14)&3)<<4
    m0=((hi>>4)&15)|((lo>>22)&3)<<4; m1=((hi>>12)&15)|((lo>>30)&3)<<4
    return (sc0,m0,sc1,m1)
# gguf-py's reference for the scales: get_scale_min_k4 over q = scales (hdr bytes 4..15)
def ref(h,sub):
    q=h[4:16]
    if sub<4: return q[sub]&63, q[sub+4]&63
    return (q[sub+4]&0xF)|((q[sub-4]>>6)<<4), (q[sub+4]>>4)|((q[sub]>>6)<<4)
random.seed(1)
n = 0
for _ in range(20000):
    h=[random.randrange(256) for _ in range(16)]
    for j in range(4):
        b=branchy(h,j); p=permf(h,j)
        r0=ref(h,2*j); r1=ref(h,2*j+1)
        assert b==p==(r0[0],r0[1],r1[0],r1[1]),(h,j,b,p)
        n+=1
print("ok",n)
