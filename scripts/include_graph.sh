#!/usr/bin/env bash
# The folder graph of the project's own #include "..." lines, and a check that its arrows point one way.
#   bash scripts/include_graph.sh          prints "from -> to  count" per folder pair, exits 1 on a cycle or on an
#                                          arrow against the layer order core/, dataloader/ -> twell/ -> model/ ->
#                                          the binaries (the repository root); test/ and dev/ may include anything
# An include resolves like the compilers here: the including file's folder, then the repository root (-I.), then
# core/ (-Icore), then test/ (-Itest, tests and benchmarks). System headers (<...>) are not counted.
set -euo pipefail
cd "$(dirname "$0")/.."

folder() { local d; d=$(dirname "$1"); d=${d#./}; [ "$d" = . ] && d=root; echo "${d%%/*}"; }

edges=$(
  # the project's sources: tracked or new files, or every source file where there is no git (a copied tree);
  # hidden folders (scratch copies of other trees, local dependency prefixes) are not the project's
  { git ls-files --cached --others --exclude-standard '*.c' '*.h' '*.cu' '*.cuh' '*.cpp' 2>/dev/null ||
    find . -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' -o -name '*.cpp'; } |
  sed 's|^\./||' | grep -v -e '^\.' -e '^build/' | while read -r f; do
    from=$(folder "$f")
    dir=$(dirname "$f")
    sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f" | while read -r inc; do
      to=
      for cand in "$dir/$inc" "$inc" "core/$inc" "test/$inc"; do
        if [ -f "$cand" ]; then to=$(folder "$cand"); break; fi
      done
      if [ -z "$to" ]; then echo "include_graph: $f includes \"$inc\", which is not in the repository" >&2; continue; fi
      if [ "$from" != "$to" ]; then echo "$from $to"; fi
    done
  done | sort | uniq -c | awk '{print $2, $3, $1}'
)

echo "include graph by folder (from -> to: #include lines):"
echo "$edges" | awk 'NF == 3 {printf "  %-10s -> %-10s %4d\n", $1, $2, $3}'

# Layer order: an arrow must go from a higher layer to a lower one. test/ and dev/ sit on top.
echo "$edges" | awk '
  BEGIN { r["core"] = 0; r["dataloader"] = 0; r["twell"] = 1; r["model"] = 2; r["root"] = 3; r["test"] = 4; r["dev"] = 4 }
  NF == 3 {
    from = $1; to = $2; n++; src[n] = from; dst[n] = to
    if (!(from in r) || !(to in r)) { printf "include_graph: unknown folder in %s -> %s\n", from, to; bad = 1 }
    else if (r[from] < r[to]) { printf "include_graph: %s -> %s points up the layers (core, dataloader < twell < model < binaries)\n", from, to; bad = 1 }
  }
  # cycle check (depth-first search over the folder graph)
  function visit(v,   i) {
    if (state[v] == 1) { printf "include_graph: cycle through %s\n", v; cyc = 1; return }
    if (state[v] == 2) return
    state[v] = 1
    for (i = 1; i <= n; i++) if (src[i] == v) visit(dst[i])
    state[v] = 2
  }
  END {
    for (i = 1; i <= n; i++) visit(src[i])
    if (cyc) bad = 1
    if (bad) exit 1
    print "include graph: no cycle, every arrow points down the layers"
  }'
