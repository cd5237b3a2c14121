#!/usr/bin/env bash
# Shows two ClusterQueues sharing quota through a Cohort, on the system
# `make up` started: applies deploy/samples/cohorts.yaml, has the speech
# team borrow beyond its quota, shows what stops it borrowing more and the
# vision team waiting for quota it lent, then gives the quota back.
# docs/operators.md ("Sharing quota: cohorts") walks through the numbers.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"
export KUBECONFIG="${root}/.local/kubeconfig"
kubectl="${root}/bin/kubectl"
timeout=60 # seconds for each step

if ! "${kubectl}" get crd cohorts.sluice.dev >/dev/null 2>&1 ||
	! curl -fsS http://127.0.0.1:8083/readyz >/dev/null 2>&1; then
	echo "demo-cohorts: sluice is not running here; start it with 'make up'" >&2
	exit 1
fi

say() { printf '\n== %s\n' "$*"; }
run() { # prints the command, then runs it
	printf '$ kubectl %s\n' "$*"
	"${kubectl}" "$@"
}

# pod namespace name cpu: a pod of the demo in its namespace's user-queue,
# running until deleted.
pod() {
	"${kubectl}" create -f - >/dev/null <<POD
apiVersion: v1
kind: Pod
metadata:
  name: $2
  namespace: $1
  labels:
    kueue.x-k8s.io/queue-name: user-queue
    demo: cohorts
spec:
  restartPolicy: Never
  containers:
    - name: main
      image: registry.k8s.io/pause:3.10
      resources:
        requests:
          cpu: "$3"
POD
	echo "created pod $1/$2 asking for $3 cpu"
}

# workload namespace pod: the name of the Workload of a single pod, once
# it exists.
workload() {
	local deadline=$((SECONDS + timeout)) name
	while :; do
		name="$("${kubectl}" get workloads.sluice.dev -n "$1" --no-headers \
			-o custom-columns=NAME:.metadata.name,POD:.metadata.ownerReferences[0].name 2>/dev/null |
			awk -v pod="$2" '$2 == pod { print $1 }')"
		[[ -n "${name}" ]] && break
		if ((SECONDS > deadline)); then
			echo "demo-cohorts: pod $1/$2 has no Workload after ${timeout}s; see .local/logs/" >&2
			exit 1
		fi
		sleep 0.2
	done
	echo "${name}"
}

reserved_message() { # namespace workload
	"${kubectl}" get workloads.sluice.dev -n "$1" "$2" \
		-o jsonpath='{.status.conditions[?(@.type=="QuotaReserved")].message}'
}

# waiting namespace pod: waits until the pod's Workload is told why it
# does not fit, and prints that.
waiting() {
	local wl deadline=$((SECONDS + timeout)) msg
	wl="$(workload "$1" "$2")"
	until msg="$(reserved_message "$1" "${wl}")" && [[ "${msg}" == *"insufficient quota"* ]]; do
		if ((SECONDS > deadline)); then
			echo "demo-cohorts: Workload $1/${wl} is not waiting for quota after ${timeout}s: ${msg}" >&2
			exit 1
		fi
		sleep 0.2
	done
	echo "Workload $1/${wl} waits: ${msg}"
}

running() { # namespace pod...
	local ns="$1"
	shift
	for p in "$@"; do
		"${kubectl}" wait -n "${ns}" --for=jsonpath='{.status.phase}'=Running "pod/${p}" --timeout="${timeout}s" >/dev/null
		echo "pod ${ns}/${p} is running"
	done
}

# cpu_status queue field value: waits until the ClusterQueue's status
# reports value for the cpu field (total, borrowed, lent); status is
# written about once a second.
cpu_status() {
	"${kubectl}" wait "clusterqueues.sluice.dev/$1" --timeout="${timeout}s" \
		--for=jsonpath="{.status.flavorsReservation[?(@.name==\"default-flavor\")].resources[?(@.name==\"cpu\")].$2}=$3" >/dev/null
}

queues() { # cpu-held-below-the-Cohort
	run get clusterqueues,cohorts
	run get clusterqueues.sluice.dev vision speech -o \
		'custom-columns=CLUSTERQUEUE:.metadata.name,CPU IN USE:.status.flavorsReservation[0].resources[0].total,BORROWED:.status.flavorsReservation[0].resources[0].borrowed,LENT:.status.flavorsReservation[0].resources[0].lent'
	"${kubectl}" wait cohorts.sluice.dev/research --timeout="${timeout}s" \
		--for=jsonpath="{.status.flavorsReservation[?(@.name==\"default-flavor\")].resources[?(@.name==\"cpu\")].total}=$1" >/dev/null
	run get cohorts.sluice.dev research -o \
		'custom-columns=COHORT:.metadata.name,CPU IN USE BELOW IT:.status.flavorsReservation[0].resources[0].total'
}

say "A run before this one leaves pods behind; they go first."
for ns in vision speech; do
	if "${kubectl}" get namespace "${ns}" >/dev/null 2>&1; then
		"${kubectl}" delete pods -n "${ns}" -l demo=cohorts --ignore-not-found --timeout="${timeout}s"
	fi
done

say "Applying deploy/samples/cohorts.yaml: Cohort research (a 2-cpu pool), ClusterQueues vision (4 cpu, lendingLimit 2) and speech (2 cpu, borrowingLimit 3)."
run apply -f deploy/samples/cohorts.yaml
"${kubectl}" wait --for=condition=Active clusterqueues.sluice.dev/vision clusterqueues.sluice.dev/speech --timeout="${timeout}s" >/dev/null

say "speech runs a 5-cpu pod: its own 2 and 3 borrowed from the cohort."
pod speech asr-train 5
running speech asr-train
train="$(workload speech asr-train)"
printf 'Workload speech/%s: %s\n' "${train}" "$(reserved_message speech "${train}")"
echo "its admission (status.admission.podSetAssignments):"
"${kubectl}" get workloads.sluice.dev -n speech "${train}" \
	-o jsonpath='{range .status.admission.podSetAssignments[*]}  pod set {.name}: flavors {.flavors}, uses {.resourceUsage}, borrowed {.borrowed}{"\n"}{end}'
cpu_status speech borrowed 3

say "speech asks for 1 cpu more: its borrowingLimit stops it."
pod speech asr-eval 1
waiting speech asr-eval

say "vision wants all 4 of its cpu: 2 are its own whatever happens, but speech holds some of the 2 it lent."
pod vision detect 4
waiting vision detect
cpu_status vision lent 1
"${kubectl}" wait --for=jsonpath='{.status.pendingWorkloads}'=1 --timeout="${timeout}s" \
	clusterqueues.sluice.dev/vision clusterqueues.sluice.dev/speech >/dev/null
queues 5

say "speech's 5-cpu pod ends: the quota it borrowed comes back, and both waiting pods run."
run delete pod -n speech asr-train
running vision detect
running speech asr-eval
cpu_status speech borrowed 0
cpu_status vision lent 0
"${kubectl}" wait --for=jsonpath='{.status.pendingWorkloads}'=0 --timeout="${timeout}s" \
	clusterqueues.sluice.dev/vision clusterqueues.sluice.dev/speech >/dev/null
queues 5
run get workloads.sluice.dev -n vision -o wide

cat <<MSG

The pods keep running. Look around with
  export KUBECONFIG=${KUBECONFIG}
  ${kubectl} get cq,cohorts
  ${kubectl} get workloads.sluice.dev -n speech -o wide
and remove the pods with
  ${kubectl} delete pods -l demo=cohorts -n vision
  ${kubectl} delete pods -l demo=cohorts -n speech
MSG
