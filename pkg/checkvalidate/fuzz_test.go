package checkvalidate_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	corev1 "k8s.io/api/core/v1"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	"github.com/sluice-dev/sluice/pkg/checkvalidate"
	"github.com/sluice-dev/sluice/pkg/podkeys"
	"github.com/sluice-dev/sluice/pkg/podset"
)

// Bits of FuzzEvaluateResponse's caps argument.
const (
	capUpdates = 1 << iota
	capRelease
)

func fuzzCaps(bits uint8) []checksv1.Capability {
	var caps []checksv1.Capability
	if bits&capUpdates != 0 {
		caps = append(caps, checksv1.Capability_CAPABILITY_POD_SET_UPDATES)
	}
	if bits&capRelease != 0 {
		caps = append(caps, checksv1.Capability_CAPABILITY_RELEASE)
	}
	return caps
}

func mustMarshal(f *testing.F, m proto.Message) []byte {
	f.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		f.Fatalf("marshal seed %v: %v", m, err)
	}
	return b
}

// fuzzSeeds are answers to fuzzRequest: valid ones of every state, and
// invalid ones that break each kind of rule.
func fuzzSeeds() (valid, invalid []*checksv1.EvaluateResponse) {
	ready := checksv1.State_STATE_READY
	full := &checksv1.PodSetUpdate{
		Name:         "main",
		Labels:       map[string]string{"example.com/pool": "a100", "team": ""},
		Annotations:  map[string]string{"example.com/note": "free text, / and all"},
		NodeSelector: map[string]string{"cloud.example.com/pool": "a100", "sluice.dev/zone": "eu"},
		Tolerations: []*checksv1.Toleration{
			{Key: "pool", Operator: checksv1.TolerationOperator_TOLERATION_OPERATOR_EQUAL, Value: "a100", Effect: checksv1.TaintEffect_TAINT_EFFECT_NO_SCHEDULE},
			{Operator: checksv1.TolerationOperator_TOLERATION_OPERATOR_EXISTS},
			{Key: "evict", Effect: checksv1.TaintEffect_TAINT_EFFECT_NO_EXECUTE, TolerationSeconds: proto.Int64(30)},
			{Key: "pool", Value: "a100", Effect: checksv1.TaintEffect_TAINT_EFFECT_NO_SCHEDULE}, // the first again, operator unset
		},
	}
	with := func(f func(*checksv1.PodSetUpdate)) *checksv1.PodSetUpdate {
		u := proto.Clone(full).(*checksv1.PodSetUpdate)
		f(u)
		return u
	}
	valid = []*checksv1.EvaluateResponse{
		{State: ready},
		{State: ready, Reason: "CapacityAvailable", Message: "placed", PodSetUpdates: []*checksv1.PodSetUpdate{full,
			with(func(u *checksv1.PodSetUpdate) { u.Name = "workers" })}},
		{State: checksv1.State_STATE_PENDING, Reason: "Waiting", RetryAfter: durationpb.New(5 * time.Second)},
		{State: checksv1.State_STATE_RETRY, Message: "later", RetryAfter: durationpb.New(time.Minute)},
		{State: checksv1.State_STATE_REJECTED, Reason: "BudgetExhausted", Message: "no budget left"},
	}
	invalid = []*checksv1.EvaluateResponse{
		{},
		{State: 9},
		{State: checksv1.State_STATE_PENDING, Reason: "not a reason"},
		{State: checksv1.State_STATE_PENDING, Message: strings.Repeat("x", checkvalidate.MaxMessageBytes+1)},
		{State: checksv1.State_STATE_PENDING, RetryAfter: durationpb.New(-time.Second)},
		{State: checksv1.State_STATE_PENDING, RetryAfter: &durationpb.Duration{Seconds: 1, Nanos: -1}},
		{State: checksv1.State_STATE_PENDING, PodSetUpdates: []*checksv1.PodSetUpdate{full}},
		{State: ready, PodSetUpdates: []*checksv1.PodSetUpdate{with(func(u *checksv1.PodSetUpdate) { u.Name = "nope" })}},
		{State: ready, PodSetUpdates: []*checksv1.PodSetUpdate{with(func(u *checksv1.PodSetUpdate) { u.Name = "" })}},
		{State: ready, PodSetUpdates: []*checksv1.PodSetUpdate{full, full}},
		{State: ready, PodSetUpdates: []*checksv1.PodSetUpdate{with(func(u *checksv1.PodSetUpdate) { u.Labels["sluice.dev/owner"] = "x" })}},
		{State: ready, PodSetUpdates: []*checksv1.PodSetUpdate{with(func(u *checksv1.PodSetUpdate) {
			u.Annotations[podkeys.WorkloadAnnotation] = "other"
		})}},
		{State: ready, PodSetUpdates: []*checksv1.PodSetUpdate{with(func(u *checksv1.PodSetUpdate) { u.Labels[podkeys.PodSetLabel] = "other" })}},
		{State: ready, PodSetUpdates: []*checksv1.PodSetUpdate{with(func(u *checksv1.PodSetUpdate) { u.Labels["example.com/pool"] = "a b" })}},
		{State: ready, PodSetUpdates: []*checksv1.PodSetUpdate{with(func(u *checksv1.PodSetUpdate) { u.NodeSelector["-bad"] = "a" })}},
		{State: ready, PodSetUpdates: []*checksv1.PodSetUpdate{with(func(u *checksv1.PodSetUpdate) {
			u.Annotations["example.com/big"] = strings.Repeat("a", checkvalidate.MaxAnnotationsBytes)
		})}},
		{State: ready, PodSetUpdates: []*checksv1.PodSetUpdate{with(func(u *checksv1.PodSetUpdate) {
			for len(u.Tolerations) <= checkvalidate.MaxTolerations {
				u.Tolerations = append(u.Tolerations, &checksv1.Toleration{Operator: checksv1.TolerationOperator_TOLERATION_OPERATOR_EXISTS})
			}
		})}},
		{State: ready, PodSetUpdates: []*checksv1.PodSetUpdate{with(func(u *checksv1.PodSetUpdate) {
			u.Tolerations = []*checksv1.Toleration{
				{Operator: 7}, {Value: "x"}, {Operator: checksv1.TolerationOperator_TOLERATION_OPERATOR_EXISTS, Key: "k", Value: "v"},
				{Key: "k", Effect: 9}, {Key: "k", Effect: checksv1.TaintEffect_TAINT_EFFECT_NO_SCHEDULE, TolerationSeconds: proto.Int64(1)},
			}
		})}},
	}
	return valid, invalid
}

// fuzzRequest asks about a workload with pod sets main and workers.
func fuzzRequest() *checksv1.EvaluateRequest {
	return &checksv1.EvaluateRequest{
		CheckName: "pool", EvaluationKey: "uid/reservation/pool",
		Workload: &checksv1.Workload{Namespace: "team-a", Name: "train", PodSets: []*checksv1.PodSet{
			{Name: "main", Count: 1}, {Name: "workers", Count: 3},
		}},
	}
}

// TestFuzzSeeds keeps the seed corpus what it claims to be, so that the
// seeds alone reach both the refusal and the merge of accepted updates.
func TestFuzzSeeds(t *testing.T) {
	caps := fuzzCaps(capUpdates | capRelease)
	valid, invalid := fuzzSeeds()
	for i, resp := range valid {
		if err := checkvalidate.EvaluateResponse(fuzzRequest(), resp, caps); err != nil {
			t.Errorf("valid seed %d refused: %v", i, err)
		}
	}
	for i, resp := range invalid {
		if checkvalidate.EvaluateResponse(fuzzRequest(), resp, caps) == nil {
			t.Errorf("invalid seed %d accepted: %v", i, resp)
		}
	}
}

// FuzzEvaluateResponse checks the validation of providers' answers on
// whatever a provider (fuzzed bytes as an EvaluateRequest and an
// EvaluateResponse) and its capabilities may be:
//   - it never panics, and says the same of the same answer every time;
//   - it refuses with an ErrorList of rules that each say something, in
//     valid UTF-8 (the message lands on a Workload);
//   - an answer it accepts is no less acceptable without the request (the
//     request only adds the pod-set-name rule), and survives a proto round
//     trip and is accepted again;
//   - an accepted answer has a known state, carries updates only when READY
//     and from a provider with CAPABILITY_POD_SET_UPDATES, at most one per
//     pod set of the request, with keys and values of Kubernetes syntax and
//     no label or annotation key under a reserved prefix;
//   - its updates, merged (pkg/podset) with sluice's own keys and given by
//     two checks at once, never conflict, and the merged info carries all
//     of them with sluice's keys untouched.
func FuzzEvaluateResponse(f *testing.F) {
	reqBytes := mustMarshal(f, fuzzRequest())
	valid, invalid := fuzzSeeds()
	for _, resp := range append(valid, invalid...) {
		b := mustMarshal(f, resp)
		f.Add(reqBytes, b, uint8(capUpdates|capRelease))
		f.Add(reqBytes, b, uint8(capRelease))
	}
	f.Add([]byte{}, []byte{}, uint8(0))
	f.Add(reqBytes, []byte{0x08, 0x02, 0x2a, 0x02, 0x0a, 0x00}, uint8(capUpdates)) // READY, one update without a name
	f.Add([]byte{0xff, 0x01}, []byte{0x12, 0x80}, uint8(0xff))                     // not protobuf

	f.Fuzz(func(t *testing.T, reqBytes, respBytes []byte, capBits uint8) {
		var req checksv1.EvaluateRequest
		var resp checksv1.EvaluateResponse
		if proto.Unmarshal(reqBytes, &req) != nil || proto.Unmarshal(respBytes, &resp) != nil {
			return
		}
		caps := fuzzCaps(capBits)

		err := checkvalidate.EvaluateResponse(&req, &resp, caps)
		if again := checkvalidate.EvaluateResponse(&req, &resp, caps); errorText(again) != errorText(err) {
			t.Fatalf("validation of %v is not deterministic: %q, then %q", &resp, errorText(err), errorText(again))
		}
		withoutReq := checkvalidate.EvaluateResponse(nil, &resp, caps)
		if err != nil {
			checkRefusal(t, &resp, err)
			return
		}
		if withoutReq != nil {
			t.Fatalf("answer %v accepted for %v, but refused without a request: %v", &resp, &req, withoutReq)
		}

		b, merr := proto.Marshal(&resp)
		if merr != nil {
			t.Fatalf("accepted answer %v does not marshal: %v", &resp, merr)
		}
		var back checksv1.EvaluateResponse
		if uerr := proto.Unmarshal(b, &back); uerr != nil {
			t.Fatalf("accepted answer %v does not unmarshal after marshalling: %v", &resp, uerr)
		}
		if !proto.Equal(&resp, &back) {
			t.Fatalf("round trip changed the answer: %v became %v", &resp, &back)
		}
		if err := checkvalidate.EvaluateResponse(&req, &back, caps); err != nil {
			t.Fatalf("answer accepted, refused after a round trip: %v", err)
		}

		checkAccepted(t, &req, &resp, caps)
	})
}

func errorText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func checkRefusal(t *testing.T, resp *checksv1.EvaluateResponse, err error) {
	t.Helper()
	var list checkvalidate.ErrorList
	if !errors.As(err, &list) || len(list) == 0 {
		t.Fatalf("refusal of %v is %T %v, want a non-empty ErrorList", resp, err, err)
	}
	for i, fe := range list {
		if fe == nil || fe.Detail == "" {
			t.Fatalf("refusal of %v: error %d says nothing: %#v", resp, i, fe)
		}
	}
	if msg := err.Error(); !utf8.ValidString(msg) {
		t.Fatalf("refusal of %v is not valid UTF-8: %q", resp, msg)
	}
}

func checkAccepted(t *testing.T, req *checksv1.EvaluateRequest, resp *checksv1.EvaluateResponse, caps []checksv1.Capability) {
	t.Helper()
	switch resp.GetState() {
	case checksv1.State_STATE_PENDING, checksv1.State_STATE_READY, checksv1.State_STATE_RETRY, checksv1.State_STATE_REJECTED:
	default:
		t.Fatalf("accepted an answer with state %v", resp.GetState())
	}
	updates := resp.GetPodSetUpdates()
	if len(updates) == 0 {
		return
	}
	if resp.GetState() != checksv1.State_STATE_READY {
		t.Fatalf("accepted updates with state %v", resp.GetState())
	}
	if !slices.Contains(caps, checksv1.Capability_CAPABILITY_POD_SET_UPDATES) {
		t.Fatalf("accepted updates from a provider with capabilities %v", caps)
	}
	var podSets []string
	for _, ps := range req.GetWorkload().GetPodSets() {
		podSets = append(podSets, ps.GetName())
	}
	seen := map[string]bool{}
	for i, u := range updates {
		if !slices.Contains(podSets, u.GetName()) || seen[u.GetName()] {
			t.Fatalf("accepted update %d for pod set %q (pod sets %q, updated already: %t)", i, u.GetName(), podSets, seen[u.GetName()])
		}
		seen[u.GetName()] = true
		for kind, m := range map[string]map[string]string{"label": u.GetLabels(), "annotation": u.GetAnnotations(), "node selector": u.GetNodeSelector()} {
			for k, v := range m {
				if checkvalidate.QualifiedName(k) != nil {
					t.Fatalf("accepted %s key %q", kind, k)
				}
				if kind != "node selector" && checkvalidate.IsReserved(k) {
					t.Fatalf("accepted %s key %q under a reserved prefix", kind, k)
				}
				if kind != "annotation" && checkvalidate.LabelValue(v) != nil {
					t.Fatalf("accepted %s value %q for %q", kind, v, k)
				}
			}
		}
		if n := len(u.GetTolerations()); n > checkvalidate.MaxTolerations {
			t.Fatalf("accepted %d tolerations", n)
		}
		checkMerge(t, req.GetWorkload().GetName(), u)
	}
}

// checkMerge merges u as the update of two checks at once, as the
// admitter merges check updates into the pods' info.
func checkMerge(t *testing.T, workload string, u *checksv1.PodSetUpdate) {
	t.Helper()
	update := podset.UpdatesFromChecks([]*checksv1.PodSetUpdate{u})[0]
	sluiceLabels := map[string]string{podkeys.PodSetLabel: u.GetName()}
	sluiceAnnotations := map[string]string{podkeys.WorkloadAnnotation: workload}
	info, err := podset.Merge(podset.Input{
		Name:        u.GetName(),
		Labels:      sluiceLabels,
		Annotations: sluiceAnnotations,
		Updates:     []podset.CheckUpdate{{CheckName: "b", Update: update}, {CheckName: "a", Update: update}},
	})
	if err != nil {
		t.Fatalf("merging accepted update %v twice: %v", u, err)
	}
	for _, f := range []struct {
		name      string
		got, want map[string]string
	}{
		{"labels", info.Labels, update.Labels}, {"labels", info.Labels, sluiceLabels},
		{"annotations", info.Annotations, update.Annotations}, {"annotations", info.Annotations, sluiceAnnotations},
		{"nodeSelector", info.NodeSelector, update.NodeSelector},
	} {
		for k, v := range f.want {
			if got, ok := f.got[k]; !ok || got != v {
				t.Fatalf("merged %s[%q] = %q (set %t), want %q", f.name, k, got, ok, v)
			}
		}
	}
	for _, tol := range update.Tolerations {
		if !slices.ContainsFunc(info.Tolerations, func(o corev1.Toleration) bool { return podset.SameToleration(o, tol) }) {
			t.Fatalf("merged tolerations %v lack %v", info.Tolerations, tol)
		}
	}
	if len(info.Tolerations) > len(update.Tolerations) {
		t.Fatalf("merged %d tolerations from %d", len(info.Tolerations), len(update.Tolerations))
	}
}
