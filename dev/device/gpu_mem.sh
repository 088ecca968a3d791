# Sourced by the device scripts: peak memory per GPU sampled by nvidia-smi while a command runs.
#   gpu_mem_start [interval ms, default 200]   ...   gpu_mem_stop    (prints "peak memory per GPU (nvidia-smi, MiB): ...")
gpu_mem_start() {
  rm -f /tmp/gpu_mem.csv
  nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits -lms "${1:-200}" > /tmp/gpu_mem.csv &
  GPU_MEM_PID=$!
}
gpu_mem_stop() {
  kill "$GPU_MEM_PID" 2>/dev/null; sleep 0.6
  python3 -c "
import collections; m = collections.defaultdict(int)
for l in open('/tmp/gpu_mem.csv'):
    p = l.split(',')
    if len(p) == 2: m[int(p[0])] = max(m[int(p[0])], int(p[1]))
print('   peak memory per GPU (nvidia-smi, MiB): ' + ', '.join('GPU%d %d' % kv for kv in sorted(m.items())))"
}
