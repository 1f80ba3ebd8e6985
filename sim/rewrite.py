#!/usr/bin/env python3
"""Turns CUDA sources into host C++ for the simulator (sim/README.md).

    sim/rewrite.py OUT_DIR FILE...    writes OUT_DIR/FILE for each FILE (.cu, .cuh, .h)

The sources keep their CUDA form; only these copies change, and only in three ways:
  1. `kernel<<<grid, block[, smem[, stream]]>>>(args)` becomes
     `::cutrain_sim::launch("kernel", [=](auto&... a) { kernel(a...); }, grid, block, smem,
     stream, args)`: the simulator checks the limits and queues the grid on the stream. The
     kernel may be a name, a template (`k<T, N>>`), a subscript (`table[i]`) or any
     parenthesised expression (`(relu ? k1 : k2)`); comments inside the launch are dropped; a
     launch in a macro's body stays one line of it (a macro parameter as the kernel is named
     by its argument: `#k`).
  2. `__shared__ T name[dims];` (also `static`, `__align__(n)` or `alignas(n)`, several
     declarators in one line) becomes a reference to per-block storage,
     `T (&name)[dims] = ::cutrain_sim::static_shared<T[dims], align>("file:line name");`, and
     `extern __shared__ T name[];` a pointer to the block's dynamic shared memory.
  3. `__CUDACC__` becomes `CUTRAIN_SIM_CUDACC` (defined when the copies of .cu files are
     compiled), so the project's device-only sections compile while no system header sees
     __CUDACC__. __CUDA_ARCH__ stays undefined: the host side of each #if is taken.
What it cannot turn into host code it refuses, naming the file and line and why (a __shared__
variable at namespace or class scope: the simulator gives each block its own only inside a
function; a launch without arguments or with the wrong number of configuration values), so
the build stops there and not in a compiler error of the copy or at start-up.
A .cu copy starts with #include <cuda_runtime.h> (nvcc includes it implicitly), and every
copy with a #line naming the original, so compiler messages point at the real source. Line
counts are kept. A copy whose text is unchanged is not rewritten (make stays incremental).
"""
import os
import re
import sys


class Refused(Exception):
    """A construct the rewriter will not turn into host code: 'file:line: why'."""


def mask(text, strings=True):
    """The text with comments (and, with `strings`, string and char literals) blanked: same
    length, newlines kept."""
    out = list(text)
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        blank = True
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
            blank = strings
        else:
            i += 1
            continue
        if blank:
            for k in range(i, min(j, n)):
                if out[k] != '\n':
                    out[k] = ' '
        i = j
    return ''.join(out)


def code_mask(text):
    """The text with comments and string/char literals blanked (same length, newlines kept)."""
    return mask(text, strings=True)


def line_of(text, i):
    return text.count('\n', 0, i) + 1


def match_close(code, i, open_ch, close_ch, where):
    """Index just past the bracket closing the one at code[i]."""
    depth = 0
    for j in range(i, len(code)):
        if code[j] == open_ch:
            depth += 1
        elif code[j] == close_ch:
            depth -= 1
            if depth == 0:
                return j + 1
    raise Refused('%s: unbalanced %s' % (where, open_ch))


def match_open(code, i, open_ch, close_ch):
    """Index of the bracket opening the one that closes at code[i - 1]."""
    depth = 0
    while i > 0:
        i -= 1
        depth += {close_ch: 1, open_ch: -1}.get(code[i], 0)
        if depth == 0:
            return i
    return 0


def split_top(s):
    """s split at the commas outside (), [], {} and template brackets of names (a < b is a
    comparison only between values; in launch configurations it does not occur)."""
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
    """Where the kernel expression that ends at `end` (just before <<<) begins: a qualified
    name with template arguments, subscripts, or a parenthesised expression."""
    i = end
    while i > 0 and code[i - 1].isspace():
        i -= 1
    while i > 0:
        c = code[i - 1]
        if c == '>':  # template arguments: back to the matching <
            i = match_open(code, i, '<', '>')
        elif c == ']':  # a subscript: back to its [
            i = match_open(code, i, '[', ']')
        elif c == ')':  # a parenthesised expression, or a call's arguments: back to its (
            closing = i
            i = match_open(code, i, '(', ')')
            j = i
            while j > 0 and code[j - 1].isspace():
                j -= 1
            word = re.search(r'\w+$', code[:j])
            if word and word.group() in ('if', 'while', 'for', 'switch', 'return', 'else'):
                return closing  # `if (x)k<<<...`: the kernel starts after the condition
            if j == 0 or not (code[j - 1].isalnum() or code[j - 1] in '_>]'):
                break  # not a call's arguments: the expression starts here
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


def macro_at(text, i):
    """The parameters of the #define whose body holds text[i] (None outside a macro)."""
    start = text.rfind('\n', 0, i) + 1
    while start > 1 and text[start - 2] == '\\':  # a continued line: the line before it
        start = text.rfind('\n', 0, start - 1) + 1
    m = re.match(r'\s*#\s*define\s+\w+(\(([^)]*)\))?', text[start:])
    if not m:
        return None
    return [p.strip() for p in (m.group(2) or '').split(',') if p.strip()]


# A kernel's name: maybe qualified, maybe with template arguments (anything else is an expression).
KERNEL_NAME = re.compile(r'[\w:]+\s*(<.*>)?', re.S)


def rewrite_launches(text, path):
    while True:
        code = code_mask(text)
        at = code.find('<<<')
        if at < 0:
            return text
        where = '%s:%d' % (path, line_of(text, at))
        start = kernel_start(code, at)
        close = code.find('>>>', at)
        if close < 0:
            raise Refused('%s: a launch whose <<< has no >>>' % where)
        config = split_top(mask(text[at + 3:close], strings=False).replace('\\\n', ' '))
        paren = close + 3
        while paren < len(code) and code[paren].isspace():
            paren += 1
        if paren >= len(code) or code[paren] != '(':
            raise Refused('%s: a launch without arguments' % where)
        end = match_close(code, paren, '(', ')', where)
        kernel = ' '.join(text[start:at].replace('\\\n', ' ').split())
        if not kernel:
            raise Refused('%s: a launch of no kernel' % where)
        # (on one line: a line splice of a macro's body and a line break become a space; what
        # is in string literals stays as it is)
        args = mask(text[paren + 1:end - 1], strings=False)
        args = args.replace('\\\n', ' ').replace('\n', ' ').strip()
        if len(config) < 2 or len(config) > 4 or not all(config):
            raise Refused('%s: launch of %s: 2 to 4 configuration values' % (where, kernel))
        config += ['0', 'nullptr'][len(config) - 2:]
        params = macro_at(text, start)
        name = '"%s"' % kernel.replace('\\', '\\\\').replace('"', '\\"')
        if params is not None and kernel in params:
            name = '#' + kernel  # the macro's argument, as the kernel is named there
        # A kernel named by an expression (a condition, a table's element) is chosen once, on
        # the host, as a GPU launch chooses it: the lambda's init-capture, not each thread.
        chosen = not KERNEL_NAME.fullmatch(kernel)
        capture = '=, cutrain_sim_k = %s' % kernel if chosen else '='
        call = ('::cutrain_sim::launch(%s, [%s](auto&... cutrain_sim_a) { %s(cutrain_sim_a...); }, %s'
                % (name, capture, 'cutrain_sim_k' if chosen else kernel,
                   ', '.join(' '.join(c.split()) for c in config)))
        call += (', ' + args if args else '') + ')'
        lost = text[start:end].count('\n') - call.count('\n')
        # Lines kept: in a macro's body each one continued (a launch there stays one line of it).
        pad = ('\\\n' if params is not None else '\n') * max(lost, 0)
        text = text[:start] + call + pad + text[end:]


# One __shared__ declaration: its storage class and alignment, the type, and the declarators
# up to the semicolon (several are split apart).
SHARED = re.compile(r'(?:(static)\s+)?(?:(extern)\s+)?__shared__\s+'
                    r'(?:(?:__align__|alignas)\s*\(\s*(\d+)\s*\)\s+)?'
                    r'([A-Za-z_][\w:<>, ]*?)\s*\b(\w+\s*(?:\[[^\]]*\]\s*)*(?:,\s*\w+\s*(?:\[[^\]]*\]\s*)*)*);')
DECLARATOR = re.compile(r'(\w+)\s*((?:\[[^\]]*\]\s*)*)$')


def brace_kinds(code, end):
    """The kinds of the braces open at code[end]: 'namespace' (a namespace or extern "C"
    block), 'class' (a struct, class, union or enum body) or 'code' (a function or a block
    in one)."""
    stack, last = [], 0
    for m in re.finditer(r'[{};]', code[:end]):
        c = m.group()
        if c == '{':
            head = code[last:m.start()]
            if re.search(r'\bnamespace\b', head) or re.search(r'\bextern\s*$', head):
                stack.append('namespace')
            elif re.search(r'\b(struct|class|union|enum)\b', head) and '(' not in head:
                stack.append('class')
            else:
                stack.append('code')
        elif c == '}' and stack:
            stack.pop()
        last = m.end()
    return stack


def rewrite_shared(text, path):
    code = code_mask(text)
    out, last = [], 0
    for m in SHARED.finditer(code):
        _static, ext, align, typ, decls = m.groups()
        typ = ' '.join(typ.split())
        line = line_of(text, m.start())
        names = split_top(decls)
        if 'code' not in brace_kinds(code, m.start()):
            raise Refused('%s:%d: __shared__ %s at namespace or class scope: the simulator gives '
                          'each block its own shared memory only for a declaration inside a '
                          'function; declare it in the kernel'
                          % (path, line, ', '.join(re.match(r'\w+', d).group() for d in names)))
        new = []
        for d in names:
            dm = DECLARATOR.match(d)
            if not dm:
                raise Refused('%s:%d: a __shared__ declarator the simulator cannot read: %s'
                              % (path, line, d))
            name, dims = dm.group(1), ''.join(dm.group(2).split())
            if ext:
                new.append('%s* %s = ::cutrain_sim::dynamic_shared<%s>();' % (typ, name, typ))
            else:
                full = typ + dims
                al = align or 'alignof(%s)' % full
                ref = '(&%s)%s' % (name, dims) if dims else '&' + name
                new.append('%s %s = ::cutrain_sim::static_shared<%s, %s>("%s:%d %s");' % (
                    typ, ref, full, al, path, line, name))
        out.append(text[last:m.start()] + ' '.join(new) +
                   '\n' * text[m.start():m.end()].count('\n'))
        last = m.end()
    out.append(text[last:])
    return ''.join(out)


def rewrite(text, path):
    text = rewrite_launches(text, path)
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
            try:
                new = rewrite(f.read(), path)
            except Refused as e:
                sys.exit('sim/rewrite.py: %s' % e)
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
