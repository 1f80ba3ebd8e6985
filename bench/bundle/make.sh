#!/usr/bin/env bash
# make.sh DEST BINARY...: writes the folder `make bundle` makes (bench/README.md): everything a
# GPU host with CUDA but without cutrain's Debian packages needs to run the tests, the
# sanitizers and the benchmarks, small enough to carry (the device tool takes 64 MiB at most).
#
#   DEST/payload.tar.xz  bin/, lib/ and openmpi/, compressed (about 180 MiB -> 27): run.sh
#                        unpacks them into a temporary folder at each run
#     bin/               the binaries, debug info stripped (symbols and the device code's line
#                        table stay, for compute-sanitizer's reports)
#     lib/               the shared libraries they load, except those every such host has
#     openmpi/           OpenMPI's Debian packages, unpacked: mpirun for the mpirun tests
#   DEST/data/fashion-mnist/   the four IDX files the tests read (CUTRAIN_FASHION_MNIST_DIR);
#                        already gzip-compressed, so they stay out of the payload
#   DEST/run.sh          runs it all (bench/bundle/run.sh)
#   DEST/compare/        bench/compare.sh, torch_reference.py and torch_ref/ (run.sh's compare)
#   DEST/BUILD           the commit, the build host, CUDA_ARCH, the contents
#
# Which libraries travel: everything ldd lists except
#   - glibc (libc, libm, libdl, librt, libpthread, libresolv, ld-linux): it cannot be mixed with
#     the host's loader, and binaries built against an older glibc (2.36, Debian 12) run on a
#     newer one (the GPU image is Ubuntu 24.04: 2.39);
#   - libstdc++ and libgcc_s: likewise backward compatible, and the host's are newer (GCC 13+)
#     than what this build needs (GCC 12: GLIBCXX_3.4.30); run.sh's ldd check says if not;
#   - cuBLAS and cuDNN: hundreds of MB; the host has them in CUDA's lib64 or in the torch
#     install's nvidia/*/lib, which run.sh finds. (cudart is linked statically.)
# So hdf5 travels with its whole closure (libsz, libaec, libcurl and the TLS, Kerberos and LDAP
# libraries curl links): a few MB, and nothing then depends on which of those the host has.
set -euo pipefail
dest=${1:?usage: make.sh DEST BINARY...}
shift
[ $# -gt 0 ] || { echo "make.sh: no binaries given" >&2; exit 2; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

rm -rf "$dest"
mkdir -p "$dest/data/fashion-mnist"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
for b in "$@"; do
  [ -x "$b" ] || { echo "make.sh: $b is missing (build it first)" >&2; exit 1; }
  strip --strip-debug -o "$stage/bin/$(basename "$b")" "$b"
done

skip='^(linux-vdso|ld-linux.*|libc|libm|libdl|librt|libpthread|libresolv|libutil|libstdc\+\+|libgcc_s|libcublas|libcublasLt|libcudnn.*|libcudart|libcuda|libnvrtc.*)\.so'
missing=$(ldd "$stage"/bin/* | grep "not found" || true)
[ -z "$missing" ] || { echo "make.sh: unresolved libraries here:" >&2; echo "$missing" >&2; exit 1; }
ldd "$stage"/bin/* | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
  while read -r name path; do
    if [[ $name =~ $skip ]]; then continue; fi
    cp -L "$path" "$stage/lib/$name"
  done
# OpenMPI for the mpirun tests (tests/train/replicas/mpi_gpu_test.cpp): the GPU image has none. Debian's
# packages, unpacked into openmpi/ (6 MB of packages); run.sh points OPAL_PREFIX there when the
# host has no mpirun (OpenMPI is relocatable that way). Without Debian's archive the bundle
# goes without, and those tests skip.
mpi_debs="openmpi-bin openmpi-common libopenmpi3 libpmix2 libhwloc15 libevent-2.1-7
          libevent-core-2.1-7 libevent-pthreads-2.1-7 libfabric1 libucx0 libpsm-infinipath1
          libpsm2-2 libibverbs1 ibverbs-providers librdmacm1 libnl-3-200 libnl-route-3-200
          libmunge2 libxnvctrl0"
payload=(bin lib)
mkdir "$stage/debs"
# shellcheck disable=SC2086
if (cd "$stage/debs" && apt-get download $mpi_debs >/dev/null 2>&1); then
  for f in "$stage"/debs/*.deb; do dpkg -x "$f" "$stage/openmpi"; done
  rm -rf "$stage/openmpi/usr/share/man" "$stage/openmpi/usr/share/doc" \
         "$stage/openmpi/usr/lib/x86_64-linux-gnu/openmpi/include"
  ln -s orterun "$stage/openmpi/usr/bin/mpirun"  # Debian names it through alternatives
  payload+=(openmpi)
else
  echo "make.sh: could not download OpenMPI's packages (apt-get download): the bundle goes" \
       "without mpirun, and its mpirun tests will skip" >&2
fi
# -9 on one thread: its 64 MiB window spans several binaries, which are mostly the same
# library code, so each after the first costs little (2026-11-27, with oneDNN's 38 MiB and
# ONNX's libraries: 27 MiB against -3's 39, which put the bundle over the 64 MiB the device
# tool carries). One thread, because a threaded xz cuts its input into blocks that share no
# window (at -9, 192 MiB ones: the payload is about 180 MiB now). About 50 s more to pack;
# unpacking stays under 2 s (65 MiB of memory).
tar -cf - -C "$stage" "${payload[@]}" | xz -T1 -9 >"$dest/payload.tar.xz"

idx=${CUTRAIN_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz \
         t10k-labels-idx1-ubyte.gz; do
  [ -f "$idx/$f" ] || { echo "make.sh: $idx/$f is missing (make deps installs it)" >&2; exit 1; }
  cp "$idx/$f" "$dest/data/fashion-mnist/"
done

cp "$here/run.sh" "$dest/run.sh"
# run.sh's compare step: bench/compare.sh and the PyTorch reference it runs
mkdir -p "$dest/compare"
cp "$here/../compare.sh" "$here/../torch_reference.py" "$dest/compare/"
cp -r "$here/../torch_ref" "$dest/compare/"
rm -rf "$dest/compare/torch_ref/__pycache__"
chmod +x "$dest/run.sh"
{
  echo "commit: $(git describe --always --dirty --abbrev=12 2>/dev/null || echo unknown)"
  # shellcheck disable=SC1091
  echo "built: $(date -u '+%Y-%m-%d %H:%M UTC') on $(. /etc/os-release && echo "$PRETTY_NAME")," \
       "$(ldd --version | head -1)"
  echo "CUDA_ARCH: ${CUDA_ARCH:-(not given)}"
  echo "bin: $(cd "$stage/bin" && echo *)"
  echo "lib: $(cd "$stage/lib" && echo *)"
  echo "openmpi: $(cd "$stage/debs" && echo *.deb)"
} >"$dest/BUILD"

size=$(du -sm "$dest" | cut -f1)
echo "bundle: $dest, ${size} MiB: $(du -sh "$stage/bin" | cut -f1) of binaries and" \
     "$(du -sh "$stage/lib" | cut -f1) of libraries in $(du -sh "$dest/payload.tar.xz" | cut -f1)" \
     "of payload.tar.xz, $(du -sh "$dest/data" | cut -f1) of Fashion-MNIST"
if [ "$size" -gt 60 ]; then
  echo "bundle: WARNING: over 60 MiB; the device tool carries 64 MiB with the working tree" >&2
fi
echo "run it on the GPU host:  $dest/run.sh OUTDIR quick|deep|all   (see bench/README.md)"
