package checkvalidate

import (
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
)

var (
	podSetUpdatesCap = []checksv1.Capability{checksv1.Capability_CAPABILITY_POD_SET_UPDATES}
	ready            = checksv1.State_STATE_READY
	equal            = checksv1.TolerationOperator_TOLERATION_OPERATOR_EQUAL
	exists           = checksv1.TolerationOperator_TOLERATION_OPERATOR_EXISTS
	noSchedule       = checksv1.TaintEffect_TAINT_EFFECT_NO_SCHEDULE
	noExecute        = checksv1.TaintEffect_TAINT_EFFECT_NO_EXECUTE
)

func TestProviderInfo(t *testing.T) {
	valid := func() *checksv1.GetProviderInfoResponse {
		return &checksv1.GetProviderInfoResponse{
			Name:             "nodepool.checks.sluice.dev",
			VendorVersion:    "v1.0.0",
			ContractVersions: []string{"sluice.checks.v1"},
			Capabilities:     []checksv1.Capability{checksv1.Capability_CAPABILITY_POD_SET_UPDATES, checksv1.Capability_CAPABILITY_RELEASE},
		}
	}
	tests := []struct {
		name    string
		mutate  func(*checksv1.GetProviderInfoResponse)
		nilResp bool
		wantErr string
	}{
		{name: "valid", mutate: func(*checksv1.GetProviderInfoResponse) {}},
		{name: "no capabilities", mutate: func(r *checksv1.GetProviderInfoResponse) { r.Capabilities = nil }},
		{name: "future contract too", mutate: func(r *checksv1.GetProviderInfoResponse) {
			r.ContractVersions = []string{"sluice.checks.v2", "sluice.checks.v1"}
		}},
		{name: "missing", nilResp: true, wantErr: "GetProviderInfo response is missing"},
		{name: "no name", mutate: func(r *checksv1.GetProviderInfoResponse) { r.Name = "" }, wantErr: "name: required"},
		{name: "bad name", mutate: func(r *checksv1.GetProviderInfoResponse) { r.Name = "My Provider" }, wantErr: "name: \"My Provider\" must consist of lowercase"},
		{name: "no contract", mutate: func(r *checksv1.GetProviderInfoResponse) { r.ContractVersions = nil }, wantErr: "contract_versions: required"},
		{name: "other contract only", mutate: func(r *checksv1.GetProviderInfoResponse) {
			r.ContractVersions = []string{"sluice.checks.v2"}
		}, wantErr: `contract_versions: must include "sluice.checks.v1"`},
		{name: "empty contract entry", mutate: func(r *checksv1.GetProviderInfoResponse) {
			r.ContractVersions = append(r.ContractVersions, "")
		}, wantErr: "contract_versions[1]: must not be empty"},
		{name: "unspecified capability", mutate: func(r *checksv1.GetProviderInfoResponse) {
			r.Capabilities = append(r.Capabilities, checksv1.Capability_CAPABILITY_UNSPECIFIED)
		}, wantErr: "capabilities[2]: CAPABILITY_UNSPECIFIED must not be sent"},
		{name: "unknown capability is allowed", mutate: func(r *checksv1.GetProviderInfoResponse) {
			r.Capabilities = []checksv1.Capability{99}
		}}, // a later v1 may add capabilities: older callers ignore them
		{name: "unknown contract revision is allowed", mutate: func(r *checksv1.GetProviderInfoResponse) {
			r.ContractRevision = 99
		}}, // a later revision: callers treat it as the latest they know
		{name: "repeated capability", mutate: func(r *checksv1.GetProviderInfoResponse) {
			r.Capabilities = append(r.Capabilities, checksv1.Capability_CAPABILITY_RELEASE)
		}, wantErr: "capabilities[2]: CAPABILITY_RELEASE is listed twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var info *checksv1.GetProviderInfoResponse
			if !tt.nilResp {
				info = valid()
				tt.mutate(info)
			}
			assertErr(t, ProviderInfo(info), tt.wantErr)
		})
	}
}

func validRequest() *checksv1.EvaluateRequest {
	return &checksv1.EvaluateRequest{
		CheckName:     "pool",
		EvaluationKey: "0c6e-uid/res-1",
		Workload: &checksv1.Workload{
			Namespace: "team-a",
			Name:      "pod-train-1a2b3",
			Uid:       "0c6e-uid",
			PodSets: []*checksv1.PodSet{
				{Name: "main", Count: 1},
				{Name: "workers", Count: 3},
			},
		},
	}
}

func TestEvaluateRequest(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*checksv1.EvaluateRequest)
		nilReq  bool
		wantErr string
	}{
		{name: "valid", mutate: func(*checksv1.EvaluateRequest) {}},
		{name: "no pod sets", mutate: func(r *checksv1.EvaluateRequest) { r.Workload.PodSets = nil }},
		{name: "missing", nilReq: true, wantErr: "Evaluate request is missing"},
		{name: "no key", mutate: func(r *checksv1.EvaluateRequest) { r.EvaluationKey = "" }, wantErr: "evaluation_key: required"},
		{name: "key of the longest length", mutate: func(r *checksv1.EvaluateRequest) { r.EvaluationKey = strings.Repeat("k", MaxEvaluationKeyBytes) }},
		{name: "key too long", mutate: func(r *checksv1.EvaluateRequest) { r.EvaluationKey = strings.Repeat("k", MaxEvaluationKeyBytes+1) },
			wantErr: "evaluation_key: must be at most 512 bytes, got 513"},
		{name: "no workload", mutate: func(r *checksv1.EvaluateRequest) { r.Workload = nil }, wantErr: "workload: required"},
		{name: "no namespace", mutate: func(r *checksv1.EvaluateRequest) { r.Workload.Namespace = "" }, wantErr: "workload.namespace: required"},
		{name: "no name", mutate: func(r *checksv1.EvaluateRequest) { r.Workload.Name = "" }, wantErr: "workload.name: required"},
		{name: "unnamed pod set", mutate: func(r *checksv1.EvaluateRequest) { r.Workload.PodSets[1].Name = "" }, wantErr: "workload.pod_sets[1].name: required"},
		{name: "duplicate pod set", mutate: func(r *checksv1.EvaluateRequest) { r.Workload.PodSets[1].Name = "main" }, wantErr: `workload.pod_sets[1].name: "main" is also the name of workload.pod_sets[0]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var req *checksv1.EvaluateRequest
			if !tt.nilReq {
				req = validRequest()
				tt.mutate(req)
			}
			assertErr(t, EvaluateRequest(req), tt.wantErr)
		})
	}
}

func TestReleaseRequest(t *testing.T) {
	assertErr(t, ReleaseRequest(&checksv1.ReleaseRequest{EvaluationKey: "k"}), "")
	assertErr(t, ReleaseRequest(&checksv1.ReleaseRequest{Name: "w"}), "evaluation_key: required")
	assertErr(t, ReleaseRequest(&checksv1.ReleaseRequest{EvaluationKey: strings.Repeat("k", MaxEvaluationKeyBytes+1)}), "evaluation_key: must be at most 512 bytes, got 513")
	assertErr(t, ReleaseRequest(nil), "Release request is missing")
}

func TestEvaluateResponse(t *testing.T) {
	update := func(mutate func(*checksv1.PodSetUpdate)) *checksv1.EvaluateResponse {
		u := &checksv1.PodSetUpdate{
			Name:         "main",
			Labels:       map[string]string{"example.com/pool": "a100"},
			Annotations:  map[string]string{"example.com/note": "any text / is fine here"},
			NodeSelector: map[string]string{"cloud.example.com/pool": "a100"},
			Tolerations: []*checksv1.Toleration{
				{Key: "pool", Operator: equal, Value: "a100", Effect: noSchedule},
				{Operator: exists},
				{Key: "evict", Effect: noExecute, TolerationSeconds: proto.Int64(30)},
			},
		}
		mutate(u)
		return &checksv1.EvaluateResponse{State: ready, PodSetUpdates: []*checksv1.PodSetUpdate{u}}
	}
	same := func(*checksv1.PodSetUpdate) {}
	tests := []struct {
		name    string
		resp    *checksv1.EvaluateResponse
		caps    []checksv1.Capability
		noReq   bool
		wantErr string
	}{
		{name: "pending", resp: &checksv1.EvaluateResponse{State: checksv1.State_STATE_PENDING, Reason: "WaitingForCapacity", Message: "3 nodes short", RetryAfter: durationpb.New(5 * time.Second)}},
		{name: "ready without updates and capability", resp: &checksv1.EvaluateResponse{State: ready}},
		{name: "retry", resp: &checksv1.EvaluateResponse{State: checksv1.State_STATE_RETRY, RetryAfter: durationpb.New(time.Minute)}},
		{name: "rejected", resp: &checksv1.EvaluateResponse{State: checksv1.State_STATE_REJECTED, Reason: "BudgetExhausted"}},
		{name: "ready with updates", resp: update(same), caps: podSetUpdatesCap},
		{name: "update per pod set", caps: podSetUpdatesCap, resp: &checksv1.EvaluateResponse{State: ready, PodSetUpdates: []*checksv1.PodSetUpdate{{Name: "main"}, {Name: "workers"}}}},
		{name: "no request to match", noReq: true, caps: podSetUpdatesCap, resp: &checksv1.EvaluateResponse{State: ready, PodSetUpdates: []*checksv1.PodSetUpdate{{Name: "anything"}}}},
		{name: "missing", resp: nil, wantErr: "Evaluate response is missing"},
		{name: "unspecified state", resp: &checksv1.EvaluateResponse{}, wantErr: "state: required; STATE_UNSPECIFIED is not an answer"},
		{name: "unknown state", resp: &checksv1.EvaluateResponse{State: 42}, wantErr: "state: unknown state 42"},
		{name: "bad reason", resp: &checksv1.EvaluateResponse{State: ready, Reason: "not ok"}, wantErr: `reason: "not ok" must consist of`},
		{name: "long message", resp: &checksv1.EvaluateResponse{State: ready, Message: strings.Repeat("x", 1025)}, wantErr: "message: must be at most 1024 bytes, got 1025"},
		{name: "negative retry_after", resp: &checksv1.EvaluateResponse{State: checksv1.State_STATE_PENDING, RetryAfter: durationpb.New(-time.Second)}, wantErr: "retry_after: must not be negative"},
		{name: "invalid retry_after", resp: &checksv1.EvaluateResponse{State: checksv1.State_STATE_PENDING, RetryAfter: &durationpb.Duration{Seconds: 1, Nanos: -1}}, wantErr: "retry_after: invalid duration"},
		{name: "updates with pending", caps: podSetUpdatesCap, resp: &checksv1.EvaluateResponse{State: checksv1.State_STATE_PENDING, PodSetUpdates: []*checksv1.PodSetUpdate{{Name: "main"}}}, wantErr: "pod_set_updates: only allowed with STATE_READY, got STATE_PENDING"},
		{name: "updates without capability", resp: update(same), wantErr: "pod_set_updates: refused: the provider does not advertise CAPABILITY_POD_SET_UPDATES"},
		{name: "unknown pod set", caps: podSetUpdatesCap, resp: update(func(u *checksv1.PodSetUpdate) { u.Name = "driver" }), wantErr: `pod_set_updates[0].name: "driver" is not a pod set of the workload (pod sets: main, workers)`},
		{name: "unnamed update", caps: podSetUpdatesCap, resp: update(func(u *checksv1.PodSetUpdate) { u.Name = "" }), wantErr: "pod_set_updates[0].name: required"},
		{name: "two updates for one pod set", caps: podSetUpdatesCap, resp: &checksv1.EvaluateResponse{State: ready, PodSetUpdates: []*checksv1.PodSetUpdate{{Name: "main"}, {Name: "workers"}, {Name: "main"}}}, wantErr: `pod_set_updates[2].name: second update for pod set "main" (first: pod_set_updates[0])`},
		{name: "bad label key", caps: podSetUpdatesCap, resp: update(func(u *checksv1.PodSetUpdate) { u.Labels = map[string]string{"a/b/c": "x"} }), wantErr: `pod_set_updates[0].labels["a/b/c"]: invalid key`},
		{name: "bad label value", caps: podSetUpdatesCap, resp: update(func(u *checksv1.PodSetUpdate) { u.Labels = map[string]string{"a/b": "x y"} }), wantErr: `pod_set_updates[0].labels["a/b"]: invalid value: "x y"`},
		{name: "reserved label sluice", caps: podSetUpdatesCap, resp: update(func(u *checksv1.PodSetUpdate) { u.Labels = map[string]string{"sluice.dev/workload": "x"} }), wantErr: `pod_set_updates[0].labels["sluice.dev/workload"]: key is under a reserved prefix`},
		{name: "reserved label kueue", caps: podSetUpdatesCap, resp: update(func(u *checksv1.PodSetUpdate) { u.Labels = map[string]string{"kueue.x-k8s.io/podset": "x"} }), wantErr: `pod_set_updates[0].labels["kueue.x-k8s.io/podset"]: key is under a reserved prefix`},
		{name: "reserved annotation", caps: podSetUpdatesCap, resp: update(func(u *checksv1.PodSetUpdate) {
			u.Annotations = map[string]string{"kueue.x-k8s.io/role-hash": "x"}
		}), wantErr: `pod_set_updates[0].annotations["kueue.x-k8s.io/role-hash"]: key is under a reserved prefix`},
		{name: "bad annotation key", caps: podSetUpdatesCap, resp: update(func(u *checksv1.PodSetUpdate) { u.Annotations = map[string]string{"bad key": "x"} }), wantErr: `pod_set_updates[0].annotations["bad key"]: invalid key`},
		{name: "annotations too big", caps: podSetUpdatesCap, resp: update(func(u *checksv1.PodSetUpdate) {
			u.Annotations = map[string]string{"a": strings.Repeat("x", 200*1024), "b": strings.Repeat("x", 60*1024)}
		}), wantErr: "pod_set_updates[0].annotations: must be at most 262144 bytes in all, got 266242"},
		{name: "bad node selector key", caps: podSetUpdatesCap, resp: update(func(u *checksv1.PodSetUpdate) { u.NodeSelector = map[string]string{"-pool": "x"} }), wantErr: `pod_set_updates[0].node_selector["-pool"]: invalid key`},
		{name: "bad node selector value", caps: podSetUpdatesCap, resp: update(func(u *checksv1.PodSetUpdate) { u.NodeSelector = map[string]string{"pool": strings.Repeat("x", 64)} }), wantErr: `pod_set_updates[0].node_selector["pool"]: invalid value: must be at most 63 characters`},
		{name: "too many tolerations", caps: podSetUpdatesCap, resp: update(func(u *checksv1.PodSetUpdate) {
			u.Tolerations = nil
			for range 9 {
				u.Tolerations = append(u.Tolerations, &checksv1.Toleration{Operator: exists})
			}
		}), wantErr: "pod_set_updates[0].tolerations: at most 8 allowed, got 9"},
		{name: "toleration without key", caps: podSetUpdatesCap, resp: update(func(u *checksv1.PodSetUpdate) {
			u.Tolerations = []*checksv1.Toleration{{Operator: equal, Value: "x"}}
		}), wantErr: "pod_set_updates[0].tolerations[0].key: required unless operator is TOLERATION_OPERATOR_EXISTS"},
		{name: "toleration bad key", caps: podSetUpdatesCap, resp: update(func(u *checksv1.PodSetUpdate) {
			u.Tolerations = []*checksv1.Toleration{{Key: "a b", Operator: exists}}
		}), wantErr: "pod_set_updates[0].tolerations[0].key: invalid key"},
		{name: "exists with value", caps: podSetUpdatesCap, resp: update(func(u *checksv1.PodSetUpdate) {
			u.Tolerations = []*checksv1.Toleration{{Key: "k", Operator: exists, Value: "v"}}
		}), wantErr: `pod_set_updates[0].tolerations[0].value: must be empty with TOLERATION_OPERATOR_EXISTS, got "v"`},
		{name: "equal with bad value", caps: podSetUpdatesCap, resp: update(func(u *checksv1.PodSetUpdate) {
			u.Tolerations = []*checksv1.Toleration{{Key: "k", Value: "v v"}}
		}), wantErr: "pod_set_updates[0].tolerations[0].value: invalid value"},
		{name: "unknown operator", caps: podSetUpdatesCap, resp: update(func(u *checksv1.PodSetUpdate) {
			u.Tolerations = []*checksv1.Toleration{{Key: "k", Operator: 7}}
		}), wantErr: "pod_set_updates[0].tolerations[0].operator: unknown operator 7"},
		{name: "unknown effect", caps: podSetUpdatesCap, resp: update(func(u *checksv1.PodSetUpdate) {
			u.Tolerations = []*checksv1.Toleration{{Key: "k", Effect: 9}}
		}), wantErr: "pod_set_updates[0].tolerations[0].effect: unknown effect 9"},
		{name: "toleration seconds without NoExecute", caps: podSetUpdatesCap, resp: update(func(u *checksv1.PodSetUpdate) {
			u.Tolerations = []*checksv1.Toleration{{Key: "k", Effect: noSchedule, TolerationSeconds: proto.Int64(5)}}
		}), wantErr: "pod_set_updates[0].tolerations[0].toleration_seconds: only allowed with TAINT_EFFECT_NO_EXECUTE, got TAINT_EFFECT_NO_SCHEDULE"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := validRequest()
			if tt.noReq {
				req = nil
			}
			assertErr(t, EvaluateResponse(req, tt.resp, tt.caps), tt.wantErr)
		})
	}
}

func TestEvaluateResponseReportsEveryError(t *testing.T) {
	resp := &checksv1.EvaluateResponse{
		State: checksv1.State_STATE_PENDING,
		PodSetUpdates: []*checksv1.PodSetUpdate{{
			Name:   "main",
			Labels: map[string]string{"sluice.dev/a": "x", "b": "bad value"},
		}},
	}
	err := EvaluateResponse(validRequest(), resp, nil)
	var list ErrorList
	if !errors.As(err, &list) {
		t.Fatalf("error %v is not an ErrorList", err)
	}
	want := []string{
		"pod_set_updates: only allowed with STATE_READY, got STATE_PENDING",
		"pod_set_updates: refused: the provider does not advertise CAPABILITY_POD_SET_UPDATES",
		`pod_set_updates[0].labels["b"]: invalid value: "bad value" must be empty or consist of`,
		`pod_set_updates[0].labels["sluice.dev/a"]: key is under a reserved prefix (sluice.dev/, kueue.x-k8s.io/)`,
	}
	if len(list) != len(want) {
		t.Fatalf("got %d errors, want %d: %v", len(list), len(want), err)
	}
	for i, w := range want {
		if !strings.HasPrefix(list[i].Error(), w) {
			t.Errorf("error %d = %q, want prefix %q", i, list[i], w)
		}
	}
	if !strings.Contains(err.Error(), "; ") {
		t.Errorf("joined message %q does not separate errors with '; '", err)
	}
}

func TestPodSetUpdate(t *testing.T) {
	assertErr(t, PodSetUpdate("update", &checksv1.PodSetUpdate{Labels: map[string]string{"ok": "yes"}}), "")
	assertErr(t, PodSetUpdate("update", &checksv1.PodSetUpdate{Labels: map[string]string{"sluice.dev/x": "yes"}}), `update.labels["sluice.dev/x"]: key is under a reserved prefix`)
}
