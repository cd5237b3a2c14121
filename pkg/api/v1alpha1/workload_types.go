package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// WorkloadSpec is a unit of admission: the pod sets that must start together.
// +kubebuilder:validation:XValidation:rule="has(self.priorityClassRef) == has(oldSelf.priorityClassRef) && (!has(self.priorityClassRef) || self.priorityClassRef == oldSelf.priorityClassRef)",message="spec.priorityClassRef is immutable: it comes from the pods, whose class cannot change"
// +kubebuilder:validation:XValidation:rule="has(self.maximumExecutionTimeSeconds) == has(oldSelf.maximumExecutionTimeSeconds) && (!has(self.maximumExecutionTimeSeconds) || self.maximumExecutionTimeSeconds == oldSelf.maximumExecutionTimeSeconds)",message="spec.maximumExecutionTimeSeconds is immutable: it comes from the pods, whose label cannot change"
type WorkloadSpec struct {
	// podSets are the groups of equivalent pods, one per role. They are
	// immutable: quota is counted from them, and a change under an
	// admission would make the queue's usage say less than what runs.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=18
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="podSets are immutable: the workload's quota is counted from them"
	PodSets []PodSet `json:"podSets"`

	// queueName is the LocalQueue, in the Workload's namespace, it waits in.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	QueueName string `json:"queueName"`

	// priorityClassRef names the class the priority came from: the
	// WorkloadPriorityClass of the pods' kueue.x-k8s.io/priority-class
	// label, or else the PriorityClass of their spec.priorityClassName.
	// Unset when the pods name neither. It never changes: sluice reads the
	// class's value once, when the Workload is created.
	// +optional
	PriorityClassRef *PriorityClassRef `json:"priorityClassRef,omitempty"`

	// priority orders workloads in a queue: higher first, then older first.
	// It is the value of the class priorityClassRef names, as it was when
	// the Workload was created, or the pods' spec.priority.
	// +optional
	Priority *int32 `json:"priority,omitempty"`

	// maximumExecutionTimeSeconds caps how long the workload may run, from
	// the pods' kueue.x-k8s.io/max-exec-time-seconds label. It counts the
	// time spent admitted, across evictions and requeues; past it the
	// workload is evicted and deactivated (reason
	// MaximumExecutionTimeExceeded).
	// +optional
	// +kubebuilder:validation:Minimum=1
	MaximumExecutionTimeSeconds *int32 `json:"maximumExecutionTimeSeconds,omitempty"`

	// active false takes the workload out of its queue and evicts it if it
	// was admitted. Defaults to true.
	// +optional
	// +kubebuilder:default=true
	Active *bool `json:"active,omitempty"`
}

// Priority class kinds a Workload's priorityClassRef may name.
const (
	// WorkloadPriorityClassKind is sluice's own class, which orders
	// workloads without touching the pods' scheduling priority.
	WorkloadPriorityClassKind = "WorkloadPriorityClass"
	// PodPriorityClassKind is Kubernetes' PriorityClass
	// (scheduling.k8s.io), which is also the pods' own priority.
	PodPriorityClassKind = "PriorityClass"
	// PodPriorityClassGroup is the API group of PodPriorityClassKind.
	PodPriorityClassGroup = "scheduling.k8s.io"
)

// PriorityClassRef names the class a workload's priority came from.
// +kubebuilder:validation:XValidation:rule="(self.group == 'sluice.dev' && self.kind == 'WorkloadPriorityClass') || (self.group == 'scheduling.k8s.io' && self.kind == 'PriorityClass')",message="priorityClassRef: group and kind must be sluice.dev and WorkloadPriorityClass, or scheduling.k8s.io and PriorityClass"
type PriorityClassRef struct {
	// group of the class: sluice.dev or scheduling.k8s.io.
	// +kubebuilder:validation:Enum=sluice.dev;scheduling.k8s.io
	Group string `json:"group"`
	// kind of the class: WorkloadPriorityClass or PriorityClass.
	// +kubebuilder:validation:Enum=WorkloadPriorityClass;PriorityClass
	Kind string `json:"kind"`
	// name of the class.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`
}

// PodSet is a group of pods with the same scheduling shape (role hash).
type PodSet struct {
	// name of the pod set, unique in the workload.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// count is the number of pods in the set.
	// +kubebuilder:validation:Minimum=1
	Count int32 `json:"count"`

	// template is what admission needs to know of the set's pods.
	Template PodSetTemplate `json:"template"`
}

// PodSetTemplate is the scheduling-relevant part of a pod set's pods: what
// quota is counted from and what admission checks' updates must not
// contradict.
type PodSetTemplate struct {
	// roleHash is the role hash (kueue.x-k8s.io/role-hash) of the pod the
	// set was built from, as it was then: the set's pods must hash the same
	// to be ungated in it.
	// +optional
	RoleHash string `json:"roleHash,omitempty"`

	// labels of the first pod of the set.
	// +optional
	Labels map[string]string `json:"labels,omitempty"`

	// annotations of the first pod of the set.
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`

	// requests is what one pod requests: the sum over its containers, or
	// the largest init container if that is more, plus overhead.
	// +optional
	Requests corev1.ResourceList `json:"requests,omitempty"`

	// nodeSelector the pods already carry.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// tolerations the pods already carry.
	// +optional
	// +listType=atomic
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
}

// WorkloadStatus is where a workload stands.
type WorkloadStatus struct {
	// conditions: QuotaReserved, Admitted, Finished, Evicted, PodsReady,
	// WaitingForReplacementPods.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// admission is the quota reserved for the workload.
	// +optional
	Admission *Admission `json:"admission,omitempty"`

	// admissionChecks are the states of the checks the ClusterQueue asks for.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	AdmissionChecks []AdmissionCheckState `json:"admissionChecks,omitempty"`

	// podSetInfos are what each pod set's pods are started with: the
	// flavors' node labels and tolerations merged with every check's
	// updates. Written together with Admitted=True.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=18
	PodSetInfos []PodSetInfo `json:"podSetInfos,omitempty"`

	// accumulatedPastExecutionTimeSeconds is the time the workload spent
	// admitted before its current admission: it grows each time Admitted
	// turns False, and counts against maximumExecutionTimeSeconds.
	// +optional
	// +kubebuilder:validation:Minimum=0
	AccumulatedPastExecutionTimeSeconds *int32 `json:"accumulatedPastExecutionTimeSeconds,omitempty"`

	// requeueState tracks requeues after an eviction.
	// +optional
	RequeueState *RequeueState `json:"requeueState,omitempty"`

	// reclaimablePods are pods that finished and whose quota is released
	// while the rest of the workload runs.
	// +optional
	// +listType=map
	// +listMapKey=name
	ReclaimablePods []ReclaimablePod `json:"reclaimablePods,omitempty"`

	// pendingReleases are the Release calls owed to admission-check
	// providers for reservations the workload gave up. They are written in
	// the same status write that gives the reservation up, so a crash never
	// loses one; the admitter calls Release until the provider acknowledges
	// it, and drops acknowledged entries with its next write of the status.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +listMapKey=reservationID
	// +kubebuilder:validation:MaxItems=64
	PendingReleases []PendingRelease `json:"pendingReleases,omitempty"`
}

// ReleaseReason says why a reservation was given up.
// +kubebuilder:validation:Enum=Finished;Evicted;Deleted
type ReleaseReason string

const (
	// ReleaseFinished: the workload ended.
	ReleaseFinished ReleaseReason = "Finished"
	// ReleaseEvicted: the workload lost its reservation and queues again.
	ReleaseEvicted ReleaseReason = "Evicted"
	// ReleaseDeleted: the Workload was deleted.
	ReleaseDeleted ReleaseReason = "Deleted"
)

// PendingRelease is a Release owed to one admission check's provider.
type PendingRelease struct {
	// name of the AdmissionCheck.
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// reservationID of the reservation released; the provider sees the
	// evaluation key "<workload uid>/<reservationID>/<check name>".
	// +kubebuilder:validation:MaxLength=64
	ReservationID string `json:"reservationID"`
	// reason the reservation was given up.
	Reason ReleaseReason `json:"reason"`
}

// Admission is a quota reservation.
type Admission struct {
	// clusterQueue the quota is reserved in.
	ClusterQueue string `json:"clusterQueue"`

	// reservationID tells this reservation from earlier ones of the same
	// workload; admission checks answer per reservation.
	ReservationID string `json:"reservationID"`

	// podSetAssignments are the flavors and quota per pod set.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=18
	PodSetAssignments []PodSetAssignment `json:"podSetAssignments"`
}

// PodSetAssignment is the flavor and quota assigned to one pod set.
type PodSetAssignment struct {
	// name of the pod set.
	Name string `json:"name"`
	// flavors assigned, per resource.
	// +optional
	Flavors map[corev1.ResourceName]string `json:"flavors,omitempty"`
	// resourceUsage is the quota reserved for the whole set.
	// +optional
	ResourceUsage corev1.ResourceList `json:"resourceUsage,omitempty"`
	// count of pods the quota is reserved for.
	// +optional
	Count *int32 `json:"count,omitempty"`
	// borrowed is the part of resourceUsage that was beyond the
	// ClusterQueue's nominal quota when the quota was reserved: taken from
	// its cohort, in the flavor flavors names for the resource.
	// +optional
	Borrowed corev1.ResourceList `json:"borrowed,omitempty"`
}

// CheckState is the answer of an admission check.
// +kubebuilder:validation:Enum=Pending;Ready;Retry;Rejected
type CheckState string

const (
	// CheckStatePending means the check has not decided yet.
	CheckStatePending CheckState = "Pending"
	// CheckStateReady means the check lets the workload start.
	CheckStateReady CheckState = "Ready"
	// CheckStateRetry means the reservation must be released and the
	// workload tried again later.
	CheckStateRetry CheckState = "Retry"
	// CheckStateRejected means the workload can never pass.
	CheckStateRejected CheckState = "Rejected"
)

// AdmissionCheckState is one check's answer for the current reservation.
type AdmissionCheckState struct {
	// name of the AdmissionCheck.
	Name string `json:"name"`
	// state of the check.
	State CheckState `json:"state"`
	// lastTransitionTime is when the state last changed.
	LastTransitionTime metav1.Time `json:"lastTransitionTime"`
	// reason is the provider's machine-readable reason.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Reason string `json:"reason,omitempty"`
	// message is the provider's explanation, for people.
	// +optional
	// +kubebuilder:validation:MaxLength=32768
	Message string `json:"message,omitempty"`
	// requeueAfterSeconds is how long to wait before a Retry is tried again.
	// +optional
	RequeueAfterSeconds *int32 `json:"requeueAfterSeconds,omitempty"`
	// retryCount counts the Retry answers so far.
	// +optional
	RetryCount *int32 `json:"retryCount,omitempty"`
	// podSetUpdates the check asks for, per pod set.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=18
	PodSetUpdates []PodSetUpdate `json:"podSetUpdates,omitempty"`
}

// PodSetUpdate is what one check adds to one pod set's pods.
type PodSetUpdate struct {
	// name of the pod set.
	Name string `json:"name"`
	// labels to add.
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
	// annotations to add.
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
	// nodeSelector entries to add.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// tolerations to add.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
}

// PodSetInfo is everything one pod set's pods are ungated with.
type PodSetInfo struct {
	// name of the pod set.
	Name string `json:"name"`
	// labels to set.
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
	// annotations to set.
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
	// nodeSelector entries to set.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// tolerations to add.
	// +optional
	// +listType=atomic
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
}

// RequeueState tracks requeues after evictions.
type RequeueState struct {
	// count of requeues so far.
	// +optional
	Count *int32 `json:"count,omitempty"`
	// requeueAt is when the workload may be queued again.
	// +optional
	RequeueAt *metav1.Time `json:"requeueAt,omitempty"`
}

// ReclaimablePod counts the finished pods of one pod set.
type ReclaimablePod struct {
	// name of the pod set.
	Name string `json:"name"`
	// count of pods that finished.
	// +kubebuilder:validation:Minimum=0
	Count int32 `json:"count"`
}

// Workload condition types.
const (
	// WorkloadQuotaReserved is True while the workload holds quota. While
	// False its reason and message say why the workload waits.
	WorkloadQuotaReserved = "QuotaReserved"
	// WorkloadAdmitted is True once quota is reserved and every admission
	// check is Ready.
	WorkloadAdmitted = "Admitted"
	// WorkloadFinished is True once the workload ended; its reason says how.
	WorkloadFinished = "Finished"
	// WorkloadEvicted is True when the workload lost its admission. While
	// status.admission is still set the eviction is in progress: the quota
	// stays reserved until the workload's pods have stopped.
	WorkloadEvicted = "Evicted"
	// WorkloadWaitingForReplacementPods is True while a group's failed pods
	// have not all been replaced, or, after an eviction or deactivation
	// deleted them, while its pods have not come back; its message says
	// which are missing. A workload without quota is not queued meanwhile.
	// A group that holds quota with no pod at all has reason NoPods, and
	// its lastTransitionTime (set anew whenever the reason becomes NoPods)
	// opens the replacement window of its ClusterQueue's
	// podGroupReplacementWindow.
	WorkloadWaitingForReplacementPods = "WaitingForReplacementPods"
	// WorkloadPodsReady is True once every pod of an admission with a
	// start-up deadline started (scheduled or ready, by the ClusterQueue's
	// waitForPodsReady.condition); such a workload is not evicted for the
	// deadline. It is removed when the admission ends.
	WorkloadPodsReady = "PodsReady"
)

// PodGroupLabel is on the Workload of a pod group, with the group's name.
// Such a Workload has no ownerReferences: sluice deletes it once the
// group has no pods and waits for none.
const PodGroupLabel = "sluice.dev/pod-group"

// ResourceInUseFinalizer is on every Workload the admitter creates. It keeps
// a deleted Workload until its pods are gone and its checks released, so a
// deletion can never be lost or undone by a resubmission.
const ResourceInUseFinalizer = "sluice.dev/resource-in-use"

// Workload condition reasons.
const (
	// ReasonPending: waiting for quota; the message says what is missing.
	ReasonPending = "Pending"
	// ReasonQuotaReserved: quota is held.
	ReasonQuotaReserved = "QuotaReserved"
	// ReasonWaitingForChecks: quota is held and checks are not all Ready.
	ReasonWaitingForChecks = "WaitingForAdmissionChecks"
	// ReasonAdmitted: every check is Ready.
	ReasonAdmitted = "Admitted"
	// ReasonPodSetUpdateConflict: checks' updates contradict each other,
	// a flavor, or the pods; the message names the check and the key.
	ReasonPodSetUpdateConflict = "PodSetUpdateConflict"
	// ReasonSucceeded: every pod succeeded.
	ReasonSucceeded = "Succeeded"
	// ReasonFailed: the workload ended with failed pods.
	ReasonFailed = "Failed"
	// ReasonPodsMissing: failed pods of a group wait for replacements.
	ReasonPodsMissing = "PodsMissing"
	// ReasonAllPodsPresent: every failed pod of a group was replaced.
	ReasonAllPodsPresent = "AllPodsPresent"
	// ReasonNoPods: every pod of the group is gone. An evicted or
	// deactivated group waits for its pods to be created again; a group
	// that holds quota waits for them until its replacement window ends,
	// and then its Workload is deleted.
	ReasonNoPods = "NoPods"
	// ReasonAdmissionCheck: evicted because a check answered Retry or
	// Rejected.
	ReasonAdmissionCheck = "AdmissionCheck"
	// ReasonInactive: evicted because spec.active was set to false.
	ReasonInactive = "Inactive"
	// ReasonQueueChanged: evicted because its pods moved to another
	// LocalQueue.
	ReasonQueueChanged = "QueueChanged"
	// ReasonEvicting: quota is held until the evicted pods stop.
	ReasonEvicting = "EvictionInProgress"
	// ReasonPodsReadyTimeout: evicted because its pods did not all start
	// within the ClusterQueue's waitForPodsReady.timeout.
	ReasonPodsReadyTimeout = "PodsReadyTimeout"
	// ReasonRequeuingLimitExceeded: deactivated because it missed its
	// start-up deadline more often than backoffLimitCount allows.
	ReasonRequeuingLimitExceeded = "RequeuingLimitExceeded"
	// ReasonPodsStarted: every pod of the admission started.
	ReasonPodsStarted = "PodsStarted"
	// ReasonClusterQueueStopped: evicted because its ClusterQueue drains
	// (stopPolicy HoldAndDrain).
	ReasonClusterQueueStopped = "ClusterQueueStopped"
	// ReasonLocalQueueStopped: evicted because its LocalQueue drains
	// (stopPolicy HoldAndDrain).
	ReasonLocalQueueStopped = "LocalQueueStopped"
	// ReasonPreempted: evicted to make room for a workload the
	// ClusterQueue's preemption policy puts first; the message names it
	// and the policy.
	ReasonPreempted = "Preempted"
	// ReasonMaximumExecutionTimeExceeded: evicted and deactivated because
	// it ran, admitted, for longer than maximumExecutionTimeSeconds.
	ReasonMaximumExecutionTimeExceeded = "MaximumExecutionTimeExceeded"
)

// +genclient
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName={wl,swl},categories=sluice
// +kubebuilder:printcolumn:name="Queue",type=string,JSONPath=`.spec.queueName`
// +kubebuilder:printcolumn:name="Reserved in",type=string,JSONPath=`.status.admission.clusterQueue`
// +kubebuilder:printcolumn:name="Admitted",type=string,JSONPath=`.status.conditions[?(@.type=="Admitted")].status`
// +kubebuilder:printcolumn:name="Finished",type=string,JSONPath=`.status.conditions[?(@.type=="Finished")].reason`
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.conditions[?(@.type=="QuotaReserved")].message`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// Workload is a unit of admission: a single pod or a group of pods that is
// queued, reserved quota, checked and admitted as one.
type Workload struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is what the workload needs.
	Spec WorkloadSpec `json:"spec"`
	// status is where it stands, written by the admitter.
	// +optional
	Status WorkloadStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// WorkloadList is a list of Workloads.
type WorkloadList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Workload `json:"items"`
}
