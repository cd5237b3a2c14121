package conformance

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	checksv1 "github.com/sluice-dev/sluice/gen/sluice/checks/v1"
	"github.com/sluice-dev/sluice/pkg/checkvalidate"
)

// Fixture is a request with the answer it must get: one case,
// "Fixture/<Name>". The generic cases only check that answers follow the
// contract; a fixture checks that the provider answers what it should,
// as it arrives on the wire.
//
// A fixtures file (ParseFixtures, LoadFixtures, the --fixtures flag) is
// JSON; the embedded messages are protojson (field names in lowerCamelCase
// or as in the .proto, enums by name):
//
//	{"fixtures": [
//	  {"name": "gpu-pool",
//	   "checkName": "pool",
//	   "parameters": {"nodeLabels": {"pool": "a100"}},
//	   "workload": {"podSets": [{"name": "main", "count": 4}]},
//	   "expect": {"state": "STATE_READY",
//	              "reason": "NodePoolAssigned",
//	              "podSetUpdates": [{"name": "main", "nodeSelector": {"pool": "a100"}}]}},
//	  {"name": "no-pool", "parameters": {}, "expect": {"code": "INVALID_ARGUMENT"}}
//	]}
//
// name is required: letters, digits, '-', '_' and '.', unique in the
// file. checkName, parameters and workload are optional: by default the
// run's check name, its parameters and the sample workload
// (Options.Workload when set). A fixture's workload gets the sample's
// namespace, name and uid when it has none. The evaluation key is
// "<workload uid>/<reservation id>/<check name>", with a reservation id of
// the fixture's own.
//
// expect holds either a state or a code. A code is the gRPC code the call
// must fail with, by name ("INVALID_ARGUMENT"). A state is the answer's
// state; with it, reason, when present, must equal the answer's reason,
// and podSetUpdates, when present (even []), must equal the answer's
// updates: the same pod sets and, for each, the same labels, annotations
// and node_selector entries and the same tolerations in the same order (an
// unspecified toleration operator counts as EQUAL, as in sluice). The
// answer must also follow the contract, as in every case.
//
// A PENDING answer where another state is expected is asked again, after
// its retry_after (unset: 1s, doubling), as long as the next call starts
// within Options.Timeout (--timeout) of the first; the last answer is then
// judged. With CAPABILITY_RELEASE, the fixture's key is released after the
// answer.
type Fixture struct {
	Name string
	// CheckName is sent as check_name; empty means Options.CheckName.
	CheckName string
	// Parameters are sent as the parameters; nil means Options.Parameters.
	Parameters *structpb.Struct
	// Workload is sent as the workload; nil means the sample workload.
	Workload *checksv1.Workload
	Expect   Expectation
}

// Expectation is what a Fixture's answer must be: State, or a failed call
// with Code.
type Expectation struct {
	// State the answer must have. STATE_UNSPECIFIED when Code is set.
	State checksv1.State
	// Reason, when not nil, must equal the answer's reason.
	Reason *string
	// PodSetUpdates, when not nil, must equal the answer's updates; an
	// empty, non-nil slice means none.
	PodSetUpdates []*checksv1.PodSetUpdate
	// Code, when not codes.OK, is the code the call must fail with.
	Code codes.Code
}

var fixtureName = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// The JSON form of a fixtures file; embedded messages stay raw for
// protojson.
type (
	fixturesJSON struct {
		Fixtures []json.RawMessage `json:"fixtures"`
	}
	fixtureJSON struct {
		Name       string          `json:"name"`
		CheckName  string          `json:"checkName"`
		Parameters json.RawMessage `json:"parameters"`
		Workload   json.RawMessage `json:"workload"`
		Expect     *expectJSON     `json:"expect"`
	}
	expectJSON struct {
		State         *string         `json:"state"`
		Reason        *string         `json:"reason"`
		PodSetUpdates json.RawMessage `json:"podSetUpdates"`
		Code          *string         `json:"code"`
	}
)

// LoadFixtures reads and parses a fixtures file (see Fixture).
func LoadFixtures(path string) ([]Fixture, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read fixtures: %w", err)
	}
	fs, err := ParseFixtures(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return fs, nil
}

// ParseFixtures parses a fixtures file (see Fixture). Errors name the
// fixture and the field.
func ParseFixtures(data []byte) ([]Fixture, error) {
	var file fixturesJSON
	if err := decodeStrict(data, &file); err != nil {
		return nil, err
	}
	if len(file.Fixtures) == 0 {
		return nil, errors.New(`fixtures: required, a list of at least one fixture`)
	}
	var fixtures []Fixture
	seen := map[string]int{}
	for i, raw := range file.Fixtures {
		f, err := parseFixture(raw)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", fixturePath(i, f.Name), err)
		}
		if j, dup := seen[f.Name]; dup {
			return nil, fmt.Errorf("%s: name: also the name of fixtures[%d]", fixturePath(i, f.Name), j)
		}
		seen[f.Name] = i
		fixtures = append(fixtures, f)
	}
	return fixtures, nil
}

func fixturePath(i int, name string) string {
	if name == "" {
		return fmt.Sprintf("fixtures[%d]", i)
	}
	return fmt.Sprintf("fixtures[%d] (%q)", i, name)
}

// parseFixture decodes one fixture; the returned Fixture has its name
// even when err is not nil, for the message.
func parseFixture(raw json.RawMessage) (Fixture, error) {
	var fj fixtureJSON
	if err := decodeStrict(raw, &fj); err != nil {
		return Fixture{}, err
	}
	f := Fixture{Name: fj.Name, CheckName: fj.CheckName}
	if present(fj.Parameters) {
		f.Parameters = &structpb.Struct{}
		if err := protojson.Unmarshal(fj.Parameters, f.Parameters); err != nil {
			return f, fmt.Errorf("parameters: must be a JSON object: %w", err)
		}
	}
	if present(fj.Workload) {
		f.Workload = &checksv1.Workload{}
		if err := protojson.Unmarshal(fj.Workload, f.Workload); err != nil {
			return f, fmt.Errorf("workload: %w", err)
		}
	}
	if fj.Expect == nil {
		return f, errors.New(`expect: required, with a state ("STATE_READY") or a code ("INVALID_ARGUMENT")`)
	}
	exp, err := parseExpect(fj.Expect)
	if err != nil {
		return f, err
	}
	f.Expect = exp
	return f, f.validate()
}

func parseExpect(ej *expectJSON) (Expectation, error) {
	var e Expectation
	if ej.Code != nil {
		if ej.State != nil || ej.Reason != nil || present(ej.PodSetUpdates) {
			return e, errors.New("expect: code stands alone; state, reason and podSetUpdates describe an answer")
		}
		c, err := parseCode(*ej.Code)
		if err != nil {
			return e, fmt.Errorf("expect.code: %w", err)
		}
		e.Code = c
		return e, nil
	}
	if ej.State == nil {
		return e, errors.New(`expect: a state ("STATE_READY") or a code ("INVALID_ARGUMENT") is required`)
	}
	v, ok := checksv1.State_value[*ej.State]
	if !ok || v == int32(checksv1.State_STATE_UNSPECIFIED) {
		return e, fmt.Errorf("expect.state: %q is not an answer; want one of STATE_PENDING, STATE_READY, STATE_RETRY, STATE_REJECTED", *ej.State)
	}
	e.State, e.Reason = checksv1.State(v), ej.Reason
	if present(ej.PodSetUpdates) {
		updates, err := parseUpdates(ej.PodSetUpdates)
		if err != nil {
			return e, err
		}
		e.PodSetUpdates = updates
	}
	return e, nil
}

// parseUpdates decodes a JSON array of protojson PodSetUpdates; [] gives
// an empty, non-nil slice.
func parseUpdates(raw json.RawMessage) ([]*checksv1.PodSetUpdate, error) {
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, errors.New("expect.podSetUpdates: must be a JSON array of PodSetUpdate")
	}
	updates := []*checksv1.PodSetUpdate{}
	for i, item := range items {
		u := &checksv1.PodSetUpdate{}
		if err := protojson.Unmarshal(item, u); err != nil {
			return nil, fmt.Errorf("expect.podSetUpdates[%d]: %w", i, err)
		}
		updates = append(updates, u)
	}
	return updates, nil
}

// parseCode reads a gRPC code by its name, such as INVALID_ARGUMENT.
func parseCode(name string) (codes.Code, error) {
	for c := codes.Canceled; c <= codes.Unauthenticated; c++ {
		if codeName(c) == name {
			return c, nil
		}
	}
	if name == "OK" {
		return codes.OK, errors.New(`"OK" is not a failure; expect a state instead`)
	}
	return codes.OK, fmt.Errorf("%q is not a gRPC code; want a name such as INVALID_ARGUMENT or FAILED_PRECONDITION", name)
}

// validate checks what does not depend on the JSON form, so that fixtures
// built in Go are held to the same rules.
func (f Fixture) validate() error {
	if !fixtureName.MatchString(f.Name) {
		return fmt.Errorf("name: %q must be letters, digits, '-', '_' and '.', and not empty", f.Name)
	}
	e := f.Expect
	switch {
	case e.Code != codes.OK && (e.State != checksv1.State_STATE_UNSPECIFIED || e.Reason != nil || e.PodSetUpdates != nil):
		return errors.New("expect: code stands alone; state, reason and podSetUpdates describe an answer")
	case e.Code != codes.OK:
		return nil
	case checksv1.State_name[int32(e.State)] == "" || e.State == checksv1.State_STATE_UNSPECIFIED:
		return fmt.Errorf("expect.state: %s is not an answer", e.State)
	case len(e.PodSetUpdates) > 0 && e.State != checksv1.State_STATE_READY:
		return fmt.Errorf("expect.podSetUpdates: only READY answers carry updates, not %s", e.State)
	}
	if len(e.PodSetUpdates) > 0 {
		want := &checksv1.EvaluateResponse{State: checksv1.State_STATE_READY, PodSetUpdates: e.PodSetUpdates}
		if err := checkvalidate.EvaluateResponse(nil, want, []checksv1.Capability{checksv1.Capability_CAPABILITY_POD_SET_UPDATES}); err != nil {
			return fmt.Errorf("expect.podSetUpdates: no provider may answer this: %w", err)
		}
	}
	return f.wellFormed()
}

// wellFormed checks that a fixture expecting an answer sends a request
// that deserves one: its workload, once namespace and name are filled in,
// follows the contract's request rules.
func (f Fixture) wellFormed() error {
	if f.Workload == nil {
		return nil
	}
	w := proto.Clone(f.Workload).(*checksv1.Workload)
	w.Namespace, w.Name = cmp.Or(w.Namespace, "filled-in"), cmp.Or(w.Name, "filled-in")
	if err := checkvalidate.EvaluateRequest(&checksv1.EvaluateRequest{EvaluationKey: "k", Workload: w}); err != nil {
		return fmt.Errorf("%w (a correct provider answers INVALID_ARGUMENT: expect that code instead)", err)
	}
	return nil
}

// decodeStrict decodes one JSON value into v, refusing unknown fields
// and trailing data.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("unexpected data after the JSON value")
	}
	return nil
}

// jsonError says what was wrong in the file's terms rather than in Go's.
func jsonError(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field == "" {
		return fmt.Errorf("must be %s, got a JSON %s", jsonKind(te.Type), te.Value)
	}
	if te != nil {
		return fmt.Errorf("%s: must be %s, got a JSON %s", te.Field, jsonKind(te.Type), te.Value)
	}
	return fmt.Errorf("invalid JSON: %w", err)
}

func jsonKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Slice:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	}
	return t.Kind().String()
}

// present tells a JSON value given from one absent or null.
func present(raw json.RawMessage) bool {
	return len(raw) > 0 && string(raw) != "null"
}

// run is the fixture's case.
func (f Fixture) run(ctx context.Context, s *suite) error {
	if err := f.validate(); err != nil {
		return fmt.Errorf("the fixture is invalid: %w", err)
	}
	req := s.fixtureRequest(f)
	if err := expectedPodSetsExist(f.Expect.PodSetUpdates, req); err != nil {
		return err
	}
	if f.Expect.Code != codes.OK {
		return s.expectCode(ctx, req, f.Expect.Code)
	}
	resp, note, err := s.askUntilSettled(ctx, req, f.Expect.State, s.fixtureEvaluate)
	if err != nil {
		return err
	}
	diffs := f.Expect.diff(resp, note)
	if s.has(checksv1.Capability_CAPABILITY_RELEASE) {
		if err := s.releaseCall(ctx, s.release(req, checksv1.ReleaseReason_RELEASE_REASON_DELETED)); err != nil {
			diffs = append(diffs, fmt.Sprintf("Release of the fixture's key failed: %v", err))
		}
	}
	if len(diffs) > 0 {
		return errors.New(strings.Join(diffs, "; "))
	}
	return nil
}

// fixtureRequest is the Evaluate request a fixture sends.
func (s *suite) fixtureRequest(f Fixture) *checksv1.EvaluateRequest {
	check := cmp.Or(f.CheckName, s.opts.CheckName)
	params := f.Parameters
	if params == nil {
		params = s.opts.Parameters
	}
	w := s.workload()
	if f.Workload != nil {
		w = s.fill(f.Workload)
	}
	return &checksv1.EvaluateRequest{
		CheckName:     check,
		Parameters:    params,
		EvaluationKey: s.evaluationKey(w, "fixture/"+f.Name, check),
		Workload:      w,
	}
}

// expectedPodSetsExist refuses a fixture that expects an update for a pod
// set its request does not have: no provider could pass it.
func expectedPodSetsExist(want []*checksv1.PodSetUpdate, req *checksv1.EvaluateRequest) error {
	var names []string
	for _, ps := range req.GetWorkload().GetPodSets() {
		names = append(names, ps.GetName())
	}
	for _, u := range want {
		if !slices.Contains(names, u.GetName()) {
			return fmt.Errorf("the fixture is invalid: it expects an update for pod set %q, which its workload does not have (pod sets: %q)", u.GetName(), names)
		}
	}
	return nil
}

// expectCode calls Evaluate and wants it to fail with code.
func (s *suite) expectCode(ctx context.Context, req *checksv1.EvaluateRequest, code codes.Code) error {
	cctx, cancel := s.call(ctx)
	defer cancel()
	resp, err := s.checks.Evaluate(cctx, req)
	if err == nil {
		return fmt.Errorf("code: want %s, got an answer: %s", codeName(code), resp.GetState())
	}
	if got := status.Code(err); got != code {
		return fmt.Errorf("code: want %s, got %s (%s)", codeName(code), codeName(got), status.Convert(err).Message())
	}
	return nil
}

// askUntilSettled evaluates req with ask and, while the answer is PENDING
// and want is not, asks again after retry_after (unset: 1s, doubling) as
// long as the next call starts within Options.Timeout of the first. note
// says why it stopped asking when the last answer is still PENDING.
func (s *suite) askUntilSettled(ctx context.Context, req *checksv1.EvaluateRequest, want checksv1.State,
	ask func(context.Context, *checksv1.EvaluateRequest) (*checksv1.EvaluateResponse, error),
) (resp *checksv1.EvaluateResponse, note string, err error) {
	start, backoff := time.Now(), time.Second
	for asks := 1; ; asks++ {
		resp, err := ask(ctx, req)
		if err != nil || resp.GetState() != checksv1.State_STATE_PENDING || want == checksv1.State_STATE_PENDING {
			return resp, "", err
		}
		wait := backoff
		if ra := resp.GetRetryAfter(); ra != nil && ra.AsDuration() > 0 {
			wait = ra.AsDuration()
		} else {
			backoff *= 2
		}
		if time.Since(start)+wait > s.opts.Timeout {
			return resp, fmt.Sprintf("asked %d times in %s; the kit asks a PENDING answer again for up to %s (--timeout), and the next ask was due in %s",
				asks, time.Since(start).Round(time.Millisecond), s.opts.Timeout, wait), nil
		}
		if err := sleep(ctx, wait); err != nil {
			return nil, "", err
		}
	}
}

// fixtureEvaluate calls Evaluate and checks the answer against the
// contract.
func (s *suite) fixtureEvaluate(ctx context.Context, req *checksv1.EvaluateRequest) (*checksv1.EvaluateResponse, error) {
	cctx, cancel := s.call(ctx)
	defer cancel()
	resp, err := s.checks.Evaluate(cctx, req)
	if err != nil {
		return nil, fmt.Errorf("Evaluate failed: %w (the fixture expects an answer)", err)
	}
	if err := checkvalidate.EvaluateResponse(req, resp, s.caps()); err != nil {
		return nil, fmt.Errorf("Evaluate answer breaks the contract: %w", err)
	}
	return resp, nil
}

// diff lists how resp differs from e, field by field. The updates are
// compared only when the state is the expected one.
func (e Expectation) diff(resp *checksv1.EvaluateResponse, note string) []string {
	var d []string
	stateOK := resp.GetState() == e.State
	if !stateOK {
		s := fmt.Sprintf("state: want %s, got %s", e.State, resp.GetState())
		if note != "" {
			s += " (" + note + ")"
		}
		d = append(d, s)
	}
	if e.Reason != nil && resp.GetReason() != *e.Reason {
		d = append(d, fmt.Sprintf("reason: want %q, got %q", *e.Reason, resp.GetReason()))
	}
	if stateOK && e.PodSetUpdates != nil {
		d = append(d, diffUpdates(e.PodSetUpdates, resp.GetPodSetUpdates())...)
	}
	return d
}

// diffUpdates compares updates by pod set: the expected ones in their
// order, then any the answer has beyond them.
func diffUpdates(want, got []*checksv1.PodSetUpdate) []string {
	var d []string
	gotByName := map[string]*checksv1.PodSetUpdate{}
	for _, g := range got {
		gotByName[g.GetName()] = g
	}
	wanted := map[string]bool{}
	for _, w := range want {
		wanted[w.GetName()] = true
		path := fmt.Sprintf("pod_set_updates[%q]", w.GetName())
		g, ok := gotByName[w.GetName()]
		if !ok {
			d = append(d, path+": want an update, got missing")
			continue
		}
		d = append(d, diffMap(path+".labels", w.GetLabels(), g.GetLabels())...)
		d = append(d, diffMap(path+".annotations", w.GetAnnotations(), g.GetAnnotations())...)
		d = append(d, diffMap(path+".node_selector", w.GetNodeSelector(), g.GetNodeSelector())...)
		if !sameTolerations(w.GetTolerations(), g.GetTolerations()) {
			d = append(d, fmt.Sprintf("%s.tolerations: want %s, got %s", path, formatTolerations(w.GetTolerations()), formatTolerations(g.GetTolerations())))
		}
	}
	for _, g := range got {
		if !wanted[g.GetName()] {
			d = append(d, fmt.Sprintf("pod_set_updates[%q]: want none, got an update", g.GetName()))
		}
	}
	return d
}

// diffMap lists the entries of want and got that differ, by key.
func diffMap(path string, want, got map[string]string) []string {
	keys := map[string]bool{}
	for k := range want {
		keys[k] = true
	}
	for k := range got {
		keys[k] = true
	}
	var d []string
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		w, inWant := want[k]
		g, inGot := got[k]
		switch {
		case inWant && !inGot:
			d = append(d, fmt.Sprintf("%s[%q]: want %q, got missing", path, k, w))
		case !inWant && inGot:
			d = append(d, fmt.Sprintf("%s[%q]: want none, got %q", path, k, g))
		case w != g:
			d = append(d, fmt.Sprintf("%s[%q]: want %q, got %q", path, k, w, g))
		}
	}
	return d
}

// sameTolerations compares in order; an unspecified operator is EQUAL.
func sameTolerations(want, got []*checksv1.Toleration) bool {
	return slices.EqualFunc(want, got, func(a, b *checksv1.Toleration) bool {
		return proto.Equal(equalOperator(a), equalOperator(b))
	})
}

func equalOperator(t *checksv1.Toleration) *checksv1.Toleration {
	if t.GetOperator() != checksv1.TolerationOperator_TOLERATION_OPERATOR_UNSPECIFIED {
		return t
	}
	c := proto.Clone(t).(*checksv1.Toleration)
	c.Operator = checksv1.TolerationOperator_TOLERATION_OPERATOR_EQUAL
	return c
}

// formatTolerations writes tolerations compactly and deterministically
// (prototext and protojson vary their spacing on purpose).
func formatTolerations(ts []*checksv1.Toleration) string {
	parts := make([]string, len(ts))
	for i, t := range ts {
		f := []string{fmt.Sprintf("key:%q", t.GetKey()), "operator:" + equalOperator(t).GetOperator().String()}
		if t.GetValue() != "" {
			f = append(f, fmt.Sprintf("value:%q", t.GetValue()))
		}
		if t.GetEffect() != checksv1.TaintEffect_TAINT_EFFECT_UNSPECIFIED {
			f = append(f, "effect:"+t.GetEffect().String())
		}
		if t.TolerationSeconds != nil {
			f = append(f, fmt.Sprintf("tolerationSeconds:%d", t.GetTolerationSeconds()))
		}
		parts[i] = "{" + strings.Join(f, " ") + "}"
	}
	return "[" + strings.Join(parts, ", ") + "]"
}
