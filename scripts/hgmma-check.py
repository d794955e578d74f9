#!/usr/bin/env python3
"""hgmma-check.py: in SASS from nvdisasm, flag any instruction that writes a
register an HGMMA still in flight reads as its A operand (wgmma with A from
registers), and say how the kernel waits for its MMAs.

    nvdisasm kernel.cubin | scripts/hgmma-check.py

An HGMMA group (up to the one marked gsb0) stays in flight until a
`WARPGROUP.DEPBAR.LE gsb0, N` leaves at most N groups pending. The scan is
linear (branches are not followed), so a loop's back edge is not seen: it
checks the straight-line code between each issue and its wait, where ptxas
would put a stage's dequantisation. Prints one line per hazard, then
"hazards: H, HGMMA: n, waits for all: a, waits leaving one: b"; exits 1
when H > 0. A kernel whose waits are all "for all" after every HGMMA has
been serialised by ptxas.
"""
import re
import sys

# Opcodes whose first operand is not a general register written.
NO_DEST = ('HGMMA', 'ST', 'SYNCS', 'BRA', 'BAR', 'WARPGROUP', 'RED', 'ATOM', 'EXIT', 'RET', 'CALL', 'BSSY', 'BSYNC',
           'NOP', 'MEMBAR', 'FENCE', 'DEPBAR', 'UTMA', 'WARPSYNC', 'ISETP', 'FSETP', 'PLOP3', 'VOTE', 'CCTL', 'ELECT')


def written(line):
    line = re.sub(r'^@!?U?P\w+\s+', '', line)
    m = re.match(r'([\w.]+)\s+(.*?);', line)
    if not m:
        return set()
    op, args = m.groups()
    if op.startswith(NO_DEST) or op.startswith('U'):  # uniform-register ops write UR, not R
        return set()
    r = re.match(r'R(\d+)', args.split(',')[0].strip())
    if not r:
        return set()
    width = 4 if '.128' in op else 2 if '.64' in op else 1
    return set(range(int(r.group(1)), int(r.group(1)) + width))


def main():
    lines = [re.sub(r'/\*[0-9a-f]*\*/', '', l).strip() for l in sys.stdin if ';' in l and '.byte' not in l]
    groups, cur = [], set()
    hazards = issued = wait_all = wait_one = 0
    for i, l in enumerate(lines):
        m = re.search(r'HGMMA\.\S+ R\d+, R(\d+), gdesc', l)
        if m:
            issued += 1
            cur |= set(range(int(m.group(1)), int(m.group(1)) + 4))
            if 'gsb0' in l:
                groups.append((i, cur))
                cur = set()
            continue
        m = re.search(r'WARPGROUP\.DEPBAR\.LE gsb0, 0x([0-9a-f]+)', l)
        if m:
            n = int(m.group(1), 16)
            wait_all += n == 0
            wait_one += n == 1
            groups = groups[len(groups) - n:] if n else []
            continue
        d = written(l)
        for gi, regs in groups:
            if d & regs:
                hazards += 1
                print(f'hazard: instruction {i + 1} writes R{sorted(d & regs)} read by the HGMMA group issued at {gi + 1}: {l}')
    print(f'hazards: {hazards}, HGMMA: {issued}, waits for all: {wait_all}, waits leaving one: {wait_one}')
    return 1 if hazards else 0


if __name__ == '__main__':
    sys.exit(main())
