#!/usr/bin/env bash
# Multi-GPU checks of the trainer (issue 22) in one call on a machine with 2 or 4 GPUs. Run from this tree's root.
# Optional: OLD=<tree> of an earlier trainer to compare world 1 against (skipped when unset). Logs under $OUT:
#   main.log     everything below in order, with the elapsed time
#   curves.txt   loss per step, 50 steps, same global batch: old trainer, 1, 2, 4 ranks (tiny preset, synthetic shard)
#   bench.txt    0.5B, B 4 x T 2048 per GPU: tokens/ms and memory at 1/2/4 ranks, with --debug-no-reduce, old trainer
#   tests.txt    gpu_test_train, gpu_test_dist, gpu_test_train_dist
#   fault.txt    one rank SIGKILLed mid-run: the other rank's log and the time it took to end
#   launch.txt   mpirun (if present), file:// (scripts/run_dist.sh) and tcp:// (MASTER_ADDR) launches
#   maketest.txt make test (everything else), in the time left
#   build.log
set -u
OUT=${OUT:-/tmp/dist_out}; mkdir -p "$OUT"
OLD=${OLD:-}
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s]"; }
exec > >(tee "$OUT/main.log") 2>&1
export NCCL_NVLS_ENABLE=0
nvidia-smi -L
NG=$(nvidia-smi -L | grep -c '^GPU')
echo "GPUs: $NG"

# ---- NCCL and MPI (sets extra=(NCCL_HOME=...) where the toolkit has no NCCL)
source dev/device/nccl_env.sh

# ---- build: the essentials first (this tree and the old trainer in parallel)
# (never a bare `wait` in this script: it would also wait for the tee above, which never ends: a deadlock)
oldpid=
if [ -n "$OLD" ]; then
  ( cd "$OLD" && { [ -d .deps ] || bash scripts/deps_unpack.sh >/dev/null; } && make -j16 build/train_gpt_relu ) > "$OUT/build_old.txt" 2>&1 &
  oldpid=$!
fi
make -j48 "${extra[@]}" build/train_gpt_relu build/gpu_test_train_dist build/gpu_test_train build/gpu_test_dist \
  build/test_rendezvous >> "$OUT/build.log" 2>&1 || { echo "BUILD FAILED"; grep -E 'error' "$OUT/build.log" | head -20; }
[ -n "$oldpid" ] && { wait $oldpid; cat "$OUT/build_old.txt" >> "$OUT/build.log"; rm -f "$OUT/build_old.txt"; }
grep -E ' error|Error ' "$OUT/build.log" | head; ls -la build/train_gpt_relu ${OLD:+"$OLD/build/train_gpt_relu"}
ldd build/train_gpt_relu | grep -E 'nccl|mpi'
el; echo "build done"

# ---- synthetic shard: a noisy repeating pattern (learnable), vocab 4096
python3 - <<'EOF'
import numpy as np, os
os.makedirs('/tmp/syn', exist_ok=True)
rng = np.random.default_rng(7)
n = 4_000_000; V = 4096
i = np.arange(n, dtype=np.int64)
t = (i * 7 + (i // 13) % 5) % V
noise = rng.random(n) < 0.1
t[noise] = rng.integers(0, V, noise.sum())
h = np.zeros(256, dtype=np.int32); h[0] = 20240520; h[1] = 1; h[2] = n
with open('/tmp/syn/syn_train_000000.bin', 'wb') as f:
    f.write(h.tobytes()); f.write(t.astype(np.uint16).tobytes())
EOF
BIN=$PWD/build/train_gpt_relu
COMMON="--train /tmp/syn/syn_train_*.bin --preset tiny --vocab 4096 --batch 4 --seq 256 --total-batch 4096 --steps 50 --warmup 5 --lr 3e-3 --eval-every 0 --sample-every 0 --log-stats-every 10 --ckpt-every -1"

# ---- loss curves: old trainer (world 1, accum 4), new 1 / 2 / 4 ranks (accum 4 / 2 / 1)
echo "== loss curves"; el
[ -n "$OLD" ] && { "$OLD/build/train_gpt_relu" $COMMON --out /tmp/c_old > /tmp/c_old.txt 2>&1; echo "old rc=$?"; }
$BIN $COMMON --out /tmp/c_w1 > /tmp/c_w1.txt 2>&1; echo "w1 rc=$?"
bash scripts/run_dist.sh 2 $BIN $COMMON --out /tmp/c_w2 > /tmp/c_w2.txt 2>&1; echo "w2 rc=$?"
[ "$NG" -ge 4 ] && { bash scripts/run_dist.sh 4 $BIN $COMMON --out /tmp/c_w4 > /tmp/c_w4.txt 2>&1; echo "w4 rc=$?"; }
python3 - > "$OUT/curves.txt" <<'EOF'
import os, re
def rd(p):
    r = {}
    if not os.path.exists(p): return r
    for l in open(p):
        m = re.match(r's:(\d+) loss:(\S+) ce:\S+ l1:\S+ norm:(\S+)', l)
        if m: r[int(m.group(1))] = (float(m.group(2)), float(m.group(3)))
    return r
runs = [('old', '/tmp/c_old'), ('w1', '/tmp/c_w1'), ('w2', '/tmp/c_w2'), ('w4', '/tmp/c_w4')]
d = {k: rd(p + '/metrics.log') for k, p in runs}
print('step ' + ' '.join('%12s' % k for k, _ in runs) + '   |w2-w1|   |w4-w1|  norm old/w1/w2/w4')
mx = {}
for s in sorted(d['w1']):
    row = [d[k].get(s, (float('nan'), 0))[0] for k, _ in runs]
    dd = [abs(row[2] - row[1]), abs(row[3] - row[1])]
    for j, k in enumerate(['w2', 'w4']): mx[k] = max(mx.get(k, 0), dd[j]) if dd[j] == dd[j] else mx.get(k, 0)
    print('%4d ' % s + ' '.join('%12.6f' % v for v in row) + '  %8.5f  %8.5f  ' % tuple(dd) +
          '/'.join('%.4f' % d[k].get(s, (0, float('nan')))[1] for k, _ in runs))
old = open('/tmp/c_old/metrics.log').read().splitlines() if os.path.exists('/tmp/c_old/metrics.log') else []
new = open('/tmp/c_w1/metrics.log').read().splitlines() if os.path.exists('/tmp/c_w1/metrics.log') else []
strip = lambda l: re.sub(r' ms:\S+', '', l)
same = len(old) == len(new) and all(strip(a) == strip(b) for a, b in zip(old, new))
print('old trainer vs world 1 (all metrics lines, 9 digits): %s (%d vs %d lines)' % ('IDENTICAL' if same else 'DIFFERENT', len(old), len(new)))
print('max |loss diff| vs world 1: ' + ', '.join('%s %.5f' % kv for kv in mx.items()))
EOF
cat "$OUT/curves.txt" | tail -4
grep -h "data parallel\|dist:" /tmp/c_w2.txt /tmp/c_w4.txt 2>/dev/null | head -4
el

# ---- throughput, 0.5B, B 4 x T 2048 per GPU; peak memory per GPU sampled by nvidia-smi every 0.2 s
echo "== bench"
. dev/device/gpu_mem.sh
B05="--preset 0.5B --batch 4 --seq 2048 --bench 24"
{
  [ -n "$OLD" ] && { echo "-- old trainer, 1 GPU"; "$OLD/build/train_gpt_relu" $B05 2>&1 | grep -E '^bench:|error'; }
  echo "-- new, 1 rank"; gpu_mem_start; $BIN $B05 2>&1 | grep -E '^bench:|error|optimizer shard'; gpu_mem_stop
  for n in 2 4; do
    [ "$n" -gt "$NG" ] && continue
    echo "-- new, $n ranks"; gpu_mem_start; bash scripts/run_dist.sh $n $BIN $B05 2>&1 | grep -E '^bench:|error|optimizer shard|data parallel'; gpu_mem_stop
    echo "-- new, $n ranks, --debug-no-reduce"; bash scripts/run_dist.sh $n $BIN $B05 --debug-no-reduce 2>&1 | grep -E '^bench:|error'
    echo "-- new, $n ranks, --grad-reduce owner"; bash scripts/run_dist.sh $n $BIN $B05 --grad-reduce owner 2>&1 | grep -E '^bench:|error'
  done
  # the sparse FFN under data parallel: synthetic 29 non-zeros per token, the dispatch all-reduced across ranks
  echo "-- new, 1 rank, SYNTHETIC sparse 29 nnz"; $BIN $B05 --synthetic-nnz 29 --ffn-path auto 2>&1 | grep -E '^bench:|error'
  [ "$NG" -ge 4 ] && { echo "-- new, 4 ranks, SYNTHETIC sparse 29 nnz"; bash scripts/run_dist.sh 4 $BIN $B05 --synthetic-nnz 29 --ffn-path auto 2>&1 | grep -E '^bench:|error'; }
} > "$OUT/bench.txt" 2>&1
cat "$OUT/bench.txt"; el

# ---- tests of the trainer and of the distributed layer
echo "== tests"
{ for t in gpu_test_train_dist gpu_test_train gpu_test_dist; do echo "=== $t"; timeout 150 ./build/$t > /tmp/$t.txt 2>&1; echo "rc=$?"; tail -n 60 /tmp/$t.txt; done; } > "$OUT/tests.txt" 2>&1
grep -E '^=== |PASSED|FAILED|SKIPPED|identical|ranks:|resumed|rc=' "$OUT/tests.txt"; el

# ---- fault: SIGKILL rank 1 mid-run; rank 0 must end within the deadline (--dist-timeout 15) with a clear message
echo "== fault"
{
  rm -f /tmp/kill_id; export SLLM_DIST_INIT=file:///tmp/kill_id WORLD_SIZE=2
  RANK=0 LOCAL_RANK=0 $BIN $COMMON --steps 100000 --dist-timeout 15 --out /tmp/kill > /tmp/kill0.txt 2>&1 & p0=$!
  RANK=1 LOCAL_RANK=1 $BIN $COMMON --steps 100000 --dist-timeout 15 > /tmp/kill1.txt 2>&1 & p1=$!
  unset SLLM_DIST_INIT WORLD_SIZE
  sleep 12; echo "rank 0 at: $(grep -c '^step' /tmp/kill0.txt) steps; SIGKILL rank 1 (pid $p1)"; t=$(date +%s.%N)
  kill -9 $p1
  for i in $(seq 1 60); do kill -0 $p0 2>/dev/null || break; sleep 1; done
  wait $p0; rc=$?; echo "rank 0 exited with code $rc after $(python3 -c "import time; print('%.1f' % (time.time() - $t))") s"
  kill -9 $p0 2>/dev/null
  echo "--- rank 0 log (last step line, then every error line)"; grep '^step' /tmp/kill0.txt | tail -n 1
  grep -v '^step' /tmp/kill0.txt | grep -A4 -i 'error' | head -20
} > "$OUT/fault.txt" 2>&1
cat "$OUT/fault.txt"; el

# ---- launch paths
echo "== launch"
S10="$COMMON --steps 10"
{
  echo "-- file:// (scripts/run_dist.sh 2)"; bash scripts/run_dist.sh 2 $BIN $S10 2>&1 | grep -E '^dist:|^step +10/|error'
  echo "-- tcp:// (RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT)"
  tp=()
  for r in 0 1; do RANK=$r LOCAL_RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29533 timeout 90 $BIN $S10 > /tmp/tcp$r.txt 2>&1 & tp+=($!); done
  wait "${tp[@]}"
  grep -hE '^dist:|^step +10/|error' /tmp/tcp0.txt /tmp/tcp1.txt
  if command -v mpirun >/dev/null; then
    echo "-- mpirun -np 2"; timeout 60 mpirun --allow-run-as-root -np 2 -x NCCL_NVLS_ENABLE=0 $BIN $S10 2>&1 | grep -E '^dist:|^step +10/|error' | head
    echo "-- mpirun -np 2 --dist-init file://"; rm -f /tmp/mpi_id; timeout 60 mpirun --allow-run-as-root -np 2 -x NCCL_NVLS_ENABLE=0 $BIN $S10 --dist-init file:///tmp/mpi_id 2>&1 | grep -E '^dist:|^step +10/|error' | head
  else echo "-- mpirun: not installed on this machine"; fi
  echo "-- total batch not divisible (2 ranks, 3072 tokens)"; bash scripts/run_dist.sh 2 $BIN $COMMON --total-batch 3072 2>&1 | grep -E 'error' | head -3
} > "$OUT/launch.txt" 2>&1
cat "$OUT/launch.txt"; el

# ---- make test in the time left
left=$(( ${BUDGET_S:-450} - ($(date +%s) - T0) ))
echo "== make test (${left} s left)"
if [ $left -gt 60 ]; then
  timeout -k 5 $left make -j48 "${extra[@]}" test > "$OUT/maketest.txt" 2>&1; echo "make test rc=$?"
  grep -E '^tests:|failing|SKIPPED|FAIL' "$OUT/maketest.txt" | head -20
fi
el
