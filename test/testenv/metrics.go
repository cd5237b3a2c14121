package testenv

import (
	"context"
	"fmt"
	"strings"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/kubernetes"
)

// Metrics returns kube-apiserver's /metrics in the Prometheus text format.
func (e *Env) Metrics(ctx context.Context) (string, error) {
	cs, err := kubernetes.NewForConfig(e.Config)
	if err != nil {
		return "", fmt.Errorf("testenv: clientset: %w", err)
	}
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return "", fmt.Errorf("testenv: get /metrics: %w", err)
	}
	return string(raw), nil
}

// RequestCount is one series of apiserver_request_total.
type RequestCount struct {
	Verb        string // as the API server labels it: POST, PUT, PATCH, APPLY, DELETE, GET, LIST, WATCH, ...
	Group       string // "" for the core group
	Version     string
	Resource    string
	Subresource string
	Scope       string // resource, namespace or cluster
	DryRun      string // non-empty for dry-run requests, which change nothing
	Code        string
	Count       float64
}

// IsWrite reports whether the request changed (or tried to change) state.
// Dry runs are not writes.
func (r RequestCount) IsWrite() bool {
	if r.DryRun != "" {
		return false
	}
	switch r.Verb {
	case "POST", "PUT", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION":
		return true
	}
	return false
}

// RequestCounts returns the API server's request counters. Benchmarks take
// two snapshots and subtract them (see SubtractCounts) to count the
// requests, and with IsWrite the writes, of a run.
func (e *Env) RequestCounts(ctx context.Context) ([]RequestCount, error) {
	text, err := e.Metrics(ctx)
	if err != nil {
		return nil, err
	}
	return ParseRequestCounts(text)
}

// ParseRequestCounts extracts apiserver_request_total from metrics text.
func ParseRequestCounts(text string) ([]RequestCount, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		return nil, fmt.Errorf("testenv: parse metrics: %w", err)
	}
	fam, ok := families["apiserver_request_total"]
	if !ok {
		return nil, fmt.Errorf("testenv: parse metrics: no apiserver_request_total series")
	}
	var out []RequestCount
	for _, m := range fam.GetMetric() {
		rc := RequestCount{Count: m.GetCounter().GetValue()}
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "verb":
				rc.Verb = l.GetValue()
			case "group":
				rc.Group = l.GetValue()
			case "version":
				rc.Version = l.GetValue()
			case "resource":
				rc.Resource = l.GetValue()
			case "subresource":
				rc.Subresource = l.GetValue()
			case "scope":
				rc.Scope = l.GetValue()
			case "dry_run":
				rc.DryRun = l.GetValue()
			case "code":
				rc.Code = l.GetValue()
			}
		}
		out = append(out, rc)
	}
	return out, nil
}

// SubtractCounts returns after minus before, series by series, dropping
// series that did not change. A series is every label the counts keep:
// two series that differ only in scope or dry run are counted apart.
func SubtractCounts(after, before []RequestCount) []RequestCount {
	k := func(r RequestCount) RequestCount {
		r.Count = 0
		return r
	}
	prev := make(map[RequestCount]float64, len(before))
	for _, r := range before {
		prev[k(r)] = r.Count
	}
	var out []RequestCount
	for _, r := range after {
		r.Count -= prev[k(r)]
		if r.Count != 0 {
			out = append(out, r)
		}
	}
	return out
}
