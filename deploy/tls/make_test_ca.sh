#!/usr/bin/env bash
# make_test_ca.sh: makes what TLS and the cluster token need, for tests and
# trials (docs/security.md): a test CA, one task certificate that every
# daemon uses as server and as client, and a random cluster token.
#
#   make_test_ca.sh [--san SAN]... [--days N] [--tasks LIST] [--force|--renew] DIR
#
# Writes into DIR (made if missing):
#   ca.pem      the CA certificate           -> --tls_ca on every daemon
#   ca.key      the CA's private key (keep it to sign more certificates)
#   task.pem    the task certificate         -> --tls_cert
#   task.key    its private key              -> --tls_key
#   token       64 hex digits                -> --auth_token_file
# and with --tasks, per-task identities for --authorize (docs/security.md),
# for each task ROLE/INDEX of LIST:
#   ROLE-INDEX.pem, ROLE-INDEX.key   its certificate, naming it as
#               URI:pscluster://ROLE/INDEX besides the --san names
#                                        -> its --tls_cert, --tls_key
#   ROLE-INDEX.token   its own token     -> its --auth_token_file
#   identities  every task's token digest -> --auth_identities_file on every daemon
#
# --tasks LIST  comma-separated ROLE/INDEX (chief, worker/0, ps/1,
#             evaluator: a role alone is index 0), e.g.
#             chief,ps/0,ps/1,worker/0,worker/1,evaluator
# --san SAN   a subject alternative name of task.pem: IP:ADDRESS or
#             DNS:NAME (DNS:*.domain for a wildcard); repeat the flag or
#             separate names by commas. Clients check the host of each
#             TF_CONFIG address against these names, so list every one
#             (Compose service names, StatefulSet pod names such as
#             DNS:ps-0.ps), or give every daemon --tls_server_name=NAME
#             with DNS:NAME here. Default: IP:127.0.0.1 and DNS:localhost.
# --days N    validity in days (default 30)
# --force     overwrite files already in DIR
# --renew     new certificates and keys (task.pem, and with --tasks each
#             task's) from the CA already in DIR (its ca.pem and ca.key);
#             the CA, the tokens and identities stay. Running daemons take
#             them without a restart (docs/security.md, "Rotating
#             certificates and tokens").
#
# Exit status: 0 done; 2 bad arguments, existing files or no openssl;
# 1 openssl failed.
set -euo pipefail

me=make_test_ca.sh
die() { echo "$me: error: $*" >&2; exit 2; }
usage() { sed -n '2,41p' "$0" | sed 's/^# \{0,1\}//'; }

sans=()
days=30
force=0
renew=0
out=""
tasks=""
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --san) [ $# -ge 2 ] || die "--san needs a value (IP:ADDRESS or DNS:NAME)"
           sans+=("$2"); shift 2 ;;
    --san=*) sans+=("${1#--san=}"); shift ;;
    --days) [ $# -ge 2 ] || die "--days needs a value"; days="$2"; shift 2 ;;
    --days=*) days="${1#--days=}"; shift ;;
    --force) force=1; shift ;;
    --renew) renew=1; shift ;;
    --tasks) [ $# -ge 2 ] || die "--tasks needs a value (e.g. chief,ps/0,worker/0)"
             tasks="$2"; shift 2 ;;
    --tasks=*) tasks="${1#--tasks=}"; shift ;;
    --) shift; [ $# -gt 0 ] && { [ -z "$out" ] || die "more than one folder"; out="$1"; shift; } ;;
    -*) die "unknown option '$1' (see --help)" ;;
    *) [ -z "$out" ] || die "more than one folder ('$out', '$1')"; out="$1"; shift ;;
  esac
done
[ -n "$out" ] || { usage >&2; die "no output folder given"; }
[[ "$days" =~ ^[0-9]+$ ]] && [ "$days" -ge 1 ] || die "--days=$days: must be a whole number >= 1"
command -v openssl >/dev/null 2>&1 || die "openssl not found (Debian: apt-get install openssl)"

[ ${#sans[@]} -gt 0 ] || sans=("IP:127.0.0.1" "DNS:localhost")
san_list=()
for group in "${sans[@]}"; do
  IFS=',' read -r -a parts <<< "$group"
  for san in "${parts[@]}"; do
    [ -n "$san" ] || continue
    if [[ "$san" =~ ^IP:[0-9A-Fa-f:.]+$ ]] || [[ "$san" =~ ^DNS:(\*\.)?[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$ ]]; then
      san_list+=("$san")
    else
      die "--san '$san': expected IP:ADDRESS or DNS:NAME (e.g. IP:10.0.0.5, DNS:ps-0.ps)"
    fi
  done
done
[ ${#san_list[@]} -gt 0 ] || die "--san: no names given"
san_csv="$(IFS=','; echo "${san_list[*]}")"
task_list=()
if [ -n "$tasks" ]; then
  IFS=',' read -r -a parts <<< "$tasks"
  for t in "${parts[@]}"; do
    [ -n "$t" ] || continue
    [[ "$t" =~ ^(chief|worker|ps|evaluator)(/(0|[1-9][0-9]{0,6}))?$ ]] ||
      die "--tasks: '$t' is not ROLE/INDEX (ROLE chief, worker, ps or evaluator; e.g. worker/3)"
    [[ "$t" == */* ]] || t="$t/0"
    for seen in "${task_list[@]}"; do [ "$seen" != "$t" ] || die "--tasks: $t is listed twice"; done
    task_list+=("$t")
  done
  [ ${#task_list[@]} -gt 0 ] || die "--tasks: no tasks given"
fi

[ "$force" -eq 0 ] || [ "$renew" -eq 0 ] || die "--force and --renew: give one (--renew keeps the CA)"
if [ "$renew" -eq 1 ]; then
  for f in ca.pem ca.key; do
    [ -r "$out/$f" ] || die "--renew: $out/$f is missing (it renews from the CA in DIR)"
  done
fi
mkdir -p "$out" || die "cannot make folder '$out'"
[ -d "$out" ] && [ -w "$out" ] || die "'$out' is not a writable folder"
if [ "$force" -eq 0 ] && [ "$renew" -eq 0 ]; then
  for f in ca.pem ca.key task.pem task.key token identities; do
    [ ! -e "$out/$f" ] || die "$out/$f exists (give --force to overwrite)"
  done
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
umask 077
cat > "$work/openssl.cnf" <<CNF
[req]
distinguished_name = dn
prompt = no
[dn]
CN = pscluster test CA
[v3_ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[v3_task]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth, clientAuth
subjectAltName = $san_csv
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
CNF

run() {
  if ! "$@" >"$work/log" 2>&1; then
    cat "$work/log" >&2
    echo "$me: error: failed: $*" >&2
    exit 1
  fi
}
export OPENSSL_CONF="$work/openssl.cnf"
if [ "$renew" -eq 1 ]; then
  cp "$out/ca.key" "$out/ca.pem" "$work/"
else
  run openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$work/ca.key"
  run openssl req -x509 -new -config "$work/openssl.cnf" -extensions v3_ca -key "$work/ca.key" \
    -sha256 -days "$days" -out "$work/ca.pem"
fi
# issue NAME CONFIG: a key NAME.key and a certificate NAME.pem signed by the
# CA, with CONFIG's [v3_task] extensions.
issue() {
  run openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$work/$1.key"
  run openssl req -new -config "$work/openssl.cnf" -subj "/CN=pscluster $1" \
    -key "$work/$1.key" -out "$work/$1.csr"
  run openssl x509 -req -in "$work/$1.csr" -CA "$work/ca.pem" -CAkey "$work/ca.key" \
    -set_serial "0x$(openssl rand -hex 16)" -sha256 -days "$days" \
    -extfile "$2" -extensions v3_task -out "$work/$1.pem"
  run openssl verify -CAfile "$work/ca.pem" "$work/$1.pem"
}
issue task "$work/openssl.cnf"
openssl rand -hex 32 > "$work/token"

# Each task's certificate names it (URI:pscluster://ROLE/INDEX), and its
# token is its own; `identities` lists the tokens' digests, not the tokens.
: > "$work/identities"
for t in "${task_list[@]}"; do
  name="${t/\//-}"
  cat > "$work/$name.cnf" <<CNF
[v3_task]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth, clientAuth
subjectAltName = URI:pscluster://$t,$san_csv
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
CNF
  issue "$name" "$work/$name.cnf"
  [ "$renew" -eq 0 ] || continue  # its token and digest stay
  openssl rand -hex 32 > "$work/$name.token"
  printf '%s %s\n' "$t" "$(tr -d '\n' < "$work/$name.token" | openssl dgst -sha256 -r | cut -d' ' -f1)" \
    >> "$work/identities"
done

# Keys and tokens readable by the owner only; certificates (and the
# digests) by anyone. Each file is written aside and renamed into place, so
# a daemon reading it (a renewal) sees the old file or the new one; a key
# is placed before its certificate.
put() { install -m "$1" "$work/$2" "$out/.$2.new" && mv -f "$out/.$2.new" "$out/$2"; }
if [ "$renew" -eq 0 ]; then
  put 644 ca.pem
  put 600 ca.key
  put 600 token
fi
put 600 task.key
put 644 task.pem
for t in "${task_list[@]}"; do
  name="${t/\//-}"
  put 600 "$name.key"
  put 644 "$name.pem"
  [ "$renew" -eq 1 ] || put 600 "$name.token"
done
[ ${#task_list[@]} -eq 0 ] || [ "$renew" -eq 1 ] || put 644 identities
if [ "$renew" -eq 1 ]; then
  echo "$me: renewed $out/task.pem${task_list[*]:+ and the certificates of ${task_list[*]}} from $out/ca.pem (valid $days days); the CA and tokens stay"
  exit 0
fi
cat <<MSG
$me: wrote $out/{ca.pem,ca.key,task.pem,task.key,token}
  task.pem names: $san_csv; valid $days days
  every daemon: --tls_cert=$out/task.pem --tls_key=$out/task.key --tls_ca=$out/ca.pem \\
                --auth_token_file=$out/token
MSG
if [ ${#task_list[@]} -gt 0 ]; then
  cat <<MSG
$me: and per task (${task_list[*]}): ROLE-INDEX.{pem,key,token}, and identities
  task ROLE/INDEX with --authorize: --tls_cert=$out/ROLE-INDEX.pem --tls_key=$out/ROLE-INDEX.key \\
      --tls_ca=$out/ca.pem --auth_token_file=$out/ROLE-INDEX.token \\
      --auth_identities_file=$out/identities --authorize
MSG
fi
