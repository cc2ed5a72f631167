#!/bin/bash
# Paired A/B of the AVX-512 small-M kernel at git revision A (default 0c06cca, before issue 15's rework)
# against the working tree (B), with a plain sum over the same bytes, for each projection shape of the
# Qwen3.5-0.8B decode step at M rows (default 1), and B's float32 row-lanes form beside them ("B row lanes",
# which the extension runs from small_m_linear_row_lanes_min_rows() rows on). Needs g++ and an AVX-512 CPU.
#
#   bench/e2e/small_m_linear_ab.sh [REV_A] [M]        (env: OMP_NUM_THREADS, default 2; wall clock)
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
rev=${1:-0c06cca}
rows=${2:-1}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
flags="-O3 -std=c++17 -mavx512f -mavx2 -mfma -I. -I$dir"
mkdir -p "$dir/a/bindings/cpu"
for f in $(git ls-tree --name-only "$rev" bindings/cpu/ | grep 'small_m_linear'); do git show "$rev:$f" > "$dir/a/$f"; done
# A's entries renamed, so that they link beside B's (A's row-lanes ones only where A has that form).
sed -e 's/small_m_linear_f32_avx512(/small_m_linear_f32_avx512_a(/' \
    -e 's/small_m_linear_f32_row_lanes_avx512(/small_m_linear_f32_row_lanes_avx512_a(/' \
    -e 's/pack_row_lanes_avx512(/pack_row_lanes_avx512_a(/' "$dir/a/bindings/cpu/small_m_linear_avx512.cpp" \
  > "$dir/a/bindings/cpu/a.cpp"
g++ $flags -I"$dir/a" -I"$dir/a/bindings/cpu" -c "$dir/a/bindings/cpu/a.cpp" -o "$dir/a.o"
g++ $flags -c bindings/cpu/small_m_linear_avx512.cpp -o "$dir/b.o"
g++ $flags -fopenmp -DQWEN_OPS_X86_KERNELS bench/e2e/small_m_linear_ab.cpp "$dir/a.o" "$dir/b.o" -o "$dir/ab"
echo "A = $rev, B = working tree; M=$rows; threads ${OMP_NUM_THREADS:-2}; load average $(cut -d' ' -f1-3 /proc/loadavg)"
# N K (times per decode step)
for shape in "6144 1024 18" "2048 1024 18" "16 1024 36" "1024 2048 18" "4096 1024 6" "512 1024 12" "1024 2048 6" \
             "3584 1024 48" "1024 3584 24" "248320 1024 1"; do
  set -- $shape
  repeats=60; [ "$1" -gt 100000 ] && repeats=9
  WALL=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} OMP_WAIT_POLICY=PASSIVE "$dir/ab" "$rows" "$1" "$2" "$repeats" | sed "s/^/x$3 /"
done
echo "load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
