// Package podkeys names the labels, annotations, gate and finalizer that sluice
// reads and writes on pods. The pod-facing keys are exactly those of Kueue's
// plain-pod integration (KEP-976) so pods written for it work unchanged;
// sluice's own additions live under the sluice.dev/ prefix.
package podkeys

const (
	// QueueNameLabel names the LocalQueue a pod is submitted to.
	QueueNameLabel = "kueue.x-k8s.io/queue-name"
	// PodGroupNameLabel names the group a pod belongs to.
	PodGroupNameLabel = "kueue.x-k8s.io/pod-group-name"
	// PodGroupRoleLabel optionally names the role of a pod inside its group.
	PodGroupRoleLabel = "kueue.x-k8s.io/pod-group-role"
	// ManagedLabel marks pods that sluice manages; its only valid value is
	// ManagedLabelValue.
	ManagedLabel = "kueue.x-k8s.io/managed"
	// ManagedLabelValue is the only value ManagedLabel may carry.
	ManagedLabelValue = "true"
	// PriorityClassLabel names the WorkloadPriorityClass (sluice.dev) a
	// pod's workload is queued at; the pod's own scheduling priority is
	// left as it is.
	PriorityClassLabel = "kueue.x-k8s.io/priority-class"
	// MaxExecTimeLabel caps, in seconds, how long a pod's workload may run
	// admitted before it is evicted and deactivated.
	MaxExecTimeLabel = "kueue.x-k8s.io/max-exec-time-seconds"
	// PodSetLabel is set at ungating to the name of the pod set the pod was
	// admitted in.
	PodSetLabel = "kueue.x-k8s.io/podset"

	// PodGroupTotalCountAnnotation is the number of pods a group waits for.
	PodGroupTotalCountAnnotation = "kueue.x-k8s.io/pod-group-total-count"
	// PodGroupSetsAnnotation declares a group's roles before its pods exist
	// (KEP-976 Story 3).
	PodGroupSetsAnnotation = "kueue.x-k8s.io/pod-group-sets"
	// RoleHashAnnotation carries the hash of the scheduling-relevant part of
	// the pod spec; pods with equal hashes share a pod set.
	RoleHashAnnotation = "kueue.x-k8s.io/role-hash"
	// RetriableInGroupAnnotation set to "false" ends a group when its pod
	// finishes instead of waiting for a replacement.
	RetriableInGroupAnnotation = "kueue.x-k8s.io/retriable-in-group"

	// AdmissionGate is the scheduling gate that holds a pod until sluice
	// admits it.
	AdmissionGate = "kueue.x-k8s.io/admission"
	// ManagedFinalizer keeps a pod object until sluice has accounted for its
	// end.
	ManagedFinalizer = "kueue.x-k8s.io/managed"

	// SluicePrefix is the prefix of sluice's own label and annotation keys,
	// which only sluice writes. Only this exact prefix is sluice's:
	// subdomains such as nodepool.sluice.dev/ belong to whoever writes them.
	SluicePrefix = "sluice.dev/"

	// TraceparentAnnotation carries the W3C trace context the webhook starts
	// for a pod, so every service continues one trace per workload.
	TraceparentAnnotation = "sluice.dev/traceparent"
	// WorkloadAnnotation names the sluice Workload a pod was admitted in.
	WorkloadAnnotation = "sluice.dev/workload"
	// WorkloadUIDAnnotation is the uid of that Workload: a pod group's name
	// may be used again once a run finished, and the pods of the earlier
	// run must not count in the later one.
	WorkloadUIDAnnotation = "sluice.dev/workload-uid"
	// ReservationAnnotation is the id of the quota reservation a pod was
	// admitted under. A workload evicted and admitted again runs anew: its
	// pods of the earlier reservation count neither as its pods nor toward
	// its end.
	ReservationAnnotation = "sluice.dev/reservation"
)
