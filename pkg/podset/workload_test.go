package podset

import (
	"errors"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

// testWorkload has pod sets "driver" and "worker"; worker is assigned two
// flavors (cpu on "spot", gpu and memory on "a100").
func testWorkload() *v1alpha1.Workload {
	return &v1alpha1.Workload{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "wl"},
		Spec: v1alpha1.WorkloadSpec{
			QueueName: "q",
			PodSets: []v1alpha1.PodSet{
				{Name: "driver", Count: 1, Template: v1alpha1.PodSetTemplate{Labels: map[string]string{"app": "train"}}},
				{Name: "worker", Count: 4, Template: v1alpha1.PodSetTemplate{
					NodeSelector: map[string]string{"arch": "amd64"},
					Tolerations:  []corev1.Toleration{tolSpotNoOp},
				}},
			},
		},
		Status: v1alpha1.WorkloadStatus{
			Admission: &v1alpha1.Admission{
				ClusterQueue:  "cq",
				ReservationID: "r1",
				PodSetAssignments: []v1alpha1.PodSetAssignment{
					{Name: "worker", Flavors: map[corev1.ResourceName]string{
						corev1.ResourceCPU: "spot", "nvidia.com/gpu": "a100", corev1.ResourceMemory: "a100",
					}},
					{Name: "driver", Flavors: map[corev1.ResourceName]string{corev1.ResourceCPU: "default"}},
				},
			},
			AdmissionChecks: []v1alpha1.AdmissionCheckState{
				{Name: "zeta", State: v1alpha1.CheckStateReady, PodSetUpdates: []v1alpha1.PodSetUpdate{
					{Name: "worker", NodeSelector: map[string]string{"rack": "r7"}, Tolerations: []corev1.Toleration{tolGPU}},
				}},
				{Name: "alpha", State: v1alpha1.CheckStateReady, PodSetUpdates: []v1alpha1.PodSetUpdate{
					{Name: "worker", Labels: map[string]string{"budget": "over"}},
					{Name: "driver", Annotations: map[string]string{"trace/id": "7"}},
				}},
			},
		},
	}
}

func testFlavors() map[string]*v1alpha1.ResourceFlavor {
	return map[string]*v1alpha1.ResourceFlavor{
		"default": flavor("default", nil),
		"spot":    flavor("spot", map[string]string{"lifecycle": "spot"}, tolSpotEq),
		"a100":    flavor("a100", map[string]string{"gpu": "a100", "arch": "amd64"}, tolGPU),
		"unused":  flavor("unused", map[string]string{"arch": "arm64"}),
	}
}

func TestMergeWorkload(t *testing.T) {
	got, err := MergeWorkload(testWorkload(), testFlavors())
	if err != nil {
		t.Fatalf("MergeWorkload() error = %v", err)
	}
	want := []v1alpha1.PodSetInfo{
		{
			Name:        "driver",
			Labels:      map[string]string{"kueue.x-k8s.io/podset": "driver"},
			Annotations: map[string]string{"sluice.dev/workload": "wl", "trace/id": "7"},
		},
		{
			Name:         "worker",
			Labels:       map[string]string{"kueue.x-k8s.io/podset": "worker", "budget": "over"},
			Annotations:  map[string]string{"sluice.dev/workload": "wl"},
			NodeSelector: map[string]string{"gpu": "a100", "lifecycle": "spot", "rack": "r7"},
			// a100 sorts before spot; spot's toleration is already on the
			// pods (empty operator == Equal); zeta's repeats a100's.
			Tolerations: []corev1.Toleration{tolGPU},
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("MergeWorkload() =\n %+v\nwant\n %+v", got, want)
	}
}

func TestMergeWorkloadErrors(t *testing.T) {
	cases := []struct {
		name     string
		mutate   func(*v1alpha1.Workload, map[string]*v1alpha1.ResourceFlavor)
		want     string
		conflict bool
	}{
		{
			name: "update for an unknown pod set",
			mutate: func(wl *v1alpha1.Workload, _ map[string]*v1alpha1.ResourceFlavor) {
				wl.Status.AdmissionChecks[1].PodSetUpdates[1].Name = "ghost"
			},
			want: `merge workload ns/wl: admission check "alpha" has an update for pod set "ghost", which the workload does not have`,
		},
		{
			name:   "no admission",
			mutate: func(wl *v1alpha1.Workload, _ map[string]*v1alpha1.ResourceFlavor) { wl.Status.Admission = nil },
			want:   `merge workload ns/wl: status.admission is not set`,
		},
		{
			name: "pod set without assignment",
			mutate: func(wl *v1alpha1.Workload, _ map[string]*v1alpha1.ResourceFlavor) {
				wl.Status.Admission.PodSetAssignments = wl.Status.Admission.PodSetAssignments[:1]
			},
			want: `merge workload ns/wl: pod set "driver" has no entry in status.admission.podSetAssignments`,
		},
		{
			name: "assignment for an unknown pod set",
			mutate: func(wl *v1alpha1.Workload, _ map[string]*v1alpha1.ResourceFlavor) {
				wl.Status.Admission.PodSetAssignments[1].Name = "ghost"
			},
			want: `merge workload ns/wl: status.admission.podSetAssignments[1]: pod set "ghost" is not in spec.podSets`,
		},
		{
			name:   "unknown flavor",
			mutate: func(_ *v1alpha1.Workload, f map[string]*v1alpha1.ResourceFlavor) { delete(f, "spot") },
			want:   `merge workload ns/wl: pod set "worker" is assigned resource flavor "spot", which is unknown`,
		},
		{
			name: "check conflicts with a flavor",
			mutate: func(wl *v1alpha1.Workload, _ map[string]*v1alpha1.ResourceFlavor) {
				wl.Status.AdmissionChecks[0].PodSetUpdates[0].NodeSelector["gpu"] = "h100"
			},
			want:     `merge workload ns/wl: pod set "worker": in admission check "zeta": conflict for nodeSelector: key=gpu, value1=a100, value2=h100`,
			conflict: true,
		},
		{
			name: "flavor conflicts with the pods",
			mutate: func(_ *v1alpha1.Workload, f map[string]*v1alpha1.ResourceFlavor) {
				f["a100"].Spec.NodeLabels["arch"] = "arm64"
			},
			want:     `merge workload ns/wl: pod set "worker": in resource flavor "a100": conflict for nodeSelector: key=arch, value1=amd64, value2=arm64`,
			conflict: true,
		},
		{
			name: "checks conflict in name order whatever the status order",
			mutate: func(wl *v1alpha1.Workload, _ map[string]*v1alpha1.ResourceFlavor) {
				wl.Status.AdmissionChecks[0].PodSetUpdates[0].Labels = map[string]string{"budget": "under"}
			},
			want:     `merge workload ns/wl: pod set "worker": in admission check "zeta": conflict for labels: key=budget, value1=over, value2=under`,
			conflict: true,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wl, flavors := testWorkload(), testFlavors()
			tc.mutate(wl, flavors)
			infos, err := MergeWorkload(wl, flavors)
			if err == nil || err.Error() != tc.want {
				t.Fatalf("MergeWorkload() = %+v, %v; want error %q", infos, err, tc.want)
			}
			var ce *ConflictError
			if got := errors.As(err, &ce); got != tc.conflict {
				t.Fatalf("errors.As(ConflictError) = %v, want %v", got, tc.conflict)
			}
			if tc.conflict && ce.PodSet != "worker" {
				t.Fatalf("conflict pod set = %q, want worker", ce.PodSet)
			}
		})
	}
}

func TestMergeWorkloadNil(t *testing.T) {
	if _, err := MergeWorkload(nil, nil); err == nil || err.Error() != "merge workload: workload is nil" {
		t.Fatalf("MergeWorkload(nil) error = %v", err)
	}
}
