#!/usr/bin/env bash
# Replays a job trace on a simulated heterogeneous GPU cluster under the fifo,
# elastic-homo and elastic-hetero policies (build/bin/simulator, elastic/simulator.h)
# and prints average JCT and makespan per policy, with FIFO's divided by each.
#
#   scripts/simulate.sh [--trace FILE] [--cluster SPEC] [--csv] [--plot OUT.png] [--simulator BIN] [-- simulator flags]
#     --trace FILE    the trace (default examples/traces/small.csv; its header says how it was made)
#     --cluster SPEC  GPUs per device type (default A100:4,V100:8,T4:8)
#     --csv           print the table as CSV
#     --plot OUT.png  also draw average JCT, makespan and the JCT distribution per policy
#                     (needs gnuplot: apt-get install gnuplot-nox)
#     --simulator BIN the binary (default build/bin/simulator, built if missing)
#   Flags after -- go to the simulator, e.g. -- --rescale_s=30 --log_decisions.
#   A new synthetic trace: build/bin/simulator --generate_trace --seed=2 --jobs=50 > t.csv
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
usage() { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }

trace=$root/examples/traces/small.csv cluster=A100:4,V100:8,T4:8 csv=0 plot="" sim=$root/build/bin/simulator extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --trace) trace=${2:?--trace needs a file}; shift 2 ;;
    --cluster) cluster=${2:?--cluster needs a spec}; shift 2 ;;
    --csv) csv=1; shift ;;
    --plot) plot=${2:?--plot needs a file name}; shift 2 ;;
    --simulator) sim=${2:?--simulator needs a file}; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) usage ;;
    *) echo "simulate.sh: unknown argument '$1'" >&2; usage ;;
  esac
done

if [ ! -x "$sim" ]; then
  [ -f "$root/build/CMakeCache.txt" ] || { echo "simulate.sh: no build/: run scripts/setup.sh first" >&2; exit 1; }
  cmake --build "$root/build" --target simulator -j "$(nproc)" >&2
fi
if [ -n "$plot" ] && ! command -v gnuplot > /dev/null; then
  echo "simulate.sh: --plot needs gnuplot (apt-get install gnuplot-nox)" >&2
  exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
args=(--trace="$trace" --cluster="$cluster" --jobs_csv="$tmp/jobs.csv" "${extra[@]}")
"$sim" "${args[@]}" --csv > "$tmp/summary.csv"
if [ $csv = 1 ]; then
  cat "$tmp/summary.csv"
else
  "$sim" "${args[@]}"
fi
[ -n "$plot" ] || exit 0

# One file per policy with its sorted JCTs and their cumulative fraction, for the CDF.
policies=$(tail -n +2 "$tmp/summary.csv" | cut -d, -f1)
cdf_plot=""
for p in $policies; do
  awk -F, -v p="$p" 'NR > 1 && $1 == p { print $6 }' "$tmp/jobs.csv" | sort -g |
    awk '{ v[NR] = $1 } END { for (i = 1; i <= NR; i++) print v[i], i / NR }' > "$tmp/cdf_$p.dat"
  cdf_plot+="${cdf_plot:+, }'$tmp/cdf_$p.dat' using 1:2 with steps lw 2 title '$p'"
done
title="$(basename "$trace"), cluster $cluster"
gnuplot <<EOF
set terminal pngcairo size 1500,480 font ",11"
set output '$plot'
set datafile separator ","
set multiplot layout 1,3 title "$title"
set style fill solid 0.7 border -1
set boxwidth 0.6
set grid ytics
set yrange [0:*]
set offsets 0, 0, graph 0.1, 0
unset key
set title "average JCT (s); label: fifo / policy"
plot '$tmp/summary.csv' skip 1 using 0:3:xtic(1) with boxes lc rgb "#4472c4", \
     '' skip 1 using 0:3:(sprintf("%.2fx", \$5)) with labels offset 0,1
set title "makespan (s); label: fifo / policy"
plot '$tmp/summary.csv' skip 1 using 0:4:xtic(1) with boxes lc rgb "#ed7d31", \
     '' skip 1 using 0:4:(sprintf("%.2fx", \$6)) with labels offset 0,1
set title "JCT distribution"
set offsets 0, 0, 0, 0
set datafile separator whitespace
set logscale x
set xlabel "JCT (s)"
set ylabel "fraction of jobs"
set yrange [0:1]
set key bottom right
plot $cdf_plot
unset multiplot
EOF
echo "simulate.sh: wrote $plot" >&2
