package workload

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	sluicev1 "github.com/sluice-dev/sluice/gen/sluice/v1"
	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
	"github.com/sluice-dev/sluice/pkg/podset"
)

func validProto() *sluicev1.Workload {
	return &sluicev1.Workload{
		Ref:       &sluicev1.WorkloadRef{Namespace: "ns", Name: "pod-a-12345"},
		QueueName: "lq",
		Priority:  5,
		PodSets: []*sluicev1.PodSet{{
			Name: "main", Count: 2, RoleHash: "h",
			Requests:    map[string]string{"cpu": "500m", "memory": "1Gi"},
			Tolerations: []*sluicev1.Toleration{{Key: "k", Operator: "Exists"}},
		}},
		Owners: []*sluicev1.OwnerReference{{Name: "a", Uid: "u1", Controller: true}},
	}
}

// fromMutatedProto converts validProto changed by mutate (if not nil) and
// checks FromProto's error: it must contain wantErr, or be nil when
// wantErr is empty. It returns the Workload, or nil once the wanted error
// was seen, as the tables of FromProto cases share this.
func fromMutatedProto(t *testing.T, mutate func(*sluicev1.Workload), wantErr string) *v1alpha1.Workload {
	t.Helper()
	p := validProto()
	if mutate != nil {
		mutate(p)
	}
	wl, err := FromProto(p)
	if wantErr != "" {
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Fatalf("err = %v, want it to contain %q", err, wantErr)
		}
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return wl
}

func TestFromProto(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*sluicev1.Workload)
		wantErr string
	}{
		{name: "valid"},
		{name: "bad namespace", mutate: func(w *sluicev1.Workload) { w.Ref.Namespace = "Bad_NS" }, wantErr: "workload.ref.namespace"},
		{name: "no name", mutate: func(w *sluicev1.Workload) { w.Ref.Name = "" }, wantErr: "workload.ref.name"},
		{name: "no queue", mutate: func(w *sluicev1.Workload) { w.QueueName = "" }, wantErr: "workload.queue_name"},
		{name: "no pod sets", mutate: func(w *sluicev1.Workload) { w.PodSets = nil }, wantErr: "workload.pod_sets: must have between 1 and 18"},
		{name: "zero count", mutate: func(w *sluicev1.Workload) { w.PodSets[0].Count = 0 }, wantErr: "workload.pod_sets[0].count"},
		{name: "bad quantity", mutate: func(w *sluicev1.Workload) { w.PodSets[0].Requests["cpu"] = "x" }, wantErr: `workload.pod_sets[0].requests["cpu"]`},
		{name: "negative quantity", mutate: func(w *sluicev1.Workload) { w.PodSets[0].Requests["cpu"] = "-1" }, wantErr: "must not be negative"},
		{name: "duplicate pod set", mutate: func(w *sluicev1.Workload) { w.PodSets = append(w.PodSets, w.PodSets[0]) }, wantErr: "must be unique"},
		{name: "owner without uid", mutate: func(w *sluicev1.Workload) { w.Owners[0].Uid = "" }, wantErr: "workload.owners[0]"},
		{name: "pod group not a label value", mutate: func(w *sluicev1.Workload) { w.Owners, w.PodGroup = nil, "a/b" }, wantErr: "workload.pod_group"},
		{name: "pod group with owners", mutate: func(w *sluicev1.Workload) { w.PodGroup = "g" }, wantErr: "workload.owners: must be empty"},
		{name: "just under the size limit", mutate: func(w *sluicev1.Workload) {
			w.PodSets[0].Annotations = map[string]string{"big": strings.Repeat("x", MaxBytes-2048)}
		}},
		{name: "over the size limit", mutate: func(w *sluicev1.Workload) {
			second := proto.Clone(w.PodSets[0]).(*sluicev1.PodSet)
			second.Name = "worker"
			second.Annotations = map[string]string{"big": strings.Repeat("x", MaxBytes/2)}
			w.PodSets[0].Annotations = map[string]string{"big": strings.Repeat("x", MaxBytes/2-10)}
			w.PodSets = append(w.PodSets, second)
		}, wantErr: `workload.pod_sets: the Workload would be`},
		{name: "over the size limit names the largest pod set", mutate: func(w *sluicev1.Workload) {
			w.PodSets[0].Annotations = map[string]string{"big": strings.Repeat("x", MaxBytes)}
		}, wantErr: fmt.Sprintf(`pod set "main" carries %d bytes`, MaxBytes+3)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wl := fromMutatedProto(t, tc.mutate, tc.wantErr)
			if wl == nil {
				return
			}
			cpu := wl.Spec.PodSets[0].Template.Requests[corev1.ResourceCPU]
			if wl.Namespace != "ns" || *wl.Spec.Priority != 5 || cpu.String() != "500m" ||
				wl.Spec.PodSets[0].Template.Tolerations[0].Operator != corev1.TolerationOpExists {
				t.Fatalf("workload = %+v", wl)
			}
			o := wl.OwnerReferences[0]
			if o.APIVersion != "v1" || o.Kind != "Pod" || !*o.Controller || *o.BlockOwnerDeletion {
				t.Fatalf("owner = %+v", o)
			}
		})
	}
}

func TestFromProtoPriorityClassAndRunTime(t *testing.T) {
	tests := []struct {
		name      string
		mutate    func(*sluicev1.Workload)
		wantRef   *v1alpha1.PriorityClassRef
		wantClass string // WorkloadPriorityClass(wl)
		wantMax   *int32
		wantErr   string
	}{
		{name: "no class"},
		{
			name:    "the pods' PriorityClass",
			mutate:  func(w *sluicev1.Workload) { w.PriorityClassName = "high" },
			wantRef: &v1alpha1.PriorityClassRef{Group: "scheduling.k8s.io", Kind: "PriorityClass", Name: "high"},
		},
		{
			name:      "a WorkloadPriorityClass wins over the PriorityClass",
			mutate:    func(w *sluicev1.Workload) { w.PriorityClassName, w.WorkloadPriorityClass = "high", "urgent" },
			wantRef:   &v1alpha1.PriorityClassRef{Group: "sluice.dev", Kind: "WorkloadPriorityClass", Name: "urgent"},
			wantClass: "urgent",
		},
		{name: "bad class name", mutate: func(w *sluicev1.Workload) { w.WorkloadPriorityClass = "Urgent!" }, wantErr: "workload.workload_priority_class"},
		{name: "a run-time cap", mutate: func(w *sluicev1.Workload) { w.MaximumExecutionTimeSeconds = ptr.To[int32](60) }, wantMax: ptr.To[int32](60)},
		{name: "a zero cap", mutate: func(w *sluicev1.Workload) { w.MaximumExecutionTimeSeconds = ptr.To[int32](0) }, wantErr: "workload.maximum_execution_time_seconds 0: must be at least 1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wl := fromMutatedProto(t, tc.mutate, tc.wantErr)
			if wl == nil {
				return
			}
			if !equality.Semantic.DeepEqual(wl.Spec.PriorityClassRef, tc.wantRef) {
				t.Errorf("priorityClassRef = %+v, want %+v", wl.Spec.PriorityClassRef, tc.wantRef)
			}
			if got := WorkloadPriorityClass(wl); got != tc.wantClass {
				t.Errorf("WorkloadPriorityClass = %q, want %q", got, tc.wantClass)
			}
			if !equality.Semantic.DeepEqual(wl.Spec.MaximumExecutionTimeSeconds, tc.wantMax) {
				t.Errorf("maximumExecutionTimeSeconds = %v, want %v", wl.Spec.MaximumExecutionTimeSeconds, tc.wantMax)
			}
			checks := ToChecks(wl, nil)
			if ref := tc.wantRef; ref != nil && (checks.GetPriorityClassName() != ref.Name || checks.GetPriorityClassKind() != ref.Kind) {
				t.Errorf("checks' view names class %q of kind %q, want %q of kind %q",
					checks.GetPriorityClassName(), checks.GetPriorityClassKind(), ref.Name, ref.Kind)
			}
			if checks.MaximumExecutionTimeSeconds != nil != (tc.wantMax != nil) {
				t.Errorf("checks' view has cap %v, want %v", checks.MaximumExecutionTimeSeconds, tc.wantMax)
			}
		})
	}
}

func TestFromProtoLabelsPodGroups(t *testing.T) {
	p := validProto()
	p.Owners, p.PodGroup = nil, "trainer"
	wl, err := FromProto(p)
	if err != nil {
		t.Fatal(err)
	}
	if PodGroup(wl) != "trainer" || len(wl.OwnerReferences) != 0 {
		t.Fatalf("labels = %v, owners = %v; want the pod-group label and no owners", wl.Labels, wl.OwnerReferences)
	}
	single, err := FromProto(validProto())
	if err != nil {
		t.Fatal(err)
	}
	if PodGroup(single) != "" {
		t.Fatalf("a single pod's workload has pod group %q", PodGroup(single))
	}
}

func TestTolerationRoundTrip(t *testing.T) {
	secs := int64(30)
	for _, tol := range []corev1.Toleration{
		{Key: "a", Operator: corev1.TolerationOpEqual, Value: "b", Effect: corev1.TaintEffectNoSchedule},
		{Key: "a", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &secs},
		{Key: "a", Operator: corev1.TolerationOpEqual, Value: "b", Effect: corev1.TaintEffectPreferNoSchedule},
	} {
		got := podset.TolerationFromChecks(TolerationToChecks(tol))
		if got.Key != tol.Key || got.Operator != tol.Operator || got.Value != tol.Value || got.Effect != tol.Effect ||
			(tol.TolerationSeconds != nil && *got.TolerationSeconds != *tol.TolerationSeconds) {
			t.Errorf("round trip of %+v gave %+v", tol, got)
		}
	}
}

func TestToChecksAddsFlavorLabels(t *testing.T) {
	wl, err := FromProto(validProto())
	if err != nil {
		t.Fatal(err)
	}
	wl.Status.Admission = &v1alpha1.Admission{ClusterQueue: "cq", ReservationID: "r", PodSetAssignments: []v1alpha1.PodSetAssignment{{
		Name: "main", Flavors: map[corev1.ResourceName]string{"cpu": "f", "memory": "f"},
	}}}
	flavor := &v1alpha1.ResourceFlavor{Spec: v1alpha1.ResourceFlavorSpec{
		NodeLabels:  map[string]string{"pool": "x"},
		Tolerations: []corev1.Toleration{{Key: "k", Operator: corev1.TolerationOpExists}, {Key: "spot", Operator: corev1.TolerationOpExists}},
	}}
	got := ToChecks(wl, map[string]*v1alpha1.ResourceFlavor{"f": flavor})
	ps := got.GetPodSets()[0]
	if got.GetClusterQueue() != "cq" || ps.GetFlavors()["cpu"] != "f" || ps.GetNodeSelector()["pool"] != "x" || ps.GetRequests()["memory"] != "1Gi" {
		t.Fatalf("ToChecks = %v", got)
	}
	if len(ps.GetTolerations()) != 2 {
		t.Fatalf("tolerations %v, want the pods' one plus the flavor's new one", ps.GetTolerations())
	}
	if len(ps.GetBorrowed()) != 0 {
		t.Fatalf("borrowed = %v for an assignment that borrows nothing", ps.GetBorrowed())
	}
}

func TestToChecksCarriesBorrowed(t *testing.T) {
	wl, err := FromProto(validProto())
	if err != nil {
		t.Fatal(err)
	}
	wl.Status.Admission = &v1alpha1.Admission{ClusterQueue: "cq", ReservationID: "r", PodSetAssignments: []v1alpha1.PodSetAssignment{{
		Name: "main", Flavors: map[corev1.ResourceName]string{"cpu": "f", "memory": "f"},
		Borrowed: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1500m")},
	}}}
	ps := ToChecks(wl, nil).GetPodSets()[0]
	if got := ps.GetBorrowed(); len(got) != 1 || got["cpu"] != "1500m" {
		t.Fatalf("borrowed = %v, want cpu 1500m", got)
	}
}

// TestFromProtoSizeBound checks the bound that lets FromProto skip
// encoding small Workloads: for the shapes that expand most from proto to
// JSON (many tiny owners and pod sets, strings that JSON escapes), the
// JSON stays under 16 times the proto plus the envelope.
func TestFromProtoSizeBound(t *testing.T) {
	shapes := map[string]func(w *sluicev1.Workload){
		"many tiny owners": func(w *sluicev1.Workload) {
			w.Owners = nil
			for i := range 500 {
				w.Owners = append(w.Owners, &sluicev1.OwnerReference{Name: fmt.Sprint(i % 10), Uid: "u", Controller: true})
			}
		},
		"tiny pod sets": func(w *sluicev1.Workload) {
			w.PodSets = nil
			for i := range maxPodSets {
				w.PodSets = append(w.PodSets, &sluicev1.PodSet{Name: string(rune('a' + i)), Count: 1})
			}
		},
		"escaped annotations": func(w *sluicev1.Workload) {
			w.PodSets[0].Annotations = map[string]string{"k": strings.Repeat("<\x01", 4096)}
		},
	}
	for name, mutate := range shapes {
		t.Run(name, func(t *testing.T) {
			p := validProto()
			mutate(p)
			wl, err := FromProto(p)
			if err != nil {
				t.Fatal(err)
			}
			data, err := json.Marshal(wl)
			if err != nil {
				t.Fatal(err)
			}
			if limit := 16*proto.Size(p) + jsonEnvelopeBytes; len(data) >= limit {
				t.Errorf("JSON %d bytes from a proto of %d: not under 16 times plus the envelope (%d)", len(data), proto.Size(p), limit)
			}
		})
	}
}
