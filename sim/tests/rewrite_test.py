#!/usr/bin/env python3
"""sim/rewrite.py's own tests (run by `make test`: tests/sim_rewrite_test.cpp): each CUDA
construct it handles becomes host C++ that compiles against the simulator's headers (g++
-fsyntax-only; sim/tests/rewrite_constructs_test.cu runs them under `make sim-test`), or is
refused with its file, line and reason. None may turn into code that compiles but means
something else: the expected texts below are the whole rewritten statements."""
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
sys.path.insert(0, os.path.join(ROOT, 'sim'))
import rewrite  # noqa: E402

# What every snippet compiles beside: kernels of every shape the launches below name.
PRELUDE = '''
__global__ void k(float* x) {}
__global__ void k1(float* x) {}
__global__ void k2(float* x) {}
template <class T> struct Foo { T v; };
template <class T> __global__ void kt(float* x) {}
__global__ void (*table[2])(float*) = {k1, k2};
'''


def launch(kernel, config, args, name=None, chosen=False):
    """The call rewrite.py makes of kernel<<<config>>>(args); `chosen`: a kernel named by an
    expression, which the lambda's init-capture evaluates once, on the host."""
    name = name or '"%s"' % kernel
    capture = '=, cutrain_sim_k = %s' % kernel if chosen else '='
    return ('::cutrain_sim::launch(%s, [%s](auto&... cutrain_sim_a) { %s(cutrain_sim_a...); }, %s%s)'
            % (name, capture, 'cutrain_sim_k' if chosen else kernel, config,
               ', ' + args if args else ''))


class Rewrite(unittest.TestCase):
    def body(self, code, path='x.cu'):
        """The rewritten text without its first two lines (the #include and #line)."""
        return rewrite.rewrite(code, path).split('\n', 2)[2]

    def compiles(self, code, path='t.cu'):
        """g++ -fsyntax-only on the rewritten code, against sim/include, as the SIM build."""
        with tempfile.TemporaryDirectory() as d:
            src = os.path.join(d, 'x.cpp')
            with open(src, 'w') as f:
                f.write(rewrite.rewrite(PRELUDE + code, path))
            r = subprocess.run(['g++', '-std=c++17', '-fsyntax-only', '-I' + os.path.join(ROOT, 'sim', 'include'),
                                '-I' + ROOT, '-DCUTRAIN_SIM=1', '-DCUTRAIN_SIM_CUDACC=1', src],
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr[-3000:])

    def refused(self, code, line, why, path='x.cu'):
        with self.assertRaises(rewrite.Refused) as e:
            rewrite.rewrite(code, path)
        self.assertIn('%s:%d: ' % (path, line), str(e.exception))
        self.assertIn(why, str(e.exception))

    # ---- launches
    def test_two_three_and_four_configuration_values(self):
        self.assertEqual(self.body('void f(float* x) { k<<<2, 32>>>(x); }'),
                         'void f(float* x) { %s; }' % launch('k', '2, 32, 0, nullptr', 'x'))
        self.assertEqual(self.body('void f(float* x) { k<<<2, 32, 64>>>(x); }'),
                         'void f(float* x) { %s; }' % launch('k', '2, 32, 64, nullptr', 'x'))
        self.assertEqual(self.body('void f(float* x, cudaStream_t s) { k<<<2, 32, 64, s>>>(x); }'),
                         'void f(float* x, cudaStream_t s) { %s; }' % launch('k', '2, 32, 64, s', 'x'))
        self.compiles('void f(float* x, cudaStream_t s) { k<<<2, 32>>>(x); k<<<2, 32, 64>>>(x); '
                      'k<<<dim3(2, 1), dim3(32), 0, s>>>(x); }')

    def test_wrong_number_of_configuration_values_is_refused(self):
        self.refused('void f(float* x) {\n  k<<<2>>>(x);\n}', 2, '2 to 4 configuration values')
        self.refused('void f(float* x) {\n  k<<<1, 2, 3, 4, 5>>>(x);\n}', 2,
                     '2 to 4 configuration values')

    def test_launch_without_arguments_is_refused(self):
        self.refused('void f() {\n\n  auto p = k<<<1, 2>>>;\n}', 3, 'a launch without arguments')

    def test_template_arguments_with_closing_angles_together(self):
        self.assertEqual(self.body('void f(float* x) { kt<Foo<int>><<<1, 2>>>(x); }'),
                         'void f(float* x) { %s; }' % launch('kt<Foo<int>>', '1, 2, 0, nullptr', 'x'))
        self.assertEqual(self.body('void f(float* x) { kt<Foo<Foo<int>>><<<1, 2>>>(x); }'),
                         'void f(float* x) { %s; }'
                         % launch('kt<Foo<Foo<int>>>', '1, 2, 0, nullptr', 'x'))
        self.compiles('void f(float* x) { kt<Foo<int>><<<1, 2>>>(x); kt<Foo<Foo<int>>><<<1, 2>>>(x); }')

    def test_shift_in_the_configuration(self):
        self.assertEqual(self.body('void f(float* x, int n) { k<<<n >> 5, 32>>>(x); }'),
                         'void f(float* x, int n) { %s; }' % launch('k', 'n >> 5, 32, 0, nullptr', 'x'))
        self.compiles('void f(float* x, int n) { k<<<(n + 31) >> 5, 32>>>(x); }')

    def test_comments_inside_the_launch_are_dropped(self):
        out = self.body('void f(float* x) {\n  k<<<1 /* blocks */, 32  // lanes\n  >>>(x /* in */);\n}')
        self.assertNotIn('//', out)
        self.assertNotIn('/*', out)
        self.assertEqual(out.count('\n'), 3)  # the lines kept
        self.compiles('void f(float* x) {\n  k<<<1 /* blocks */, 32  // lanes\n  >>>(x /* in */);\n}')

    def test_a_string_in_the_arguments_is_kept_as_it_is(self):
        out = self.body('void g(const char*); void f() { g("a  <<<b>>>  // c"); }')
        self.assertIn('"a  <<<b>>>  // c"', out)

    def test_launch_through_a_macro_names_the_kernel_it_is_given(self):
        out = self.body('#define RUN(kern, x) kern<<<1, 32>>>(x)\nvoid f(float* x) { RUN(k1, x); }')
        self.assertIn(launch('kern', '1, 32, 0, nullptr', 'x', name='#kern'), out)
        # A launch spread over a macro's continued lines stays in the macro, its lines kept.
        code = '#define RUN2(kern, x) \\\n  kern<<<1,\\\n       32>>>(x)\nvoid f(float* x) { RUN2(k2, x); }'
        out = self.body(code)
        self.assertEqual(out.count('\n'), code.count('\n'))
        self.assertEqual(out.split('\n')[0], '#define RUN2(kern, x) \\')
        self.compiles(code + '\n#define RUN(kern, x) kern<<<1, 32>>>(x)\nvoid g(float* x) { RUN(k1, x); }')

    def test_conditional_and_subscripted_kernels(self):
        self.assertEqual(self.body('void f(bool r, float* x) { (r ? k1 : k2)<<<1, 2>>>(x); }'),
                         'void f(bool r, float* x) { %s; }'
                         % launch('(r ? k1 : k2)', '1, 2, 0, nullptr', 'x', chosen=True))
        self.assertEqual(self.body('void f(int i, float* x) { table[i]<<<1, 2>>>(x); }'),
                         'void f(int i, float* x) { %s; }'
                         % launch('table[i]', '1, 2, 0, nullptr', 'x', chosen=True))
        self.compiles('void f(bool r, int i, float* x) { (r ? k1 : k2)<<<1, 2>>>(x); '
                      'table[i]<<<1, 2>>>(x); }')

    def test_a_kernel_after_a_condition(self):
        self.assertEqual(self.body('void f(bool r, float* x) { if (r)k<<<1, 2>>>(x); }'),
                         'void f(bool r, float* x) { if (r)%s; }' % launch('k', '1, 2, 0, nullptr', 'x'))
        self.compiles('void f(bool r, float* x) { if (r)k<<<1, 2>>>(x); else k1<<<1, 2>>>(x); }')

    # ---- shared memory
    def test_several_declarators_in_one_line(self):
        out = self.body('__global__ void f() {\n  __shared__ float a[4], b[8][2];\n}', 'x.cu')
        self.assertIn('float (&a)[4] = ::cutrain_sim::static_shared<float[4], alignof(float[4])>'
                      '("x.cu:2 a");', out)
        self.assertIn('float (&b)[8][2] = ::cutrain_sim::static_shared<float[8][2], '
                      'alignof(float[8][2])>("x.cu:2 b");', out)
        self.compiles('__global__ void f() {\n  __shared__ float a[4], b[8][2];\n  a[0] = b[7][1];\n}')

    def test_alignment(self):
        for spelling in ('__align__(16)', 'alignas(16)'):
            out = self.body('__global__ void f() { __shared__ %s unsigned char s[40]; }' % spelling)
            self.assertIn('::cutrain_sim::static_shared<unsigned char[40], 16>', out)
            self.compiles('__global__ void f() { __shared__ %s unsigned char s[40]; s[0] = 1; }'
                          % spelling)

    def test_static_and_extern_in_a_function(self):
        out = self.body('__global__ void f() { static __shared__ int s; extern __shared__ float d[]; }')
        self.assertNotIn('static', out.replace('static_shared', ''))  # each block its own
        self.assertIn('int &s = ::cutrain_sim::static_shared<int, alignof(int)>', out)
        self.assertIn('float* d = ::cutrain_sim::dynamic_shared<float>();', out)
        self.compiles('__global__ void f() { static __shared__ int s; extern __shared__ float d[]; '
                      's = 1; d[0] = 2; }')

    def test_shared_at_namespace_or_class_scope_is_refused(self):
        self.refused('namespace a {\n\nextern __shared__ float dyn[];\n}', 3, '__shared__ dyn at namespace')
        self.refused('__shared__ int counter;\n', 1, '__shared__ counter at namespace')
        self.refused('struct S {\n  __shared__ int x;\n};', 2, 'declare it in the kernel')
        # Inside a kernel in a namespace, or in a lambda in a kernel: fine.
        self.compiles('namespace a {\n__global__ void f() {\n  auto g = [] { __shared__ int z; z = 1; };\n'
                      '  __shared__ float s[2];\n  s[0] = 1;\n  g();\n}\n}')

    def test_cudacc(self):
        self.assertIn('#if defined(CUTRAIN_SIM_CUDACC)', self.body('#if defined(__CUDACC__)\n#endif'))


class CommandLine(unittest.TestCase):
    def test_a_refusal_stops_the_build_naming_file_and_line(self):
        with tempfile.TemporaryDirectory() as d:
            src = os.path.join(d, 'bad.cu')
            with open(src, 'w') as f:
                f.write('// a kernel file\n__shared__ float s[4];\n')
            r = subprocess.run([sys.executable, os.path.join(ROOT, 'sim', 'rewrite.py'),
                                os.path.join(d, 'out'), src], capture_output=True, text=True)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn('%s:2: __shared__ s at namespace or class scope' % src, r.stderr)
            self.assertFalse(os.path.exists(os.path.join(d, 'out')))


if __name__ == '__main__':
    unittest.main()
