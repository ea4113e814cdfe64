#!/bin/sh
# make demo: profile Debian's /usr/bin/ocamlopt.opt (a stripped native OCaml
# 4.13 program) while it compiles a large generated module, then print the
# text report (with live-at-end and peak-live per site).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
work=$top/build/demo
rate=${RATE:-1e-4}
mkdir -p "$work"
python3 "$top/tests/gen_module.py" "${ITEMS:-1500}" > "$work/big.ml"
cd "$work"
rm -f big.cmi big.cmx big.o
echo "== camlheap record --rate $rate --live -- ocamlopt.opt -g -c big.ml  ($(wc -c < big.ml) bytes of OCaml)" >&2
"$top/build/camlheap" record --rate "$rate" --live --top "${TOP:-8}" -o report.txt -- /usr/bin/ocamlopt.opt -g -c big.ml
cat report.txt
echo
echo "report: $work/report.txt" >&2
