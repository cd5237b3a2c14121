#!/usr/bin/env bash
# Starts sluice on the local control plane: the control plane itself (if it is
# not up), then the admitter, the checks service, the grouper and the webhook,
# each as its own process talking gRPC over loopback. With --demo it then
# applies the sample configuration and walks a KEP-976 Story 1 pod through
# the system. State, logs and pids live in .local/.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"
demo=false
[[ "${1:-}" == "--demo" ]] && demo=true

local_dir="${root}/.local"
logs="${local_dir}/logs"
pids="${local_dir}/pids"
export KUBECONFIG="${local_dir}/kubeconfig"
kubectl="${root}/bin/kubectl"
mkdir -p "${logs}" "${pids}"

"${root}/hack/cluster-up.sh"

# The system namespace and the CRDs come first: the services wait for them.
"${kubectl}" apply --server-side -f deploy/crd/ >/dev/null
"${kubectl}" wait --for condition=Established --timeout=60s -f deploy/crd/ >/dev/null

# Each service runs as its own ServiceAccount, with deploy/'s RBAC and flow
# control, as in a cluster; hack/local-rbac.yaml adds the webhook's
# self-registration, which only local runs use. test/harness applies the
# same files.
manifests=(deploy/namespace.yaml deploy/*/serviceaccount.yaml deploy/*/rbac.yaml deploy/flowcontrol.yaml hack/local-rbac.yaml)
"${kubectl}" apply --server-side --force-conflicts "${manifests[@]/#/--filename=}" >/dev/null
# The authorizer learns of new bindings a moment later; a webhook refused
# its self-registration would exit.
deadline=$((SECONDS + 60))
until [[ "$("${kubectl}" auth can-i create mutatingwebhookconfigurations --as system:serviceaccount:sluice-system:sluice-webhook)" == yes ]] &&
	[[ "$("${kubectl}" auth can-i update leases -n sluice-system --as system:serviceaccount:sluice-system:sluice-admitter)" == yes ]]; do
	if ((SECONDS > deadline)); then
		echo "sluice-up: the RBAC of deploy/ is not in force after 60s" >&2
		exit 1
	fi
	sleep 0.5
done 2>/dev/null

# What decides quota is sluice's to write: admission policies the API server
# enforces itself (deploy/policies), and the roles for the people sluice
# governs (deploy/user-roles.yaml). test/harness applies the same files. The
# API server compiles a policy a moment after it is stored, long before the
# services below are ready.
"${kubectl}" apply --server-side --force-conflicts --filename=deploy/policies/ --filename=deploy/user-roles.yaml >/dev/null

# One kubeconfig per service, with a token of its ServiceAccount from the
# TokenRequest API. The kubeconfigs name the token by file, which clients
# read again every minute: running `make up` again mints new tokens, and
# services already running switch to them.
identities="${local_dir}/identities"
token_hours=168
mkdir -p -m 700 "${identities}"
server="$("${kubectl}" config view --raw --minify -o jsonpath='{.clusters[0].cluster.server}')"
ca="$("${kubectl}" config view --raw --minify -o jsonpath='{.clusters[0].cluster.certificate-authority-data}')"
umask 077 # tokens and kubeconfigs are for their service alone
for name in admitter grouper webhook checks-approval; do
	token="${identities}/${name}.token"
	"${kubectl}" create token "sluice-${name}" --namespace sluice-system --duration "${token_hours}h" >"${token}.new"
	mv "${token}.new" "${token}"
	cat >"${identities}/${name}.kubeconfig" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
- name: sluice-local
  cluster:
    server: ${server}
    certificate-authority-data: ${ca}
users:
- name: sluice-${name}
  user:
    tokenFile: ${token}
contexts:
- name: sluice-local
  context: {cluster: sluice-local, user: sluice-${name}, namespace: sluice-system}
current-context: sluice-local
KUBECONFIG
	chmod 600 "${token}" "${identities}/${name}.kubeconfig" # written by an earlier version too
done
umask 022

# Mutual TLS between the services, as in a cluster, with certificates from a
# local CA made once in .local/certs/ca (cert-manager's job in a cluster).
# Each run renews the service certificates, and running services read them
# again within a minute. The admitter's identity is also the Secret
# sluice-admitter-tls, which AdmissionChecks of the built-in providers name
# for mutual TLS (deploy/samples/story1-queues.yaml), as cert-manager's
# Secret of the same name in a cluster.
certs="${local_dir}/certs"
"${root}/bin/sluice-certs" --dir "${certs}" --namespace sluice-system
"${kubectl}" create secret generic sluice-admitter-tls --namespace sluice-system --type kubernetes.io/tls \
	--from-file=tls.crt="${certs}/admitter/tls.crt" --from-file=tls.key="${certs}/admitter/tls.key" \
	--from-file=ca.crt="${certs}/admitter/ca.crt" --dry-run=client -o yaml |
	"${kubectl}" apply --server-side --force-conflicts -f - >/dev/null
tls() { # service
	echo --tls-cert-file "${certs}/$1/tls.crt" --tls-key-file "${certs}/$1/tls.key" --tls-ca-file "${certs}/$1/ca.crt"
}

start() { # name http-addr args... (the binary is bin/<name>, or bin/$BIN)
	local name="$1" http="$2"; shift 2
	local bin="${BIN:-${name}}"
	local pidfile="${pids}/sluice-${name}.pid"
	if [[ -f "${pidfile}" ]] && kill -0 "$(cat "${pidfile}")" 2>/dev/null; then
		echo "  ${name}: already running (pid $(cat "${pidfile}"))"
		return
	fi
	OTEL_SERVICE_NAME="sluice-${name}" nohup "${root}/bin/${bin}" --http-addr "${http}" --log-format text "$@" \
		>"${logs}/sluice-${name}.log" 2>&1 &
	echo $! >"${pidfile}"
	echo "  ${name}: started (pid $!, log .local/logs/sluice-${name}.log)"
}

wait_ready() { # name http-addr
	local name="$1" http="$2" deadline=$((SECONDS + 90))
	until curl -fsS "http://${http}/readyz" >/dev/null 2>&1; do
		if ((SECONDS > deadline)); then
			echo "sluice-up: ${name} did not become ready in 90s; last log lines:" >&2
			tail -n 30 "${logs}/sluice-${name}.log" >&2
			exit 1
		fi
		if ! kill -0 "$(cat "${pids}/sluice-${name}.pid")" 2>/dev/null; then
			echo "sluice-up: ${name} exited; last log lines:" >&2
			tail -n 30 "${logs}/sluice-${name}.log" >&2
			exit 1
		fi
		sleep 0.5
	done
}

echo "starting sluice:"
# Leader election on, as in a cluster: its Lease renewals use their own
# flow (deploy/flowcontrol.yaml).
# shellcheck disable=SC2046 # tls prints flags whose paths have no spaces
start admitter 127.0.0.1:8083 $(tls admitter) --kubeconfig "${identities}/admitter.kubeconfig" --grpc-addr 127.0.0.1:9090 --namespace sluice-system --leader-elect=true
# shellcheck disable=SC2046
start checks 127.0.0.1:8084 $(tls checks) --grpc-addr 127.0.0.1:9091
# The approval check (deploy/samples/approval.yaml) reads Workloads as its own
# ServiceAccount; it presents the checks service's certificate.
# shellcheck disable=SC2046
BIN=checks start checks-approval 127.0.0.1:8085 $(tls checks) --provider approval --kubeconfig "${identities}/checks-approval.kubeconfig" --grpc-addr 127.0.0.1:9092
# shellcheck disable=SC2046
start grouper 127.0.0.1:8082 $(tls grouper) --kubeconfig "${identities}/grouper.kubeconfig" --admitter-addr 127.0.0.1:9090
# The local control plane runs the GenericWorkload and GangScheduling
# feature gates, so KEP-976 groups get a scheduler gang here.
start webhook 127.0.0.1:8081 --kubeconfig "${identities}/webhook.kubeconfig" --self-register --webhook-port 9443 --unregister-on-exit --cert-dir "${local_dir}/webhook-certs" --gang-scheduling
for s in admitter:127.0.0.1:8083 checks:127.0.0.1:8084 checks-approval:127.0.0.1:8085 grouper:127.0.0.1:8082 webhook:127.0.0.1:8081; do
	wait_ready "${s%%:*}" "${s#*:}"
done
echo "sluice is up."

if ${demo}; then
	# One fake node becomes the "batch" pool: labelled and tainted, so only
	# pods that carry the nodepool check's updates can land there.
	node="$("${kubectl}" get nodes -o jsonpath='{.items[0].metadata.name}')"
	"${kubectl}" label nodes --overwrite "${node}" pool=batch >/dev/null
	"${kubectl}" taint nodes --overwrite "${node}" pool=batch:NoSchedule >/dev/null
	"${kubectl}" apply -f deploy/samples/story1-queues.yaml -f deploy/samples/approval.yaml -f deploy/samples/priority-classes.yaml >/dev/null
	echo "applied deploy/samples/story1-queues.yaml and priority-classes.yaml; ${node} is the batch pool (label pool=batch, taint pool=batch:NoSchedule)"
	"${root}/bin/sluice-demo" --kubeconfig "${KUBECONFIG}" --samples "${root}/deploy/samples" --kubectl "${kubectl}"
fi

cat <<MSG

Point kubectl at it:   export KUBECONFIG=${KUBECONFIG}
                       ${kubectl} get sluice -A        (queues, flavors, checks, workloads)
Service credentials:   .local/identities/ (one ServiceAccount each; tokens valid ${token_hours}h, renewed by make up)
Service certificates:  .local/certs/ (mutual TLS from a local CA; renewed by make up)
Logs:                  .local/logs/
Stop everything:       make down
MSG
