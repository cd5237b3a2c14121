package quota

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-dev/sluice/pkg/api/v1alpha1"
)

// TestFlavorFungibility: a ClusterQueue "a" with two flavors of cpu,
// "first" and "second", in a cohort with "b", which lends what it does
// not use. Whether a workload takes a flavor that needs borrowing or
// preemption, or tries the next one, is the queue's flavorFungibility.
func TestFlavorFungibility(t *testing.T) {
	const (
		mayStop = v1alpha1.MayStopSearch
		tryNext = v1alpha1.TryNextFlavor
	)
	tests := []struct {
		name                  string
		whenBorrow, whenPreem v1alpha1.FlavorFungibilityPolicy // "" leaves flavorFungibility unset
		// used is a's usage of each flavor; bUsed is b's of "first".
		used        map[string]string
		bUsed       string
		preemptible bool // preemption could make room in "first"
		wantFlavor  string
		wantBorrow  bool
		wantPreempt bool
		wantErr     bool
	}{
		{name: "the first flavor, borrowing, by default", used: map[string]string{"first": "2", "second": "0"},
			wantFlavor: "first", wantBorrow: true},
		{name: "the next flavor that fits without borrowing", whenBorrow: tryNext, whenPreem: tryNext,
			used: map[string]string{"first": "2", "second": "0"}, wantFlavor: "second"},
		{name: "back to borrowing when no later flavor fits", whenBorrow: tryNext, whenPreem: tryNext,
			used: map[string]string{"first": "2", "second": "2"}, wantFlavor: "first", wantBorrow: true},
		{name: "a later flavor that fits before preempting, by default", used: map[string]string{"first": "2", "second": "0"},
			bUsed: "2", preemptible: true, wantFlavor: "second"},
		{name: "preempting in the first flavor with MayStopSearch", whenBorrow: mayStop, whenPreem: mayStop,
			used: map[string]string{"first": "2", "second": "0"}, bUsed: "2", preemptible: true, wantFlavor: "first", wantBorrow: true, wantPreempt: true},
		{name: "back to preempting when no later flavor fits", used: map[string]string{"first": "2", "second": "2"},
			bUsed: "2", preemptible: true, wantFlavor: "first", wantBorrow: true, wantPreempt: true},
		{name: "no flavor when preemption cannot help", used: map[string]string{"first": "2", "second": "2"},
			bUsed: "2", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cq := clusterQueue(group([]corev1.ResourceName{"cpu"}, flavorQuota("first", "cpu", "2"), flavorQuota("second", "cpu", "2")))
			cq.Name, cq.Spec.CohortName = "a", "org"
			if tt.whenBorrow != "" {
				cq.Spec.FlavorFungibility = &v1alpha1.FlavorFungibility{WhenCanBorrow: tt.whenBorrow, WhenCanPreempt: tt.whenPreem}
			}
			lender := &v1alpha1.ClusterQueue{ObjectMeta: metav1.ObjectMeta{Name: "b"}, Spec: v1alpha1.ClusterQueueSpec{
				CohortName: "org", ResourceGroups: []v1alpha1.ResourceGroup{group([]corev1.ResourceName{"cpu"}, flavorQuota("first", "cpu", "2"))},
			}}
			tree := NewTree()
			for _, q := range []*v1alpha1.ClusterQueue{cq, lender} {
				tree.SetClusterQueue(q.Name, q.Spec.CohortName, QuotasOf(q.Spec.ResourceGroups))
			}
			for flavor, used := range tt.used {
				tree.AddUsage("a", Amounts(Usage{flavor: rl("cpu", used)}))
			}
			if tt.bUsed != "" {
				tree.AddUsage("b", Amounts(Usage{"first": rl("cpu", tt.bUsed)}))
			}
			var asked []map[FR]int64
			preemptible := func(request map[FR]int64) bool {
				asked = append(asked, request)
				return tt.preemptible && request[FR{Flavor: "first", Resource: "cpu"}] > 0
			}
			asg, err := AssignWith(cq, []v1alpha1.PodSet{podSet("main", 1, rl("cpu", "1"))}, flavorObjects("first", "second"), tree, preemptible)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("assigned %+v, want no flavor", asg.PodSets)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := asg.PodSets[0].Flavors["cpu"]; got != tt.wantFlavor || asg.Borrowing != tt.wantBorrow || asg.Preempting != tt.wantPreempt {
				t.Errorf("flavor %s, borrowing %v, preempting %v; want %s, %v, %v",
					got, asg.Borrowing, asg.Preempting, tt.wantFlavor, tt.wantBorrow, tt.wantPreempt)
			}
			for _, request := range asked {
				if request[FR{Flavor: "first", Resource: "cpu"}] != 1000 && request[FR{Flavor: "second", Resource: "cpu"}] != 1000 {
					t.Errorf("preemption was asked about %v, want the pod set's 1 cpu in one flavor", request)
				}
			}
		})
	}
}
