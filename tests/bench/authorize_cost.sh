#!/usr/bin/env bash
# Benchmark (not a test): what per-task identities cost. The same sync run
# (2 ps, 2 workers, the built-in CNN on MNIST, --epochs=1, the chief
# scoring the final weights) under mutual TLS, alternated, two ways:
#
#   shared      one certificate for every task and one cluster token
#               (--tls_cert task.pem, --auth_token_file token)
#   authorize   each task its own certificate and token, the identities
#               list, and --authorize: every call and data-plane frame
#               identified and checked against the table
#
# and prints each run's chief wall_s and steps, the medians and their ratio.
# The files: deploy/tls/make_test_ca.sh --tasks, in a scratch folder.
#
#   tests/bench/authorize_cost.sh [--rounds=3] [--data_dir=DIR]
#
# Needs the daemons built in bazel-bin and openssl.
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
rounds=3
data="$repo/../shared/data/mnist"
bad() { echo "authorize_cost: $1" >&2; exit 2; }
for arg in "$@"; do
  case "$arg" in
    --rounds=*) rounds="${arg#*=}" ;;
    --data_dir=*) data="${arg#*=}" ;;
    -h | --help) sed -n '2,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) bad "unknown argument '$arg' (--help lists them)" ;;
  esac
done
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || bad "--rounds=$rounds: a positive whole number"
[ -f "$data/train-images-idx3-ubyte.gz" ] || bad "--data_dir=$data: no MNIST there"
BIN="$repo/bazel-bin"
for b in ps_server/ps_server worker/worker chief/chief; do
  [ -x "$BIN/$b" ] || bad "missing $BIN/$b (bazel build //...)"
done

tmp="$(mktemp -d)"
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; rm -rf "$tmp"' EXIT
pki="$tmp/pki"
"$repo/deploy/tls/make_test_ca.sh" --tasks chief,ps/0,ps/1,worker/0,worker/1 "$pki" >/dev/null ||
  bad "make_test_ca.sh failed"

source "$(dirname "${BASH_SOURCE[0]}")/bench_common.sh"   # free_ports

# one_run WAY: one run; prints "wall_s steps".
one_run() {
  local way="$1" p cluster task role index sec log
  mapfile -t p < <(free_ports 9)
  cluster="\"cluster\": {\"chief\": [\"127.0.0.1:${p[0]}\"], \"ps\": [\"127.0.0.1:${p[1]}\", \"127.0.0.1:${p[2]}\"],"
  cluster+=" \"worker\": [\"127.0.0.1:${p[3]}\", \"127.0.0.1:${p[4]}\"]}, \"rpc_layer\": \"grpc+tls\""
  pids=()
  for task in ps/0 ps/1 worker/0 worker/1 chief/0; do
    role="${task%/*}" index="${task#*/}"
    if [ "$way" = shared ]; then
      sec=(--tls_cert="$pki/task.pem" --tls_key="$pki/task.key" --tls_ca="$pki/ca.pem"
           --auth_token_file="$pki/token")
    else
      sec=(--tls_cert="$pki/$role-$index.pem" --tls_key="$pki/$role-$index.key" --tls_ca="$pki/ca.pem"
           --auth_token_file="$pki/$role-$index.token" --auth_identities_file="$pki/identities" --authorize)
    fi
    case "$role" in
      ps) args=("$BIN/ps_server/ps_server" --data_port="${p[$((5 + index))]}") ;;
      worker) args=("$BIN/worker/worker" --data_dir="$data" --device=cpu --threads=1) ;;
      chief) args=("$BIN/chief/chief" --data_dir="$data" --epochs=1 --logdir="$(mktemp -d "$tmp/logs-$way.XXXX")") ;;
    esac
    TF_CONFIG="{$cluster, \"task\": {\"type\": \"$role\", \"index\": $index}}" \
      "${args[@]}" "${sec[@]}" --metrics_port=0 >"$tmp/$way-$role$index.log" 2>&1 &
    pids+=($!)
  done
  wait "${pids[4]}"
  kill "${pids[@]:0:4}" 2>/dev/null
  wait "${pids[@]:0:4}" 2>/dev/null
  log="$(grep -h '^final: ' "$tmp/$way-chief0.log" | tail -1)"
  [ -n "$log" ] || { echo "authorize_cost: $way: no final line; the chief's last lines:" >&2
                     tail -5 "$tmp/$way-chief0.log" >&2; exit 1; }
  sed -nE 's/.* steps=([0-9]+) .* wall_s=([0-9.]+).*/\2 \1/p' <<<"$log"
}

median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "authorize_cost: $(date -u '+%Y-%m-%d %H:%M') UTC, commit $(git -C "$repo" rev-parse --short HEAD)," \
  "$(nproc) cores; sync, 2 ps x 2 workers, cnn, 1 epoch, mutual TLS; $rounds rounds, alternated"
printf '%6s %10s %8s %6s\n' round way wall_s steps
for ((r = 1; r <= rounds; r++)); do
  for way in shared authorize; do
    read -r wall steps < <(one_run "$way") || exit 1
    printf '%6d %10s %8s %6s\n' "$r" "$way" "$wall" "$steps"
    echo "$wall" >>"$tmp/$way.walls"
  done
done
s="$(median <"$tmp/shared.walls")" a="$(median <"$tmp/authorize.walls")"
printf 'median wall_s: shared %s, authorize %s; authorize / shared = %s\n' "$s" "$a" \
  "$(awk -v a="$a" -v s="$s" 'BEGIN { printf "%.3f", a / s }')"
