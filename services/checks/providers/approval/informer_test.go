package approval

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

func workloadMeta(uid string, annotations map[string]string) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
		Namespace: "team-a", Name: "train-1", UID: types.UID(uid), Annotations: annotations,
	}}
}

var (
	approvedMeta   = workloadMeta("u1", map[string]string{Annotation: "alice"})
	unapprovedMeta = workloadMeta("u1", map[string]string{"other": "x"})
)

func TestApprovalHandler(t *testing.T) {
	tests := []struct {
		name  string
		event func(h cache.ResourceEventHandlerFuncs)
		want  bool // whether the workload's approval changed
	}{
		{name: "add approved", event: func(h cache.ResourceEventHandlerFuncs) { h.OnAdd(approvedMeta, false) }, want: true},
		{name: "add unapproved", event: func(h cache.ResourceEventHandlerFuncs) { h.OnAdd(unapprovedMeta, false) }},
		{name: "annotation added", event: func(h cache.ResourceEventHandlerFuncs) { h.OnUpdate(unapprovedMeta, approvedMeta) }, want: true},
		{name: "annotation removed", event: func(h cache.ResourceEventHandlerFuncs) { h.OnUpdate(approvedMeta, unapprovedMeta) }, want: true},
		{name: "approver changed", event: func(h cache.ResourceEventHandlerFuncs) {
			h.OnUpdate(approvedMeta, workloadMeta("u1", map[string]string{Annotation: "bob"}))
		}},
		{name: "other annotation changed", event: func(h cache.ResourceEventHandlerFuncs) {
			h.OnUpdate(unapprovedMeta, workloadMeta("u1", map[string]string{"other": "y"}))
		}},
		{name: "replaced by another object", event: func(h cache.ResourceEventHandlerFuncs) {
			h.OnUpdate(approvedMeta, workloadMeta("u2", map[string]string{Annotation: "alice"}))
		}, want: true},
		{name: "delete approved", event: func(h cache.ResourceEventHandlerFuncs) { h.OnDelete(approvedMeta) }, want: true},
		{name: "delete approved, missed by the watch", event: func(h cache.ResourceEventHandlerFuncs) {
			h.OnDelete(cache.DeletedFinalStateUnknown{Key: "team-a/train-1", Obj: approvedMeta})
		}, want: true},
		{name: "delete unapproved", event: func(h cache.ResourceEventHandlerFuncs) { h.OnDelete(unapprovedMeta) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []Ref
			tt.event(approvalHandler(func(r Ref) { got = append(got, r) }))
			var want []Ref
			if tt.want {
				want = []Ref{trainRef}
			}
			if !slices.Equal(got, want) {
				t.Errorf("changed %v, want %v", got, want)
			}
		})
	}
}

func TestSlim(t *testing.T) {
	full := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
		Namespace: "team-a", Name: "train-1", UID: "u1", ResourceVersion: "7",
		Labels:        map[string]string{"l": "v"},
		Annotations:   map[string]string{Annotation: "alice", "big": "x"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
	}}
	got, err := slim(full)
	if err != nil {
		t.Fatal(err)
	}
	m := got.(*metav1.PartialObjectMetadata)
	want := Workload{UID: "u1", Approved: true, Approver: "alice"}
	if workloadOf(m) != want || m.Namespace != "team-a" || m.Name != "train-1" || m.ResourceVersion != "7" {
		t.Errorf("slim kept %+v, want the name, resource version and %+v", m.ObjectMeta, want)
	}
	if len(m.Annotations) != 1 || m.Labels != nil || m.ManagedFields != nil {
		t.Errorf("slim kept %+v, want only the approval annotation", m.ObjectMeta)
	}
	if got, _ := slim(workloadMeta("u1", nil)); got.(*metav1.PartialObjectMetadata).Annotations != nil {
		t.Errorf("slim of an unannotated object has annotations")
	}
}
