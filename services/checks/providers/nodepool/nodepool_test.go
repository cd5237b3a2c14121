package nodepool

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	"github.com/sluice-dev/sluice/pkg/checkvalidate"
)

func request(t *testing.T, params map[string]any, podSets ...string) *checksv1.EvaluateRequest {
	t.Helper()
	req := &checksv1.EvaluateRequest{
		CheckName:     "pool-a100",
		EvaluationKey: "uid-1/res-1",
		Workload:      &checksv1.Workload{Namespace: "team-a", Name: "pod-train-1a2b3", Uid: "uid-1"},
	}
	for _, n := range podSets {
		req.Workload.PodSets = append(req.Workload.PodSets, &checksv1.PodSet{Name: n, Count: 1})
	}
	if params != nil {
		s, err := structpb.NewStruct(params)
		if err != nil {
			t.Fatal(err)
		}
		req.Parameters = s
	}
	return req
}

func TestEvaluate(t *testing.T) {
	equal := checksv1.TolerationOperator_TOLERATION_OPERATOR_EQUAL
	tests := []struct {
		name    string
		params  map[string]any
		podSets []string
		want    []*checksv1.PodSetUpdate
	}{
		{
			name:    "node labels only: default pool label",
			params:  map[string]any{"nodeLabels": map[string]any{"pool": "a100", "cloud.example.com/zone": "z1"}},
			podSets: []string{"main"},
			want: []*checksv1.PodSetUpdate{{
				Name:         "main",
				NodeSelector: map[string]string{"pool": "a100", "cloud.example.com/zone": "z1"},
				Labels:       map[string]string{PoolLabel: "z1"},
			}},
		},
		{
			name: "taint, pod labels, two pod sets",
			params: map[string]any{
				"nodeLabels": map[string]any{"pool": "a100"},
				"taint":      map[string]any{"key": "dedicated", "value": "a100", "effect": "NoExecute"},
				"podLabels":  map[string]any{"example.com/team": "ml"},
			},
			podSets: []string{"driver", "workers"},
			want: []*checksv1.PodSetUpdate{
				{Name: "driver", NodeSelector: map[string]string{"pool": "a100"}, Labels: map[string]string{"example.com/team": "ml"},
					Tolerations: []*checksv1.Toleration{{Key: "dedicated", Operator: equal, Value: "a100", Effect: checksv1.TaintEffect_TAINT_EFFECT_NO_EXECUTE}}},
				{Name: "workers", NodeSelector: map[string]string{"pool": "a100"}, Labels: map[string]string{"example.com/team": "ml"},
					Tolerations: []*checksv1.Toleration{{Key: "dedicated", Operator: equal, Value: "a100", Effect: checksv1.TaintEffect_TAINT_EFFECT_NO_EXECUTE}}},
			},
		},
		{
			name: "taint effect defaults to NoSchedule, empty podLabels means none",
			params: map[string]any{
				"nodeLabels": map[string]any{"pool": "a100"},
				"taint":      map[string]any{"key": "dedicated"},
				"podLabels":  map[string]any{},
			},
			podSets: []string{"main"},
			want: []*checksv1.PodSetUpdate{{
				Name: "main", NodeSelector: map[string]string{"pool": "a100"},
				Tolerations: []*checksv1.Toleration{{Key: "dedicated", Operator: equal, Effect: checksv1.TaintEffect_TAINT_EFFECT_NO_SCHEDULE}},
			}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := request(t, tt.params, tt.podSets...)
			resp, err := Checker{}.Evaluate(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if resp.GetState() != checksv1.State_STATE_READY || resp.GetReason() != ReasonAssigned {
				t.Errorf("state %s reason %q, want READY %s", resp.GetState(), resp.GetReason(), ReasonAssigned)
			}
			if len(resp.GetPodSetUpdates()) != len(tt.want) {
				t.Fatalf("updates = %v, want %v", resp.GetPodSetUpdates(), tt.want)
			}
			for i := range tt.want {
				if !proto.Equal(resp.GetPodSetUpdates()[i], tt.want[i]) {
					t.Errorf("update %d = %v, want %v", i, resp.GetPodSetUpdates()[i], tt.want[i])
				}
			}
			if err := checkvalidate.EvaluateResponse(req, resp, Info("test").Capabilities); err != nil {
				t.Errorf("answer breaks the contract: %v", err)
			}
			again, err := Checker{}.Evaluate(context.Background(), req)
			if err != nil || !proto.Equal(resp, again) {
				t.Errorf("second answer %v (%v) differs from first %v", again, err, resp)
			}
		})
	}
}

func TestEvaluateRefusesBadParameters(t *testing.T) {
	pool := map[string]any{"pool": "a100"}
	tests := []struct {
		name    string
		params  map[string]any
		wantMsg string
	}{
		{name: "absent", params: nil, wantMsg: "parameters.nodeLabels: required"},
		{name: "empty node labels", params: map[string]any{"nodeLabels": map[string]any{}}, wantMsg: "parameters.nodeLabels: required"},
		{name: "node labels not a map", params: map[string]any{"nodeLabels": "pool=a100"}, wantMsg: "parameters.nodeLabels: expected object, got string"},
		{name: "bad node label key", params: map[string]any{"nodeLabels": map[string]any{"bad key": "x"}}, wantMsg: `parameters.nodeLabels["bad key"]: invalid key`},
		{name: "bad node label value", params: map[string]any{"nodeLabels": map[string]any{"pool": "a 100"}}, wantMsg: `parameters.nodeLabels["pool"]: invalid value`},
		{name: "taint without key", params: map[string]any{"nodeLabels": pool, "taint": map[string]any{"value": "x"}}, wantMsg: "parameters.taint.key: required"},
		{name: "bad taint key", params: map[string]any{"nodeLabels": pool, "taint": map[string]any{"key": "-x"}}, wantMsg: "parameters.taint.key: invalid key"},
		{name: "bad taint value", params: map[string]any{"nodeLabels": pool, "taint": map[string]any{"key": "x", "value": "a/b"}}, wantMsg: "parameters.taint.value: invalid value"},
		{name: "bad taint effect", params: map[string]any{"nodeLabels": pool, "taint": map[string]any{"key": "x", "effect": "NoRun"}}, wantMsg: `parameters.taint.effect: "NoRun" is not one of`},
		{name: "reserved pod label", params: map[string]any{"nodeLabels": pool, "podLabels": map[string]any{"sluice.dev/pool": "a"}}, wantMsg: `parameters.podLabels["sluice.dev/pool"]: key is under a reserved prefix`},
		{name: "bad pod label", params: map[string]any{"nodeLabels": pool, "podLabels": map[string]any{"team": "a b"}}, wantMsg: `parameters.podLabels["team"]: invalid value`},
		{name: "unknown parameter", params: map[string]any{"nodeLabels": pool, "nodeLabel": pool}, wantMsg: `parameters: unknown field "nodeLabel"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Checker{}.Evaluate(context.Background(), request(t, tt.params, "main"))
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tt.wantMsg) {
				t.Fatalf("error = %v, want INVALID_ARGUMENT containing %q", err, tt.wantMsg)
			}
		})
	}
}

func TestMessageFitsTheContract(t *testing.T) {
	labels := map[string]any{}
	for _, k := range []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p", "q", "r"} {
		labels["example.com/"+strings.Repeat(k, 60)] = strings.Repeat("v", 60)
	}
	req := request(t, map[string]any{"nodeLabels": labels}, "main")
	resp, err := Checker{}.Evaluate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(resp.GetMessage()); n > checkvalidate.MaxMessageBytes || !strings.HasSuffix(resp.GetMessage(), "...") {
		t.Errorf("message is %d bytes (limit %d), want truncated with ...", n, checkvalidate.MaxMessageBytes)
	}
}

func TestRelease(t *testing.T) {
	if err := (Checker{}).Release(context.Background(), &checksv1.ReleaseRequest{EvaluationKey: "unknown"}); err != nil {
		t.Fatalf("Release of an unknown key = %v, want nil", err)
	}
}
