// Package workload answers questions about a Workload's state (reserved,
// admitted, finished, ...) and converts it between the API types and the
// sluice.v1 and sluice.checks.v1 messages the admitter speaks.
package workload

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

// Key names a workload in the admitter's maps.
func Key(wl *v1alpha1.Workload) types.NamespacedName {
	return types.NamespacedName{Namespace: wl.Namespace, Name: wl.Name}
}

// HasReservation reports whether the workload holds quota.
func HasReservation(wl *v1alpha1.Workload) bool { return wl.Status.Admission != nil }

// IsAdmitted reports whether the workload's Admitted condition is True.
func IsAdmitted(wl *v1alpha1.Workload) bool {
	return meta.IsStatusConditionTrue(wl.Status.Conditions, v1alpha1.WorkloadAdmitted)
}

// IsFinished reports whether the workload's Finished condition is True.
func IsFinished(wl *v1alpha1.Workload) bool {
	return meta.IsStatusConditionTrue(wl.Status.Conditions, v1alpha1.WorkloadFinished)
}

// IsActive reports whether spec.active is unset or true.
func IsActive(wl *v1alpha1.Workload) bool { return wl.Spec.Active == nil || *wl.Spec.Active }

// IsPending reports whether the workload waits for quota: active, not
// finished, no reservation.
func IsPending(wl *v1alpha1.Workload) bool {
	return IsActive(wl) && !IsFinished(wl) && !HasReservation(wl) && !IsDeleting(wl)
}

// IsEvicting reports whether the workload was evicted but still holds its
// quota: its pods have not all stopped yet.
func IsEvicting(wl *v1alpha1.Workload) bool {
	return HasReservation(wl) && meta.IsStatusConditionTrue(wl.Status.Conditions, v1alpha1.WorkloadEvicted)
}

// IsDeleting reports whether the Workload object is being deleted.
func IsDeleting(wl *v1alpha1.Workload) bool { return wl.DeletionTimestamp != nil }

// InCheckPhase reports whether the workload holds quota and waits for its
// admission checks.
func InCheckPhase(wl *v1alpha1.Workload) bool {
	return HasReservation(wl) && !IsAdmitted(wl) && !IsFinished(wl) && !IsEvicting(wl) && !IsDeleting(wl)
}

// Priority is the workload's priority (zero when unset).
func Priority(wl *v1alpha1.Workload) int32 {
	if wl.Spec.Priority == nil {
		return 0
	}
	return *wl.Spec.Priority
}

// ReservationID is the id of the workload's current reservation; empty
// without one.
func ReservationID(wl *v1alpha1.Workload) string {
	if wl.Status.Admission == nil {
		return ""
	}
	return wl.Status.Admission.ReservationID
}

// EvaluationKey is the key a check's provider sees for one reservation of
// a workload: "<uid>/<reservationID>/<check>". The check is part of it so
// that two AdmissionChecks served by one provider never share a key: the
// contract lets a provider key what it holds by the evaluation key alone.
func EvaluationKey(uid types.UID, reservationID, check string) string {
	return string(uid) + "/" + reservationID + "/" + check
}

// ParseEvaluationKey splits an evaluation key made by EvaluationKey. It
// reports false for anything else, such as a key a provider made up: no
// part may be empty, and a check name holds no '/'.
func ParseEvaluationKey(key string) (uid types.UID, reservationID, check string, ok bool) {
	parts := strings.Split(key, "/")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return "", "", "", false
	}
	return types.UID(parts[0]), parts[1], parts[2], true
}

// NewReservationID returns a fresh random reservation id.
func NewReservationID() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("read random reservation id: %v", err))
	}
	return hex.EncodeToString(b[:])
}

// Condition returns the condition of type t, or nil.
func Condition(wl *v1alpha1.Workload, t string) *metav1.Condition {
	return meta.FindStatusCondition(wl.Status.Conditions, t)
}

// SetCondition sets a condition on conds, keeping its transition time when
// the status does not change. It reports whether anything changed.
func SetCondition(conds *[]metav1.Condition, t string, status metav1.ConditionStatus, reason, message string, generation int64) bool {
	return meta.SetStatusCondition(conds, metav1.Condition{
		Type: t, Status: status, Reason: reason, Message: message, ObservedGeneration: generation,
	})
}

// CheckState returns the state entry of the named check, or nil.
func CheckState(wl *v1alpha1.Workload, name string) *v1alpha1.AdmissionCheckState {
	for i := range wl.Status.AdmissionChecks {
		if wl.Status.AdmissionChecks[i].Name == name {
			return &wl.Status.AdmissionChecks[i]
		}
	}
	return nil
}

// Shrink is an informer transform for Workloads: a finished workload
// keeps only what its deletion needs, so the finished workloads a cluster
// keeps around cost the admitter's cache little. The pod templates' labels,
// annotations, node selectors and tolerations, the pod set infos and the
// checks' pod set updates are dropped; nothing reads them once the
// workload finished. Other objects pass through unchanged.
func Shrink(obj any) (any, error) {
	wl, ok := obj.(*v1alpha1.Workload)
	if !ok || !IsFinished(wl) {
		return obj, nil
	}
	for i := range wl.Spec.PodSets {
		t := &wl.Spec.PodSets[i].Template
		t.Labels, t.Annotations, t.NodeSelector, t.Tolerations = nil, nil, nil, nil
	}
	wl.Status.PodSetInfos = nil
	for i := range wl.Status.AdmissionChecks {
		wl.Status.AdmissionChecks[i].PodSetUpdates = nil
	}
	return wl, nil
}
