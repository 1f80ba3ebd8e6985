#!/usr/bin/env python3
"""Turns CUDA sources into host C++ for the simulator (sim/README.md).

    sim/rewrite.py OUT_DIR FILE...    writes OUT_DIR/FILE for each FILE (.cu, .cuh, .h)

The sources keep their CUDA form; only these copies change, and only in three ways:
  1. `kernel<<<grid, block[, smem[, stream]]>>>(args)` becomes
     `::cutrain_sim::launch("kernel", [=](auto&... a) { kernel(a...); }, grid, block, smem,
     stream, args)`: the simulator checks the limits and queues the grid on the stream.
  2. `__shared__ T name[dims];` becomes a reference to per-block storage,
     `T (&name)[dims] = ::cutrain_sim::static_shared<T[dims], align>("file:line name");`, and
     `extern __shared__ T name[];` a pointer to the block's dynamic shared memory.
  3. `__CUDACC__` becomes `CUTRAIN_SIM_CUDACC` (defined when the copies of .cu files are
     compiled), so the project's device-only sections compile while no system header sees
     __CUDACC__. __CUDA_ARCH__ stays undefined: the host side of each #if is taken.
A .cu copy starts with #include <cuda_runtime.h> (nvcc includes it implicitly), and every
copy with a #line naming the original, so compiler messages point at the real source. Line
counts are kept. A copy whose text is unchanged is not rewritten (make stays incremental).
"""
import os
import re
import sys


def code_mask(text):
    """The text with comments and string/char literals blanked (same length, newlines kept)."""
    out = list(text)
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith('//', i):
            j = text.find('\n', i)
            j = n if j < 0 else j
        elif text.startswith('/*', i):
            j = text.find('*/', i + 2)
            j = n if j < 0 else j + 2
        elif c in '"\'':
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == '\\' else 1
            j += 1
        else:
            i += 1
            continue
        for k in range(i, min(j, n)):
            if out[k] != '\n':
                out[k] = ' '
        i = j
    return ''.join(out)


def match_close(code, i, open_ch, close_ch):
    """Index just past the bracket closing the one at code[i]."""
    depth = 0
    for j in range(i, len(code)):
        if code[j] == open_ch:
            depth += 1
        elif code[j] == close_ch:
            depth -= 1
            if depth == 0:
                return j + 1
    raise SyntaxError('unbalanced %s at offset %d' % (open_ch, i))


def split_top(s):
    """s split at the commas outside (), [] and {}."""
    parts, depth, cur = [], 0, ''
    for c in s:
        if c in '([{':
            depth += 1
        elif c in ')]}':
            depth -= 1
        if c == ',' and depth == 0:
            parts.append(cur)
            cur = ''
        else:
            cur += c
    parts.append(cur)
    return [p.strip() for p in parts]


def kernel_start(code, end):
    """Where the kernel expression that ends at `end` (just before <<<) begins."""
    i = end
    while i > 0 and code[i - 1].isspace():
        i -= 1
    while i > 0:
        c = code[i - 1]
        if c == '>':  # template arguments: back to the matching <
            depth = 0
            while i > 0:
                i -= 1
                depth += {'>': 1, '<': -1}.get(code[i], 0)
                if depth == 0:
                    break
        elif c.isalnum() or c in '_:':
            i -= 1
        elif c.isspace():  # `name <T>` or `a::\n b`: go on only inside a qualified name
            j = i
            while j > 0 and code[j - 1].isspace():
                j -= 1
            if j > 0 and (code[j - 1] in ':>' or code[i] in '<:'):
                i = j
            else:
                break
        else:
            break
    return i


def rewrite_launches(text):
    while True:
        code = code_mask(text)
        at = code.find('<<<')
        if at < 0:
            return text
        start = kernel_start(code, at)
        close = code.find('>>>', at)
        config = split_top(text[at + 3:close])
        paren = close + 3
        while code[paren].isspace():
            paren += 1
        if code[paren] != '(':
            raise SyntaxError('a launch without arguments at offset %d' % at)
        end = match_close(code, paren, '(', ')')
        kernel = text[start:at].strip()
        args = text[paren + 1:end - 1]
        if len(config) < 2 or len(config) > 4:
            raise SyntaxError('launch of %s: 2 to 4 configuration values' % kernel)
        config += ['0', 'nullptr'][len(config) - 2:]
        name = ' '.join(kernel.split()).replace('"', '\\"')
        call = ('::cutrain_sim::launch("%s", [=](auto&... cutrain_sim_a) { %s(cutrain_sim_a...); }, %s'
                % (name, ' '.join(kernel.split()), ', '.join(' '.join(c.split()) for c in config)))
        call += (', ' + args if args.strip() else '') + ')'
        lost = text[start:end].count('\n') - call.count('\n')
        text = text[:start] + call + '\n' * max(lost, 0) + text[end:]


SHARED = re.compile(r'(extern\s+)?__shared__\s+(?:__align__\s*\(\s*(\d+)\s*\)\s+)?'
                    r'([A-Za-z_][\w:<>, ]*?)\s*\b(\w+)\s*((?:\[[^\]]*\]\s*)*);')


def rewrite_shared(text, path):
    code = code_mask(text)
    out, last = [], 0
    for m in SHARED.finditer(code):
        ext, align, typ, name, dims = m.groups()
        typ, dims = ' '.join(typ.split()), ''.join(dims.split())
        line = text.count('\n', 0, m.start()) + 1
        if ext:
            new = '%s* %s = ::cutrain_sim::dynamic_shared<%s>();' % (typ, name, typ)
        else:
            full = typ + dims
            al = align or 'alignof(%s)' % full
            ref = '(&%s)%s' % (name, dims) if dims else '&' + name
            new = '%s %s = ::cutrain_sim::static_shared<%s, %s>("%s:%d %s");' % (
                typ, ref, full, al, path, line, name)
        new += '\n' * text[m.start():m.end()].count('\n')
        out.append(text[last:m.start()] + new)
        last = m.end()
    out.append(text[last:])
    return ''.join(out)


def rewrite(text, path):
    text = rewrite_launches(text)
    text = rewrite_shared(text, path)
    text = re.sub(r'\b__CUDACC__\b', 'CUTRAIN_SIM_CUDACC', text)
    head = '#include <cuda_runtime.h>\n' if path.endswith('.cu') else ''
    return head + '#line 1 "%s"\n' % path + text


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    out_dir = sys.argv[1]
    for path in sys.argv[2:]:
        with open(path) as f:
            new = rewrite(f.read(), path)
        dst = os.path.join(out_dir, path)
        if os.path.exists(dst):
            with open(dst) as f:
                if f.read() == new:
                    continue
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        with open(dst + '.tmp', 'w') as f:
            f.write(new)
        os.replace(dst + '.tmp', dst)


if __name__ == '__main__':
    main()
