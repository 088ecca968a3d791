#!/usr/bin/env bash
# Launch N ranks of a program on this node without MPI: one process per GPU, NCCL bootstrapped through a
# shared-file rendezvous in a fresh directory (core/rendezvous.h).
#
#   scripts/run_dist.sh N PROGRAM [ARGS...]
#
# Each rank gets RANK, WORLD_SIZE, LOCAL_RANK (= RANK: GPU r) and SLLM_DIST_INIT=file://<dir>/nccl_id in its
# environment (core/dist.cuh reads them; a program's own --dist-init flag overrides SLLM_DIST_INIT). Rank 0
# prints to the terminal; rank r > 0 writes <dir>/rank<r>.log, whose tail is printed when that rank fails.
# When a rank fails, the others get SIGTERM after DIST_GRACE_S seconds (default 10: time for them to report
# their own view through the watchdog); the script exits with the first failing rank's exit code (0 if all
# succeed). Environment: DIST_DIR (rendezvous + log directory; default a fresh mktemp -d, removed on success),
# DIST_TIMEOUT_S (passed as SLLM_DIST_TIMEOUT, the per-collective deadline, for programs that read it).
#
# With OpenMPI instead (the binary must be built with MPI: the Makefile finds it):
#   mpirun -np N -x NCCL_NVLS_ENABLE=0 PROGRAM [ARGS...]
# Multi-node without MPI: start one copy of PROGRAM per GPU on every node with RANK, WORLD_SIZE, LOCAL_RANK and
# MASTER_ADDR=<rank 0's host> MASTER_PORT=<free port> (TCP rendezvous), or SLLM_DIST_INIT=file:///shared/fs/path.
set -u
if [ $# -lt 2 ]; then
  sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
N=$1; shift
case "$N" in ''|*[!0-9]*) echo "run_dist.sh: N must be a positive integer (got '$N')" >&2; exit 2;; esac
if [ "$N" -lt 1 ]; then echo "run_dist.sh: N must be >= 1" >&2; exit 2; fi
made_dir=0
if [ -z "${DIST_DIR:-}" ]; then DIST_DIR=$(mktemp -d /tmp/sllm_dist.XXXXXX); made_dir=1; fi
mkdir -p "$DIST_DIR"
rm -f "$DIST_DIR/nccl_id"
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}  # NVLink multicast stays off unless set explicitly
export WORLD_SIZE=$N SLLM_DIST_INIT="file://$DIST_DIR/nccl_id"
[ -n "${DIST_TIMEOUT_S:-}" ] && export SLLM_DIST_TIMEOUT=$DIST_TIMEOUT_S
grace=${DIST_GRACE_S:-10}

declare -a pids
for ((r = 0; r < N; r++)); do
  if [ $r -eq 0 ]; then
    RANK=$r LOCAL_RANK=$r "$@" &
  else
    RANK=$r LOCAL_RANK=$r "$@" >"$DIST_DIR/rank$r.log" 2>&1 &
  fi
  pids[$r]=$!
done
trap 'for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done' INT TERM

declare -a rcs
left=$N; first_rc=0; first_rank=-1; fail_time=0
while [ $left -gt 0 ]; do
  for ((r = 0; r < N; r++)); do
    [ -n "${rcs[$r]:-}" ] && continue
    if ! kill -0 "${pids[$r]}" 2>/dev/null; then
      wait "${pids[$r]}"; rcs[$r]=$?; left=$((left - 1))
      if [ "${rcs[$r]}" -ne 0 ] && [ $first_rank -lt 0 ]; then
        first_rank=$r; first_rc=${rcs[$r]}; fail_time=$SECONDS
        echo "run_dist.sh: rank $r exited with code ${rcs[$r]}" >&2
      fi
    fi
  done
  if [ $first_rank -ge 0 ] && [ $left -gt 0 ] && [ $((SECONDS - fail_time)) -ge "$grace" ]; then
    for ((r = 0; r < N; r++)); do
      [ -z "${rcs[$r]:-}" ] && { echo "run_dist.sh: stopping rank $r (SIGTERM)" >&2; kill -TERM "${pids[$r]}" 2>/dev/null; }
    done
    fail_time=$((SECONDS + 1000000))
  fi
  [ $left -gt 0 ] && sleep 0.2
done

for ((r = 1; r < N; r++)); do
  if [ "${rcs[$r]}" -ne 0 ]; then
    echo "---- rank $r (exit ${rcs[$r]}), last lines of $DIST_DIR/rank$r.log ----" >&2
    tail -n 40 "$DIST_DIR/rank$r.log" >&2
  fi
done
if [ $first_rank -lt 0 ] && [ $made_dir = 1 ]; then rm -rf "$DIST_DIR"; fi
[ $first_rank -ge 0 ] && echo "run_dist.sh: failed (first failure: rank $first_rank, exit $first_rc; logs in $DIST_DIR)" >&2
exit $first_rc
