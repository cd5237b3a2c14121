package workload

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/sluice-dev/sluice/pkg/podkeys"
	"github.com/sluice-dev/sluice/pkg/rolehash"
)

// TestForDeclaredRoleHashes: the set of the driver's own role carries the
// driver's role hash; a set shaped by a template carries the hash of the
// template's spec, even when the template names another one: pods that
// hash like their set need not ask to join it, so a hash of the user's
// choosing would let pods of any shape pass for the role.
func TestForDeclaredRoleHashes(t *testing.T) {
	driver := pod("driver", func(p *corev1.Pod) {
		p.Labels[podkeys.PodGroupNameLabel] = "spark"
		p.Labels[podkeys.PodGroupRoleLabel] = "driver"
		p.Annotations[podkeys.PodGroupSetsAnnotation] = `[{"name":"driver","count":1},` +
			`{"name":"executor","count":2,"template":{"metadata":{"annotations":{"kueue.x-k8s.io/role-hash":"0badc0de"}},` +
			`"spec":{"containers":[{"name":"e","resources":{"requests":{"cpu":"100m"}}}]}}}]`
	})
	wl, err := ForDeclared("spark", driver)
	if err != nil {
		t.Fatal(err)
	}
	template := corev1.PodSpec{Containers: []corev1.Container{{Name: "e", Resources: corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}}}}
	want, err := rolehash.Compute(&template)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, ps := range wl.GetPodSets() {
		got[ps.GetName()] = ps.GetRoleHash()
		if ps.GetName() == "executor" && ps.GetAnnotations()[podkeys.RoleHashAnnotation] != "" {
			t.Errorf("executor pod set keeps the template's role hash annotation: %v", ps.GetAnnotations())
		}
	}
	if got["driver"] != "abcd1234" || got["executor"] != want {
		t.Errorf("role hashes %v, want driver abcd1234 (its annotation) and executor %s (its template's spec)", got, want)
	}
}
